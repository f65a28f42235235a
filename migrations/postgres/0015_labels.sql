-- Why: a reviewer who reads a trace and disagrees with the judge needs somewhere to say so, and a
-- team needs those answers to measure the judge on its own traces, calibrate, and gate CI.
-- The same change as SQLite's migration of the same name.

CREATE TABLE labels (
    uid TEXT PRIMARY KEY,
    trace_id bigint NOT NULL REFERENCES traces(id) ON DELETE CASCADE,
    target TEXT NOT NULL CHECK (target IN ('cell', 'gate', 'claim', 'sufficiency', 'coverage')),
    item TEXT NOT NULL DEFAULT '',
    value TEXT NOT NULL,
    reviewer TEXT NOT NULL,
    labelled_at double precision NOT NULL,
    note TEXT,
    judged TEXT,
    result_at TEXT,
    source TEXT NOT NULL DEFAULT 'veralith'
);
CREATE INDEX labels_by_trace ON labels (trace_id, target, item, labelled_at);
CREATE INDEX labels_by_time ON labels (labelled_at);

ALTER TABLE traces ADD COLUMN threshold_labels bigint;
