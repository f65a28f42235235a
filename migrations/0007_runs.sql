-- Why: "what did my last change do?" needs traces grouped by the run that produced them. Every
-- `veralith eval` invocation is a run, and traces logged from an application can name one
-- (VERALITH_RUN, or run= on log()); `veralith compare A B` then pairs the traces of two runs.
-- A run records the judge configuration it ran with, so two runs that differ in judge model or
-- prompt version can be told apart from two runs that differ in the application's answers.

CREATE TABLE runs (
    id              INTEGER PRIMARY KEY,
    -- Optional for eval runs (`--run-name`), required for SDK runs; not unique across eval runs
    -- (re-running "main" in CI is normal): a name resolves to the newest run that has it.
    name            TEXT,
    source          TEXT    NOT NULL CHECK (source IN ('eval', 'sdk')),
    started_at      TEXT    NOT NULL,
    ended_at        TEXT,                   -- NULL while running, for SDK runs, and after a crash
    backend         TEXT,
    model           TEXT,
    prompt_versions TEXT    CHECK (prompt_versions IS NULL OR json_valid(prompt_versions)),
    input           TEXT,                   -- what was evaluated, e.g. the JSONL file (eval)
    -- Totals written when an eval run ends; NULL for open runs, whose totals are counted live.
    n_traces        INTEGER,
    n_pass          INTEGER,
    n_fail          INTEGER,
    n_indeterminate INTEGER,
    n_unevaluated   INTEGER,                -- traces of the run without a stored result
    usd             REAL,                   -- sum of known costs
    usd_unknown     INTEGER                 -- results whose price was unknown
);
CREATE INDEX runs_name ON runs (name, id);
-- SDK traces join their run by name (get-or-create), so an SDK run name is unique.
CREATE UNIQUE INDEX runs_sdk_name ON runs (name) WHERE source = 'sdk';

-- The run that last wrote or judged the trace. SDK runs are read through it.
ALTER TABLE traces ADD COLUMN run_id INTEGER REFERENCES runs (id) ON DELETE SET NULL;
-- Loading an SDK run's traces (compare) and counting its gates (runs) walk this index.
CREATE INDEX traces_run ON traces (run_id, quality_gate);

-- What each eval run found, trace by trace. A record's external id is unique within its knowledge
-- base, so evaluating a changed file again re-judges the same trace in place: the traces row then
-- holds only the newest outcome, and the earlier run's outcome would be lost without this copy of
-- the rolled-up columns `veralith compare` needs, taken when the run judged (or reused) the trace.
-- `reason` is the one-line why of a result that did not pass, built from the full result then.
CREATE TABLE run_traces (
    run_id                INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    trace_id              INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    external_id           TEXT,
    knowledge_base        TEXT    NOT NULL,
    failure_cell          TEXT,
    quality_gate          TEXT,
    status                TEXT    NOT NULL,
    sufficiency_fraction  REAL,
    faithfulness_fraction REAL,
    n_claims              INTEGER,
    n_extra_claims        INTEGER,
    usd                   REAL,
    reason                TEXT,
    query                 TEXT    NOT NULL,
    PRIMARY KEY (run_id, trace_id)
) WITHOUT ROWID;
