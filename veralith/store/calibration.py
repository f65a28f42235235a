"""The calibration read: a percentile of sufficiency_fraction over one knowledge base's
complete_grounded results, without scanning them.

Percentile definition (numpy.percentile's default, method="linear"): with the n values sorted
ascending as x[0..n-1] and h = (n - 1) * p / 100, the result is x[floor(h)] + (h - floor(h)) *
(x[floor(h) + 1] - x[floor(h)]) (just x[n-1] when floor(h) = n - 1). It is computed in exact
rational arithmetic from the stored floats and rounded once, so the same data always gives the
same, correctly rounded threshold.

Cost: one COUNT over the partial index `traces_calibration` and one two-row read at OFFSET
floor(h) in index order: no sort, no full scan, whatever the size of the table.
"""

from __future__ import annotations

import math
from fractions import Fraction

from sqlite_utils import Database

__all__ = ["CALIBRATION_CELL", "calibration_count", "linear_percentile", "percentile_threshold", "rank_of"]

CALIBRATION_CELL = "complete_grounded"
# `status = 'done'` must appear literally for SQLite to use the partial index.
_WHERE = ("status = 'done' AND knowledge_base = ? AND failure_cell = ? AND sufficiency_fraction IS NOT NULL")


def calibration_count(db: Database, knowledge_base: str) -> int:
    """How many stored results of this knowledge base count towards its calibration."""
    row = db.execute(f"SELECT COUNT(*) FROM traces INDEXED BY traces_calibration WHERE {_WHERE}",
                     [knowledge_base, CALIBRATION_CELL]).fetchone()
    return int(row[0])


def rank_of(n: int, percentile: float) -> int:
    """floor(h): the rank of the lower of the two values the percentile lies between."""
    return math.floor(_h(n, percentile))


def linear_percentile(lower: float, upper: float, n: int, percentile: float) -> float:
    """The definition above, given the values at ranks floor(h) (`lower`) and floor(h)+1 (`upper`)."""
    h = _h(n, percentile)
    return float(Fraction(lower) + (h - math.floor(h)) * (Fraction(upper) - Fraction(lower)))


def _h(n: int, percentile: float) -> Fraction:
    return Fraction(n - 1) * Fraction(percentile) / 100


def percentile_threshold(db: Database, knowledge_base: str, *, percentile: float,
                         min_traces: int) -> tuple[float, int] | None:
    """(threshold, n) once `min_traces` results qualify, else None."""
    n = calibration_count(db, knowledge_base)
    if n < max(1, min_traces):
        return None
    lo = rank_of(n, percentile)
    rows = db.execute(
        f"SELECT sufficiency_fraction FROM traces INDEXED BY traces_calibration WHERE {_WHERE}"
        " ORDER BY sufficiency_fraction LIMIT 2 OFFSET ?", [knowledge_base, CALIBRATION_CELL, lo]).fetchall()
    if not rows:  # the set shrank between the two reads (a concurrent re-evaluation); try next time
        return None
    lower = rows[0][0]
    upper = rows[1][0] if len(rows) > 1 else lower
    return linear_percentile(lower, upper, n, percentile), n
