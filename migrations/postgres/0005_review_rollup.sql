-- Why: `stats`, `list` and the web view count the results a person should look at (needs_review): the
-- running totals carry that count too (`review_n`), as SQLite's migration 0013 does, so it costs a few
-- rows at any size. The row trigger, the view and the fold learn the new column; existing traces are
-- counted in as one delta per group.

ALTER TABLE trace_rollup_base ADD COLUMN review_n bigint NOT NULL DEFAULT 0;
ALTER TABLE trace_rollup_delta ADD COLUMN review_n bigint NOT NULL DEFAULT 0;

INSERT INTO trace_rollup_delta (knowledge_base, failure_cell, quality_gate, status, review_n)
SELECT knowledge_base, COALESCE(failure_cell, ''), COALESCE(quality_gate, ''), status, COUNT(*)
FROM traces WHERE needs_review = 1 GROUP BY 1, 2, 3, 4;

CREATE OR REPLACE VIEW trace_rollup AS
SELECT knowledge_base, failure_cell, quality_gate, status, SUM(n) AS n, SUM(s_sum) AS s_sum, SUM(s_n) AS s_n,
       SUM(f_sum) AS f_sum, SUM(f_n) AS f_n, SUM(calls) AS calls, SUM(input_tokens) AS input_tokens,
       SUM(output_tokens) AS output_tokens, SUM(usd) AS usd, SUM(usd_unknown) AS usd_unknown,
       SUM(review_n) AS review_n
FROM (SELECT * FROM trace_rollup_base UNION ALL SELECT * FROM trace_rollup_delta) AS parts
GROUP BY knowledge_base, failure_cell, quality_gate, status
HAVING SUM(n) <> 0;

CREATE OR REPLACE FUNCTION veralith_rollup_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO trace_rollup_delta VALUES (
            OLD.knowledge_base, COALESCE(OLD.failure_cell, ''), COALESCE(OLD.quality_gate, ''), OLD.status, -1,
            -COALESCE(OLD.sufficiency_fraction, 0), -(CASE WHEN OLD.sufficiency_fraction IS NULL THEN 0 ELSE 1 END),
            -COALESCE(OLD.faithfulness_fraction, 0), -(CASE WHEN OLD.faithfulness_fraction IS NULL THEN 0 ELSE 1 END),
            -COALESCE(OLD.calls, 0), -COALESCE(OLD.input_tokens, 0), -COALESCE(OLD.output_tokens, 0),
            -COALESCE(OLD.usd, 0), -(CASE WHEN OLD.quality_gate IS NOT NULL AND OLD.usd IS NULL THEN 1 ELSE 0 END),
            -(CASE WHEN OLD.needs_review = 1 THEN 1 ELSE 0 END));
        IF OLD.quality_gate IS NOT NULL THEN
            INSERT INTO trace_daily_delta VALUES (
                substr(OLD.created_at, 1, 10), OLD.knowledge_base, COALESCE(OLD.failure_cell, ''), OLD.quality_gate,
                -1, -COALESCE(OLD.usd, 0), -(CASE WHEN OLD.usd IS NULL THEN 1 ELSE 0 END));
        END IF;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        INSERT INTO trace_rollup_delta VALUES (
            NEW.knowledge_base, COALESCE(NEW.failure_cell, ''), COALESCE(NEW.quality_gate, ''), NEW.status, 1,
            COALESCE(NEW.sufficiency_fraction, 0), CASE WHEN NEW.sufficiency_fraction IS NULL THEN 0 ELSE 1 END,
            COALESCE(NEW.faithfulness_fraction, 0), CASE WHEN NEW.faithfulness_fraction IS NULL THEN 0 ELSE 1 END,
            COALESCE(NEW.calls, 0), COALESCE(NEW.input_tokens, 0), COALESCE(NEW.output_tokens, 0),
            COALESCE(NEW.usd, 0), CASE WHEN NEW.quality_gate IS NOT NULL AND NEW.usd IS NULL THEN 1 ELSE 0 END,
            CASE WHEN NEW.needs_review = 1 THEN 1 ELSE 0 END);
        IF NEW.quality_gate IS NOT NULL THEN
            INSERT INTO trace_daily_delta VALUES (
                substr(NEW.created_at, 1, 10), NEW.knowledge_base, COALESCE(NEW.failure_cell, ''), NEW.quality_gate,
                1, COALESCE(NEW.usd, 0), CASE WHEN NEW.usd IS NULL THEN 1 ELSE 0 END);
        END IF;
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER traces_rollup ON traces;
CREATE TRIGGER traces_rollup AFTER INSERT OR DELETE OR UPDATE OF
    created_at, knowledge_base, failure_cell, quality_gate, status, sufficiency_fraction, faithfulness_fraction,
    calls, input_tokens, output_tokens, usd, needs_review ON traces
    FOR EACH ROW EXECUTE FUNCTION veralith_rollup_row();

CREATE OR REPLACE FUNCTION veralith_compact_rollups() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    folded bigint := 0;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('veralith_compact_rollups')) THEN
        RETURN 0;
    END IF;
    WITH moved AS (DELETE FROM trace_rollup_delta RETURNING *),
         summed AS (
             SELECT knowledge_base, failure_cell, quality_gate, status, SUM(n) AS n, SUM(s_sum) AS s_sum,
                    SUM(s_n) AS s_n, SUM(f_sum) AS f_sum, SUM(f_n) AS f_n, SUM(calls) AS calls,
                    SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens, SUM(usd) AS usd,
                    SUM(usd_unknown) AS usd_unknown, SUM(review_n) AS review_n, COUNT(*) AS rows_folded
             FROM moved GROUP BY 1, 2, 3, 4),
         applied AS (
             INSERT INTO trace_rollup_base AS b
             SELECT knowledge_base, failure_cell, quality_gate, status, n, s_sum, s_n, f_sum, f_n, calls,
                    input_tokens, output_tokens, usd, usd_unknown, review_n FROM summed
             ON CONFLICT (knowledge_base, failure_cell, quality_gate, status) DO UPDATE SET
                 n = b.n + excluded.n, s_sum = b.s_sum + excluded.s_sum, s_n = b.s_n + excluded.s_n,
                 f_sum = b.f_sum + excluded.f_sum, f_n = b.f_n + excluded.f_n, calls = b.calls + excluded.calls,
                 input_tokens = b.input_tokens + excluded.input_tokens,
                 output_tokens = b.output_tokens + excluded.output_tokens, usd = b.usd + excluded.usd,
                 usd_unknown = b.usd_unknown + excluded.usd_unknown, review_n = b.review_n + excluded.review_n)
    SELECT COALESCE(SUM(rows_folded), 0) INTO folded FROM summed;
    -- An emptied group goes away, and with it any float residue of the subtractions.
    DELETE FROM trace_rollup_base WHERE n = 0;
    WITH moved AS (DELETE FROM trace_daily_delta RETURNING *)
    INSERT INTO trace_daily_base AS b
    SELECT day, knowledge_base, failure_cell, quality_gate, SUM(n), SUM(usd), SUM(usd_unknown)
    FROM moved GROUP BY 1, 2, 3, 4
    ON CONFLICT (day, knowledge_base, failure_cell, quality_gate) DO UPDATE SET
        n = b.n + excluded.n, usd = b.usd + excluded.usd, usd_unknown = b.usd_unknown + excluded.usd_unknown;
    DELETE FROM trace_daily_base WHERE n = 0;
    RETURN folded;
END $$;
