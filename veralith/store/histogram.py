"""App-latency percentiles read from a log-bucketed histogram (`latency_histogram`), not the traces.

Triggers (migrations/0018; PostgreSQL 0010) count, per knowledge base, the traces whose
`app_latency_ms` falls in each bucket of `latency_buckets`: bucket k >= 1 holds [lo_k, lo_k x 1.02)
from lo_1 = 0.001 ms up to ~1e9 ms, bucket 0 everything below 0.001 ms. A percentile is the bucket
that holds the nearest-rank value (rank ceil(p/100 x n)), reported as the bucket's harmonic middle
2·lo·hi / (lo + hi). That is within RELATIVE_ERROR (0.99%, (1.02 - 1) / (1.02 + 1)) of the exact
nearest-rank value for every latency from 0.001 ms to ~1e9 ms; below 0.001 ms it reads as 0, and
above ~1e9 ms as the last bound. The read costs one row per occupied bucket (a few hundred at
most for a knowledge base whose latencies span four orders of magnitude), whatever the history's size.
"""

from __future__ import annotations

import math
from typing import Any

from veralith.store.sql import Db

__all__ = ["GROWTH", "RELATIVE_ERROR", "app_latency_percentiles", "bucket_value", "histograms", "percentiles"]

GROWTH = 1.02                                  # each bucket's upper bound over its lower (migrations/0018)
RELATIVE_ERROR = (GROWTH - 1) / (GROWTH + 1)   # the worst relative error of a value read from a bucket
_LAST_BUCKET = 1396                            # open-ended: [~1e9 ms, inf)


def bucket_value(bucket: int, lo: float) -> float:
    """The value a bucket stands for: the one within RELATIVE_ERROR of both its bounds."""
    if bucket <= 0:
        return 0.0
    if bucket >= _LAST_BUCKET:
        return lo
    hi = lo * GROWTH
    return 2 * lo * hi / (lo + hi)


def app_latency_percentiles(db: Db, kb: str) -> dict[str, Any] | None:
    """p50 and p95 of the app's own latency (ms) over the traces of `kb` that recorded one, by the
    nearest-rank method (the value at rank ceil(p/100 * n) in ascending order), read from the
    histogram and so within `relative_error` of the exact figure; with their count `n`. None when
    no trace of `kb` recorded a latency."""
    return percentiles(histograms(db, kb).get(kb))


_PERCENTILES = (("p50", 50), ("p95", 95))


def histograms(db: Db, kb: str | None = None) -> dict[str, tuple[int, list[tuple[int, int, int, float]]]]:
    """{knowledge base: (traces, [(running count up to and including the bucket, bucket, its
    traces, its lower bound), ...] ascending)} for one or (None) every knowledge base, in one query:
    only the buckets at or next to the ranks of p50 and p95 leave the database."""
    where, params = ("", []) if kb is None else (" WHERE knowledge_base = ?", [kb])
    near = " OR ".join(f"(upto >= total * {p} / 100.0 - 1 AND upto - n <= total * {p} / 100.0 + 1)"
                       for _, p in _PERCENTILES)
    rows = db.execute(
        "SELECT r.knowledge_base, r.upto, r.bucket, r.n, b.lo, r.total FROM (SELECT knowledge_base, bucket, n,"
        " CAST(SUM(n) OVER (PARTITION BY knowledge_base ORDER BY bucket) AS BIGINT) AS upto,"
        " CAST(SUM(n) OVER (PARTITION BY knowledge_base) AS BIGINT) AS total"
        f" FROM latency_histogram{where}) AS r JOIN latency_buckets b ON b.bucket = r.bucket"
        f" WHERE {near} ORDER BY r.knowledge_base, r.bucket", params).fetchall()
    found: dict[str, tuple[int, list[tuple[int, int, int, float]]]] = {}
    for name, upto, bucket, n, lo, total in rows:
        found.setdefault(name, (int(total), []))[1].append((int(upto), int(bucket), int(n), float(lo)))
    return found


def percentiles(histogram: tuple[int, list[tuple[int, int, int, float]]] | None) -> dict[str, Any] | None:
    """The figures `app_latency_percentiles` describes, from one knowledge base's `histograms` entry."""
    if histogram is None or not histogram[0]:
        return None
    n, rows = histogram
    figures: dict[str, Any] = {"n": n}
    for name, p in _PERCENTILES:
        rank = max(1, math.ceil(p * n / 100))
        # the bucket holding that rank: its ranks are upto - count + 1 .. upto
        figures[name] = next(bucket_value(bucket, lo) for upto, bucket, count, lo in rows
                             if upto - count < rank <= upto)
    figures["relative_error"] = RELATIVE_ERROR
    return figures
