-- Why: `--explain` keeps, for a failing trace, one more judge call's account of what went wrong in that
-- trace and the change to try, beside the rule-based suggestion (which stays in traces). At most one
-- per trace; a re-evaluation replaces it with the trace's other judgments. `dropped` holds the note
-- when the reply was not kept (an invented quote, a refused input); quotes and usage are JSON.

CREATE TABLE explanations (
    trace_id        INTEGER NOT NULL PRIMARY KEY REFERENCES traces (id) ON DELETE CASCADE,
    what_went_wrong TEXT    NOT NULL,
    change_to_try   TEXT    NOT NULL,
    quotes          TEXT    NOT NULL,   -- JSON list of {source, chunk_id, text}, each found in the trace
    missing_fact    TEXT    NOT NULL,
    dropped         TEXT,               -- NULL when kept, else why not ("explanation dropped: ...")
    backend         TEXT    NOT NULL,
    model           TEXT    NOT NULL,
    prompt_version  TEXT    NOT NULL,
    call_usage      TEXT    NOT NULL    -- JSON {calls, cache_hits, input_tokens, ..., usd} of this one call
);
