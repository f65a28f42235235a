"""Calibration: the sufficiency threshold a knowledge base has earned from its own history.

The rule, in one place (`calibrate`, used by the orchestrator through veralith.pipeline.calibrate
and by every store's `stats`): among the done results of a knowledge base in `complete_grounded`,
the `settings.calibration_percentile`-th percentile of their sufficiency_fraction is the threshold
once there are at least `settings.calibration_min_traces` of them; until then the strict
`settings.sufficiency_fallback`. It reads a store only through `calibration_count` and
`calibration_values` (`SqlCalibration` over either store's connection), so every store calibrates alike.

Percentile definition (numpy.percentile's default, method="linear"): with the n values sorted
ascending as x[0..n-1] and h = (n - 1) * p / 100, the result is x[floor(h)] + (h - floor(h)) *
(x[floor(h) + 1] - x[floor(h)]) (just x[n-1] when floor(h) = n - 1). It is computed in exact
rational arithmetic from the stored floats and rounded once, so the same data always gives the
same, correctly rounded threshold.

From labels: where reviewers have labelled the sufficiency of sub-questions on at least
`settings.labels_min` traces of a knowledge base (veralith.store.labels), its threshold is fitted to
those labels instead (`fit_threshold`): a trace's context is sufficient to its reviewer when no
sub-question of it was labelled N, and the threshold is the one that best separates those traces by
the judge's sufficiency_fraction (balanced accuracy; the stricter of equals). The result then says
how many labelled traces it was fitted to (`Diagnosis.threshold_labels`); without enough labels
nothing changes. How well a threshold fitted this way does is measured out of fold
(`cross_validated`, shown by `veralith agreement`), never on the labels it was fitted to.

Cost (`SqlCalibration`, either store): both reads come from `calibration_counts`, the number of
calibration traces per (knowledge base, sufficiency fraction as stored) that triggers keep
(migrations/0018; PostgreSQL 0010). A fraction is a ratio of small integers, so a knowledge base has
few distinct values: the count is a sum over them and the values at ranks floor(h) and floor(h)+1
are found by walking their counts in order. The result is exact (the same stored floats at the same
ranks as sorting every trace) and costs one row per distinct value, whatever the history's size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from veralith.config import settings
from veralith.models import ThresholdSource
from veralith.store.sql import Db

__all__ = ["CALIBRATION_CELL", "Calibration", "CalibrationData", "CountedCalibration", "SqlCalibration",
           "balanced_accuracy", "calibrate", "cross_validated", "fit_threshold", "labelled_sufficiency",
           "linear_percentile", "rank_of", "value_counts"]

CALIBRATION_CELL = "complete_grounded"  # also written into the triggers that keep calibration_counts


class CalibrationData(Protocol):
    """The two reads calibration needs (every Store has them)."""

    def calibration_count(self, knowledge_base: str) -> int: ...

    def calibration_values(self, knowledge_base: str, offset: int, limit: int) -> list[float]: ...


@dataclass(frozen=True)
class Calibration:
    threshold: float
    source: ThresholdSource
    traces: int        # results that count towards calibration (fewer than the minimum: fallback)
    labels: int | None = None   # labelled traces the threshold was fitted to; None: not fitted to labels


def calibrate(data: CalibrationData, knowledge_base: str) -> Calibration:
    """The threshold `knowledge_base` uses now, under the current settings (the rule above)."""
    read_labels = getattr(data, "calibration_labels", None)   # SqlCalibration has it; a bare CalibrationData may not
    pairs = read_labels(knowledge_base) if read_labels is not None else []
    if len(pairs) >= settings.labels_min:
        fitted = fit_threshold(pairs)
        if fitted is not None:
            return Calibration(fitted, ThresholdSource.calibrated, len(pairs), labels=len(pairs))
    found, n = _percentile(data, knowledge_base, percentile=settings.calibration_percentile,
                           min_traces=settings.calibration_min_traces)
    if found is not None:
        return Calibration(found, ThresholdSource.calibrated, n)
    return Calibration(settings.sufficiency_fallback, ThresholdSource.fallback, n)


class SqlCalibration:
    """CalibrationData over one store connection."""

    def __init__(self, db: Db) -> None:
        self.db = db

    def calibration_count(self, knowledge_base: str) -> int:
        row = self.db.execute("SELECT COALESCE(SUM(n), 0) FROM calibration_counts WHERE knowledge_base = ?",
                              [knowledge_base]).fetchone()
        return int(row[0])

    def calibration_labels(self, knowledge_base: str) -> list[tuple[float, bool]]:
        return labelled_sufficiency(self.db, knowledge_base).get(knowledge_base, [])

    def calibration_values(self, knowledge_base: str, offset: int, limit: int) -> list[float]:
        # Only the values whose ranks overlap [offset, offset + limit) leave the database.
        rows = self.db.execute(_RANKED.format(where=" WHERE knowledge_base = ?")
                               + " WHERE upto > ? AND upto - n < ?",
                               [knowledge_base, offset, offset + limit]).fetchall()
        return _walk(sorted((int(upto) - int(n), float(value), int(n)) for _, value, n, upto, _ in rows), offset, limit)


class CountedCalibration:
    """CalibrationData over the counts `value_counts` read for every knowledge base in one query
    (what `stats` needs): each knowledge base's total and the values around its percentile."""

    def __init__(self, counts: dict[str, tuple[int, list[tuple[int, float, int]]]],
                 labels: dict[str, list[tuple[float, bool]]] | None = None) -> None:
        self.counts = counts
        self.labels = labels or {}

    def calibration_labels(self, knowledge_base: str) -> list[tuple[float, bool]]:
        return self.labels.get(knowledge_base, [])

    def calibration_count(self, knowledge_base: str) -> int:
        return self.counts.get(knowledge_base, (0, []))[0]

    def calibration_values(self, knowledge_base: str, offset: int, limit: int) -> list[float]:
        total, rows = self.counts.get(knowledge_base, (0, []))
        values = _walk(rows, offset, limit)
        if len(values) != max(0, min(limit, total - offset)):  # asked for ranks value_counts did not read
            raise ValueError(f"ranks {offset}..{offset + limit - 1} of {knowledge_base!r} were not read")
        return values


