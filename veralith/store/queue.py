"""The work queue as the people who run a fleet watch it: how much waits, how old the oldest is, how
fast traces are judged, what fails, and what is stuck, read from the store (both databases) and
shown by `veralith stats` and the Prometheus endpoints of `veralith worker --metrics-port` and
`veralith serve` (`/metrics`).

Every figure is one cheap read, so a scrape costs the same whatever the history's size: counts by
status and the oldest pending trace come from the partial work index (`traces_work`, pending and
running only) and the status index; "judged in the last 5 minutes" looks at the newest
`RECENT_WINDOW` traces only (a queue that drains older traces faster than that is under-counted;
the worker's own counters, `veralith_worker_*_total`, count every one).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from veralith.store.sql import Db

__all__ = ["CONTENT_TYPE", "RATE_WINDOW_S", "RECENT_WINDOW", "QueueFigures", "dead_lettered", "exposition",
           "queue_figures", "read_or_none", "registry"]

RATE_WINDOW_S = 300.0        # judged per minute is averaged over this long
RECENT_WINDOW = 50_000       # the newest traces looked at for it
STUCK_AFTER_S = 5 * 60.0     # a `running` trace whose lease is older than this (veralith.work.leases)


@dataclass(frozen=True)
class QueueFigures:
    """The queue now. Ages and rates are None when there is nothing to measure (never 0 for unknown)."""

    pending: int
    running: int
    stuck_running: int          # running under a lease older than the lease timeout
    failed: int                 # traces whose last evaluation failed (status error)
    dead_lettered: int          # records a store refused, set aside (0 where that place does not exist yet)
    oldest_pending_age_s: float | None
    judged_last_5m: int         # evaluations finished in the last RATE_WINDOW_S (among the newest traces)
    judge_errors_last_5m: int   # of those, how many failed or carry a judge error

    @property
    def judged_per_minute(self) -> float:
        return self.judged_last_5m / (RATE_WINDOW_S / 60.0)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "judged_per_minute": self.judged_per_minute}


def queue_figures(db: Db, *, now: float | None = None) -> QueueFigures:
    """The queue of the store behind `db`, read now (`now`: unix seconds, for tests)."""
    now = time.time() if now is None else now
    by_status = {row["status"]: int(row["n"]) for row in db.query(
        "SELECT status, COUNT(*) AS n FROM traces WHERE status IN ('pending', 'running', 'error') GROUP BY status")}
    stuck = db.execute(f"SELECT COUNT(*) FROM traces WHERE status = 'running' AND lease_at < {db.dialect.epoch} - ?",
                       [STUCK_AFTER_S]).fetchone()[0]
    oldest = db.execute("SELECT MIN(created_at) FROM traces WHERE status = 'pending'").fetchone()[0]
    since = dt.datetime.fromtimestamp(now - RATE_WINDOW_S, dt.timezone.utc).isoformat(timespec="microseconds")
    # A failed evaluation keeps no evaluated_at: its updated_at is when it ended.
    recent = db.execute(
        "SELECT COUNT(*), SUM(CASE WHEN r.status = 'error' OR EXISTS (SELECT 1 FROM judge_errors j"
        " WHERE j.trace_id = r.id) THEN 1 ELSE 0 END) FROM (SELECT id, status, evaluated_at, updated_at"
        " FROM traces ORDER BY id DESC LIMIT ?) r WHERE r.status IN ('done', 'error')"
        " AND COALESCE(r.evaluated_at, r.updated_at) >= ?", [RECENT_WINDOW, since]).fetchone()
    return QueueFigures(
        pending=by_status.get("pending", 0), running=by_status.get("running", 0), stuck_running=int(stuck or 0),
        failed=by_status.get("error", 0), dead_lettered=dead_lettered(db),
        oldest_pending_age_s=None if oldest is None else max(0.0, now - _epoch(str(oldest))),
        judged_last_5m=int(recent[0] or 0), judge_errors_last_5m=int(recent[1] or 0))


def read_or_none(store: Any) -> QueueFigures | None:
    """`queue_figures` of `store`, or None when the store cannot be read now (an outage is what a
    scrape must still answer during: `veralith_store_up` 0)."""
    try:
        return store.read(queue_figures)
    except Exception:   # whatever the database said: the scrape answers, store_up 0, and the log has why
        logging.getLogger("veralith.store").debug("veralith: queue figures unreadable", exc_info=True)
        return None


def dead_lettered(db: Db) -> int:
    """Records set aside in the dead-letter place (`dead_letters`); 0 on a store whose schema has no
    such table yet (asked first: a failed statement would end a PostgreSQL transaction)."""
    if not db.columns("dead_letters"):
        return 0
    return int(db.execute("SELECT COUNT(*) FROM dead_letters").fetchone()[0])


def _epoch(iso: str) -> float:
    moment = dt.datetime.fromisoformat(iso)
    if moment.tzinfo is None:   # stored as UTC (veralith.store.rows.now_iso)
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.timestamp()


# -- Prometheus ----------------------------------------------------------------------------------

_GAUGES = (   # (name, help, attribute of QueueFigures)
    ("veralith_queue_pending", "Traces waiting to be judged.", "pending"),
    ("veralith_queue_running", "Traces being judged (claimed under a lease).", "running"),
    ("veralith_queue_stuck_running", "Traces running under a lease older than the lease timeout (5 min).",
     "stuck_running"),
    ("veralith_queue_dead_lettered", "Records the store refused, set aside (see `veralith dead-letters`).",
     "dead_lettered"),
    ("veralith_traces_failed", "Traces whose last evaluation failed (status error).", "failed"),
    ("veralith_queue_oldest_pending_age_seconds", "Age of the oldest pending trace (0 when none waits).",
     "oldest_pending_age_s"),
    ("veralith_judged_per_minute", "Evaluations finished per minute, over the last 5 minutes.",
     "judged_per_minute"),
    ("veralith_judge_errors_last_5m", "Evaluations of the last 5 minutes that failed or carry a judge error.",
     "judge_errors_last_5m"),
)


Counters = Callable[[], Mapping[str, tuple[str, float]]]


def registry(figures: Callable[[], QueueFigures | None], counters: Counters | None = None) -> Any:
    """A prometheus-client registry of our own (never the process-wide one a host app may use) whose
    collector reads `figures()` at each scrape (None: the store could not be read, and
    `veralith_store_up` says so) and a process's own `counters()` ({name: (help, value)}, each a
    counter whose name ends in `_total`)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

    class _Collector:
        def collect(self) -> Iterator[Metric]:
            now = figures()
            yield GaugeMetricFamily("veralith_store_up", "1 when the store could be read for these figures.",
                                    value=0 if now is None else 1)
            if now is not None:
                for name, text, attribute in _GAUGES:
                    value = getattr(now, attribute)
                    yield GaugeMetricFamily(name, text, value=0.0 if value is None else float(value))
            for name, (text, value) in (counters() if counters else {}).items():
                yield CounterMetricFamily(name.removesuffix("_total"), text, value=float(value))

    out = CollectorRegistry(auto_describe=False)
    out.register(_Collector())
    return out


def exposition(figures: Callable[[], QueueFigures | None], counters: Counters | None = None) -> bytes:
    """The Prometheus text of `registry(figures, counters)`, written by prometheus-client."""
    from prometheus_client import generate_latest

    return bytes(generate_latest(registry(figures, counters)))


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"   # prometheus_client.CONTENT_TYPE_LATEST
