-- Why: result schema 1.1. A diagnosis a person can trust needs more than the labels: each verdict's
-- confidence and evidence quotes, the gap statements a response makes ("the documents don't say…"),
-- the response kind derived from them, the completeness roles (answers vs supports) and per
-- sub-question statuses (answered / partial / unanswered), per sub-question coverage, and whether a
-- low-confidence verdict decides the outcome (needs_review). Results stored under 1.0 keep NULL or
-- empty values here and read back with the model's defaults.

ALTER TABLE traces ADD COLUMN response_kind TEXT CHECK (response_kind IS NULL OR response_kind IN (
    'answer', 'partial_refusal', 'full_refusal', 'clarification_request', 'no_factual_content'));
ALTER TABLE traces ADD COLUMN as_of TEXT;                 -- the date the judges took as today
ALTER TABLE traces ADD COLUMN needs_review INTEGER CHECK (needs_review IS NULL OR needs_review IN (0, 1));
ALTER TABLE traces ADD COLUMN review_ids TEXT CHECK (review_ids IS NULL OR json_valid(review_ids));
-- {sub_question_id: answered|partial|ungrounded_answer|declined|unanswered}
ALTER TABLE traces ADD COLUMN coverage TEXT CHECK (coverage IS NULL OR json_valid(coverage));
ALTER TABLE traces ADD COLUMN n_partial_sub_questions INTEGER;

ALTER TABLE sufficiency_judgments ADD COLUMN confidence REAL;   -- NULL: the backend could not tell
ALTER TABLE faithfulness_judgments ADD COLUMN confidence REAL;
-- [{"chunk_id": ..., "quote": ...}, ...] in the judge's order
ALTER TABLE faithfulness_judgments ADD COLUMN evidence TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(evidence));

-- Completeness detail as JSON maps keyed by sub-question (or gap) id, in sub-question order.
ALTER TABLE completeness ADD COLUMN supports TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(supports));
ALTER TABLE completeness ADD COLUMN statuses TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(statuses));
ALTER TABLE completeness ADD COLUMN gap_links TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(gap_links));
ALTER TABLE completeness ADD COLUMN confidence TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(confidence));

-- Sentences of the response that say the documents lack something: refusal text, not claims.
CREATE TABLE gaps (
    trace_id   INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position   INTEGER NOT NULL,
    gap_id     TEXT    NOT NULL,
    text       TEXT    NOT NULL,
    char_start INTEGER,                 -- span in the response when locatable, else NULL
    char_end   INTEGER,
    PRIMARY KEY (trace_id, position)
) WITHOUT ROWID;
