"""What a rerun costs: 50 traces judged against a slow server, then judged again.

    .venv/bin/python benchmarks/cache_rerun.py [--traces 50] [--latency 0.5] [--workers 8]

The fake OpenAI server (tests/fake_openai_server.py) answers every request after `--latency`
seconds. Run 1 evaluates the traces (`--workers` at a time, as `veralith eval --concurrency`
would) on an empty database; run 2 evaluates them again in the same process (served by the
in-process LRU); run 3 does it in a new process on the same database (served by SQLite, the LRU
emptied before each repetition; the clock starts after the imports, which take seconds in a cold
process whatever is cached). Reruns are repeated (--repeat, median shown). Each
line gives the wall time, the HTTP requests the server saw, cache hits and USD (gpt-4o prices,
the server's default usage: characters / 4 of each request in, 20 tokens out). persist=False throughout:
the store's writes are the same in every run and are not what is measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def _traces(n: int) -> list[dict]:
    """n traces taken round-robin from the shared dev sets (the ones with a response)."""
    sets = []
    for name in ("faithfulness_halueval_qa", "faithfulness_begin_wow", "faithfulness_rgb_counterfactual",
                 "claims_wice", "faithfulness_faithbench"):
        with (SHARED / "data" / f"{name}.dev.jsonl").open(encoding="utf-8") as handle:
            # evaluate() refuses an empty query (nothing to judge against), so those rows are skipped
            sets.append([row for row in map(json.loads, handle) if row["query"].strip()][:n])
    sets = [rows for rows in sets if rows]   # a set whose rows all lack a query contributes none
    rows = [row for i in range(n) for rows in sets if i < len(rows) for row in [rows[i]]]
    return rows[:n]


def run(traces: list[dict], workers: int) -> dict:
    """Evaluate every trace with the current settings; wall time and summed usage."""
    import veralith

    def one(row: dict):
        return veralith.evaluate(row["query"], row["context"], row["response"], persist=False)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(one, traces))
    seconds = time.perf_counter() - started
    usd = [r.usage.usd for r in results]
    return {"seconds": seconds, "calls": sum(r.usage.calls for r in results),
            "cache_hits": sum(r.usage.cache_hits for r in results),
            "usd": None if None in usd else sum(usd),
            "errors": sum(len(r.errors) for r in results)}


def _settings(base_url: str, db_path: str):
    from veralith.config import settings

    return settings.override(backend="openai", base_url=base_url, api_key="bench", judge_model="gpt-4o",
                             db_path=db_path, cache=True, max_retries=0)


def rerun(traces: list[dict], workers: int, repeat: int, *, from_disk: bool) -> dict:
    """The median of `repeat` reruns (the machine's other load makes single timings noisy)."""
    from veralith.llm.cache import get_cache

    runs = []
    for _ in range(repeat):
        if from_disk:
            get_cache().current.clear_memory()  # every repetition reads SQLite, as a new process would
        runs.append(run(traces, workers))
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


def child(args: argparse.Namespace) -> int:
    with _settings(args.base_url, args.db):
        # Imports (the openai SDK, sqlite-utils) cost seconds in a cold process whatever the cache
        # does; load them before the clock starts, and report the process's total time apart.
        from veralith.llm import get_client
        from veralith.store.db import open_db

        get_client()
        open_db(args.db)
        print(json.dumps(rerun(_traces(args.traces), args.workers, args.repeat, from_disk=True)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=50)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="reruns per row; the median is shown")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)

    from fake_openai_server import FakeOpenAIServer

    server = FakeOpenAIServer(latency_s=args.latency).start()
    db = os.path.join(tempfile.mkdtemp(prefix="veralith-bench-"), "bench.db")
    traces = _traces(args.traces)
    rows = []
    try:
        with _settings(server.base_url, db):
            before = server.count
            first = run(traces, args.workers)
            first["requests"] = server.count - before
            before = server.count
            again = rerun(traces, args.workers, args.repeat, from_disk=False)
            again["requests"] = server.count - before
        before = server.count
        started = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, "--child", "--base-url", server.base_url, "--db", db,
                              "--traces", str(args.traces), "--workers", str(args.workers),
                              "--repeat", str(args.repeat)],
                             capture_output=True, text=True, check=True, timeout=600).stdout
        fresh = json.loads(out.strip().splitlines()[-1])
        fresh["requests"] = server.count - before
        process_s = time.perf_counter() - started
    finally:
        server.stop()
    rows = [("1. first run, empty cache", first), ("2. rerun, same process (LRU)", again),
            ("3. rerun, new process (SQLite)", fresh)]
    print(f"{args.traces} traces, {args.latency * 1000:.0f} ms server latency, {args.workers} traces at a time; "
          f"reruns: median of {args.repeat}, requests counted over all of them\n")
    print("| run | wall time | HTTP requests | cache hits | USD | speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, r in rows:
        usd = "unknown" if r["usd"] is None else f"${r['usd']:.4f}"
        print(f"| {label} | {r['seconds']:.3f} s | {r['requests']} | {r['cache_hits']} | {usd} | "
              f"{first['seconds'] / r['seconds']:.0f}× |")
    print(f"\nRun 3's process took {process_s:.1f} s in all, most of it importing the openai SDK and "
          "sqlite-utils before the first trace (not timed above).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
