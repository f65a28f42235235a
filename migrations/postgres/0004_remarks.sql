-- Why: a result keeps the response's conversational sentences (advice, encouragement, offers to
-- help) as remarks, shown and never graded: the same table as SQLite's migration 0012.
CREATE TABLE remarks (
    trace_id   bigint  NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position   integer NOT NULL,
    remark_id  text    NOT NULL,
    text       text    NOT NULL,
    char_start integer,
    char_end   integer,
    PRIMARY KEY (trace_id, position)
);
