"""What a trace costs in and out, schemas counted, before and after the replies and schemas of issue 39.

    .venv/bin/python benchmarks/reply_cost.py [--baseline COMMIT] [--markdown]

The method of issue 39: six traces (a definition plus a wrong figure, a correct answer, a number swap, a
two-part question answered in one sentence, a 5-chunk context with an 8-claim response, a refusal), the
same scripted answers for every version, every request counted with tiktoken (o200k_base, offline from
../shared/tiktoken) as OpenAI bills it: the chat messages plus the strict response schema as input, the
reply as output. Priced at gpt-4o $2.50 / $10 and gpt-4o-mini $0.15 / $0.60 per million tokens (cached
input half the input price on both).

The traces, their scripted answers and the one scripted server are benchmarks/six_traces.py: for every
request, the trace's oracle is written out with every field any version's schema has and then cut to
the schema the request sent: a field a version no longer asks for is not written, nothing else changes,
so the difference between two versions is their prompts and schemas, never the answers.

The baseline is computed, not copied: the package as it was at `--baseline` (default: the commit before
this work) is extracted with `git archive` into a temporary directory and the same measurement runs there
in a child process. Each version runs twice: one model (gpt-4o for every call) and with
VERALITH_DECOMPOSER_MODEL=gpt-4o-mini (the two decomposition calls on the small model).

Columns: input and output tokens per model, USD per trace (mean of the six) with no prompt cache, and
"warm": the static prefix of each call (schema + system message) served from OpenAI's prompt cache at
half price where it reaches the 1,024-token minimum (then 1,024 + a multiple of 128), what a steady
stream of traces pays.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from six_traces import ORACLES, ScriptedServer, row, usd

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VERALITH_SHARED_DIR") or REPO.parent / "shared")
# main before this round of issue 39's work (prompts questions-v4 ... completeness-v5); the first round's
# baseline was 71ceb31 (questions-v3 ... faithfulness-v5): `--baseline 71ceb31` measures against it.
BASELINE = "9680ec6"
# The original `veralith` 0.2.7 from the package index on the same six traces, as issue 39 measured it
# (json_object mode, no schema; gpt-4o judging, gpt-4o-mini decomposing). benchmarks/peer_cost.py runs it.
ORIGINAL = {"calls": 29, "gpt-4o": (15122, 1528), "gpt-4o-mini": (8839, 551), "usd": 0.00912}


# ---------------------------------------------------------------- one version, measured in this process

def measure(decomposer: str | None, server: ScriptedServer | None = None) -> dict[str, Any]:
    """Every request of the six traces with the installed (or --tree) veralith against `server` (one of
    its own if None): per call its task, model, input and output tokens, schema tokens and cacheable
    prefix; and per trace its cell and gate."""
    if server is None:
        with ScriptedServer() as own:
            return measure(decomposer, own)
    import veralith
    from veralith.config import settings

    since = len(server.exchanges)
    cells = []
    for oracle in ORACLES:
        with settings.override(backend="openai", base_url=server.base_url, api_key="bench", judge_model="gpt-4o",
                               decomposer_model=decomposer, cache=False, max_retries=0):
            result = veralith.evaluate(oracle["query"], oracle["context"], oracle["response"], persist=False)
        assert not result.errors, (oracle["name"], result.errors)
        cells.append([oracle["name"], result.failure_cell.value if result.failure_cell else None,
                      result.status.quality_gate.value])
    return {"calls": server.calls(since), "cells": cells}


# ---------------------------------------------------------------- the baseline, in its own tree

def _baseline(commit: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="veralith-baseline-") as tmp:
        archive = Path(tmp) / "src.tar"
        with archive.open("wb") as handle:
            subprocess.run(["git", "-C", str(REPO), "archive", commit, "veralith"], check=True, stdout=handle)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        out = subprocess.run([sys.executable, __file__, "--tree", tmp, "--json"], check=True, capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": tmp})
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def _both() -> dict[str, Any]:
    return {"one model": measure(None), "decomposer gpt-4o-mini": measure("gpt-4o-mini")}


# ---------------------------------------------------------------- report

def report(before: dict[str, Any], after: dict[str, Any], commit: str) -> None:
    o = ORIGINAL
    print(f"### Six traces, schemas counted (baseline: {commit}, computed)\n")
    print("| | calls | gpt-4o in / out | gpt-4o-mini in / out | USD per trace | USD per trace, warm cache |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| original `veralith` 0.2.7 (issue 39's figures; benchmarks/peer_cost.py runs it) | {o['calls']} | "
          f"{o['gpt-4o'][0]:,} / "
          f"{o['gpt-4o'][1]:,} | {o['gpt-4o-mini'][0]:,} / {o['gpt-4o-mini'][1]:,} | ${o['usd']:.5f} | |")
    for label, runs in (("before", before), ("after", after)):
        for mode in ("decomposer gpt-4o-mini", "one model"):
            print(row(f"{label}, {mode}", runs[mode]["calls"]))
    print("\n### Per task (one model): input, schema, output tokens over the six traces\n")
    print("| task | calls | input before → after | schema before → after | output before → after | "
          "largest static prefix before → after |")
    print("|---|---:|---:|---:|---:|---:|")
    seen = {c["task"] for c in before["one model"]["calls"] + after["one model"]["calls"]}
    tasks = [t for t in ("questions", "claims", "sufficiency", "faithfulness", "completeness") if t in seen]
    for task in tasks:
        b = [c for c in before["one model"]["calls"] if c["task"] == task]
        a = [c for c in after["one model"]["calls"] if c["task"] == task]
        cells = [f"{sum(c[k] for c in b):,} → {sum(c[k] for c in a):,}" for k in ("input", "schema", "output")]
        prefix = f"{max((c['prefix'] for c in b), default=0):,} → {max((c['prefix'] for c in a), default=0):,}"
        print(f"| {task} | {len(a)} | {' | '.join(cells)} | {prefix} |")
    same = before["one model"]["cells"] == after["one model"]["cells"] == after["decomposer gpt-4o-mini"]["cells"]
    print(f"\nVerdicts (cell, gate) per trace {'identical' if same else 'DIFFER'} before and after: "
          + "; ".join(f"{n}: {c} / {g}" for n, c, g in after["one model"]["cells"]))
    cost = usd(after["decomposer gpt-4o-mini"]["calls"])
    print(f"Target (issue 39): with the decomposer model, USD per trace at or below the original's "
          f"${o['usd']:.5f}: ${cost:.5f} ({cost / o['usd'] - 1:+.0%}) — {'met' if cost <= o['usd'] else 'MISSED'}.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=BASELINE, help="the commit whose veralith is the baseline")
    parser.add_argument("--tree", help=argparse.SUPPRESS)     # the child process: measure the package in this tree
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path[:0] = [*([args.tree] if args.tree else []), str(REPO / "tests")]
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))
    if args.json:
        print(json.dumps(_both()))
        return 0
    sys.path.insert(1, str(REPO))
    report(_baseline(args.baseline), _both(), args.baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
