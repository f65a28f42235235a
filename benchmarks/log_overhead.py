"""What log() costs the caller, against a bare INSERT + commit of the same row, in four situations.

    .venv/bin/python benchmarks/log_overhead.py [--calls 2000] [--backend openai|local] [--latency 0.2]
                                                [--hold-s 10] [--pg]

Baseline (same process, same run): the trace row and its context rows inserted with the plain
sqlite3 module in one transaction, committed, on a local WAL file with the store's schema: what
persisting the trace costs at the least.

1. steady: log() `--calls` times on a fresh database with the background worker running as in
   production (evaluating with `--backend`: `openai` waits on the fake judge server at `--latency`
   seconds a call; `local` competes with the caller for the GIL, the worst case). Median and p99
   per call, and their ratio to the baseline's.
2. locked: another process takes the SQLite write lock and holds it `--hold-s` seconds; a fresh
   Python process (its first call included) logs `--calls` traces meanwhile and reports each call's
   time; the lock is let go only after the last call returned. Every id must then be stored.
3. postgres (with `--pg`: a throwaway server from Debian's postgresql, as the tests start one):
   log() with the server up, then with it stopped, then the server is started again and every
   trace must arrive. A warm-up trace per phase is not counted (it reserves the host's id block).

Figures go to stdout as one JSON object. No data set is needed.
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

from veralith.store import ops

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

QUERY = "What is the P/E ratio, and what was Apple's P/E in 2023?"
CONTEXT = ["The price-to-earnings (P/E) ratio is the share price divided by earnings per share.",
           "Apple reported earnings per share of $6.13 for fiscal 2023."]
RESPONSE = "P/E is the share price over earnings per share. Apple's P/E in 2023 was 42.7."


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_us": round(statistics.median(ordered) * 1e6, 1),
            "p99_us": round(ordered[int(0.99 * (len(ordered) - 1))] * 1e6, 1),
            "max_us": round(ordered[-1] * 1e6, 1)}


def bare_insert(path: str, calls: int) -> list[float]:
    from veralith.store.db import connect
    connect(path).close()  # the same schema and indexes log()'s traces end up in
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = wal")
    conn.execute("PRAGMA synchronous = NORMAL")
    samples = []
    for i in range(calls):
        t0 = time.perf_counter()
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO traces (id, created_at, updated_at, status, knowledge_base, metadata, query,"
                     " response) VALUES (?, ?, ?, 'pending', 'default', '{}', ?, ?)",
                     (i + 1, now, now, QUERY, RESPONSE))
        conn.executemany("INSERT INTO context_chunks (trace_id, position, chunk_id, metadata, text)"
                         " VALUES (?, ?, ?, '{}', ?)", [(i + 1, k, f"c{k}", t) for k, t in enumerate(CONTEXT)])
        conn.execute("COMMIT")
        samples.append(time.perf_counter() - t0)
    conn.close()
    return samples


def log_calls(calls: int) -> tuple[list[float], list[int]]:
    import veralith.sdk.log as sdk
    ids, samples = [], []
    for _ in range(calls):
        t0 = time.perf_counter()
        ids.append(sdk.log(QUERY, CONTEXT, RESPONSE))
        samples.append(time.perf_counter() - t0)
    return samples, ids


_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""

_FRESH_LOGGER = """
import json, sys, time
QUERY, CONTEXT, RESPONSE = json.loads(sys.argv[2])
t0 = time.perf_counter()
import veralith
from veralith.store import ops
imported = time.perf_counter() - t0
samples, ids = [], []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    ids.append(veralith.log(QUERY, CONTEXT, RESPONSE))
    samples.append(time.perf_counter() - t0)
