-- Why: `stats`, `list` and the web view count the results a person should look at (needs_review).
-- The running totals carry that count too (`review_n`), so it costs a few rows at any size instead of
-- a pass over every trace. The three rollup triggers of migration 0002 are recreated to keep it, and
-- fire on a change of needs_review as well.

ALTER TABLE trace_rollup ADD COLUMN review_n INTEGER NOT NULL DEFAULT 0;  -- stored results with needs_review = 1

CREATE TEMP TABLE veralith_review_counts AS
SELECT knowledge_base, COALESCE(failure_cell, '') AS failure_cell, COALESCE(quality_gate, '') AS quality_gate,
       status, COUNT(*) AS n
FROM traces WHERE needs_review = 1 GROUP BY 1, 2, 3, 4;

UPDATE trace_rollup SET review_n = COALESCE((
    SELECT n FROM veralith_review_counts r
    WHERE r.knowledge_base = trace_rollup.knowledge_base AND r.failure_cell = trace_rollup.failure_cell
      AND r.quality_gate = trace_rollup.quality_gate AND r.status = trace_rollup.status), 0);

DROP TABLE veralith_review_counts;

DROP TRIGGER trace_rollup_insert;
DROP TRIGGER trace_rollup_delete;
DROP TRIGGER trace_rollup_update;

CREATE TRIGGER trace_rollup_insert AFTER INSERT ON traces BEGIN
    INSERT INTO trace_rollup VALUES (
        NEW.knowledge_base, COALESCE(NEW.failure_cell, ''), COALESCE(NEW.quality_gate, ''), NEW.status, 1,
        COALESCE(NEW.sufficiency_fraction, 0), NEW.sufficiency_fraction IS NOT NULL,
        COALESCE(NEW.faithfulness_fraction, 0), NEW.faithfulness_fraction IS NOT NULL,
        COALESCE(NEW.calls, 0), COALESCE(NEW.input_tokens, 0), COALESCE(NEW.output_tokens, 0),
        COALESCE(NEW.usd, 0), NEW.quality_gate IS NOT NULL AND NEW.usd IS NULL, COALESCE(NEW.needs_review, 0) = 1)
    ON CONFLICT DO UPDATE SET
        n = n + excluded.n, s_sum = s_sum + excluded.s_sum, s_n = s_n + excluded.s_n,
        f_sum = f_sum + excluded.f_sum, f_n = f_n + excluded.f_n, calls = calls + excluded.calls,
        input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
        usd = usd + excluded.usd, usd_unknown = usd_unknown + excluded.usd_unknown,
        review_n = review_n + excluded.review_n;
END;

CREATE TRIGGER trace_rollup_delete AFTER DELETE ON traces BEGIN
    UPDATE trace_rollup SET
        n = n - 1,
        s_sum = s_sum - COALESCE(OLD.sufficiency_fraction, 0), s_n = s_n - (OLD.sufficiency_fraction IS NOT NULL),
        f_sum = f_sum - COALESCE(OLD.faithfulness_fraction, 0), f_n = f_n - (OLD.faithfulness_fraction IS NOT NULL),
        calls = calls - COALESCE(OLD.calls, 0), input_tokens = input_tokens - COALESCE(OLD.input_tokens, 0),
        output_tokens = output_tokens - COALESCE(OLD.output_tokens, 0), usd = usd - COALESCE(OLD.usd, 0),
        usd_unknown = usd_unknown - (OLD.quality_gate IS NOT NULL AND OLD.usd IS NULL),
        review_n = review_n - (COALESCE(OLD.needs_review, 0) = 1)
    WHERE knowledge_base = OLD.knowledge_base AND failure_cell = COALESCE(OLD.failure_cell, '')
      AND quality_gate = COALESCE(OLD.quality_gate, '') AND status = OLD.status;
    -- An emptied group goes away, and with it any float residue of the subtractions.
    DELETE FROM trace_rollup
    WHERE knowledge_base = OLD.knowledge_base AND failure_cell = COALESCE(OLD.failure_cell, '')
      AND quality_gate = COALESCE(OLD.quality_gate, '') AND status = OLD.status AND n = 0;
END;

CREATE TRIGGER trace_rollup_update AFTER UPDATE OF
    knowledge_base, failure_cell, quality_gate, status, sufficiency_fraction, faithfulness_fraction, calls,
    input_tokens, output_tokens, usd, needs_review ON traces BEGIN
    UPDATE trace_rollup SET
        n = n - 1,
        s_sum = s_sum - COALESCE(OLD.sufficiency_fraction, 0), s_n = s_n - (OLD.sufficiency_fraction IS NOT NULL),
        f_sum = f_sum - COALESCE(OLD.faithfulness_fraction, 0), f_n = f_n - (OLD.faithfulness_fraction IS NOT NULL),
        calls = calls - COALESCE(OLD.calls, 0), input_tokens = input_tokens - COALESCE(OLD.input_tokens, 0),
        output_tokens = output_tokens - COALESCE(OLD.output_tokens, 0), usd = usd - COALESCE(OLD.usd, 0),
        usd_unknown = usd_unknown - (OLD.quality_gate IS NOT NULL AND OLD.usd IS NULL),
        review_n = review_n - (COALESCE(OLD.needs_review, 0) = 1)
    WHERE knowledge_base = OLD.knowledge_base AND failure_cell = COALESCE(OLD.failure_cell, '')
      AND quality_gate = COALESCE(OLD.quality_gate, '') AND status = OLD.status;
    DELETE FROM trace_rollup
    WHERE knowledge_base = OLD.knowledge_base AND failure_cell = COALESCE(OLD.failure_cell, '')
      AND quality_gate = COALESCE(OLD.quality_gate, '') AND status = OLD.status AND n = 0;
    INSERT INTO trace_rollup VALUES (
        NEW.knowledge_base, COALESCE(NEW.failure_cell, ''), COALESCE(NEW.quality_gate, ''), NEW.status, 1,
        COALESCE(NEW.sufficiency_fraction, 0), NEW.sufficiency_fraction IS NOT NULL,
        COALESCE(NEW.faithfulness_fraction, 0), NEW.faithfulness_fraction IS NOT NULL,
        COALESCE(NEW.calls, 0), COALESCE(NEW.input_tokens, 0), COALESCE(NEW.output_tokens, 0),
        COALESCE(NEW.usd, 0), NEW.quality_gate IS NOT NULL AND NEW.usd IS NULL, COALESCE(NEW.needs_review, 0) = 1)
    ON CONFLICT DO UPDATE SET
        n = n + excluded.n, s_sum = s_sum + excluded.s_sum, s_n = s_n + excluded.s_n,
        f_sum = f_sum + excluded.f_sum, f_n = f_n + excluded.f_n, calls = calls + excluded.calls,
        input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
        usd = usd + excluded.usd, usd_unknown = usd_unknown + excluded.usd_unknown,
        review_n = review_n + excluded.review_n;
END;
