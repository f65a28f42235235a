-- Why: migration 0018 filled each eval run's copy of a trace's correctness layer only where the
-- trace's stored result was still that run's own; the other copies taken before it kept NULL, which
-- also means "no reference", so `veralith compare` counted those pairs as having a reference in one
-- run only. This marks them: their layer is not known (the same column as SQLite's migration 0027).

-- 1: the copy recorded its layer (NULL correctness: no reference, or no result); 0: a copy taken before
-- runs kept the layer (migration 0018) that 0018 could not fill, so not known.
ALTER TABLE run_traces ADD COLUMN correctness_known smallint NOT NULL DEFAULT 1
    CHECK (correctness_known IN (0, 1));

-- Copies taken before 0018 was applied (their run started before it) that it left NULL: those with an
-- outcome whose trace's stored result was not that run's own.
UPDATE run_traces SET correctness_known = 0
WHERE correctness IS NULL AND quality_gate IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM traces t WHERE t.id = run_traces.trace_id AND t.run_id = run_traces.run_id
                  AND t.status = 'done')
  AND run_id IN (SELECT id FROM runs WHERE started_at < coalesce(
      (SELECT applied_at FROM veralith_migrations WHERE name = '0018_run_correctness'), '9999'));
