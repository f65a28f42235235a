-- Why: a result says how it was judged (`mode`, 'full' or 'fast'); the same column as SQLite's
-- migration 0019. Every result stored before it was judged in full.

ALTER TABLE traces ADD COLUMN mode text;

UPDATE traces SET mode = 'full' WHERE execution IS NOT NULL;

-- An eval run's own copy of each trace's outcome keeps the mode too (veralith.store.runs).
ALTER TABLE run_traces ADD COLUMN mode text;

UPDATE run_traces SET mode = 'full' WHERE quality_gate IS NOT NULL;