# Each value with its count, the running count up to and including it (`upto`, so its ranks are
# upto - n .. upto - 1) and the knowledge base's total, by one window over the counts.
_RANKED = ("SELECT knowledge_base, value, n, upto, total FROM (SELECT knowledge_base, value, n,"
           " CAST(SUM(n) OVER (PARTITION BY knowledge_base ORDER BY value) AS BIGINT) AS upto,"
           " CAST(SUM(n) OVER (PARTITION BY knowledge_base) AS BIGINT) AS total"
           " FROM calibration_counts{where}) AS ranked")


def value_counts(db: Db, percentile: float,
                 knowledge_base: str | None = None) -> dict[str, tuple[int, list[tuple[int, float, int]]]]:
    """{knowledge base: (total, [(first rank, value, traces), ...] ascending)} for one or (None)
    every knowledge base: only the values at or next to ranks floor(h) and floor(h)+1 of
    `percentile` (a margin of one rank each side of h keeps float rounding from losing one)."""
    where, params = ("", []) if knowledge_base is None else (" WHERE knowledge_base = ?", [knowledge_base])
    rows = db.execute(_RANKED.format(where=where) + " WHERE upto > (total - 1) * ? / 100 - 1"
                      " AND upto - n <= (total - 1) * ? / 100 + 2 ORDER BY knowledge_base, value",
                      [*params, percentile, percentile]).fetchall()
    counts: dict[str, tuple[int, list[tuple[int, float, int]]]] = {}
    for kb, value, n, upto, total in rows:
        counts.setdefault(kb, (int(total), []))[1].append((int(upto) - int(n), float(value), int(n)))
    return counts


def _walk(rows: list[tuple[int, float, int]], offset: int, limit: int) -> list[float]:
    """The values at ranks offset .. offset+limit-1, from (first rank, value, count) rows ascending."""
    values: list[float] = []
    for first, value, n in rows:
        # ranks first .. first+n-1 all hold `value`; keep those inside the window asked for
        low, high = max(first, offset), min(first + n, offset + limit)
        values.extend([value] * max(0, high - low))
    return values


def rank_of(n: int, percentile: float) -> int:
    """floor(h): the rank of the lower of the two values the percentile lies between."""
    return math.floor(_h(n, percentile))


def linear_percentile(lower: float, upper: float, n: int, percentile: float) -> float:
    """The definition above, given the values at ranks floor(h) (`lower`) and floor(h)+1 (`upper`)."""
    h = _h(n, percentile)
    return float(Fraction(lower) + (h - math.floor(h)) * (Fraction(upper) - Fraction(lower)))


