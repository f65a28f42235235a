-- Why: a result keeps the response's conversational sentences (advice on how to go about it,
-- encouragement, offers to help) as remarks: shown by inspect and the web view, never graded. They
-- have the shape of gap statements and live beside them. Results stored before this migration have
-- none, which is what they had.

CREATE TABLE remarks (
    trace_id   INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position   INTEGER NOT NULL,
    remark_id  TEXT    NOT NULL,
    text       TEXT    NOT NULL,
    char_start INTEGER,                 -- span in the response when locatable, else NULL
    char_end   INTEGER,
    PRIMARY KEY (trace_id, position)
) WITHOUT ROWID;
