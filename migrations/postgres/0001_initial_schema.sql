-- The PostgreSQL store's schema: the same tables, columns and meanings as the SQLite store's (its
-- migrations 0001-0009, see docs/storage.md), so one set of queries (veralith/store) serves both.
-- Times are ISO-8601 UTC text and JSON is text, as in SQLite: they sort and compare the same way in
-- both stores, and a history copied from one to the other (`veralith migrate --to`) is unchanged.
-- Two things differ, each for concurrency:
--   * trace ids are handed out in blocks of 1,000 by the sequence veralith_trace_ids (a host keeps
--     a block in its spool folder, so `log()` never asks the database for an id);
--   * the running totals behind `stats` and the web overview are append-only deltas that one
--     process at a time folds into base rows (veralith_compact_rollups), so concurrent writers never
--     wait on (or deadlock over) the same few total rows; the views trace_rollup and trace_daily
--     sum both and read like SQLite's tables.

CREATE SEQUENCE veralith_trace_ids INCREMENT BY 1000 START WITH 1 MINVALUE 1;

CREATE TABLE traces (
    id                        bigint  PRIMARY KEY,
    created_at                text    NOT NULL,
    updated_at                text    NOT NULL,
    evaluated_at              text,
    status                    text    NOT NULL DEFAULT 'pending'
                              CHECK (status IN ('pending', 'running', 'done', 'error')),
    lease_host                text,
    lease_pid                 bigint,
    lease_at                  double precision,
    attempts                  integer NOT NULL DEFAULT 0,
    error_message             text,
    knowledge_base            text    NOT NULL DEFAULT 'default',
    metadata                  text    NOT NULL DEFAULT '{}',
    schema_version            text,
    failure_cell              text    CHECK (failure_cell IN (
                                  'complete_grounded', 'complete_ungrounded', 'incomplete_grounded',
                                  'incomplete_ungrounded', 'extra_grounded', 'extra_ungrounded')),
    overall_verdict           text    CHECK (overall_verdict IN ('Y', 'N')),
    quality_gate              text    CHECK (quality_gate IN ('pass', 'fail', 'indeterminate')),
    execution                 text,
    availability              text,
    status_reason             text,
    status_summary            text,
    refusal                   integer CHECK (refusal IN (0, 1)),
    has_diagnosis             integer NOT NULL DEFAULT 0 CHECK (has_diagnosis IN (0, 1)),
    sufficiency_level         text    CHECK (sufficiency_level IN ('high', 'low')),
    sufficiency_fraction      double precision,
    faithfulness_fraction     double precision,
    threshold                 double precision,
    threshold_source          text    CHECK (threshold_source IN ('calibrated', 'fallback')),
    n_sub_questions           integer,
    n_claims                  integer,
    n_uncovered_sub_questions integer,
    n_extra_claims            integer,
    suggestion_title          text,
    suggestion_summary        text,
    suggestion_actions        text,
    calls                     bigint,
    cache_hits                bigint,
    input_tokens              bigint,
    cached_input_tokens       bigint,
    output_tokens             bigint,
    usd                       double precision,
    backend                   text,
    judge_model               text,
    latency_ms                text,
    prompt_versions           text,
    query                     text    NOT NULL,
    response                  text    NOT NULL,
    response_kind             text    CHECK (response_kind IS NULL OR response_kind IN (
                                  'answer', 'partial_refusal', 'full_refusal', 'clarification_request',
                                  'no_factual_content')),
    as_of                     text,
    needs_review              integer CHECK (needs_review IS NULL OR needs_review IN (0, 1)),
    review_ids                text,
    coverage                  text,
    n_partial_sub_questions   integer,
    lease_token               text,
    external_id               text,
    run_id                    bigint,
    uid                       text
);

