-- Why: `veralith stats` scanned every trace (a covering index still meant 1M grouped rows, about
-- 1-2 s at a million traces). Triggers now keep one row of running totals per (knowledge base,
-- cell, gate, status), so stats reads a few dozen rows whatever the history's size. The totals
-- are maintained by SQLite itself on every insert, update and delete of a trace, so no code path
-- can forget them; the covering index they replace is dropped to keep writes cheap.

CREATE TABLE trace_rollup (
    knowledge_base TEXT    NOT NULL,
    failure_cell   TEXT    NOT NULL,            -- '' for none (not evaluated, or no cell)
    quality_gate   TEXT    NOT NULL,            -- '' for none (no stored result)
    status         TEXT    NOT NULL,
    n              INTEGER NOT NULL DEFAULT 0,  -- traces in this group
    s_sum          REAL    NOT NULL DEFAULT 0,  -- sum and count of non-NULL sufficiency_fraction
    s_n            INTEGER NOT NULL DEFAULT 0,
    f_sum          REAL    NOT NULL DEFAULT 0,  -- sum and count of non-NULL faithfulness_fraction
    f_n            INTEGER NOT NULL DEFAULT 0,
    calls          INTEGER NOT NULL DEFAULT 0,
    input_tokens   INTEGER NOT NULL DEFAULT 0,
    output_tokens  INTEGER NOT NULL DEFAULT 0,
    usd            REAL    NOT NULL DEFAULT 0,  -- sum of known costs
    usd_unknown    INTEGER NOT NULL DEFAULT 0,  -- stored results whose cost was unknown
    PRIMARY KEY (knowledge_base, failure_cell, quality_gate, status)
) WITHOUT ROWID;

INSERT INTO trace_rollup
SELECT knowledge_base, COALESCE(failure_cell, ''), COALESCE(quality_gate, ''), status, COUNT(*),
       COALESCE(SUM(sufficiency_fraction), 0), COUNT(sufficiency_fraction),
       COALESCE(SUM(faithfulness_fraction), 0), COUNT(faithfulness_fraction),
       COALESCE(SUM(calls), 0), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),
       COALESCE(SUM(usd), 0), SUM(quality_gate IS NOT NULL AND usd IS NULL)
FROM traces GROUP BY 1, 2, 3, 4;

CREATE TRIGGER trace_rollup_insert AFTER INSERT ON traces BEGIN
    INSERT INTO trace_rollup VALUES (
        NEW.knowledge_base, COALESCE(NEW.failure_cell, ''), COALESCE(NEW.quality_gate, ''), NEW.status, 1,
        COALESCE(NEW.sufficiency_fraction, 0), NEW.sufficiency_fraction IS NOT NULL,
        COALESCE(NEW.faithfulness_fraction, 0), NEW.faithfulness_fraction IS NOT NULL,
        COALESCE(NEW.calls, 0), COALESCE(NEW.input_tokens, 0), COALESCE(NEW.output_tokens, 0),
        COALESCE(NEW.usd, 0), NEW.quality_gate IS NOT NULL AND NEW.usd IS NULL)
    ON CONFLICT DO UPDATE SET
        n = n + excluded.n, s_sum = s_sum + excluded.s_sum, s_n = s_n + excluded.s_n,
        f_sum = f_sum + excluded.f_sum, f_n = f_n + excluded.f_n, calls = calls + excluded.calls,
        input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
        usd = usd + excluded.usd, usd_unknown = usd_unknown + excluded.usd_unknown;
END;

CREATE TRIGGER trace_rollup_delete AFTER DELETE ON traces BEGIN
    UPDATE trace_rollup SET
        n = n - 1,
        s_sum = s_sum - COALESCE(OLD.sufficiency_fraction, 0), s_n = s_n - (OLD.sufficiency_fraction IS NOT NULL),
        f_sum = f_sum - COALESCE(OLD.faithfulness_fraction, 0), f_n = f_n - (OLD.faithfulness_fraction IS NOT NULL),
        calls = calls - COALESCE(OLD.calls, 0), input_tokens = input_tokens - COALESCE(OLD.input_tokens, 0),
        output_tokens = output_tokens - COALESCE(OLD.output_tokens, 0), usd = usd - COALESCE(OLD.usd, 0),
        usd_unknown = usd_unknown - (OLD.quality_gate IS NOT NULL AND OLD.usd IS NULL)
    WHERE knowledge_base = OLD.knowledge_base AND failure_cell = COALESCE(OLD.failure_cell, '')
      AND quality_gate = COALESCE(OLD.quality_gate, '') AND status = OLD.status;
    -- An emptied group goes away, and with it any float residue of the subtractions.
    DELETE FROM trace_rollup
    WHERE knowledge_base = OLD.knowledge_base AND failure_cell = COALESCE(OLD.failure_cell, '')
      AND quality_gate = COALESCE(OLD.quality_gate, '') AND status = OLD.status AND n = 0;
END;

-- An update is the delete of the old row's contribution and the insert of the new one's. Only
-- updates that touch a rolled-up column fire it (lease renewals and messages do not).
CREATE TRIGGER trace_rollup_update AFTER UPDATE OF
    knowledge_base, failure_cell, quality_gate, status, sufficiency_fraction, faithfulness_fraction, calls,
    input_tokens, output_tokens, usd ON traces BEGIN
    UPDATE trace_rollup SET
        n = n - 1,
        s_sum = s_sum - COALESCE(OLD.sufficiency_fraction, 0), s_n = s_n - (OLD.sufficiency_fraction IS NOT NULL),
        f_sum = f_sum - COALESCE(OLD.faithfulness_fraction, 0), f_n = f_n - (OLD.faithfulness_fraction IS NOT NULL),
        calls = calls - COALESCE(OLD.calls, 0), input_tokens = input_tokens - COALESCE(OLD.input_tokens, 0),
        output_tokens = output_tokens - COALESCE(OLD.output_tokens, 0), usd = usd - COALESCE(OLD.usd, 0),
        usd_unknown = usd_unknown - (OLD.quality_gate IS NOT NULL AND OLD.usd IS NULL)
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
        COALESCE(NEW.usd, 0), NEW.quality_gate IS NOT NULL AND NEW.usd IS NULL)
    ON CONFLICT DO UPDATE SET
        n = n + excluded.n, s_sum = s_sum + excluded.s_sum, s_n = s_n + excluded.s_n,
        f_sum = f_sum + excluded.f_sum, f_n = f_n + excluded.f_n, calls = calls + excluded.calls,
        input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
        usd = usd + excluded.usd, usd_unknown = usd_unknown + excluded.usd_unknown;
END;

DROP INDEX traces_rollup;
