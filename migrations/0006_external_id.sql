-- Why: people find traces by their own ids. A record's `id` (the JSONL field of `veralith eval`)
-- becomes the trace's external id: unique within its knowledge base, so re-running a file finds the
-- trace it wrote before instead of duplicating it, and `inspect`, `export` and `resume` accept it.
-- Earlier versions kept that id only as metadata.id (it stays there for readers of old exports);
-- traces stored before this migration take it from there, the newest trace winning when a re-run
-- file stored several under one id.

ALTER TABLE traces ADD COLUMN external_id TEXT;  -- the caller's own id (JSONL `id`); NULL when none was given

UPDATE traces SET external_id = picked.external_id
FROM (SELECT max(id) AS id, CAST(json_extract(metadata, '$.id') AS TEXT) AS external_id
      FROM traces
      WHERE json_valid(metadata) AND json_type(metadata, '$.id') IN ('integer', 'text')
      GROUP BY knowledge_base, CAST(json_extract(metadata, '$.id') AS TEXT)) AS picked
WHERE traces.id = picked.id;

-- Looked up on every re-run record; NULLs (traces without an id) are not indexed and never collide.
CREATE UNIQUE INDEX traces_external_id ON traces (knowledge_base, external_id) WHERE external_id IS NOT NULL;
-- `inspect ID` may name an external id without its knowledge base.
CREATE INDEX traces_by_external_id ON traces (external_id) WHERE external_id IS NOT NULL;

-- Re-judging a trace in place (a re-run file whose record or judge configuration changed,
-- `eval --rejudge`) supersedes a good result too, not only a failed one: history says what it was.
ALTER TABLE trace_history ADD COLUMN failure_cell TEXT;     -- the superseded result's cell (NULL: none)
ALTER TABLE trace_history ADD COLUMN backend TEXT;          -- and the judge configuration that produced it
ALTER TABLE trace_history ADD COLUMN judge_model TEXT;
ALTER TABLE trace_history ADD COLUMN prompt_versions TEXT CHECK (prompt_versions IS NULL OR json_valid(prompt_versions));