CREATE INDEX traces_created_at ON traces (created_at);
CREATE INDEX traces_failure_cell ON traces (failure_cell, id);
CREATE INDEX traces_knowledge_base ON traces (knowledge_base);
CREATE INDEX traces_status ON traces (status);
CREATE INDEX traces_calibration ON traces (knowledge_base, failure_cell, sufficiency_fraction) WHERE status = 'done';
CREATE UNIQUE INDEX traces_external_id ON traces (knowledge_base, external_id) WHERE external_id IS NOT NULL;
CREATE INDEX traces_by_external_id ON traces (external_id) WHERE external_id IS NOT NULL;
CREATE INDEX traces_run ON traces (run_id, quality_gate);
CREATE UNIQUE INDEX traces_uid ON traces (uid) WHERE uid IS NOT NULL;
CREATE INDEX traces_work ON traces (id) WHERE status IN ('pending', 'running');
CREATE INDEX traces_work_host ON traces (lease_host) WHERE status IN ('pending', 'running');

CREATE TABLE context_chunks (
    trace_id  bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position  integer NOT NULL,
    chunk_id  text    NOT NULL,
    source    text,
    metadata  text    NOT NULL DEFAULT '{}',
    text      text    NOT NULL,
    PRIMARY KEY (trace_id, position)
);

CREATE TABLE sub_questions (
    trace_id        bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position        integer NOT NULL,
    sub_question_id text    NOT NULL,
    text            text    NOT NULL,
    PRIMARY KEY (trace_id, position)
);

CREATE TABLE claims (
    trace_id   bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position   integer NOT NULL,
    claim_id   text    NOT NULL,
    text       text    NOT NULL,
    char_start integer,
    char_end   integer,
    PRIMARY KEY (trace_id, position)
);

CREATE TABLE sufficiency_judgments (
    trace_id        bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position        integer NOT NULL,
    sub_question_id text    NOT NULL,
    verdict         text    NOT NULL CHECK (verdict IN ('Y', 'N')),
    reasoning       text    NOT NULL,
    chunk_ids       text    NOT NULL DEFAULT '[]',
    prompt_version  text,
    confidence      double precision,
    PRIMARY KEY (trace_id, position)
);

CREATE TABLE faithfulness_judgments (
    trace_id       bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position       integer NOT NULL,
    claim_id       text    NOT NULL,
    verdict        text    NOT NULL CHECK (verdict IN ('Y', 'N')),
    relation       text    NOT NULL
                   CHECK (relation IN ('supported', 'unsupported', 'contradicted', 'conflicting')),
    reasoning      text    NOT NULL,
    prompt_version text,
    confidence     double precision,
    evidence       text    NOT NULL DEFAULT '[]',
    PRIMARY KEY (trace_id, position)
);

CREATE TABLE grounding (
    trace_id          bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    judgment_position integer NOT NULL,
    kind              text    NOT NULL CHECK (kind IN ('supports', 'contradicts')),
    position          integer NOT NULL,
    claim_id          text    NOT NULL,
    chunk_id          text    NOT NULL,
    PRIMARY KEY (trace_id, judgment_position, kind, position)
);
CREATE INDEX grounding_chunk ON grounding (trace_id, chunk_id);

CREATE TABLE completeness (
    trace_id                    bigint PRIMARY KEY REFERENCES traces (id) ON DELETE CASCADE,
    reasoning                   text NOT NULL,
    uncovered_sub_question_ids  text NOT NULL DEFAULT '[]',
    prompt_version              text,
    supports                    text NOT NULL DEFAULT '{}',
    statuses                    text NOT NULL DEFAULT '{}',
    gap_links                   text NOT NULL DEFAULT '{}',
    confidence                  text NOT NULL DEFAULT '{}'
);

CREATE TABLE completeness_mappings (
    trace_id        bigint  NOT NULL REFERENCES completeness (trace_id) ON DELETE CASCADE,
    sq_position     integer NOT NULL,
    position        integer NOT NULL,
    sub_question_id text    NOT NULL,
    claim_id        text,
    PRIMARY KEY (trace_id, sq_position, position)
);

