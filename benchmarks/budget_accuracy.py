"""How close is the budget guard's token estimate to what the judge server actually receives?

For each shared dev trace (../shared/data/*.dev.jsonl) this estimates the trace's input tokens
(veralith.pipeline.budget.estimate_trace: the real prompts, the pipeline's batching, tiktoken)
and then evaluates it against the local fake OpenAI server in `count_tokens` mode, which reports
the prompt tokens it received counted with tiktoken (o200k_base, OpenAI's chat counting rules).

    .venv/bin/python benchmarks/budget_accuracy.py [--limit 60] [--batch-size 6]

Two scenarios. `sentences`: the fake server's own decomposition, one claim per sentence with a
letter in it and the query as the one sub-question, which is close to what the estimate assumes,
so it measures the prompt rendering, batching and counting. `clauses`: the decomposition splits
every sentence further at ", ", "; " and " and " (more, shorter claims, as real judge models often
write), which measures the error of assuming one claim per sentence. A real model's claims are
the main source of error on real traffic; output tokens are reported against the allowance.
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
SHARED = REPO.parent / "shared"
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))

import re  # noqa: E402

from fake_openai_server import FakeOpenAIServer, auto_reply, task_of  # noqa: E402

import veralith  # noqa: E402
from veralith.config import settings  # noqa: E402
from veralith.pipeline.budget import estimate_trace  # noqa: E402


def _rows(path: Path, limit: int) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    return rows if limit <= 0 else rows[:limit]


def clause_claims(body: dict) -> dict:
    """The fake's reply, with each claim split into its clauses (the `clauses` scenario)."""
    reply = auto_reply(body)
    if task_of(body) == "claims":
        claims: list[dict] = []
        for claim in reply["claims"]:
            parts = [p for p in re.split(r",\s+|;\s+|\s+and\s+", claim["text"]) if re.search(r"[^\W\d_]", p)]
            for part in parts or [claim["text"]]:
                claims.append({**claim, "id": f"c{len(claims) + 1}", "text": part})
        reply["claims"] = claims
    return reply


def measure(scenario: str, limit: int, batch_size: int) -> None:
    server = FakeOpenAIServer(count_tokens=True).start()
    if scenario == "clauses":
        server.responder = clause_claims
    errors: dict[str, list[float]] = {}
    totals = {"estimated": 0, "received": 0, "out_allowance": 0, "out_received": 0, "traces": 0}
    started = time.perf_counter()
    try:
        with settings.override(backend="openai", base_url=server.base_url, api_key="bench", judge_model="gpt-4o",
                               cache=False, max_retries=0, batch_size=batch_size):
            for path in sorted((SHARED / "data").glob("*.dev.jsonl")):
                name = path.name.removesuffix(".dev.jsonl")
                for row in _rows(path, limit):
                    if not row["query"].strip():
                        continue   # evaluate() refuses an empty query: there is nothing to judge against
                    est = estimate_trace(row["query"], row["context"], row["response"])
                    result = veralith.evaluate(row["query"], row["context"], row["response"], persist=False)
                    got = result.usage.input_tokens
                    errors.setdefault(name, []).append((est.input_tokens - got) / got)
                    totals["estimated"] += est.input_tokens
                    totals["received"] += got
                    totals["out_allowance"] += est.output_tokens
                    totals["out_received"] += result.usage.output_tokens
                    totals["traces"] += 1
    finally:
        server.stop()

    print(f"\nScenario `{scenario}` (estimate − received) / received, per trace:\n")
    print("| dev set | traces | median error | worst error | within ±30 % |")
    print("|---|---:|---:|---:|---:|")
    every: list[float] = []
    for name, errs in errors.items():
        every += errs
        within = sum(abs(e) <= 0.30 for e in errs) / len(errs)
        print(f"| {name} | {len(errs)} | {statistics.median(errs):+.1%} | {max(errs, key=abs):+.1%} | {within:.0%} |")
    within = sum(abs(e) <= 0.30 for e in every) / len(every)
    aggregate = (totals["estimated"] - totals["received"]) / totals["received"]
    print(f"| **all** | {len(every)} | {statistics.median(every):+.1%} | {max(every, key=abs):+.1%} | {within:.0%} |")
    print(f"\ninput tokens: estimated {totals['estimated']:,}, received {totals['received']:,} "
          f"(aggregate error {aggregate:+.1%}); output allowance {totals['out_allowance']:,} vs "
          f"{totals['out_received']:,} generated by the fake server; {totals['traces']} traces in "
          f"{time.perf_counter() - started:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=60, help="traces per dev set (0 = all)")
    parser.add_argument("--batch-size", type=int, default=6)
    parser.add_argument("--scenario", choices=["sentences", "clauses", "both"], default="both")
    args = parser.parse_args(argv)
    for scenario in (["sentences", "clauses"] if args.scenario == "both" else [args.scenario]):
        measure(scenario, args.limit, args.batch_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
