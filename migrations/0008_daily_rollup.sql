-- Why: the web view's overview charts each knowledge base's cells, pass rate and cost per day. Read
-- from `traces`, thirty days of a busy history are hundreds of thousands of rows (about a second at
-- a million traces). Triggers now keep one row of running totals per (UTC day, knowledge base,
-- cell, gate) of the stored results, as migrations/0002 does for `trace_rollup`, so the overview
-- reads a few rows per day whatever the history's size. Only results are counted: a pending trace
-- costs nothing here until its result is stored.

CREATE TABLE trace_daily (
    day            TEXT    NOT NULL,            -- substr(created_at, 1, 10): the UTC date the trace was created
    knowledge_base TEXT    NOT NULL,
    failure_cell   TEXT    NOT NULL,            -- '' for a result without a cell
    quality_gate   TEXT    NOT NULL,
    n              INTEGER NOT NULL DEFAULT 0,  -- results in this group
    usd            REAL    NOT NULL DEFAULT 0,  -- sum of known costs
    usd_unknown    INTEGER NOT NULL DEFAULT 0,  -- results whose cost was unknown
    PRIMARY KEY (day, knowledge_base, failure_cell, quality_gate)
) WITHOUT ROWID;

INSERT INTO trace_daily
SELECT substr(created_at, 1, 10), knowledge_base, COALESCE(failure_cell, ''), quality_gate, COUNT(*),
       COALESCE(SUM(usd), 0), SUM(usd IS NULL)
FROM traces WHERE quality_gate IS NOT NULL GROUP BY 1, 2, 3, 4;

CREATE TRIGGER trace_daily_insert AFTER INSERT ON traces WHEN NEW.quality_gate IS NOT NULL BEGIN
    INSERT INTO trace_daily VALUES (
        substr(NEW.created_at, 1, 10), NEW.knowledge_base, COALESCE(NEW.failure_cell, ''), NEW.quality_gate, 1,
        COALESCE(NEW.usd, 0), NEW.usd IS NULL)
    ON CONFLICT DO UPDATE SET n = n + 1, usd = usd + excluded.usd, usd_unknown = usd_unknown + excluded.usd_unknown;
END;

CREATE TRIGGER trace_daily_delete AFTER DELETE ON traces WHEN OLD.quality_gate IS NOT NULL BEGIN
    UPDATE trace_daily SET n = n - 1, usd = usd - COALESCE(OLD.usd, 0), usd_unknown = usd_unknown - (OLD.usd IS NULL)
    WHERE day = substr(OLD.created_at, 1, 10) AND knowledge_base = OLD.knowledge_base
      AND failure_cell = COALESCE(OLD.failure_cell, '') AND quality_gate = OLD.quality_gate;
    -- An emptied group goes away, and with it any float residue of the subtractions.
    DELETE FROM trace_daily
    WHERE day = substr(OLD.created_at, 1, 10) AND knowledge_base = OLD.knowledge_base
      AND failure_cell = COALESCE(OLD.failure_cell, '') AND quality_gate = OLD.quality_gate AND n = 0;
END;

-- An update is the removal of the old row's contribution (if it had a result) and the addition of
-- the new one's (if it has one). Only updates of a counted column fire it (not leases or messages).
CREATE TRIGGER trace_daily_update AFTER UPDATE OF created_at, knowledge_base, failure_cell, quality_gate, usd
ON traces WHEN OLD.quality_gate IS NOT NULL OR NEW.quality_gate IS NOT NULL BEGIN
    UPDATE trace_daily SET n = n - 1, usd = usd - COALESCE(OLD.usd, 0), usd_unknown = usd_unknown - (OLD.usd IS NULL)
    WHERE OLD.quality_gate IS NOT NULL AND day = substr(OLD.created_at, 1, 10)
      AND knowledge_base = OLD.knowledge_base AND failure_cell = COALESCE(OLD.failure_cell, '')
      AND quality_gate = OLD.quality_gate;
    DELETE FROM trace_daily
    WHERE OLD.quality_gate IS NOT NULL AND day = substr(OLD.created_at, 1, 10)
      AND knowledge_base = OLD.knowledge_base AND failure_cell = COALESCE(OLD.failure_cell, '')
      AND quality_gate = OLD.quality_gate AND n = 0;
    INSERT INTO trace_daily
    SELECT substr(NEW.created_at, 1, 10), NEW.knowledge_base, COALESCE(NEW.failure_cell, ''), NEW.quality_gate, 1,
           COALESCE(NEW.usd, 0), NEW.usd IS NULL
    WHERE NEW.quality_gate IS NOT NULL
    ON CONFLICT DO UPDATE SET n = n + 1, usd = usd + excluded.usd, usd_unknown = usd_unknown + excluded.usd_unknown;
END;
