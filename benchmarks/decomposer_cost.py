"""What a small decomposer model saves: the cost per trace with gpt-4o judging, decomposer gpt-4o vs gpt-4o-mini.

    .venv/bin/python benchmarks/decomposer_cost.py [--file examples/traces.jsonl] [--decomposer gpt-4o-mini]

Both runs happen in this process against the scripted fake OpenAI server (tests/fake_openai_server.py,
`auto` replies: the same answer whatever model is asked), which reports usage counted with tiktoken
(o200k_base: prompt messages plus the response_format schema in, the reply's JSON out). The reply cache
is off, so every trace makes every call in both runs. Each call is priced by Veralith's own price table
for the model it was sent to; the per-model split is read from the cost tracker. Next to each run, the
budget guard's estimate (`veralith eval FILE --dry-run`) of the same file with the same models.

The fake's replies are short (one reasoning sentence at most), so its output tokens are below a real
model's; the ratio is a property of the prompts, which are real. Results are compared field by field
(timings and usage aside) to check that the decomposer model changes nothing in their form or verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))   # the offline copy of the encodings

JUDGE = "gpt-4o"


def _traces(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _run(traces: list[dict], base_url: str, decomposer: str | None) -> dict:
    """Evaluate every trace with `decomposer` (None: the judge model); results, usage per model, estimate."""
    import veralith
    from veralith.config import settings
    from veralith.observability.cost import get_tracker
    from veralith.pipeline.budget import estimate_trace

    tracker = get_tracker()
    tracker.reset()
    with settings.override(backend="openai", base_url=base_url, api_key="bench", judge_model=JUDGE,
                           decomposer_model=decomposer, cache=False, max_retries=0):
        results = [veralith.evaluate(t["query"], t["context"], t["response"], persist=False,
                                     knowledge_base=t.get("knowledge_base", "default")) for t in traces]
        estimates = [estimate_trace(t["query"], t["context"], t["response"]) for t in traces]
    by_model = tracker.by_model()
    tracker.reset()
    usd = [r.usage.usd for r in results]
    estimated = [e.usd for e in estimates]
    return {"results": results, "by_model": by_model,
            "usd": None if None in usd else sum(usd),   # type: ignore[arg-type]
            "estimated_usd": None if None in estimated else sum(estimated),   # type: ignore[arg-type]
            "calls": sum(r.usage.calls for r in results),
            "estimated_tokens": (sum(e.input_tokens for e in estimates), sum(e.output_tokens for e in estimates))}


def _form(result) -> dict:
    return result.model_dump(mode="json", exclude={"latency_ms", "usage"})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--file", type=Path, default=REPO / "examples" / "traces.jsonl")
    parser.add_argument("--decomposer", default="gpt-4o-mini")
    args = parser.parse_args(argv)
    from fake_openai_server import FakeOpenAIServer

    traces = _traces(args.file)
    server = FakeOpenAIServer(count_tokens=True).start()
    try:
        baseline = _run(traces, server.base_url, None)
        cheaper = _run(traces, server.base_url, args.decomposer)
    finally:
        server.stop()
    n = len(traces)
    print(f"{args.file.name}: {n} traces, judge model {JUDGE}; fake server, tokens counted with tiktoken")
    print(f"{'decomposer':<14}{'calls':>7}{'prompt tok':>12}{'output tok':>12}{'USD/trace':>12}"
          f"{'dry-run USD/trace':>19}")
    for name, run in ((JUDGE, baseline), (args.decomposer, cheaper)):
        models = run["by_model"]
        tokens_in = sum(u.input_tokens for u in models.values())
        tokens_out = sum(u.output_tokens for u in models.values())
        print(f"{name:<14}{run['calls']:>7}{tokens_in:>12,}{tokens_out:>12,}{run['usd'] / n:>12.6f}"
              f"{run['estimated_usd'] / n:>19.6f}")
        for model, used in sorted(models.items()):
            print(f"  {model:<12}{used.calls:>7}{used.input_tokens:>12,}{used.output_tokens:>12,}"
                  f"{(used.usd or 0) / n:>12.6f}")
    ratio = cheaper["usd"] / baseline["usd"]
    estimated_ratio = cheaper["estimated_usd"] / baseline["estimated_usd"]
    print(f"cost per trace, decomposer {args.decomposer} / {JUDGE}: {ratio:.3f} ({1 - ratio:.1%} less); "
          f"dry run: {estimated_ratio:.3f} ({1 - estimated_ratio:.1%} less)")
    real_in = sum(u.input_tokens for u in cheaper["by_model"].values())
    real_out = sum(u.output_tokens for u in cheaper["by_model"].values())
    est_in, est_out = cheaper["estimated_tokens"]
    print(f"dry run / real run, decomposer {args.decomposer}: USD {cheaper['estimated_usd'] / cheaper['usd']:.3f}, "
          f"prompt tokens {est_in / real_in:.3f}, output tokens {est_out / real_out:.3f} (an allowance, high on "
          "purpose)")
    same = sum(_form(a) == _form(b) for a, b in zip(baseline["results"], cheaper["results"], strict=True))
    print(f"results identical in form and verdicts (timings and usage aside): {same} of {n}")


if __name__ == "__main__":
    main()
