"""Throughput of `veralith eval` against an OpenAI-compatible server with a fixed latency.

Starts tests/fake_openai_server.py on 127.0.0.1 (every request answered after LATENCY seconds),
writes N distinct traces (so nothing is served from the cache), runs the real console command in a
subprocess and compares its evaluation wall time with the ideal

    N / concurrency x 2 round trips (questions and claims at once, then the three judges at once) x latency

Target: at most 1.25 x the ideal. Process start-up (imports) is reported separately: it is paid once
per run and does not depend on N.

    .venv/bin/python benchmarks/eval_throughput.py [--traces 160] [--concurrency 16] [--latency 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=160)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--no-persist", action="store_true", help="dry run (no database writes)")
    args = parser.parse_args()

    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "fake_openai_server.py"), "--port", "0",
                               "--auto", "--latency", str(args.latency)], stdout=subprocess.PIPE, text=True)
    try:
        ready = server.stdout.readline().split()
        assert ready and ready[0] == "READY", ready
        base_url = ready[1]
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "traces.jsonl"
            data.write_text("".join(json.dumps(t) + "\n" for t in traces(args.traces)), encoding="utf-8")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
            env.update(VERALITH_BACKEND="openai", VERALITH_BASE_URL=base_url, VERALITH_API_KEY="bench",
                       VERALITH_DB_PATH=str(Path(tmp) / "bench.db"), PYTHONPATH=str(REPO))
            command = [sys.executable, "-m", "veralith.cli", "eval", str(data), "--concurrency",
                       str(args.concurrency), "--output", str(Path(tmp) / "results.jsonl")]
            if args.no_persist:
                command.append("--no-persist")
            started = time.perf_counter()
            run = subprocess.run(command, env=env, capture_output=True, text=True)
            total_s = time.perf_counter() - started
            results = [json.loads(line) for line in (Path(tmp) / "results.jsonl").read_text().splitlines()]
        with urllib.request.urlopen(f"{base_url}/_stats", timeout=10) as reply:
            stats = json.loads(reply.read())
    finally:
        server.terminate()
        server.wait(timeout=10)

    match = re.search(r"wall time\s+([\d.]+) s", run.stdout)
    if run.returncode != 0 or match is None:
        print(run.stdout, run.stderr, sep="\n", file=sys.stderr)
        print(f"eval exited {run.returncode}", file=sys.stderr)
        return 1
    eval_s = float(match.group(1))
    ideal = args.traces / args.concurrency * 2 * args.latency
    print(f"traces {args.traces}  concurrency {args.concurrency}  latency {args.latency} s  "
          f"persist {not args.no_persist}")
    print(f"results {len(results)}  server requests {stats.get('count', stats)}")
    print(f"ideal {ideal:.2f} s  target <= {1.25 * ideal:.2f} s")
    print(f"evaluation wall time {eval_s:.2f} s = {eval_s / ideal:.2f} x ideal "
          f"({'PASS' if eval_s <= 1.25 * ideal else 'FAIL'})")
    print(f"whole command incl. start-up {total_s:.2f} s (start-up {total_s - eval_s:.2f} s)")
    # Where the time goes: per-trace latency as the pipeline measured it, and how busy the CLI kept
    # its workers (sum of trace times / concurrency / wall). A low busy share would be the runner's fault;
    # a high one with slow traces means each round trip costs more than the server's latency.
    totals = [r["latency_ms"]["total"] / 1000 for r in results]
    decompose = [r["latency_ms"]["decompose"] / 1000 for r in results]
    busy = sum(totals) / args.concurrency / eval_s
    print(f"per trace: mean {sum(totals) / len(totals):.2f} s (ideal {2 * args.latency:.2f} s), decompose round trip "
          f"mean {sum(decompose) / len(decompose):.2f} s (server latency {args.latency:.2f} s); workers busy "
          f"{busy:.0%} of the wall time")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0 if eval_s <= 1.25 * ideal and len(results) == args.traces else 1


if __name__ == "__main__":
    sys.exit(main())