print(json.dumps({"samples": samples, "ids": ids, "import_s": imported}), flush=True)
sys.stdin.readline()   # exit (and ship, and judge) only once the lock is gone
"""


def under_lock(path: str, calls: int, hold_s: float, env: dict[str, str]) -> dict[str, object]:
    """A fresh process logs while another holds the write lock for `hold_s` seconds."""
    import veralith.sdk.log as sdk
    sdk.log(QUERY, CONTEXT, RESPONSE)   # the database exists and is migrated before the lock is taken
    sdk.shutdown(wait=True, timeout=120)
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    locked_at = time.monotonic()
    logger = subprocess.Popen([sys.executable, "-c", _FRESH_LOGGER, str(calls), json.dumps([QUERY, CONTEXT, RESPONSE])],
                              stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**env, "VERALITH_DB_PATH": path})
    assert logger.stdout is not None
    found = json.loads(logger.stdout.readline())
    returned_while_locked = holder.poll() is None
    time.sleep(max(0.0, hold_s - (time.monotonic() - locked_at)))
    holder.communicate("go\n", timeout=60)
    logger.communicate("go\n", timeout=600)
    stored = {r[0] for r in sqlite3.connect(path).execute("SELECT id FROM traces")}
    return {"hold_s": hold_s, "first_call_us": round(found["samples"][0] * 1e6, 1), "log": _summary(found["samples"]),
            "calls_over_50ms": sum(s > 0.05 for s in found["samples"]), "every_call_returned_while_locked":
            returned_while_locked, "lost": len(set(found["ids"]) - stored)}


def with_postgres(calls: int, tmp: str) -> dict[str, object]:
    from pg_server import PgServer

    import veralith.sdk.log as sdk
    from veralith.config import settings
    from veralith.store import open_store

    server = PgServer()
    try:
        url = server.new_database()
        os.environ.update(VERALITH_DB_URL=url, VERALITH_SPOOL_DIR=os.path.join(tmp, "pg-spool"))
        settings.reload()
        sdk.log(QUERY, CONTEXT, RESPONSE)   # the host's first block of ids
        up, ids_up = log_calls(calls)
        server.halt()
        sdk.log(QUERY, CONTEXT, RESPONSE)
        down, ids_down = log_calls(calls)
        server.start()
        t0 = time.monotonic()
        sdk.shutdown(wait=True, timeout=1800)
        caught_up = time.monotonic() - t0
        stored = open_store(url).read(ops.stats)["traces"]
        return {"up": _summary(up), "down": _summary(down), "logged": len(ids_up) + len(ids_down) + 2,
                "stored_after_restart": stored, "seconds_to_ship_and_judge_after_restart": round(caught_up, 1)}
    finally:
        sdk.shutdown(wait=False)
        server.stop()
        os.environ.pop("VERALITH_DB_URL", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--backend", choices=["openai", "local"], default="openai")
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--hold-s", type=float, default=10.0, help="how long the rival process holds the lock")
    parser.add_argument("--pg", action="store_true", help="also measure a PostgreSQL store, up and down")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="veralith-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERALITH_")}
    env.update(VERALITH_QUEUE_SIZE=str(args.calls + 10), VERALITH_BACKEND=args.backend, PYTHONPATH=str(REPO))
    server = None
    if args.backend == "openai":
        from fake_openai_server import FakeOpenAIServer
        server = FakeOpenAIServer(latency_s=args.latency).start()
        env.update(VERALITH_BASE_URL=server.base_url, VERALITH_API_KEY="test")
    os.environ.update(env)
    os.environ["VERALITH_DB_PATH"] = os.path.join(tmp, "log.db")
    from veralith.config import settings
    settings.reload()
    import veralith.sdk.log as sdk

    bare = _summary(bare_insert(os.path.join(tmp, "bare.db"), args.calls))
    sdk.log(QUERY, CONTEXT, RESPONSE)   # imports and threads, as any process's first call (measured in `locked`)
    samples, _ = log_calls(args.calls)
    steady = _summary(samples)
    sdk.shutdown(wait=False)   # the backlog stays pending; not what is measured
    out: dict[str, object] = {
        "calls": args.calls, "backend": args.backend, "bare_insert": bare, "log": steady,
        "median_ratio": round(steady["median_us"] / bare["median_us"], 2),
        "p99_ms": round(steady["p99_us"] / 1000, 2)}
    locked_path = os.path.join(tmp, "locked.db")
    with settings.override(db_path=locked_path):
        out["locked"] = under_lock(locked_path, args.calls, args.hold_s, env)
    if args.pg:
        out["postgres"] = with_postgres(args.calls, tmp)
    if server is not None:
        server.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
