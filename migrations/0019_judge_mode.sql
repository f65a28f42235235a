-- Why: a result says how it was judged (`mode`): `full` (two decomposition calls, three isolated judges)
-- or `fast` (one call that decomposes and judges at once, for screening). `veralith compare` reads it to
-- refuse mixing the two silently. Every result stored before this migration was judged in full.

ALTER TABLE traces ADD COLUMN mode TEXT;   -- 'full' | 'fast'; NULL until the trace has a result

UPDATE traces SET mode = 'full' WHERE execution IS NOT NULL;

-- An eval run's own copy of each trace's outcome keeps the mode too (veralith.store.runs).
ALTER TABLE run_traces ADD COLUMN mode TEXT;

UPDATE run_traces SET mode = 'full' WHERE quality_gate IS NOT NULL;
