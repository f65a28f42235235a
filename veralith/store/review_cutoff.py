"""The review flag's cut-off a knowledge base has earned from its reviewers' labels.

A trace is flagged `needs_review` when a verdict that decides its cell or gate has a confidence
below the cut-off (veralith.pipeline.review). The default cut-off is REVIEW_BELOW (0.7). Where
reviewers have labelled at least `settings.labels_min` traces of a knowledge base, the cut-off is
fitted to those labels instead (`review_cutoff`); without enough labels nothing changes.

What is fitted. The flag is worth reading when it points at the traces where the judge and the people
disagree. Each labelled trace gives one pair: the lowest confidence among its deciding verdicts (the
stored `review_confidence`; 1.0 when none decides, so no cut-off flags it) and whether any of its
current labels disagrees with its current result (a label the judge gave no value is left out). A
cut-off c flags the traces whose confidence is below c. Among the cut-offs that flag different sets
(midway between neighbouring confidences, and 1.0), the one with the best F2 is chosen: recall of
the disagreements weighted twice their precision. Why F2: a disagreement the flag misses goes
unread and wrong, while a flagged trace that turns out right costs one reading; F1 would treat the
two alike, and recall alone would flag everything. Of equal scores the lowest cut-off (fewest traces
to read) wins. When no cut-off catches a disagreement (none among the labels, or none the flag could
ever reach) there is nothing to fit and the default stays.

Only a label given against the trace's current result counts (its `result_at` is the trace's
`evaluated_at`): the stored confidence belongs to that result, and a label on an older result is
about verdicts that are gone. How well a fitted cut-off does is measured out of fold (`cross_validated`,
5 folds by trace, shown by `veralith agreement`), never on the labels it was fitted to.
"""

from __future__ import annotations

from dataclasses import dataclass

from veralith.config import settings
from veralith.policy import REVIEW_BELOW
from veralith.store.sql import Db

__all__ = ["Cutoff", "FlagScore", "cross_validated", "fit_cutoff", "fitted_cutoff", "flag_score", "labelled_review",
           "review_cutoff"]

BETA = 2.0   # recall counts BETA times precision (see the module docstring)


@dataclass(frozen=True)
class Cutoff:
    cutoff: float
    labels: int | None = None    # labelled traces it was fitted to; None: the default


@dataclass(frozen=True)
class FlagScore:
    """How a cut-off's flag catches the disagreements among labelled traces."""

    flagged: int
    caught: int          # flagged traces where the people disagree with the judge
    disagreements: int   # every labelled trace where they disagree

    @property
    def precision(self) -> float | None:
        return self.caught / self.flagged if self.flagged else None

    @property
    def recall(self) -> float | None:
        return self.caught / self.disagreements if self.disagreements else None

    @property
    def f_beta(self) -> float:
        p, r = self.precision or 0.0, self.recall or 0.0
        b2 = BETA * BETA
        return 0.0 if p == 0 or r == 0 else (1 + b2) * p * r / (b2 * p + r)


def flag_score(pairs: list[tuple[float, bool]], cutoff: float) -> FlagScore:
    """The flag under `cutoff` over (lowest deciding confidence, people disagree) pairs."""
    flagged = [disagree for confidence, disagree in pairs if confidence < cutoff]
    return FlagScore(len(flagged), sum(flagged), sum(disagree for _, disagree in pairs))


def fit_cutoff(pairs: list[tuple[float, bool]]) -> float | None:
    """The cut-off with the best F2 on `pairs` (the lowest of equals); None when none catches a disagreement."""
    values = sorted({confidence for confidence, _ in pairs if confidence < 1.0} | {1.0})
    candidates = [round((low + high) / 2, 6) for low, high in zip(values, values[1:], strict=False)]
    best: tuple[float, float] | None = None
    for candidate in candidates:
        score = flag_score(pairs, candidate).f_beta
        if score > 0 and (best is None or score > best[0]):
            best = (score, candidate)
    return None if best is None else best[1]


def cross_validated(pairs: list[tuple[float, bool]], folds: int = 5) -> tuple[FlagScore | None, int]:
    """The flag out of fold: the pairs (ordered by trace by the caller) are dealt into `folds` folds,
    each fold flagged by a cut-off fitted on the others (the default where nothing could be fitted).
    Returns (the pooled score of every held-out trace or None without pairs, folds fitted)."""
    flagged = caught = 0
    fitted = 0
    for k in range(folds):
        train = [p for i, p in enumerate(pairs) if i % folds != k]
        test = [p for i, p in enumerate(pairs) if i % folds == k]
        cutoff = fit_cutoff(train)
        fitted += cutoff is not None and bool(test)
        score = flag_score(test, REVIEW_BELOW if cutoff is None else cutoff)
        flagged, caught = flagged + score.flagged, caught + score.caught
    if not pairs:
        return None, fitted
    return FlagScore(flagged, caught, sum(d for _, d in pairs)), fitted


def review_cutoff(db: Db, knowledge_base: str) -> Cutoff:
    """The cut-off `knowledge_base` flags under now (the rule above)."""
    return fitted_cutoff(labelled_review(db, knowledge_base).get(knowledge_base, []))


def fitted_cutoff(pairs: list[tuple[float, bool]]) -> Cutoff:
    """The cut-off fitted to one knowledge base's pairs (`labelled_review`), or the default with too few."""
    fitted = fit_cutoff(pairs) if len(pairs) >= settings.labels_min else None
    return Cutoff(REVIEW_BELOW) if fitted is None else Cutoff(fitted, len(pairs))


def labelled_review(db: Db, knowledge_base: str | None = None) -> dict[str, list[tuple[float, bool]]]:
    """{knowledge base: [(lowest deciding confidence, whether a current label disagrees with the judge),
    ...] by trace id} over done traces whose labels were given against their current result; one or
    (None) every knowledge base, only those with at least `settings.labels_min` such traces (one count
    first, so a store without enough labels pays one query)."""
    from veralith.store.labels import current, enough_labelled

    condition = ("t.status = 'done' AND t.review_confidence IS NOT NULL AND l.result_at = t.evaluated_at"
                 " AND l.judged IS NOT NULL")
    wanted = enough_labelled(db, condition, knowledge_base)
    out: dict[str, list[tuple[float, bool]]] = {}
    for kb in wanted:
        info = {int(tid): (float(conf), evaluated) for tid, conf, evaluated in db.execute(
            "SELECT DISTINCT t.id, t.review_confidence, t.evaluated_at FROM labels l JOIN traces t"
            f" ON t.id = l.trace_id WHERE {condition} AND t.knowledge_base = ?",
            [kb]).fetchall()}
        disagree: dict[int, bool] = {}
        for label in current(db, kb=kb):
            # the newest label on each part counts; one on an older result says nothing of this one
            if label.trace_id not in info or label.judged is None or label.result_at != info[label.trace_id][1]:
                continue
            disagree[label.trace_id] = disagree.get(label.trace_id, False) or label.value != label.judged
        if len(disagree) >= settings.labels_min:
            out[kb] = [(info[tid][0], disagree[tid]) for tid in sorted(disagree)]
    return out
