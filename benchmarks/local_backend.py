"""Speed of the local backend: traces per second on one core through `veralith.evaluate(persist=False)`.

    .venv/bin/python benchmarks/local_backend.py [--data DIR] [--repeat 1]

Every record of every *.dev.jsonl in ../shared/data with a context is evaluated once per repeat,
in one process pinned to one CPU where the OS allows it. A record without a query (WiCE's claims)
is judged under local_fit.NO_QUERY, as benchmarks/judge_quality.py does (the API refuses an
empty one). Both the process's CPU time (traces per CPU-second: the figure that does not depend on
what else the machine runs) and wall time are shown. Each trace is new to the process on the first
pass (the tokenizer caches only help within a trace; one untimed warm-up call pays the imports), so
that pass is the honest figure; later repeats show the warm-cache ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_fit import query_of  # noqa: E402

import veralith  # noqa: E402
from veralith.config import settings  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data"


def records(data: Path) -> list[dict]:
    rows = []
    for path in sorted(data.glob("*.dev.jsonl")):
        with path.open(encoding="utf-8") as handle:
            rows += [json.loads(line) for line in handle if line.strip()]
    return [r for r in rows if r["context"]]  # the completeness pairs carry no context


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeat", type=int, default=1, help="passes over the data (first pass is cold)")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    rows = records(args.data)
    with settings.override(backend="local"):
        # One untimed call pays the one-time imports (the judge client module, pydantic schemas).
        veralith.evaluate(query_of(rows[0]), rows[0]["context"], rows[0]["response"], persist=False)
        for n in range(args.repeat):
            per_trace = []
            cpu_started = time.process_time()
            started = time.perf_counter()
            for row in rows:
                t0 = time.perf_counter()
                veralith.evaluate(query_of(row), row["context"], row["response"], persist=False)
                per_trace.append(time.perf_counter() - t0)
            elapsed = time.perf_counter() - started
            # CPU time of this process: what one core delivers even when other jobs share the machine.
            cpu = time.process_time() - cpu_started
            per_trace.sort()
            p95 = per_trace[int(0.95 * (len(per_trace) - 1))]
            print(f"pass {n + 1} ({'cold' if n == 0 else 'warm'}): {len(rows)} traces; "
                  f"CPU {cpu:.2f} s = {len(rows) / cpu:.0f} traces per CPU-second; "
                  f"wall {elapsed:.2f} s = {len(rows) / elapsed:.0f} traces/s; "
                  f"median {statistics.median(per_trace) * 1000:.2f} ms, "
                  f"p95 {p95 * 1000:.2f} ms, max {per_trace[-1] * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
