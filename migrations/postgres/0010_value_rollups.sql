-- Why: the calibrated threshold and the app-latency p50/p95 in `stats` and the web overview were
-- order statistics walked in an index per knowledge base (~90 ms each at 1M traces). Counts by value
-- now keep them, as SQLite's migration 0018 does (the same tables and meanings, read by the same
-- SQL): calibration_counts (exact: per stored sufficiency fraction) and latency_histogram
-- (approximate, within 1%: per log-spaced bucket of latency_buckets). As for trace_rollup (0001),
-- writers append deltas and one process at a time folds them into base rows
-- (veralith_compact_value_rollups), so concurrent writers never wait on the same count rows; the
-- views calibration_counts and latency_histogram sum both.

-- Writers wait from here to the commit, so the backfill below misses no trace and counts none twice.
LOCK TABLE traces IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE calibration_counts_base (
    knowledge_base text             NOT NULL,
    value          double precision NOT NULL,  -- a sufficiency_fraction, exactly as stored
    n              bigint           NOT NULL,  -- done complete_grounded traces with that value
    PRIMARY KEY (knowledge_base, value)
);
CREATE TABLE calibration_counts_delta (LIKE calibration_counts_base INCLUDING DEFAULTS);

-- Bucket boundaries by repeated multiplication: the same doubles as SQLite's (0018).
CREATE TABLE latency_buckets (
    bucket integer          PRIMARY KEY,
    lo     double precision NOT NULL UNIQUE  -- inclusive lower bound in ms; the next bucket's lo is the upper
);
INSERT INTO latency_buckets
WITH RECURSIVE b(bucket, lo) AS (
    SELECT 1, 0.001::double precision UNION ALL SELECT bucket + 1, lo * 1.02 FROM b WHERE bucket < 1396)
SELECT 0, -1e308::double precision UNION ALL SELECT bucket, lo FROM b;

CREATE TABLE latency_histogram_base (
    knowledge_base text    NOT NULL,
    bucket         integer NOT NULL,  -- latency_buckets.bucket
    n              bigint  NOT NULL,  -- traces whose app_latency_ms falls in it
    PRIMARY KEY (knowledge_base, bucket)
);
CREATE TABLE latency_histogram_delta (LIKE latency_histogram_base INCLUDING DEFAULTS);

CREATE VIEW calibration_counts AS
SELECT knowledge_base, value, SUM(n) AS n
FROM (SELECT * FROM calibration_counts_base UNION ALL SELECT * FROM calibration_counts_delta) AS parts
GROUP BY knowledge_base, value
HAVING SUM(n) <> 0;

CREATE VIEW latency_histogram AS
SELECT knowledge_base, bucket, SUM(n) AS n
FROM (SELECT * FROM latency_histogram_base UNION ALL SELECT * FROM latency_histogram_delta) AS parts
GROUP BY knowledge_base, bucket
HAVING SUM(n) <> 0;

CREATE FUNCTION veralith_latency_bucket(ms double precision) RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT COALESCE((SELECT bucket FROM latency_buckets WHERE lo <= ms ORDER BY lo DESC LIMIT 1), 0)
$$;

CREATE FUNCTION veralith_value_rollups_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    old_counts boolean := TG_OP IN ('UPDATE', 'DELETE') AND OLD.status = 'done'
                          AND OLD.failure_cell = 'complete_grounded' AND OLD.sufficiency_fraction IS NOT NULL;
    new_counts boolean := TG_OP IN ('UPDATE', 'INSERT') AND NEW.status = 'done'
                          AND NEW.failure_cell = 'complete_grounded' AND NEW.sufficiency_fraction IS NOT NULL;
    old_timed  boolean := TG_OP IN ('UPDATE', 'DELETE') AND OLD.app_latency_ms IS NOT NULL;
    new_timed  boolean := TG_OP IN ('UPDATE', 'INSERT') AND NEW.app_latency_ms IS NOT NULL;