CREATE TABLE completeness_extras (
    trace_id bigint  NOT NULL REFERENCES completeness (trace_id) ON DELETE CASCADE,
    position integer NOT NULL,
    claim_id text    NOT NULL,
    PRIMARY KEY (trace_id, position)
);

CREATE TABLE judge_errors (
    trace_id bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position integer NOT NULL,
    phase    text    NOT NULL CHECK (phase IN ('decompose', 'sufficiency', 'faithfulness', 'completeness')),
    kind     text    NOT NULL,
    message  text    NOT NULL,
    attempts integer NOT NULL DEFAULT 1,
    PRIMARY KEY (trace_id, position)
);

CREATE TABLE gaps (
    trace_id   bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position   integer NOT NULL,
    gap_id     text    NOT NULL,
    text       text    NOT NULL,
    char_start integer,
    char_end   integer,
    PRIMARY KEY (trace_id, position)
);

CREATE TABLE llm_cache (
    key            text    PRIMARY KEY,
    task           text    NOT NULL,
    model          text    NOT NULL,
    prompt_version text    NOT NULL,
    value          text    NOT NULL,
    created_at     text    NOT NULL,
    hits           bigint  NOT NULL DEFAULT 0
);

CREATE TABLE trace_history (
    id              bigint  GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    trace_id        bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    recorded_at     text    NOT NULL,
    evaluated_at    text,
    status          text    NOT NULL,
    quality_gate    text,
    error_message   text,
    judge_errors    text    NOT NULL DEFAULT '[]',
    failure_cell    text,
    backend         text,
    judge_model     text,
    prompt_versions text
);
CREATE INDEX trace_history_by_trace ON trace_history (trace_id, id);

CREATE TABLE runs (
    id              bigint  GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    name            text,
    source          text    NOT NULL CHECK (source IN ('eval', 'sdk')),
    started_at      text    NOT NULL,
    ended_at        text,
    backend         text,
    model           text,
    prompt_versions text,
    input           text,
    n_traces        bigint,
    n_pass          bigint,
    n_fail          bigint,
    n_indeterminate bigint,
    n_unevaluated   bigint,
    usd             double precision,
    usd_unknown     bigint
);
CREATE INDEX runs_name ON runs (name, id);
CREATE UNIQUE INDEX runs_sdk_name ON runs (name) WHERE source = 'sdk';
ALTER TABLE traces ADD FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE SET NULL;

CREATE TABLE run_traces (
    run_id                bigint  NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    trace_id              bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    external_id           text,
    knowledge_base        text    NOT NULL,
    failure_cell          text,
    quality_gate          text,
    status                text    NOT NULL,
    sufficiency_fraction  double precision,
    faithfulness_fraction double precision,
    n_claims              integer,
    n_extra_claims        integer,
    usd                   double precision,
    reason                text,
    query                 text    NOT NULL,
    PRIMARY KEY (run_id, trace_id)
);

-- Running totals: base rows (folded) + append-only deltas, read through the views below.
CREATE TABLE trace_rollup_base (
    knowledge_base text             NOT NULL,
    failure_cell   text             NOT NULL,  -- '' for none (not evaluated, or no cell)
    quality_gate   text             NOT NULL,  -- '' for none (no stored result)
    status         text             NOT NULL,
    n              bigint           NOT NULL DEFAULT 0,
    s_sum          double precision NOT NULL DEFAULT 0,
    s_n            bigint           NOT NULL DEFAULT 0,
    f_sum          double precision NOT NULL DEFAULT 0,
    f_n            bigint           NOT NULL DEFAULT 0,
    calls          bigint           NOT NULL DEFAULT 0,
    input_tokens   bigint           NOT NULL DEFAULT 0,
    output_tokens  bigint           NOT NULL DEFAULT 0,
    usd            double precision NOT NULL DEFAULT 0,
    usd_unknown    bigint           NOT NULL DEFAULT 0,
    PRIMARY KEY (knowledge_base, failure_cell, quality_gate, status)
);
CREATE TABLE trace_rollup_delta (LIKE trace_rollup_base INCLUDING DEFAULTS);

