"""What log() costs the caller: median and p99 per call, against a bare WAL insert of the same data.

    .venv/bin/python benchmarks/log_overhead.py [--calls 2000] [--backend openai|local] [--latency 0.2]
                                                [--hold-ms 200] [--gap-ms 50]

Baseline: the same trace row and its context rows inserted with the plain sqlite3 module in one
transaction on a WAL database (what persisting the trace costs at the least). Then log() on a
fresh database: validation, the pending row and its chunks in one transaction, the enqueue; the
background worker runs meanwhile, as it would in production. With `--backend openai` it waits
on the fake OpenAI server (tests/fake_openai_server.py, `--latency` seconds per request), as it
would on a real judge; with `--backend local` it competes with the caller for the GIL, which is
the worst case.

Then the same with a competing writer: another process that holds the database's write lock for
`--hold-ms` at a time, releasing it for `--gap-ms` in between (a long migration, a bulk import, a
stuck writer). log() must still return within about VERALITH_LOG_TIMEOUT_MS (50 ms by default):
what it cannot write in time goes to its spool file and the worker moves it in later. The run
checks that every returned id ends up in the database. Figures go to stdout as one JSON object.
No data set is needed.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

QUERY = "What is the P/E ratio, and what was Apple's P/E in 2023?"
CONTEXT = ["The price-to-earnings (P/E) ratio is the share price divided by earnings per share.",
           "Apple reported earnings per share of $6.13 for fiscal 2023."]
RESPONSE = "P/E is the share price over earnings per share. Apple's P/E in 2023 was 42.7."


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_us": round(statistics.median(ordered) * 1e6, 1),
            "p99_us": round(ordered[int(0.99 * (len(ordered) - 1))] * 1e6, 1)}


def bare_insert(path: str, calls: int) -> list[float]:
    from veralith.store.db import connect
    connect(path).close()  # same schema and indexes as log() writes into
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = wal")
    conn.execute("PRAGMA synchronous = NORMAL")
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        conn.execute("BEGIN IMMEDIATE")
        trace_id = conn.execute(
            "INSERT INTO traces (created_at, updated_at, status, knowledge_base, metadata, query, response)"
            " VALUES (?, ?, 'pending', 'default', '{}', ?, ?)", (now, now, QUERY, RESPONSE)).lastrowid
        conn.executemany("INSERT INTO context_chunks (trace_id, position, chunk_id, metadata, text)"
                         " VALUES (?, ?, ?, '{}', ?)", [(trace_id, i, f"c{i}", t) for i, t in enumerate(CONTEXT)])
        conn.execute("COMMIT")
        samples.append(time.perf_counter() - t0)
    conn.close()
    return samples


def log_calls(calls: int) -> tuple[list[float], list[int]]:
    import veralith.sdk.log as sdk
    ids = [sdk.log(QUERY, CONTEXT, RESPONSE)]  # warm: imports, connection, worker thread, id block
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        ids.append(sdk.log(QUERY, CONTEXT, RESPONSE))
        samples.append(time.perf_counter() - t0)
    return samples, ids


_COMPETITOR = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
hold, gap = float(sys.argv[2]), float(sys.argv[3])
print("ready", flush=True)
while True:
    conn.execute("BEGIN IMMEDIATE")
    time.sleep(hold)
    conn.execute("COMMIT")
    time.sleep(gap)
"""


def with_competing_writer(path: str, calls: int, hold_s: float, gap_s: float) -> tuple[list[float], list[int], int]:
    """log() while another process keeps taking the write lock; (samples, ids, traces spooled)."""
    import veralith.sdk.log as sdk
    from veralith.store import spool

    appended = [0]
    real_append = spool.Spool.append

    def counting(self, *args, **kwargs):  # counts traces that went to the spool
        appended[0] += 1
        return real_append(self, *args, **kwargs)
    spool.Spool.append = counting

    sdk.log(QUERY, CONTEXT, RESPONSE)  # warm before the competitor starts
    rival = subprocess.Popen([sys.executable, "-c", _COMPETITOR, path, str(hold_s), str(gap_s)],
                             stdout=subprocess.PIPE, text=True)
    try:
        rival.stdout.readline()
        samples, ids = [], []
        for _ in range(calls):
            t0 = time.perf_counter()
            ids.append(sdk.log(QUERY, CONTEXT, RESPONSE))
            samples.append(time.perf_counter() - t0)
    finally:
        rival.kill()
        rival.wait()
        spool.Spool.append = real_append
    return samples, ids, appended[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--backend", choices=["openai", "local"], default="openai")
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--hold-ms", type=float, default=200.0, help="competing writer: lock held per turn")
    parser.add_argument("--gap-ms", type=float, default=50.0, help="competing writer: pause between turns")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="veralith-bench-")
    os.environ.update(VERALITH_DB_PATH=os.path.join(tmp, "log.db"), VERALITH_QUEUE_SIZE=str(args.calls + 10),
                      VERALITH_BACKEND=args.backend)
    server = None
    if args.backend == "openai":
        from fake_openai_server import FakeOpenAIServer
        server = FakeOpenAIServer(latency_s=args.latency).start()
        os.environ.update(VERALITH_BASE_URL=server.base_url, VERALITH_API_KEY="test")
    from veralith.config import settings
    settings.reload()
    import veralith.sdk.log as sdk
    from veralith.store.db import open_db

    bare = _percentiles(bare_insert(os.path.join(tmp, "bare.db"), args.calls))
    samples, _ = log_calls(args.calls)
    logged = _percentiles(samples)
    sdk.shutdown(wait=False)  # the backlog stays pending; not what is measured
    contended_path = os.path.join(tmp, "contended.db")
    with settings.override(db_path=contended_path):
        samples, ids, spooled = with_competing_writer(contended_path, args.calls, args.hold_ms / 1000,
                                                      args.gap_ms / 1000)
        contended = _percentiles(samples)
        contended["max_us"] = round(max(samples) * 1e6, 1)
        sdk.shutdown(wait=True, timeout=600)  # moves the spool in (evaluation is not measured)
        stored = {r[0] for r in open_db(contended_path).execute("SELECT id FROM traces")}
    if server is not None:
        server.stop()
    print(json.dumps({"calls": args.calls, "backend": args.backend, "bare_insert": bare, "log": logged,
                      "median_ratio": round(logged["median_us"] / bare["median_us"], 2),
                      "p99_ratio": round(logged["p99_us"] / bare["p99_us"], 2),
                      "competing_writer": {"hold_ms": args.hold_ms, "gap_ms": args.gap_ms,
                                           "log_timeout_ms": settings.log_timeout_ms, "log": contended,
                                           "spooled": spooled, "lost": len(set(ids) - stored),
                                           "median_ratio_vs_bare": round(contended["median_us"] / bare["median_us"], 2),
                                           "p99_ratio_vs_bare": round(contended["p99_us"] / bare["p99_us"], 2)}},
                     indent=2))


if __name__ == "__main__":
    main()
