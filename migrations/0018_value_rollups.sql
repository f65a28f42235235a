-- Why: two figures of `stats` and the web overview were order statistics over every trace of a
-- knowledge base (an offset walk in an index that grows with the history): the calibrated
-- threshold (a percentile of the sufficiency fractions of its done `complete_grounded` traces)
-- and the app-latency p50/p95. Triggers now keep counts by value, so both are read from a few
-- hundred rows at most, whatever the history's size:
--   * calibration_counts: per (knowledge base, sufficiency fraction as stored), how many traces
--     count towards calibration. A fraction is a ratio of small integers, so the values are few,
--     and the percentile read from the counts is EXACT (the same floats, the same ranks).
--   * latency_histogram: per (knowledge base, bucket), how many traces recorded an app latency in
--     that bucket. Buckets are log-spaced (each lower bound 1.02 x the previous, from 0.001 ms to
--     about 1e9 ms, listed in latency_buckets), so a percentile read from them is APPROXIMATE:
--     within 1% of the true value (veralith.store.histogram).
-- The triggers are separate from trace_rollup's (migration 0013): an update fires them only when
-- a column they count by changed, and a trace re-judged moves its count.

CREATE TABLE calibration_counts (
    knowledge_base TEXT    NOT NULL,
    value          REAL    NOT NULL,  -- a sufficiency_fraction, exactly as stored
    n              INTEGER NOT NULL,  -- done complete_grounded traces with that value
    PRIMARY KEY (knowledge_base, value)
) WITHOUT ROWID;

INSERT INTO calibration_counts
SELECT knowledge_base, sufficiency_fraction, COUNT(*) FROM traces
WHERE status = 'done' AND failure_cell = 'complete_grounded' AND sufficiency_fraction IS NOT NULL
GROUP BY 1, 2;

-- The bucket boundaries, computed once here (by repeated multiplication, the same IEEE doubles on
-- every store) so every trigger and reader agrees on them. Bucket 0 holds everything below 0.001 ms
-- (and anything that compares below every bound).
CREATE TABLE latency_buckets (
    bucket INTEGER PRIMARY KEY,
    lo     REAL    NOT NULL UNIQUE  -- inclusive lower bound in ms; the next bucket's lo is the upper
);
INSERT INTO latency_buckets
WITH RECURSIVE b(bucket, lo) AS (SELECT 1, 0.001 UNION ALL SELECT bucket + 1, lo * 1.02 FROM b WHERE bucket < 1396)
SELECT 0, -1e308 UNION ALL SELECT bucket, lo FROM b;

CREATE TABLE latency_histogram (
    knowledge_base TEXT    NOT NULL,
    bucket         INTEGER NOT NULL,  -- latency_buckets.bucket
    n              INTEGER NOT NULL,  -- traces whose app_latency_ms falls in it
    PRIMARY KEY (knowledge_base, bucket)
) WITHOUT ROWID;

INSERT INTO latency_histogram
SELECT knowledge_base, bucket, COUNT(*) FROM (
    SELECT knowledge_base, COALESCE((SELECT bucket FROM latency_buckets WHERE lo <= app_latency_ms
                                     ORDER BY lo DESC LIMIT 1), 0) AS bucket
    FROM traces WHERE app_latency_ms IS NOT NULL)
GROUP BY 1, 2;

-- Calibration counts: a trace counts while it is done, in complete_grounded, with a fraction.
CREATE TRIGGER calibration_counts_insert AFTER INSERT ON traces
WHEN NEW.status = 'done' AND NEW.failure_cell = 'complete_grounded' AND NEW.sufficiency_fraction IS NOT NULL
BEGIN
    INSERT INTO calibration_counts VALUES (NEW.knowledge_base, NEW.sufficiency_fraction, 1)
    ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER calibration_counts_delete AFTER DELETE ON traces
WHEN OLD.status = 'done' AND OLD.failure_cell = 'complete_grounded' AND OLD.sufficiency_fraction IS NOT NULL
BEGIN
    UPDATE calibration_counts SET n = n - 1
    WHERE knowledge_base = OLD.knowledge_base AND value = OLD.sufficiency_fraction;
    DELETE FROM calibration_counts WHERE knowledge_base = OLD.knowledge_base AND value = OLD.sufficiency_fraction
      AND n <= 0;