def _h(n: int, percentile: float) -> Fraction:
    return Fraction(n - 1) * Fraction(percentile) / 100


def _percentile(data: CalibrationData, knowledge_base: str, *, percentile: float,
                min_traces: int) -> tuple[float | None, int]:
    """(the percentile, or None while there are too few values, and how many there are): the count is
    returned either way, so the fallback does not read it a second time (a round trip per trace on a
    server)."""
    n = data.calibration_count(knowledge_base)
    if n < max(1, min_traces):
        return None, n
    values = data.calibration_values(knowledge_base, rank_of(n, percentile), 2)
    if not values:  # the set shrank between the two reads (a concurrent re-evaluation); try next time
        return None, data.calibration_count(knowledge_base)
    lower = values[0]
    upper = values[1] if len(values) > 1 else lower
    return linear_percentile(lower, upper, n, percentile), n


# -- from labels -------------------------------------------------------------------------------------

def labelled_sufficiency(db: Db, knowledge_base: str | None = None) -> dict[str, list[tuple[float, bool]]]:
    """{knowledge base: [(the judge's sufficiency_fraction, whether the reviewer found the context
    sufficient), ...]} over done traces with a current sufficiency label and a fraction; one or (None)
    every knowledge base. Only when some knowledge base could have enough does it read the labels."""
    from veralith.store.labels import current, enough_labelled

    wanted = enough_labelled(db, "l.target = 'sufficiency'", knowledge_base)
    out: dict[str, list[tuple[float, bool]]] = {}
    for kb in wanted:
        verdicts: dict[int, bool] = {}
        for label in current(db, kb=kb, target="sufficiency"):
            verdicts[label.trace_id] = verdicts.get(label.trace_id, True) and label.value == "Y"
        ids = sorted(verdicts)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            for tid, fraction in db.execute(
                    f"SELECT id, sufficiency_fraction FROM traces WHERE id IN ({', '.join('?' for _ in chunk)})"
                    " AND status = 'done' AND sufficiency_fraction IS NOT NULL", chunk).fetchall():
                out.setdefault(kb, []).append((float(fraction), verdicts[int(tid)]))
    return out


def balanced_accuracy(pairs: list[tuple[float, bool]], threshold: float) -> float | None:
    """Mean recall of the two classes when `fraction >= threshold` is read as sufficient (None when
    one class is missing)."""
    pos = [f >= threshold for f, ok in pairs if ok]
    neg = [f < threshold for f, ok in pairs if not ok]
    if not pos or not neg:
        return None
    return (sum(pos) / len(pos) + sum(neg) / len(neg)) / 2


def fit_threshold(pairs: list[tuple[float, bool]]) -> float | None:
    """The threshold among the fractions seen (and 1.0) with the best balanced accuracy on `pairs`,
    the highest of equals (strict wording is the safer mistake); None when the labels hold one class."""
    best: tuple[float, float] | None = None
    for candidate in sorted({f for f, _ in pairs} | {1.0}, reverse=True):
        score = balanced_accuracy(pairs, candidate)
        if score is not None and (best is None or score > best[0]):
            best = (score, candidate)
    return None if best is None else best[1]


def cross_validated(pairs: list[tuple[float, bool]], folds: int = 5) -> tuple[float | None, int]:
    """Balanced accuracy of `fit_threshold`, out of fold: the pairs are dealt into `folds` folds (in
    their order: the caller orders them by trace), each fold judged by a threshold fitted on the
    others. Returns (accuracy over every held-out prediction or None, folds that could be fitted)."""
    predictions: list[tuple[bool, bool]] = []
    fitted = 0
    for k in range(folds):
        train = [p for i, p in enumerate(pairs) if i % folds != k]
        test = [p for i, p in enumerate(pairs) if i % folds == k]
        threshold = fit_threshold(train)
        if threshold is None or not test:
            continue
        fitted += 1
        predictions += [(f >= threshold, ok) for f, ok in test]
    pos = [said for said, ok in predictions if ok]
    neg = [not said for said, ok in predictions if not ok]
    if not pos or not neg:
        return None, fitted
    return (sum(pos) / len(pos) + sum(neg) / len(neg)) / 2, fitted
