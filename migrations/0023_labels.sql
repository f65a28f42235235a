-- Why: a reviewer who reads a trace and disagrees with the judge needs somewhere to say so, and a
-- team needs those answers to measure the judge on its own traces (`veralith agreement`), to
-- calibrate a knowledge base's threshold and review flag, and to build a regression set for CI.
-- One row per verdict a person gave: on the trace's cell or gate, one claim's relation, one
-- sub-question's sufficiency or coverage. A later row on the same (trace, target, item) corrects
-- an earlier one; every row is kept. `judged` and `result_at` record the result it was given
-- against, so a re-judged trace keeps its label and shows whether the judge now agrees.

CREATE TABLE labels (
    uid TEXT PRIMARY KEY,                 -- random; a copy or an import adds a label once
    trace_id INTEGER NOT NULL REFERENCES traces(id) ON DELETE CASCADE,
    target TEXT NOT NULL CHECK (target IN ('cell', 'gate', 'claim', 'sufficiency', 'coverage')),
    item TEXT NOT NULL DEFAULT '',        -- the claim or sub-question id; '' for the cell and the gate
    value TEXT NOT NULL,                  -- the reviewer's verdict (a cell, pass/fail, a relation, Y/N, a coverage)
    reviewer TEXT NOT NULL,
    labelled_at REAL NOT NULL,            -- unix time
    note TEXT,
    judged TEXT,                          -- what the judge said when the label was given (NULL: nothing)
    result_at TEXT,                       -- evaluated_at of that result
    source TEXT NOT NULL DEFAULT 'veralith'   -- veralith | jsonl | csv | langfuse | phoenix
);
CREATE INDEX labels_by_trace ON labels (trace_id, target, item, labelled_at);
CREATE INDEX labels_by_time ON labels (labelled_at);

-- How many labelled traces a result's sufficiency threshold was fitted to (NULL: not fitted to
-- labels), so `inspect` and the trace page say which was used (threshold_source stays 'calibrated').
ALTER TABLE traces ADD COLUMN threshold_labels INTEGER;
