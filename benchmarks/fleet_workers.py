"""Fleet mode under load: many worker processes on one store, and how fast they judge.

    .venv/bin/python benchmarks/fleet_workers.py [--store sqlite|postgres|both] [--processes 8] [--threads 4]
                                                 [--traces 1000] [--latency 0.2] [--sizes 1,2,4,8]
                                                 [--per-worker 40] [--skip-once] [--skip-throughput] [--skip-kill]

1. exactly once: `--traces` pending traces, then `--processes` `veralith worker --once --concurrency
   --threads` processes at the same time (the offline judge, so the store is what is contended).
   Checked afterwards: every trace done, each claimed once (`attempts` = 1) and judged once (no
   superseded outcome in its history), and no lock or serialization error in any worker's output.
2. throughput: for each worker count in `--sizes`, that many worker processes (`--threads` each)
   against the fake judge server answering every call in `--latency` seconds, on `--per-worker` x
   workers traces. A trace takes two round trips (decomposition, then the three judges at once), so
   the bound is traces / (workers x threads) x 2 x latency. Timed from the moment every worker has
   said it is ready (start-up is not judging) to the last result stored; reported as a ratio to the
   bound, with the machine's CPU count beside it.
3. a killed worker: two workers against the slow judge; one is killed with SIGKILL once both are
   judging; the survivor takes the dead one's traces over (same host: at its next sweep; another
   host: once the lease expires). Checked: every trace done once.

Figures go to stdout as JSON. PostgreSQL comes from Debian's package, started the way the tests
start it (tests/pg_server.py). No data set is needed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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


def _fill(url: str, n: int) -> None:
    from veralith.models import ContextChunk
    from veralith.store import open_store
    from veralith.store.protocol import TraceInput
    from veralith.work.intake import create

    store = open_store(url)
    chunks = [ContextChunk(id=f"c{i}", text=t) for i, t in enumerate(CONTEXT)]
    for i in range(n):
        create(store, TraceInput(query=f"{QUERY} #{i}", context=chunks, response=RESPONSE))


def _counts(url: str) -> dict[str, int]:
    from veralith.store import open_store

    store = open_store(url)
    with store.connection() as db:  # type: ignore[attr-defined]
        row = db.execute("SELECT COUNT(*), SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END),"
                         " SUM(CASE WHEN attempts = 1 THEN 1 ELSE 0 END) FROM traces").fetchone()
        history = db.execute("SELECT COUNT(*) FROM trace_history").fetchone()[0]
    return {"traces": int(row[0]), "done": int(row[1] or 0), "claimed_once": int(row[2] or 0),
            "superseded_outcomes": int(history)}


def _workers(n: int, threads: int, env: dict[str, str], *, once: bool) -> list[subprocess.Popen[str]]:
    argv = [sys.executable, "-m", "veralith.cli", "worker", "--concurrency", str(threads), "--every", "3600"]
    return [subprocess.Popen(argv + (["--once"] if once else []), env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(n)]


def _ready(workers: list[subprocess.Popen[str]]) -> None:
    for worker in workers:  # until its line saying it is judging (a warning about the model may come first)
        assert worker.stderr is not None
        for line in worker.stderr:
            if "judging the traces of" in line:
                break


def exactly_once(url: str, env: dict[str, str], processes: int, threads: int, traces: int) -> dict[str, object]:
    _fill(url, traces)
    t0 = time.monotonic()
    workers = _workers(processes, threads, {**env, "VERALITH_BACKEND": "local"}, once=True)
    outputs = [w.communicate(timeout=3600) for w in workers]
    elapsed = time.monotonic() - t0
    errors = [line for _, err in outputs for line in err.splitlines()
              if any(word in line.lower() for word in ("error", "lock", "serializ", "deadlock", "traceback"))]
    counts = _counts(url)
    return {"processes": processes, "threads": threads, "traces": traces, "seconds": round(elapsed, 1),
            **counts, "exit_codes": sorted({w.returncode for w in workers}), "error_lines": errors[:5],
            "ok": counts["done"] == counts["claimed_once"] == traces and not counts["superseded_outcomes"]
            and not errors}


def throughput(new_url, env: dict[str, str], sizes: list[int], threads: int, per_worker: int,
               latency: float) -> list[dict[str, object]]:
    rows = []
    for size in sizes:
        url = new_url()
        traces = per_worker * size
        _fill(url, traces)
        workers = _workers(size, threads, {**env, "VERALITH_DB_URL": url}, once=False)
        _ready(workers)
        t0 = time.monotonic()
        while _counts(url)["done"] < traces and time.monotonic() - t0 < 3600:
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.communicate(timeout=120)
        bound = traces / (size * threads) * 2 * latency
        rows.append({"workers": size, "threads_each": threads, "traces": traces, "seconds": round(elapsed, 2),
                     "bound_s": round(bound, 2), "ratio": round(elapsed / bound, 2), "cpus": os.cpu_count()})
    return rows


def killed_worker(url: str, env: dict[str, str], threads: int, traces: int) -> dict[str, object]:
    _fill(url, traces)
    env = {**env, "VERALITH_DB_URL": url}
    workers = _workers(2, threads, env, once=False)
    _ready(workers)
    time.sleep(1.0)  # both are judging
    workers[0].send_signal(signal.SIGKILL)
    workers[0].wait()
    t0 = time.monotonic()
    while _counts(url)["done"] < traces and time.monotonic() - t0 < 900:
        time.sleep(0.2)
    taken_over = time.monotonic() - t0
    workers[1].send_signal(signal.SIGTERM)
    workers[1].communicate(timeout=120)
    counts = _counts(url)
    return {"traces": traces, "seconds_after_the_kill": round(taken_over, 1), **counts,
            "ok": counts["done"] == traces and not counts["superseded_outcomes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--sizes", default="1,2,4,8")
    parser.add_argument("--per-worker", type=int, default=40, help="throughput: traces per worker")
    parser.add_argument("--skip-once", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-kill", action="store_true")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="veralith-fleet-")
    from fake_openai_server import FakeOpenAIServer

    judge = FakeOpenAIServer(latency_s=args.latency).start()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    base.update(PYTHONPATH=str(REPO), VERALITH_BACKEND="openai", VERALITH_BASE_URL=judge.base_url,
                VERALITH_API_KEY="test", VERALITH_CACHE="0", VERALITH_SPOOL_DIR=os.path.join(tmp, "spool"),
                # The fake judge stands for a hosted API, which takes calls in parallel. On 127.0.0.1 it
                # would otherwise be taken for a local model server, allowed one call at a time per
                # process (VERALITH_SERVER_CONCURRENCY's default), and each worker would run at 1/threads.
                VERALITH_SERVER_CONCURRENCY=str(max(64, args.threads * 4)))
    out: dict[str, object] = {"cpus": os.cpu_count(), "latency_s": args.latency}
    stores = ["sqlite", "postgres"] if args.store == "both" else [args.store]
    server = None
    names = iter(range(10_000))
    try:
        for kind in stores:
            if kind == "postgres":
                from pg_server import PgServer
                server = PgServer()
                new_url = server.new_database
            else:
                def new_url() -> str:
                    return "sqlite:///" + os.path.join(tmp, f"fleet{next(names)}.db")
            os.environ.update(base)
            from veralith.config import settings
            settings.reload()
            result: dict[str, object] = {}
            if not args.skip_once:
                url = new_url()
                result["exactly_once"] = exactly_once(url, {**base, "VERALITH_DB_URL": url}, args.processes,
                                                      args.threads, args.traces)
            if not args.skip_throughput:
                result["throughput"] = throughput(new_url, base, [int(s) for s in args.sizes.split(",")],
                                                  args.threads, args.per_worker, args.latency)
            if not args.skip_kill:
                result["killed_worker"] = killed_worker(new_url(), base, args.threads, args.per_worker * 2)
            out[kind] = result
    finally:
        judge.stop()
        if server is not None:
            server.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
