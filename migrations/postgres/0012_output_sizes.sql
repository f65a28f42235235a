-- Why: the dry run's expected output tokens, learnt from real runs per task, model and prompt
-- version; the same table as SQLite's migration 0020 (veralith.store.outputsizes).

CREATE TABLE output_sizes (
    task             text    NOT NULL,
    model            text    NOT NULL,
    prompt_version   text    NOT NULL,
    traces           bigint  NOT NULL DEFAULT 0,
    planned_calls    bigint  NOT NULL DEFAULT 0,
    calls            bigint  NOT NULL DEFAULT 0,
    allowance_tokens bigint  NOT NULL DEFAULT 0,
    output_tokens    bigint  NOT NULL DEFAULT 0,
    updated_at       text    NOT NULL,
    PRIMARY KEY (task, model, prompt_version)
);
