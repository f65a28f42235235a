-- Fleet mode. Every trace carries a random `uid`, so a store recognises a trace it already holds
-- when a spooled trace is shipped twice (a crash between the insert and the spool's deletion) or
-- when a history is copied into another store (`veralith migrate --to`); ids alone cannot tell a
-- repeat from two different traces that were given the same id. Traces written before get one now.
ALTER TABLE traces ADD COLUMN uid TEXT;
UPDATE traces SET uid = lower(hex(randomblob(16))) WHERE uid IS NULL;
CREATE UNIQUE INDEX traces_uid ON traces (uid) WHERE uid IS NOT NULL;

-- The work queue `veralith worker` claims from, in id order: only the traces nobody has finished;
-- and, by host, the leases a worker checks for processes of its own host that are gone.
CREATE INDEX traces_work ON traces (id) WHERE status IN ('pending', 'running');
CREATE INDEX traces_work_host ON traces (lease_host) WHERE status IN ('pending', 'running');
