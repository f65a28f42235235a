-- Why: the first schema. Tables mirror veralith.models.EvaluationResult one-to-one so a stored
-- result reads back equal to the computed one; `traces` also carries the rolled-up diagnosis so
-- list, stats and calibration never have to join the judgment tables.
-- Conventions: timestamps are ISO-8601 UTC text (sortable); lists keep their order in `position`;
-- JSON columns hold free-form maps (metadata, latency, prompt versions) that nobody filters on.

CREATE TABLE traces (
    id                        INTEGER PRIMARY KEY,
    created_at                TEXT    NOT NULL,
    updated_at                TEXT    NOT NULL,
    evaluated_at              TEXT,
    -- Work state: pending (written, not yet evaluated), running (claimed under a lease),
    -- done (a result is stored), error (the last evaluation failed; see error_message).
    status                    TEXT    NOT NULL DEFAULT 'pending'
                              CHECK (status IN ('pending', 'running', 'done', 'error')),
    -- The lease: which process owns the trace. For `running` it is the evaluating process; for
    -- `pending` it is the process whose in-memory queue holds the trace (NULL: nobody's queue).
    lease_host                TEXT,
    lease_pid                 INTEGER,
    lease_at                  REAL,                 -- unix seconds, compared against a timeout
    attempts                  INTEGER NOT NULL DEFAULT 0,
    error_message             TEXT,
    knowledge_base            TEXT    NOT NULL DEFAULT 'default',
    metadata                  TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
    schema_version            TEXT,
    -- Rolled-up result (NULL until a result is stored).
    failure_cell              TEXT    CHECK (failure_cell IN (
                                  'complete_grounded', 'complete_ungrounded', 'incomplete_grounded',
                                  'incomplete_ungrounded', 'extra_grounded', 'extra_ungrounded')),
    -- 'Y' iff the answer itself is complete and grounded, 'N' for any other cell, NULL without a
    -- cell. Unlike quality_gate it does not excuse a correct refusal.
    overall_verdict           TEXT    CHECK (overall_verdict IN ('Y', 'N')),
    quality_gate              TEXT    CHECK (quality_gate IN ('pass', 'fail', 'indeterminate')),
    execution                 TEXT,
    availability              TEXT,
    status_reason             TEXT,
    status_summary            TEXT,
    refusal                   INTEGER CHECK (refusal IN (0, 1)),
    has_diagnosis             INTEGER NOT NULL DEFAULT 0 CHECK (has_diagnosis IN (0, 1)),
    sufficiency_level         TEXT    CHECK (sufficiency_level IN ('high', 'low')),
    sufficiency_fraction      REAL,
    faithfulness_fraction     REAL,
    threshold                 REAL,
    threshold_source          TEXT    CHECK (threshold_source IN ('calibrated', 'fallback')),
    n_sub_questions           INTEGER,
    n_claims                  INTEGER,
    n_uncovered_sub_questions INTEGER,
    n_extra_claims            INTEGER,
    suggestion_title          TEXT,
    suggestion_summary        TEXT,
    suggestion_actions        TEXT    CHECK (suggestion_actions IS NULL OR json_valid(suggestion_actions)),
    calls                     INTEGER,
    cache_hits                INTEGER,
    input_tokens              INTEGER,
    cached_input_tokens       INTEGER,
    output_tokens             INTEGER,
    usd                       REAL,                 -- NULL when a price was unknown, never a silent 0
    backend                   TEXT,
    judge_model               TEXT,
    latency_ms                TEXT    CHECK (latency_ms IS NULL OR json_valid(latency_ms)),
    prompt_versions           TEXT    CHECK (prompt_versions IS NULL OR json_valid(prompt_versions)),
    -- The big texts come last so that row scans touch as little as possible before them.
    query                     TEXT    NOT NULL,
    response                  TEXT    NOT NULL
);

-- Listing newest first and time-window stats.
CREATE INDEX traces_created_at ON traces (created_at);
-- Filtered listing (`--cell`, `--kb`, status); each also yields id order because the rowid is
-- the implicit last column of every index.
CREATE INDEX traces_failure_cell ON traces (failure_cell);
CREATE INDEX traces_knowledge_base ON traces (knowledge_base);
CREATE INDEX traces_status ON traces (status);
-- Covering index for `stats`: the whole aggregation is an index-only scan, grouped in index order.
CREATE INDEX traces_rollup ON traces (
    knowledge_base, failure_cell, quality_gate, status, sufficiency_fraction, faithfulness_fraction,
    calls, input_tokens, output_tokens, usd);
-- Calibration: COUNT and OFFSET reads over one (KB, cell) range in sufficiency order, done only.
CREATE INDEX traces_calibration ON traces (knowledge_base, failure_cell, sufficiency_fraction)
    WHERE status = 'done';

CREATE TABLE context_chunks (
    trace_id  INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position  INTEGER NOT NULL,
    chunk_id  TEXT    NOT NULL,
    source    TEXT,
    metadata  TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
    text      TEXT    NOT NULL,
    PRIMARY KEY (trace_id, position)
) WITHOUT ROWID;

CREATE TABLE sub_questions (
    trace_id        INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position        INTEGER NOT NULL,
    sub_question_id TEXT    NOT NULL,
    text            TEXT    NOT NULL,
    PRIMARY KEY (trace_id, position)
) WITHOUT ROWID;

CREATE TABLE claims (
    trace_id   INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position   INTEGER NOT NULL,
    claim_id   TEXT    NOT NULL,
    text       TEXT    NOT NULL,
    char_start INTEGER,                 -- span in the response when locatable, else NULL
    char_end   INTEGER,
    PRIMARY KEY (trace_id, position)
) WITHOUT ROWID;

CREATE TABLE sufficiency_judgments (
    trace_id        INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position        INTEGER NOT NULL,
    sub_question_id TEXT    NOT NULL,
    verdict         TEXT    NOT NULL CHECK (verdict IN ('Y', 'N')),
    reasoning       TEXT    NOT NULL,
    chunk_ids       TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(chunk_ids)),
    prompt_version  TEXT,
    PRIMARY KEY (trace_id, position)
) WITHOUT ROWID;

