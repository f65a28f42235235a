-- Why: a team's reference answer and expected chunks are kept beside the trace, and its result keeps the
-- reference's facts with their context-recall and answer-correctness verdicts, the expected chunks
-- retrieved or not, and the correctness layer: the same tables as SQLite's migration 0024.

CREATE TABLE trace_references (
    trace_id           bigint NOT NULL PRIMARY KEY REFERENCES traces (id) ON DELETE CASCADE,
    answer             text,
    contexts           text   NOT NULL DEFAULT '[]',
    correctness        text   CHECK (correctness IN ('correct', 'partly_correct', 'incorrect', 'not_assessed')),
    cause              text   CHECK (cause IN ('never_retrieved', 'retrieved_unused', 'stated_wrongly')),
    context_recall     double precision,
    answer_correctness double precision,
    expected_recall    double precision,
    contradicted_claim_ids text,
    summary            text,
    error              text
);
CREATE INDEX trace_references_correctness ON trace_references (correctness);

CREATE TABLE reference_facts (
    trace_id               bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position               integer NOT NULL,
    fact_id                text    NOT NULL,
    text                   text    NOT NULL,
    recall                 text    CHECK (recall IN ('retrieved', 'not_retrieved')),
    recall_chunk_ids       text    NOT NULL,
    recall_reasoning       text    NOT NULL,
    correctness            text    CHECK (correctness IN ('stated', 'contradicted', 'missing')),
    claim_ids              text    NOT NULL,
    correctness_reasoning  text    NOT NULL,
    PRIMARY KEY (trace_id, position)
);

CREATE TABLE expected_contexts (
    trace_id  bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position  integer NOT NULL,
    given     text    NOT NULL,
    chunk_id  text,
    rank      integer,
    PRIMARY KEY (trace_id, position)
);
