-- Why: a record a store refuses (or that breaks the rule every stored text follows: no NUL, no lone
-- surrogate) must not block the records shipped, imported or copied with it, nor be lost. It is set
-- aside here with its reason, counted in `veralith stats`, listed by `veralith dead-letters` and
-- tried again by `veralith dead-letters --retry` once the cause is fixed.

CREATE TABLE dead_letters (
    id              INTEGER PRIMARY KEY,
    uid             TEXT    NOT NULL UNIQUE,   -- the record's unique id (a spooled trace's uid): set aside once
    source          TEXT    NOT NULL CHECK (source IN ('shipper', 'import', 'migrate', 'worker')),  -- who set it aside
    trace_id        INTEGER,                   -- the id it was logged or stored under, when it had one
    knowledge_base  TEXT,                      -- of the trace, when it had one (`stats --kb` counts by it)
    payload         TEXT    NOT NULL,          -- the record as JSON, non-ASCII escaped (any text fits)
    reason          TEXT    NOT NULL,          -- why it was set aside, one line
    created_at      TEXT    NOT NULL,          -- UTC ISO time it was set aside
    retried_at      TEXT,                      -- the last `--retry` that could not store it either
    attempts        INTEGER NOT NULL DEFAULT 0 -- how many `--retry` runs tried it
);
CREATE INDEX dead_letters_created ON dead_letters (created_at);
