"""What a small decomposer model saves: the cost per trace with gpt-4o judging, decomposer gpt-4o vs gpt-4o-mini,
as the dry run estimates it before any real run, as real runs cost, and as the dry run expects it afterwards.

    .venv/bin/python benchmarks/decomposer_cost.py [--file examples/traces.jsonl] [--decomposer gpt-4o-mini]

Everything happens in this process against the scripted fake OpenAI server (tests/fake_openai_server.py,
`auto` replies: the same answer whatever model is asked), which reports usage counted with tiktoken
(o200k_base: prompt messages plus the response_format schema in, the reply's JSON out). The reply cache
is off, so every trace makes every call. Each call is priced by Veralith's own price table for the model
it was sent to; the per-model split is read from the cost tracker.

1. Dry run before any real run: the store has no history, so output tokens are the generous allowance
   the budget guard counts (`veralith eval FILE --dry-run`'s estimate, veralith.pipeline.budget).
2. Real runs, single-model then with the small decomposer; every result is saved to a fresh SQLite store,
   which keeps what each task's calls wrote next to the allowance (veralith.store.outputsizes).
3. Dry run after them: the same estimate with the output learnt from that store (the dry run's own
   `past_output`, through the store protocol). It is in-sample (the history is of these very traces),
   so it is also run out of sample: the file split in two halves by line parity, each half estimated
   with what the real runs of the other half alone wrote (two more stores).

The fake's replies are short (one reasoning sentence at most), so its output tokens are below a real
model's; what the learnt estimate learns is whatever the store saw, here the fake's sizes. Results are
compared field by field (timings and usage aside) to check that the decomposer model changes nothing in
their form or verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))   # the offline copy of the encodings

JUDGE = "gpt-4o"
AGREE_WITHIN = 0.10     # the target: dry run and real run within 10 %
SAVING = 0.30           # the target: at least 30 % below the single-model cost


def _traces(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _config(base_url: str, decomposer: str | None, db_path: str) -> dict[str, Any]:
    return dict(backend="openai", base_url=base_url, api_key="bench", judge_model=JUDGE, decomposer_model=decomposer,
                cache=False, max_retries=0, db_path=db_path, db_url=None)


def _real(traces: list[dict], base_url: str, decomposer: str | None, stores: list[list[Any]]) -> dict:
    """Evaluate every trace with `decomposer` (None: the judge model); results, usage per model. Trace i's
    result is saved to every store in stores[i]."""
    import veralith
    from veralith.config import settings
    from veralith.observability.cost import get_tracker
    from veralith.work.intake import store_result

    tracker = get_tracker()
    tracker.reset()
    with settings.override(**_config(base_url, decomposer, ":memory:")):
        results = [veralith.evaluate(t["query"], t["context"], t["response"], persist=False,
                                     knowledge_base=t.get("knowledge_base", "default")) for t in traces]
    for result, where in zip(results, stores, strict=True):
        for store in where:
            store_result(store, result)
    by_model = tracker.by_model()
    tracker.reset()
    usd = [r.usage.usd for r in results]
    return {"results": results, "by_model": by_model, "usd": None if None in usd else sum(usd),  # type: ignore[arg-type]
            "calls": sum(r.usage.calls for r in results),
            "tokens": (sum(u.input_tokens for u in by_model.values()), sum(u.output_tokens for u in by_model.values()))}


def _dry(traces: list[dict], base_url: str, decomposer: str | None, db_path: str) -> dict:
    """The dry run's estimate of `traces` with the output learnt from the store at `db_path` (the
    allowance where it holds nothing), as `veralith eval FILE --dry-run` makes it."""
    from veralith.cli.dryrun import past_output
    from veralith.config import settings
    from veralith.pipeline.budget import estimate_trace

    with settings.override(**_config(base_url, decomposer, db_path)):
        learnt, _ = past_output(print)
        estimates = [estimate_trace(t["query"], t["context"], t["response"], learnt=learnt) for t in traces]
    usd = [e.usd for e in estimates]
    return {"usd": None if None in usd else sum(usd),  # type: ignore[arg-type]
            "calls": sum(e.calls for e in estimates), "learnt_calls": sum(e.learnt_calls for e in estimates),
            "past_calls": learnt.calls_used() if learnt is not None else 0,
            "tokens": (sum(e.input_tokens for e in estimates), sum(e.output_tokens for e in estimates))}


def _sum(*runs: dict) -> dict:
    return {"usd": sum(r["usd"] for r in runs), "calls": sum(r["calls"] for r in runs),
            "learnt_calls": sum(r["learnt_calls"] for r in runs), "past_calls": sum(r["past_calls"] for r in runs),
            "tokens": tuple(sum(r["tokens"][i] for r in runs) for i in (0, 1))}


def _form(result) -> dict:
    return result.model_dump(mode="json", exclude={"latency_ms", "usage"})


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--file", type=Path, default=REPO / "examples" / "traces.jsonl")
    parser.add_argument("--decomposer", default="gpt-4o-mini")
    args = parser.parse_args(argv)
    from fake_openai_server import FakeOpenAIServer

    from veralith.store import open_store

    traces = _traces(args.file)
    n = len(traces)
    halves = [[t for i, t in enumerate(traces) if i % 2 == k] for k in (0, 1)]
    configs = ((JUDGE, None), (args.decomposer, args.decomposer))
    server = FakeOpenAIServer(count_tokens=True).start()
    try:
        with tempfile.TemporaryDirectory(prefix="decomposer-cost-") as folder:
            every, half = os.path.join(folder, "all.db"), [os.path.join(folder, f"half{k}.db") for k in (0, 1)]
            before = {name: _dry(traces, server.base_url, decomposer, every) for name, decomposer in configs}
            stores = [open_store(p) for p in (every, *half)]   # created (and migrated) by their first write
            real = {name: _real(traces, server.base_url, decomposer, [[stores[0], stores[1 + i % 2]] for i in range(n)])
                    for name, decomposer in configs}
            after = {name: _dry(traces, server.base_url, decomposer, every) for name, decomposer in configs}
            # Out of sample: each half estimated from what the other half's real runs wrote.
            held_out = {name: _sum(*(_dry(halves[k], server.base_url, decomposer, half[1 - k]) for k in (0, 1)))
                        for name, decomposer in configs}
            for store in stores:
                store.close()
    finally:
        server.stop()

    print(f"{args.file.name}: {n} traces, judge model {JUDGE}; fake server, tokens counted with tiktoken")
    print(f"{'decomposer':<14}{'':<24}{'calls':>7}{'prompt tok':>12}{'output tok':>12}{'USD/trace':>12}")
    rows = (("dry run, before (allowance)", before), ("real run", real), ("dry run, after (learnt)", after),
            ("dry run, out of sample", held_out))
    for name, _ in configs:
        for label, runs in rows:
            run = runs[name]
            tokens_in, tokens_out = run["tokens"]
            print(f"{name:<14}{label:<24}{run['calls']:>7}{tokens_in:>12,}{tokens_out:>12,}{run['usd'] / n:>12.6f}")
        for model, used in sorted(real[name]["by_model"].items()):
            print(f"  real, {model:<30}{used.calls:>7}{used.input_tokens:>12,}{used.output_tokens:>12,}"
                  f"{(used.usd or 0) / n:>12.6f}")
    small = args.decomposer
    for label, runs in rows:
        extra = ""
        if "learnt" in label or "sample" in label:
            run = runs[small]
            extra = (f"; output learnt for {run['learnt_calls']} of {run['calls']} calls, "
                     f"from {run['past_calls']} past calls")
        print(f"{label:<28} decomposer {small} / {JUDGE}: {runs[small]['usd'] / runs[JUDGE]['usd']:.3f} "
              f"({1 - runs[small]['usd'] / runs[JUDGE]['usd']:.1%} less){extra}")
    real_small = real[small]
    for label, runs in rows:
        if runs is real:
            continue
        ratio = runs[small]["usd"] / real_small["usd"]
        (est_in, est_out), (real_in, real_out) = runs[small]["tokens"], real_small["tokens"]
        print(f"{label:<28} / real run, decomposer {small}: USD {ratio:.3f}, prompt tokens {est_in / real_in:.3f}, "
              f"output tokens {est_out / real_out:.3f}")
    real_saving = 1 - real_small["usd"] / real[JUDGE]["usd"]
    print(f"targets (decomposer {small}): real run >= {SAVING:.0%} less: {_verdict(real_saving >= SAVING)} "
          f"({real_saving:.1%})")
    for label, runs in rows:
        if runs is real:
            continue
        saving = 1 - runs[small]["usd"] / runs[JUDGE]["usd"]
        agree = abs(runs[small]["usd"] / real_small["usd"] - 1)
        print(f"  {label:<27} >= {SAVING:.0%} less: {_verdict(saving >= SAVING)} ({saving:.1%}); within "
              f"{AGREE_WITHIN:.0%} of the real run: {_verdict(agree <= AGREE_WITHIN)} ({agree:.1%} off)")
    same = sum(_form(a) == _form(b) for a, b in zip(real[JUDGE]["results"], real[small]["results"], strict=True))
    print(f"results identical in form and verdicts (timings and usage aside): {same} of {n}")


if __name__ == "__main__":
    main()
