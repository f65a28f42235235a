"""Whole `veralith eval` command time against the two-round-trip latency bound, sync vs async path.

Mirrors benchmarks/eval_throughput.py (the 160 traces at 500 ms, concurrency 16 of issue 27), for
concurrency 16, 64 and 256, each run twice in turn: a thread per trace (VERALITH_ASYNC_CALLS=0) and
one event loop with AsyncOpenAI (VERALITH_ASYNC_CALLS=1). Every run starts its own
tests/fake_openai_server.py subprocess on 127.0.0.1 (every request answered after LATENCY seconds)
and writes N distinct traces, so nothing is served from the reply cache.

The bound: a trace is two round trips (questions and claims at once, then the three judges at once),
so N traces at concurrency C take at least ceil(N / C) x 2 x LATENCY when every trace starts in step
(`bound`); `ideal` = N / C x 2 x LATENCY is the throughput figure eval_throughput.py uses (not
reachable when C does not divide N). `whole` is the command's wall time including process start-up
(imports, about 1 s here), `eval` the evaluation time the command reports itself. `CPU` is the
command's own CPU time (user + system, from the kernel's accounting of the finished child process;
the fake server is another process and is not in it), start-up included, and `CPU/req` that divided
by the requests the server answered: on 2 cores, the floor the wall time cannot go below.

A server on 127.0.0.1 is given one request at a time unless VERALITH_SERVER_CONCURRENCY says more;
the runs set it to 256 (its maximum), which caps the first round at concurrency 256 too (160 traces
x 2 decomposition calls = 320 requests).

    .venv/bin/python benchmarks/async_latency.py [--traces 160] [--latency 0.5] [--concurrency 16 64 256]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def traces(n: int) -> list[dict]:
    return [{"id": i, "query": f"What is the boiling point of compound {i}?",
             "context": [f"Compound {i} boils at {100 + i} degrees Celsius.", f"Compound {i} is a clear liquid."],
             "response": f"Compound {i} boils at {100 + i} degrees Celsius. It is a clear liquid."}
            for i in range(n)]


def run(n: int, concurrency: int, latency: float, asynchronous: bool, persist: bool = True) -> dict:
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "fake_openai_server.py"), "--port", "0",
                               "--auto", "--latency", str(latency)], stdout=subprocess.PIPE, text=True)
    try:
        ready = server.stdout.readline().split()
        assert ready and ready[0] == "READY", ready
        base_url = ready[1]
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "traces.jsonl"
            data.write_text("".join(json.dumps(t) + "\n" for t in traces(n)), encoding="utf-8")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
            env.update(VERALITH_BACKEND="openai", VERALITH_BASE_URL=base_url, VERALITH_API_KEY="bench",
                       VERALITH_DB_PATH=str(Path(tmp) / "bench.db"), PYTHONPATH=str(REPO),
                       VERALITH_SERVER_CONCURRENCY="256", VERALITH_ASYNC_CALLS="1" if asynchronous else "0")
            command = [sys.executable, "-m", "veralith.cli", "eval", str(data), "--concurrency", str(concurrency),
                       "--output", str(Path(tmp) / "results.jsonl")] + ([] if persist else ["--no-persist"])
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            whole = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)   # the server is still running: not counted
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            results = (Path(tmp) / "results.jsonl").read_text().splitlines()
        with urllib.request.urlopen(f"{base_url}/_stats", timeout=10) as reply:
            stats = json.loads(reply.read())
    finally:
        server.terminate()
        server.wait(timeout=10)
    match = re.search(r"wall time\s+([\d.]+) s", done.stdout)
    if done.returncode != 0 or match is None or len(results) != n:
        print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
        raise SystemExit(f"eval exited {done.returncode} with {len(results)} results")
    return {"whole": whole, "eval": float(match.group(1)), "requests": stats["count"],
            "max_in_flight": stats.get("max_in_flight"), "cpu": cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=160)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--no-persist", action="store_true", help="no database writes (eval --no-persist)")
    args = parser.parse_args()
    print(f"{args.traces} traces, server latency {args.latency} s, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs{', --no-persist' if args.no_persist else ''}")
    print("| concurrency | path | bound s | whole s | whole / bound | eval s | eval / bound | requests | "
          "max in flight | CPU s | CPU/req ms |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for concurrency in args.concurrency:
        bound = math.ceil(args.traces / concurrency) * 2 * args.latency
        for asynchronous in (False, True):
            got = run(args.traces, concurrency, args.latency, asynchronous, persist=not args.no_persist)
            print(f"| {concurrency} | {'async' if asynchronous else 'threads'} | {bound:.2f} | {got['whole']:.2f} | "
                  f"{got['whole'] / bound:.2f}x | {got['eval']:.2f} | {got['eval'] / bound:.2f}x | "
                  f"{got['requests']} | {got['max_in_flight']} | {got['cpu']:.2f} | "
                  f"{1000 * got['cpu'] / max(got['requests'], 1):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
