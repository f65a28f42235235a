"""History at scale: `stats`, `list --limit 50` and calibration over 1M stored traces, on either store.

    .venv/bin/python benchmarks/history_scale.py [--traces 1000000] [--db PATH | --db-url URL | --pg] [--repeat 5]

Fills a store with synthetic traces (rolled-up columns only: the child tables do not take part in
these queries) spread over 5 knowledge bases, the six cells plus indeterminate (no cell), and all four work
states, 90 % of them with the app's own latency recorded (so `stats` computes a p50 and p95 per
knowledge base, from a histogram: `app_latency_worst_relative_error` compares them with the exact
values sorted from the traces); then times each query through the store (veralith.store: what `veralith stats`
and `list` call) `--repeat` times after one warm-up, and prints the median and the worst, in
milliseconds, as JSON. An existing store with enough rows is reused. `--pg` starts a throwaway PostgreSQL server
(Debian's package, as the tests do); its running totals are folded (compacted) after the fill, as
a writing process does every few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from veralith.store import ops

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

CELLS = ["complete_grounded", "complete_ungrounded", "incomplete_grounded", "incomplete_ungrounded",
         "extra_grounded", "extra_ungrounded", None]
KBS = [f"kb{i}" for i in range(5)]


def _rows(n: int, seed: int = 7):
    rng = random.Random(seed)
    for i in range(n):
        status = rng.choices(["done", "pending", "running", "error"], [97, 1, 1, 1])[0]
        done = status == "done"
        cell = rng.choice(CELLS) if done else None
        gate = None if not done else "indeterminate" if cell is None else \
            "pass" if cell == "complete_grounded" else "fail"
        stamp = f"2026-{1 + i * 11 // n:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00.{i % 1_000_000:06d}+00:00"
        yield (stamp, stamp, status, rng.choice(KBS), "{}", cell, gate,
               round(rng.random(), 3) if done else None, round(rng.random(), 3) if done else None,
               4 if done else None, 1200 if done else None, 150 if done else None,
               round(rng.random() / 100, 6) if done else None,
               f"Synthetic question number {i} about the product?", f"Synthetic answer {i}. It is fine.",
               round(rng.lognormvariate(6.5, 0.6), 1) if rng.random() < 0.9 else None)


def fill(url: str, n: int) -> float:
    from veralith.store import open_store
    from veralith.work.migrate import ids_past

    store = open_store(url)
    with store.connection() as db:  # type: ignore[attr-defined]
        have = int(db.execute("SELECT COUNT(*) FROM traces").fetchone()[0])
        if have >= n:
            return 0.0
        t0 = time.perf_counter()
        batch: list[tuple] = []
        for i, row in enumerate(_rows(n - have, seed=have)):
            batch.append((have + i + 1, *row))
            if len(batch) == 50_000:
                _flush(db, batch)
        _flush(db, batch)
        store.after_copy(db)   # PostgreSQL folds its running totals
        db.execute("ANALYZE")
    ids_past(store)            # the id allocator past the rows written
    if url.startswith("postgresql"):
        # What autovacuum does to a table some time after a bulk load: mark its pages all-visible, so
        # reads that walk an index (the calibration and latency percentiles' offset reads) can skip
        # the table. Measured straight after the load they would measure the load, not the store.
        # The whole database: folding the running totals' deltas (after_copy) leaves millions of dead
        # delta rows, which autovacuum clears soon after; the totals' reads would otherwise scan them.
        # VACUUM cannot run in a transaction: a connection of its own, in autocommit.
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - t0


def _flush(db, batch) -> None:
    if batch:
        with db.write():
            db.executemany(
                "INSERT INTO traces (id, created_at, updated_at, status, knowledge_base, metadata, failure_cell,"
                " quality_gate, sufficiency_fraction, faithfulness_fraction, calls, input_tokens, output_tokens,"
                " usd, query, response, app_latency_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                batch)
        batch.clear()


def timed(fn, repeat: int) -> dict[str, float]:
    fn()  # warm-up: page cache, statement cache
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return {"median_ms": round(statistics.median(samples), 1), "max_ms": round(max(samples), 1)}


def latency_error(db) -> float:
    """The largest relative error of the histogram's p50/p95 (what `stats` shows) against the exact
    nearest-rank values sorted from the traces, over every knowledge base."""
    import math

    from veralith.store.queries import app_latency_percentiles
    worst = 0.0
    for kb in KBS:
        shown = app_latency_percentiles(db, kb)
        values = [row[0] for row in db.execute("SELECT app_latency_ms FROM traces WHERE knowledge_base = ?"
                                               " AND app_latency_ms IS NOT NULL ORDER BY 1", [kb]).fetchall()]
        for name, p in (("p50", 50), ("p95", 95)):
            exact = values[max(1, math.ceil(p * len(values) / 100)) - 1]
            worst = max(worst, abs(shown[name] - exact) / exact)
    return round(worst, 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--db", default=None, help="a SQLite file")
    parser.add_argument("--db-url", default=None, help="a store URL (sqlite:///... or postgresql://...)")
    parser.add_argument("--pg", action="store_true", help="a throwaway PostgreSQL server")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    server = None
    if args.pg:
        sys.path.insert(0, str(REPO / "tests"))
        from pg_server import PgServer
        server = PgServer()
        url = server.new_database()
    else:
        url = args.db_url or "sqlite:///" + (args.db or os.path.join(tempfile.mkdtemp(prefix="veralith-history-"),
                                                                     "history.db"))
    os.environ["VERALITH_DB_URL"] = url
    from veralith.config import settings
    settings.reload()
    from veralith.pipeline.calibrate import current_threshold
    from veralith.store import open_store

    try:
        fill_s = fill(url, args.traces)
        store = open_store(url, read_only=True)
        figures = {
            "store": url.split(":", 1)[0], "traces": store.read(ops.stats)["traces"], "fill_s": round(fill_s, 1),
            "stats": timed(lambda: store.read(ops.stats), args.repeat),
            "stats_kb": timed(lambda: store.read(ops.stats, kb="kb3"), args.repeat),
            "list_50": timed(lambda: store.read(ops.list_traces, limit=50), args.repeat),
            "list_50_cell": timed(lambda: store.read(ops.list_traces, limit=50, cell="extra_ungrounded"), args.repeat),
            "list_50_kb_cell": timed(lambda: store.read(ops.list_traces, limit=50, kb="kb1", cell="complete_grounded"),
                                     args.repeat),
            "current_threshold": timed(lambda: current_threshold("kb2", store), args.repeat),
        }
        with store.connection() as db:  # type: ignore[attr-defined]
            from veralith.store.queries import app_latency_percentiles
            figures["app_latency_p50_p95_kb"] = timed(lambda: app_latency_percentiles(db, "kb2"), args.repeat)
            figures["app_latency_worst_relative_error"] = latency_error(db)
        print(json.dumps(figures, indent=2))
    finally:
        if server is not None:
            from veralith.store import _stores
            for opened in _stores.values():
                opened.close()
            server.stop()


if __name__ == "__main__":
    main()
