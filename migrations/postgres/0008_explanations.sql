-- Why: `--explain` keeps, for a failing trace, what went wrong in it and the change to try, beside the
-- rule-based suggestion: the same table as SQLite's migration 0016.
CREATE TABLE explanations (
    trace_id        bigint NOT NULL PRIMARY KEY REFERENCES traces (id) ON DELETE CASCADE,
    what_went_wrong text   NOT NULL,
    change_to_try   text   NOT NULL,
    quotes          text   NOT NULL,
    missing_fact    text   NOT NULL,
    dropped         text,
    backend         text   NOT NULL,
    model           text   NOT NULL,
    prompt_version  text   NOT NULL,
    call_usage      text   NOT NULL
);
