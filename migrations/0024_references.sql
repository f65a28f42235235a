-- Why: a team's golden set gives a reference answer (RAGAS `reference`/`ground_truth`, DeepEval
-- `expected_output`) and the chunks that should have been retrieved (`reference_contexts`,
-- `expected_context`); both were dropped. They are kept beside the trace (written with it when it is
-- logged), and its result keeps the reference's facts, each with a context-recall and an
-- answer-correctness verdict, the expected chunks the retriever did or did not return, and the
-- correctness layer read off them (beside the six cells, which stay reference-free).

CREATE TABLE trace_references (
    trace_id           INTEGER NOT NULL PRIMARY KEY REFERENCES traces (id) ON DELETE CASCADE,
    answer             TEXT,                -- the reference answer; NULL when only expected chunks were given
    contexts           TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(contexts)),  -- JSON list: expected chunk ids or texts
    -- Set with the result (NULL until the trace is judged):
    correctness        TEXT    CHECK (correctness IN ('correct', 'partly_correct', 'incorrect', 'not_assessed')),
    cause              TEXT    CHECK (cause IN ('never_retrieved', 'retrieved_unused', 'stated_wrongly')),
    context_recall     REAL,                -- facts the context states / facts judged
    answer_correctness REAL,                -- facts the response states / facts judged
    expected_recall    REAL,                -- expected chunks retrieved / expected chunks
    contradicted_claim_ids TEXT,            -- JSON list of the response's claims that contradict a fact
    summary            TEXT,
    error              TEXT                 -- why some verdicts are missing; NULL when every call ran
);
CREATE INDEX trace_references_correctness ON trace_references (correctness);

-- One row per fact of the reference answer, in its order, with its two verdicts (NULL: not given).
CREATE TABLE reference_facts (
    trace_id               INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position               INTEGER NOT NULL,
    fact_id                TEXT    NOT NULL,   -- f1, f2, ...
    text                   TEXT    NOT NULL,
    recall                 TEXT    CHECK (recall IN ('retrieved', 'not_retrieved')),
    recall_chunk_ids       TEXT    NOT NULL,   -- JSON list of the chunks that state it
    recall_reasoning       TEXT    NOT NULL,
    correctness            TEXT    CHECK (correctness IN ('stated', 'contradicted', 'missing')),
    claim_ids              TEXT    NOT NULL,   -- JSON list of the claims that state or contradict it
    correctness_reasoning  TEXT    NOT NULL,
    PRIMARY KEY (trace_id, position)
);

-- One row per expected chunk: the retrieved chunk it matched (NULL: never retrieved) and its rank.
CREATE TABLE expected_contexts (
    trace_id  INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position  INTEGER NOT NULL,
    given     TEXT    NOT NULL,
    chunk_id  TEXT,
    rank      INTEGER,
    PRIMARY KEY (trace_id, position)
);
