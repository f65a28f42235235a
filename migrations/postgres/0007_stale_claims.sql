-- Why: a faithfulness verdict may be `stale` (a claim stated only by chunks too old for the question,
-- or one a later chunk changed), and it keeps the dates it rests on (`dates`): the same change as
-- SQLite's migration 0015.
ALTER TABLE faithfulness_judgments DROP CONSTRAINT faithfulness_judgments_relation_check;
ALTER TABLE faithfulness_judgments ADD CONSTRAINT faithfulness_judgments_relation_check
    CHECK (relation IN ('supported', 'unsupported', 'contradicted', 'conflicting', 'stale'));
ALTER TABLE faithfulness_judgments ADD COLUMN dates text NOT NULL DEFAULT '[]';
