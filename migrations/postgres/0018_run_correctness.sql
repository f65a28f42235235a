-- Why: each eval run's own copy of a trace's outcome (run_traces) keeps the correctness layer it had
-- then, so `veralith compare` reads a trace judged again in place as each run saw it; the same column
-- as SQLite's migration 0026. NULL: no reference, or no result in that run.

ALTER TABLE run_traces ADD COLUMN correctness text
    CHECK (correctness IN ('correct', 'partly_correct', 'incorrect', 'not_assessed'));

-- Copies taken before this migration: only where the trace's stored result is still that run's own.
UPDATE run_traces SET correctness = (
    SELECT r.correctness FROM trace_references r WHERE r.trace_id = run_traces.trace_id)
WHERE quality_gate IS NOT NULL
  AND EXISTS (SELECT 1 FROM traces t WHERE t.id = run_traces.trace_id AND t.run_id = run_traces.run_id
              AND t.status = 'done');
