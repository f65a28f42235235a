-- Why: a faithfulness verdict may be `stale` (a claim stated only by chunks too old for the question,
-- or one a later chunk changed), and it keeps the dates it rests on (`dates`). SQLite cannot widen a
-- CHECK constraint in place, so the table is rebuilt with the wider one and its rows copied unchanged;
-- no other table refers to it.

CREATE TABLE faithfulness_judgments_new (
    trace_id       INTEGER NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    position       INTEGER NOT NULL,
    claim_id       TEXT    NOT NULL,
    verdict        TEXT    NOT NULL CHECK (verdict IN ('Y', 'N')),
    relation       TEXT    NOT NULL
                   CHECK (relation IN ('supported', 'unsupported', 'contradicted', 'conflicting', 'stale')),
    reasoning      TEXT    NOT NULL,
    prompt_version TEXT,
    confidence     REAL,
    evidence       TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(evidence)),
    dates          TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(dates)),  -- [{chunk_id, date, quote}]
    PRIMARY KEY (trace_id, position)
) WITHOUT ROWID;

INSERT INTO faithfulness_judgments_new
    (trace_id, position, claim_id, verdict, relation, reasoning, prompt_version, confidence, evidence)
SELECT trace_id, position, claim_id, verdict, relation, reasoning, prompt_version, confidence, evidence
FROM faithfulness_judgments;

DROP TABLE faithfulness_judgments;
ALTER TABLE faithfulness_judgments_new RENAME TO faithfulness_judgments;