CREATE TABLE faithfulness_judgments (
    trace_id       INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position       INTEGER NOT NULL,
    claim_id       TEXT    NOT NULL,
    verdict        TEXT    NOT NULL CHECK (verdict IN ('Y', 'N')),
    relation       TEXT    NOT NULL
                   CHECK (relation IN ('supported', 'unsupported', 'contradicted', 'conflicting')),
    reasoning      TEXT    NOT NULL,
    prompt_version TEXT,
    PRIMARY KEY (trace_id, position)
) WITHOUT ROWID;

-- Claim <-> chunk links of the Faithfulness judgments: `supports` rows are grounding_chunk_ids,
-- `contradicts` rows are contradicting_chunk_ids, each list in its own order.
CREATE TABLE grounding (
    -- Key columns first, in key order: SQLite 3.40's integrity_check misreports NOT NULL columns
    -- of a WITHOUT ROWID table whose key columns are declared out of order.
    trace_id          INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    judgment_position INTEGER NOT NULL,     -- which faithfulness judgment (its position)
    kind              TEXT    NOT NULL CHECK (kind IN ('supports', 'contradicts')),
    position          INTEGER NOT NULL,     -- order within that judgment's list
    claim_id          TEXT    NOT NULL,
    chunk_id          TEXT    NOT NULL,
    PRIMARY KEY (trace_id, judgment_position, kind, position)
) WITHOUT ROWID;
CREATE INDEX grounding_chunk ON grounding (trace_id, chunk_id);

-- One row per trace whose Completeness judge produced a judgment.
CREATE TABLE completeness (
    trace_id                    INTEGER PRIMARY KEY REFERENCES traces (id) ON DELETE CASCADE,
    reasoning                   TEXT NOT NULL,
    uncovered_sub_question_ids  TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(uncovered_sub_question_ids)),
    prompt_version              TEXT
);

-- mappings {sub_question_id: [claim_id, ...]}; a sub-question mapped to no claim keeps one row
-- with claim_id NULL so that an empty list reads back as an empty list.
CREATE TABLE completeness_mappings (
    trace_id        INTEGER NOT NULL REFERENCES completeness (trace_id) ON DELETE CASCADE,
    sq_position     INTEGER NOT NULL,       -- order of the sub-question in the mapping
    position        INTEGER NOT NULL,       -- order of the claim within it
    sub_question_id TEXT    NOT NULL,
    claim_id        TEXT,
    PRIMARY KEY (trace_id, sq_position, position)
) WITHOUT ROWID;

CREATE TABLE completeness_extras (
    trace_id INTEGER NOT NULL REFERENCES completeness (trace_id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    claim_id TEXT    NOT NULL,
    PRIMARY KEY (trace_id, position)
) WITHOUT ROWID;

-- veralith.models.JudgeError, in the order the pipeline recorded them.
CREATE TABLE judge_errors (
    trace_id INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    phase    TEXT    NOT NULL CHECK (phase IN ('decompose', 'sufficiency', 'faithfulness', 'completeness')),
    kind     TEXT    NOT NULL,
    message  TEXT    NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (trace_id, position)
) WITHOUT ROWID;

-- Judge replies keyed by hash(backend, model, prompt version, messages, schema); the in-process
-- LRU sits in front of it. `hits` counts reuse, for the cost report.
CREATE TABLE llm_cache (
    key            TEXT    PRIMARY KEY,
    task           TEXT    NOT NULL,
    model          TEXT    NOT NULL,
    prompt_version TEXT    NOT NULL,
    value          TEXT    NOT NULL CHECK (json_valid(value)),
    created_at     TEXT    NOT NULL,
    hits           INTEGER NOT NULL DEFAULT 0
);
