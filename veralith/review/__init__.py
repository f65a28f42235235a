"""Human review: labels given against stored results, the judge's agreement with them, the
thresholds they calibrate and the regression set they make (docs/review.md).

Pure functions over `EvaluationResult`s and `veralith.store.labels.Label`s; the store is reached only
through `Store.read` / `Store.write` by the callers (CLI, web view)."""
