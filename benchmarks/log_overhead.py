"""What log() costs the caller: median and p99 per call, against a bare WAL insert of the same data.

    .venv/bin/python benchmarks/log_overhead.py [--calls 2000] [--backend openai|local] [--latency 0.2]

Baseline: the same trace row and its context rows inserted with the plain sqlite3 module in one
transaction on a WAL database (what persisting the trace costs at the least). Then log() on a
fresh database: validation, the pending row and its chunks in one transaction, the enqueue; the
background worker runs meanwhile, as it would in production. With `--backend openai` it waits
on the fake OpenAI server (tests/fake_openai_server.py, `--latency` seconds per request), as it
would on a real judge; with `--backend local` it competes with the caller for the GIL, which is
the worst case. Figures go to stdout as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
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


def log_calls(calls: int) -> list[float]:
    import veralith.sdk.log as sdk
    sdk.log(QUERY, CONTEXT, RESPONSE)  # warm: imports, connection, worker thread
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        sdk.log(QUERY, CONTEXT, RESPONSE)
        samples.append(time.perf_counter() - t0)
    sdk.shutdown(wait=False)  # the backlog stays pending; not what is measured
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--backend", choices=["openai", "local"], default="openai")
    parser.add_argument("--latency", type=float, default=0.2)
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
    bare = _percentiles(bare_insert(os.path.join(tmp, "bare.db"), args.calls))
    logged = _percentiles(log_calls(args.calls))
    if server is not None:
        server.stop()
    print(json.dumps({"calls": args.calls, "backend": args.backend, "bare_insert": bare, "log": logged,
                      "median_ratio": round(logged["median_us"] / bare["median_us"], 2),
                      "p99_ratio": round(logged["p99_us"] / bare["p99_us"], 2)}, indent=2))


if __name__ == "__main__":
    main()