BEGIN
    -- An update that leaves a count where it was (a status change of a trace outside calibration, a
    -- claim, a lease) writes nothing.
    IF TG_OP = 'UPDATE' THEN
        IF old_counts AND new_counts AND OLD.knowledge_base = NEW.knowledge_base
           AND OLD.sufficiency_fraction = NEW.sufficiency_fraction THEN
            old_counts := false;
            new_counts := false;
        END IF;
        IF OLD.knowledge_base = NEW.knowledge_base
           AND OLD.app_latency_ms IS NOT DISTINCT FROM NEW.app_latency_ms THEN
            old_timed := false;
            new_timed := false;
        END IF;
    END IF;
    IF old_counts THEN
        INSERT INTO calibration_counts_delta VALUES (OLD.knowledge_base, OLD.sufficiency_fraction, -1);
    END IF;
    IF new_counts THEN
        INSERT INTO calibration_counts_delta VALUES (NEW.knowledge_base, NEW.sufficiency_fraction, 1);
    END IF;
    IF old_timed THEN
        INSERT INTO latency_histogram_delta VALUES (OLD.knowledge_base, veralith_latency_bucket(OLD.app_latency_ms), -1);
    END IF;
    IF new_timed THEN
        INSERT INTO latency_histogram_delta VALUES (NEW.knowledge_base, veralith_latency_bucket(NEW.app_latency_ms), 1);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER traces_value_rollups AFTER INSERT OR DELETE OR UPDATE OF
    knowledge_base, status, failure_cell, sufficiency_fraction, app_latency_ms ON traces
    FOR EACH ROW EXECUTE FUNCTION veralith_value_rollups_row();

-- Fold the deltas into the base rows, one process at a time (others skip; their deltas are folded
-- next time). Readers see the old or the new split, never half of it (one transaction).
CREATE FUNCTION veralith_compact_value_rollups() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    folded bigint := 0;
    more   bigint := 0;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('veralith_compact_value_rollups')) THEN
        RETURN 0;
    END IF;
    WITH moved AS (DELETE FROM calibration_counts_delta RETURNING *),
         summed AS (SELECT knowledge_base, value, SUM(n) AS n, COUNT(*) AS rows_folded FROM moved GROUP BY 1, 2),
         applied AS (
             INSERT INTO calibration_counts_base AS b SELECT knowledge_base, value, n FROM summed
             ON CONFLICT (knowledge_base, value) DO UPDATE SET n = b.n + excluded.n)
    SELECT COALESCE(SUM(rows_folded), 0) INTO folded FROM summed;
    DELETE FROM calibration_counts_base WHERE n = 0;
    WITH moved AS (DELETE FROM latency_histogram_delta RETURNING *),
         summed AS (SELECT knowledge_base, bucket, SUM(n) AS n, COUNT(*) AS rows_folded FROM moved GROUP BY 1, 2),
         applied AS (
             INSERT INTO latency_histogram_base AS b SELECT knowledge_base, bucket, n FROM summed
             ON CONFLICT (knowledge_base, bucket) DO UPDATE SET n = b.n + excluded.n)
    SELECT COALESCE(SUM(rows_folded), 0) INTO more FROM summed;
    DELETE FROM latency_histogram_base WHERE n = 0;
    RETURN folded + more;
END $$;

-- The history so far, straight into the base rows.
INSERT INTO calibration_counts_base
SELECT knowledge_base, sufficiency_fraction, COUNT(*) FROM traces
WHERE status = 'done' AND failure_cell = 'complete_grounded' AND sufficiency_fraction IS NOT NULL
GROUP BY 1, 2;

INSERT INTO latency_histogram_base
SELECT knowledge_base, veralith_latency_bucket(app_latency_ms), COUNT(*) FROM traces
WHERE app_latency_ms IS NOT NULL GROUP BY 1, 2;

-- Nothing reads these two indexes any more (they served the offset walks the counts replace).
DROP INDEX traces_calibration;
DROP INDEX traces_app_latency;
