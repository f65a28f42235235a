"""log()'s first call in a fresh process, against another source tree's, runs interleaved (issue 35).

    .venv/bin/python benchmarks/first_log.py [--runs 8] [--before DIR]

Each run is a new process (SQLite store in a new folder, the offline judge) that imports veralith and
logs 100 traces 5 ms apart; it prints the first call's milliseconds and the worst of the other 99.
With `--before DIR` (a checkout of another commit, e.g. `git archive main | tar -x -C DIR`), a run of
that tree's code comes before each run of this one, so both meet the same load. Prints one JSON object:
each tree's figures and medians, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

RUN = r"""
import json, os, sys, time
import veralith
ms = []
for i in range(100):
    started = time.perf_counter()
    veralith.log(f"What is the capital of France? ({i})", ["Paris is the capital of France."],
                 "Paris is the capital of France.")
    ms.append((time.perf_counter() - started) * 1000)
    time.sleep(0.005)
print(json.dumps({"first": round(ms[0], 2), "worst_rest": round(max(ms[1:]), 2)}), flush=True)
veralith.shutdown(wait=True, timeout=30)
"""


def once(tree: Path) -> dict[str, float]:
    folder = tempfile.mkdtemp(prefix="veralith-first-log-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERALITH_")}
    env.update({"PYTHONPATH": str(tree), "VERALITH_DB_PATH": str(Path(folder) / "v.db"), "VERALITH_BACKEND": "local"})
    # cwd: a folder without a `veralith` package, so that PYTHONPATH decides which tree is imported
    done = subprocess.run([sys.executable, "-c", RUN], env=env, cwd=folder, capture_output=True, text=True,
                          timeout=300)
    line = next((x for x in done.stdout.splitlines() if x.startswith("{")), None)
    if line is None:
        raise SystemExit(f"a run of {tree} printed nothing: {done.stderr.strip()[-300:]}")
    return dict(json.loads(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--before", type=Path, default=None, help="another source tree, run interleaved")
    args = parser.parse_args()
    trees = {"before": args.before, "this": REPO} if args.before else {"this": REPO}
    found: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    load = [os.getloadavg()[0]]
    for _ in range(args.runs):
        for name, tree in trees.items():
            found[name].append(once(tree))
    load.append(os.getloadavg()[0])
    print(json.dumps({"load_average": load, **{name: {
        "first_ms": [r["first"] for r in runs], "median_first_ms": statistics.median(r["first"] for r in runs),
        "worst_other_ms": max(r["worst_rest"] for r in runs)} for name, runs in found.items()}}, indent=2))


if __name__ == "__main__":
    main()