CREATE TABLE trace_daily_base (
    day            text             NOT NULL,  -- the UTC date the trace was created
    knowledge_base text             NOT NULL,
    failure_cell   text             NOT NULL,  -- '' for a result without a cell
    quality_gate   text             NOT NULL,
    n              bigint           NOT NULL DEFAULT 0,
    usd            double precision NOT NULL DEFAULT 0,
    usd_unknown    bigint           NOT NULL DEFAULT 0,
    PRIMARY KEY (day, knowledge_base, failure_cell, quality_gate)
);
CREATE TABLE trace_daily_delta (LIKE trace_daily_base INCLUDING DEFAULTS);

CREATE VIEW trace_rollup AS
SELECT knowledge_base, failure_cell, quality_gate, status, SUM(n) AS n, SUM(s_sum) AS s_sum, SUM(s_n) AS s_n,
       SUM(f_sum) AS f_sum, SUM(f_n) AS f_n, SUM(calls) AS calls, SUM(input_tokens) AS input_tokens,
       SUM(output_tokens) AS output_tokens, SUM(usd) AS usd, SUM(usd_unknown) AS usd_unknown
FROM (SELECT * FROM trace_rollup_base UNION ALL SELECT * FROM trace_rollup_delta) AS parts
GROUP BY knowledge_base, failure_cell, quality_gate, status
HAVING SUM(n) <> 0;

CREATE VIEW trace_daily AS
SELECT day, knowledge_base, failure_cell, quality_gate, SUM(n) AS n, SUM(usd) AS usd, SUM(usd_unknown) AS usd_unknown
FROM (SELECT * FROM trace_daily_base UNION ALL SELECT * FROM trace_daily_delta) AS parts
GROUP BY day, knowledge_base, failure_cell, quality_gate
HAVING SUM(n) <> 0;

CREATE FUNCTION veralith_rollup_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO trace_rollup_delta VALUES (
            OLD.knowledge_base, COALESCE(OLD.failure_cell, ''), COALESCE(OLD.quality_gate, ''), OLD.status, -1,
            -COALESCE(OLD.sufficiency_fraction, 0), -(CASE WHEN OLD.sufficiency_fraction IS NULL THEN 0 ELSE 1 END),
            -COALESCE(OLD.faithfulness_fraction, 0), -(CASE WHEN OLD.faithfulness_fraction IS NULL THEN 0 ELSE 1 END),
            -COALESCE(OLD.calls, 0), -COALESCE(OLD.input_tokens, 0), -COALESCE(OLD.output_tokens, 0),
            -COALESCE(OLD.usd, 0), -(CASE WHEN OLD.quality_gate IS NOT NULL AND OLD.usd IS NULL THEN 1 ELSE 0 END));
        IF OLD.quality_gate IS NOT NULL THEN
            INSERT INTO trace_daily_delta VALUES (
                substr(OLD.created_at, 1, 10), OLD.knowledge_base, COALESCE(OLD.failure_cell, ''), OLD.quality_gate,
                -1, -COALESCE(OLD.usd, 0), -(CASE WHEN OLD.usd IS NULL THEN 1 ELSE 0 END));
        END IF;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        INSERT INTO trace_rollup_delta VALUES (
            NEW.knowledge_base, COALESCE(NEW.failure_cell, ''), COALESCE(NEW.quality_gate, ''), NEW.status, 1,
            COALESCE(NEW.sufficiency_fraction, 0), CASE WHEN NEW.sufficiency_fraction IS NULL THEN 0 ELSE 1 END,
            COALESCE(NEW.faithfulness_fraction, 0), CASE WHEN NEW.faithfulness_fraction IS NULL THEN 0 ELSE 1 END,
            COALESCE(NEW.calls, 0), COALESCE(NEW.input_tokens, 0), COALESCE(NEW.output_tokens, 0),
            COALESCE(NEW.usd, 0), CASE WHEN NEW.quality_gate IS NOT NULL AND NEW.usd IS NULL THEN 1 ELSE 0 END);
        IF NEW.quality_gate IS NOT NULL THEN
            INSERT INTO trace_daily_delta VALUES (
                substr(NEW.created_at, 1, 10), NEW.knowledge_base, COALESCE(NEW.failure_cell, ''), NEW.quality_gate,
                1, COALESCE(NEW.usd, 0), CASE WHEN NEW.usd IS NULL THEN 1 ELSE 0 END);
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER traces_rollup AFTER INSERT OR DELETE OR UPDATE OF
    created_at, knowledge_base, failure_cell, quality_gate, status, sufficiency_fraction, faithfulness_fraction,
    calls, input_tokens, output_tokens, usd ON traces
    FOR EACH ROW EXECUTE FUNCTION veralith_rollup_row();

