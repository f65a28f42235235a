-- Why: `veralith eval --dry-run` reports an expected cost, and what a judge writes back (output tokens)
-- is unknown before the call. The budget guard keeps its generous allowance (an upper bound); the dry
-- run instead learns, per task, model and prompt version, how the output real runs got compares with
-- that allowance, and how many requests they made per call it plans. One row per (task, model, prompt
-- version), summed as results are saved (veralith.store.outputsizes): a handful of rows, whatever the
-- number of traces.

CREATE TABLE output_sizes (
    task             TEXT    NOT NULL,   -- questions | claims | sufficiency | faithfulness | completeness | fast
    model            TEXT    NOT NULL,   -- the model the calls were sent to
    prompt_version   TEXT    NOT NULL,
    traces           INTEGER NOT NULL DEFAULT 0,   -- traces whose calls of this task are summed here
    planned_calls    INTEGER NOT NULL DEFAULT 0,   -- the calls the dry run plans for the same traces
    calls            INTEGER NOT NULL DEFAULT 0,   -- requests made, re-asks included (0: a planned call not needed)
    allowance_tokens INTEGER NOT NULL DEFAULT 0,   -- the dry run's allowance for the same traces' planned calls
    output_tokens    INTEGER NOT NULL DEFAULT 0,   -- what the model wrote, as the server reported it
    updated_at       TEXT    NOT NULL,
    PRIMARY KEY (task, model, prompt_version)
);
