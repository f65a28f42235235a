-- Why: the review flag's cut-off (a deciding verdict below it flags the trace, veralith.pipeline.review)
-- was a constant 0.7. Where a knowledge base has enough reviewers' labels it is now fitted to them
-- (veralith.store.review_cutoff), so a result records which cut-off it was flagged under and how many
-- labelled traces that cut-off was fitted to (NULL: the default), for `stats`, `inspect` and the trace
-- page to say which was used; and the lowest confidence among its deciding verdicts (1.0 when none
-- decides), which is what a cut-off is fitted to. NULL on results stored before this migration.
ALTER TABLE traces ADD COLUMN review_cutoff REAL;
ALTER TABLE traces ADD COLUMN review_cutoff_labels INTEGER;
ALTER TABLE traces ADD COLUMN review_confidence REAL;
