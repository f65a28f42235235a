-- Why: `veralith compare` shows how the correctness layer (issue 42: correct, partly_correct,
-- incorrect, not_assessed; read off a reference answer) moved between two runs. A re-run of a file
-- re-judges its traces in place, so trace_references keeps only the newest layer: each eval run's own
-- copy of a trace's outcome (run_traces) keeps the layer it had then, as it keeps the cell and gate.
-- NULL: the trace had no reference, or no result in that run.

-- The correctness layer the run's result of the trace had (NULL: no reference, or no result).
ALTER TABLE run_traces ADD COLUMN correctness TEXT
    CHECK (correctness IN ('correct', 'partly_correct', 'incorrect', 'not_assessed'));

-- Copies taken before this migration: only where the trace's stored result is still that run's own
-- (the run is the trace's latest and the copy has an outcome); an earlier run's layer of a trace judged
-- again since is not known, and stays NULL.
UPDATE run_traces SET correctness = (
    SELECT r.correctness FROM trace_references r WHERE r.trace_id = run_traces.trace_id)
WHERE quality_gate IS NOT NULL
  AND EXISTS (SELECT 1 FROM traces t WHERE t.id = run_traces.trace_id AND t.run_id = run_traces.run_id
              AND t.status = 'done');
