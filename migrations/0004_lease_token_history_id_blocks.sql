-- Why: three reliability fixes need state the schema did not have.
-- 1. A lease named by host + pid alone cannot tell a restarted container (same host name, pid 1
--    again) from the process that took it, nor a reused pid from its first owner: `lease_token`
--    adds a random per-process token (prefixed by the pid's start time where the OS tells it).
-- 2. Re-judging a trace (`veralith resume --failed`) replaces its judgments; `trace_history` keeps
--    what each earlier evaluation ended with (its judge errors or failure message).
-- 3. `log()` may not wait for the write lock; it then spools the trace to a file under an id taken
--    from a block this process reserved in `trace_id_blocks`, so the id it returns is final. Every
--    new trace id is above every reserved block (see veralith.store.repository).

ALTER TABLE traces ADD COLUMN lease_token TEXT;  -- random per-process token of the lease's owner

CREATE TABLE trace_history (
    id                 INTEGER PRIMARY KEY,
    trace_id           INTEGER NOT NULL REFERENCES traces(id) ON DELETE CASCADE,
    recorded_at        TEXT    NOT NULL,           -- when the evaluation was superseded
    evaluated_at       TEXT,                       -- when that evaluation finished
    status             TEXT    NOT NULL,           -- the trace's status then (done or error)
    quality_gate       TEXT,
    error_message      TEXT,                       -- the failure message of an `error` trace
    judge_errors       TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(judge_errors))  -- [{phase, kind, message, attempts}]
);
CREATE INDEX trace_history_by_trace ON trace_history (trace_id, id);

CREATE TABLE trace_id_blocks (
    lo                 INTEGER PRIMARY KEY,        -- first id of the block
    hi                 INTEGER NOT NULL,           -- last id of the block
    owner              TEXT    NOT NULL,           -- host, pid and token of the reserving process
    taken_at           TEXT    NOT NULL
);