END;

CREATE TRIGGER calibration_counts_update_old AFTER UPDATE OF
    knowledge_base, status, failure_cell, sufficiency_fraction ON traces
WHEN OLD.status = 'done' AND OLD.failure_cell = 'complete_grounded' AND OLD.sufficiency_fraction IS NOT NULL
BEGIN
    UPDATE calibration_counts SET n = n - 1
    WHERE knowledge_base = OLD.knowledge_base AND value = OLD.sufficiency_fraction;
    DELETE FROM calibration_counts WHERE knowledge_base = OLD.knowledge_base AND value = OLD.sufficiency_fraction
      AND n <= 0;
END;

CREATE TRIGGER calibration_counts_update_new AFTER UPDATE OF
    knowledge_base, status, failure_cell, sufficiency_fraction ON traces
WHEN NEW.status = 'done' AND NEW.failure_cell = 'complete_grounded' AND NEW.sufficiency_fraction IS NOT NULL
BEGIN
    INSERT INTO calibration_counts VALUES (NEW.knowledge_base, NEW.sufficiency_fraction, 1)
    ON CONFLICT DO UPDATE SET n = n + 1;
END;

-- Latency histogram: a trace counts while it has an app latency.
CREATE TRIGGER latency_histogram_insert AFTER INSERT ON traces WHEN NEW.app_latency_ms IS NOT NULL
BEGIN
    INSERT INTO latency_histogram VALUES (NEW.knowledge_base, COALESCE((SELECT bucket FROM latency_buckets
        WHERE lo <= NEW.app_latency_ms ORDER BY lo DESC LIMIT 1), 0), 1)
    ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER latency_histogram_delete AFTER DELETE ON traces WHEN OLD.app_latency_ms IS NOT NULL
BEGIN
    UPDATE latency_histogram SET n = n - 1 WHERE knowledge_base = OLD.knowledge_base AND bucket = COALESCE((
        SELECT bucket FROM latency_buckets WHERE lo <= OLD.app_latency_ms ORDER BY lo DESC LIMIT 1), 0);
    DELETE FROM latency_histogram WHERE knowledge_base = OLD.knowledge_base AND n <= 0;
END;

-- Only a changed latency or knowledge base moves a count (a status change does not).
CREATE TRIGGER latency_histogram_update_old AFTER UPDATE OF knowledge_base, app_latency_ms ON traces
WHEN OLD.app_latency_ms IS NOT NULL
 AND (OLD.app_latency_ms IS NOT NEW.app_latency_ms OR OLD.knowledge_base IS NOT NEW.knowledge_base)
BEGIN
    UPDATE latency_histogram SET n = n - 1 WHERE knowledge_base = OLD.knowledge_base AND bucket = COALESCE((
        SELECT bucket FROM latency_buckets WHERE lo <= OLD.app_latency_ms ORDER BY lo DESC LIMIT 1), 0);
    DELETE FROM latency_histogram WHERE knowledge_base = OLD.knowledge_base AND n <= 0;
END;

CREATE TRIGGER latency_histogram_update_new AFTER UPDATE OF knowledge_base, app_latency_ms ON traces
WHEN NEW.app_latency_ms IS NOT NULL
 AND (OLD.app_latency_ms IS NOT NEW.app_latency_ms OR OLD.knowledge_base IS NOT NEW.knowledge_base)
BEGIN
    INSERT INTO latency_histogram VALUES (NEW.knowledge_base, COALESCE((SELECT bucket FROM latency_buckets
        WHERE lo <= NEW.app_latency_ms ORDER BY lo DESC LIMIT 1), 0), 1)
    ON CONFLICT DO UPDATE SET n = n + 1;
END;

-- Nothing reads these two indexes any more (they served the offset walks the counts replace).
DROP INDEX traces_calibration;
DROP INDEX traces_app_latency;
