-- Why: the review flag's cut-off (a deciding verdict below it flags the trace, veralith.pipeline.review)
-- was a constant 0.7. Where a knowledge base has enough reviewers' labels it is now fitted to them
-- (veralith.store.review_cutoff), so a result records the cut-off it was flagged under, where that came
-- from, and what a cut-off is fitted to. All three are NULL on results stored before this migration.

-- The confidence below which a deciding verdict flagged this result (0.7 unless fitted to labels).
ALTER TABLE traces ADD COLUMN review_cutoff REAL;
-- How many labelled traces the cut-off was fitted to (NULL: the default), so `stats`, `inspect` and the trace page say which was used.
ALTER TABLE traces ADD COLUMN review_cutoff_labels INTEGER;
-- The lowest confidence among the verdicts that decide the cell or the gate (1.0 when none does): the result is flagged under a cut-off c exactly when this is below c.
ALTER TABLE traces ADD COLUMN review_confidence REAL;