-- Fold the deltas into the base rows, one process at a time (others skip: their deltas stay and are
-- folded next time). Readers see the old or the new split, never half of it (one transaction).
CREATE FUNCTION veralith_compact_rollups() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    folded bigint := 0;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('veralith_compact_rollups')) THEN
        RETURN 0;
    END IF;
    WITH moved AS (DELETE FROM trace_rollup_delta RETURNING *),
         summed AS (
             SELECT knowledge_base, failure_cell, quality_gate, status, SUM(n) AS n, SUM(s_sum) AS s_sum,
                    SUM(s_n) AS s_n, SUM(f_sum) AS f_sum, SUM(f_n) AS f_n, SUM(calls) AS calls,
                    SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens, SUM(usd) AS usd,
                    SUM(usd_unknown) AS usd_unknown, COUNT(*) AS rows_folded
             FROM moved GROUP BY 1, 2, 3, 4),
         applied AS (
             INSERT INTO trace_rollup_base AS b
             SELECT knowledge_base, failure_cell, quality_gate, status, n, s_sum, s_n, f_sum, f_n, calls,
                    input_tokens, output_tokens, usd, usd_unknown FROM summed
             ON CONFLICT (knowledge_base, failure_cell, quality_gate, status) DO UPDATE SET
                 n = b.n + excluded.n, s_sum = b.s_sum + excluded.s_sum, s_n = b.s_n + excluded.s_n,
                 f_sum = b.f_sum + excluded.f_sum, f_n = b.f_n + excluded.f_n, calls = b.calls + excluded.calls,
                 input_tokens = b.input_tokens + excluded.input_tokens,
                 output_tokens = b.output_tokens + excluded.output_tokens, usd = b.usd + excluded.usd,
                 usd_unknown = b.usd_unknown + excluded.usd_unknown)
    SELECT COALESCE(SUM(rows_folded), 0) INTO folded FROM summed;
    -- An emptied group goes away, and with it any float residue of the subtractions.
    DELETE FROM trace_rollup_base WHERE n = 0;
    WITH moved AS (DELETE FROM trace_daily_delta RETURNING *)
    INSERT INTO trace_daily_base AS b
    SELECT day, knowledge_base, failure_cell, quality_gate, SUM(n), SUM(usd), SUM(usd_unknown)
    FROM moved GROUP BY 1, 2, 3, 4
    ON CONFLICT (day, knowledge_base, failure_cell, quality_gate) DO UPDATE SET
        n = b.n + excluded.n, usd = b.usd + excluded.usd, usd_unknown = b.usd_unknown + excluded.usd_unknown;
    DELETE FROM trace_daily_base WHERE n = 0;
    RETURN folded;
END $$;
