"""Calibration: the sufficiency threshold a knowledge base has earned from its own history.

The rule, in one place (`calibrate`, used by the orchestrator through veralith.pipeline.calibrate
and by every store's `stats`): among the done results of a knowledge base in `complete_grounded`,
the `settings.calibration_percentile`-th percentile of their sufficiency_fraction is the threshold
once there are at least `settings.calibration_min_traces` of them; until then the strict
`settings.sufficiency_fallback`. It reads a store only through `calibration_count` and
`calibration_values` (any TraceStore has them), so every store calibrates alike.

Percentile definition (numpy.percentile's default, method="linear"): with the n values sorted
ascending as x[0..n-1] and h = (n - 1) * p / 100, the result is x[floor(h)] + (h - floor(h)) *
(x[floor(h) + 1] - x[floor(h)]) (just x[n-1] when floor(h) = n - 1). It is computed in exact
rational arithmetic from the stored floats and rounded once, so the same data always gives the
same, correctly rounded threshold.

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
           "calibrate", "linear_percentile", "rank_of", "value_counts"]

CALIBRATION_CELL = "complete_grounded"  # also written into the triggers that keep calibration_counts


class CalibrationData(Protocol):
    """The two reads calibration needs (every TraceStore has them)."""

    def calibration_count(self, knowledge_base: str) -> int: ...

    def calibration_values(self, knowledge_base: str, offset: int, limit: int) -> list[float]: ...


@dataclass(frozen=True)
class Calibration:
    threshold: float
    source: ThresholdSource
    traces: int        # results that count towards calibration (fewer than the minimum: fallback)


def calibrate(data: CalibrationData, knowledge_base: str) -> Calibration:
    """The threshold `knowledge_base` uses now, under the current settings (the rule above)."""
    found = _percentile(data, knowledge_base, percentile=settings.calibration_percentile,
                        min_traces=settings.calibration_min_traces)
    if found is not None:
        return Calibration(found[0], ThresholdSource.calibrated, found[1])
    return Calibration(settings.sufficiency_fallback, ThresholdSource.fallback,
                       data.calibration_count(knowledge_base))


class SqlCalibration:
    """CalibrationData over one store connection."""

    def __init__(self, db: Db) -> None:
        self.db = db

    def calibration_count(self, knowledge_base: str) -> int:
        row = self.db.execute("SELECT COALESCE(SUM(n), 0) FROM calibration_counts WHERE knowledge_base = ?",
                              [knowledge_base]).fetchone()
        return int(row[0])

    def calibration_values(self, knowledge_base: str, offset: int, limit: int) -> list[float]:
        return _walk(value_counts(self.db, knowledge_base).get(knowledge_base, []), offset, limit)


class CountedCalibration:
    """CalibrationData over counts by value already read (`value_counts`): `stats` reads every
    knowledge base's counts in one query and calibrates each from them."""

    def __init__(self, counts: dict[str, list[tuple[float, int]]]) -> None:
        self.counts = counts

    def calibration_count(self, knowledge_base: str) -> int:
        return sum(n for _, n in self.counts.get(knowledge_base, []))

    def calibration_values(self, knowledge_base: str, offset: int, limit: int) -> list[float]:
        return _walk(self.counts.get(knowledge_base, []), offset, limit)


def value_counts(db: Db, knowledge_base: str | None = None) -> dict[str, list[tuple[float, int]]]:
    """{knowledge base: [(sufficiency fraction, traces), ...] ascending} from calibration_counts,
    for one knowledge base or (None) all of them."""
    sql, params = "SELECT knowledge_base, value, n FROM calibration_counts", []
    if knowledge_base is not None:
        sql += " WHERE knowledge_base = ?"
        params.append(knowledge_base)
    counts: dict[str, list[tuple[float, int]]] = {}
    for kb, value, n in db.execute(sql + " ORDER BY knowledge_base, value", params).fetchall():
        if int(n) > 0:
            counts.setdefault(kb, []).append((float(value), int(n)))
    return counts


def _walk(counts: list[tuple[float, int]], offset: int, limit: int) -> list[float]:
    """The values at ranks offset .. offset+limit-1 of the multiset `counts` (ascending (value, n))."""
    values: list[float] = []
    seen = 0  # how many values come before the current one
    for value, n in counts:
        # ranks seen .. seen+n-1 all hold `value`; keep those inside the window asked for
        first, last = max(seen, offset), min(seen + n, offset + limit)
        values.extend([value] * max(0, last - first))
        seen += n
        if seen >= offset + limit:
            break
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
                min_traces: int) -> tuple[float, int] | None:
    n = data.calibration_count(knowledge_base)
    if n < max(1, min_traces):
        return None
    values = data.calibration_values(knowledge_base, rank_of(n, percentile), 2)
    if not values:  # the set shrank between the two reads (a concurrent re-evaluation); try next time
        return None
    lower = values[0]
    upper = values[1] if len(values) > 1 else lower
    return linear_percentile(lower, upper, n, percentile), n
