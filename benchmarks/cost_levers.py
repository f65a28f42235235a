"""What each remaining lever on a trace's cost would save, against the original `veralith` 0.2.7, on the six
traces of issue 39 (benchmarks/six_traces.py), so that the choice between them is made on figures.

    .venv/bin/python benchmarks/cost_levers.py [--venv DIR] [--fresh]

One scripted server answers the original (run as benchmarks/peer_cost.py runs it: its own virtual
environment, the first run needs the network) and this Veralith with VERALITH_DECOMPOSER_MODEL=gpt-4o-mini.
Then each judge reply (sufficiency, faithfulness, completeness) and the strict schema its request sent are
rewritten as a lever would have them and counted again (tiktoken o200k_base, offline); prompts are left as
they are. A rewrite is a lower bound of the cost: it counts what the reply no longer writes, not what a
schema would need to say when a field is asked for (a field asked for only in some cases needs one
variant of the item per case, which the schema, billed as input on every call, pays for).

The levers, each on top of the ones before it:
- shorter keys: `id` for an item's sub-question, claim or gap id, `against` for the contradicting chunk
  ids, `missing` for the missing facts, `chunk` for an evidence's chunk id;
- no empty lists: a list with nothing in it is not written (missing facts of a "yes", evidence of a
  "no", contradicting chunks of a supported claim);
- evidence as quotes only: each piece of evidence is its quote, the chunk found by code from the quote;
- no evidence: no quotes and no missing facts at all, as the original writes (the quote and id checks
  then have nothing to check).
A measured row besides: the same run with VERALITH_BATCH_SIZE=8 (eight claims per faithfulness call).
The last column is how many gpt-4o prompt tokens (over the six traces) would still have to go from the
judges' prompts for the row to cost what the original costs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from six_traces import ORACLES, PRICES, ScriptedServer, tokens, usd

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VERALITH_SHARED_DIR") or REPO.parent / "shared")
JUDGES = ("sufficiency", "faithfulness", "completeness")
KEYS = {"sub_question_id": "id", "claim_id": "id", "gap_id": "id", "contradicting_chunk_ids": "against",
        "missing_facts": "missing", "chunk_id": "chunk"}
LISTS = ("items", "claims", "gaps", "sub_questions")   # the reply's own lists, written even when empty


def shorter_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {KEYS.get(k, k): shorter_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shorter_keys(v) for v in value]
    return value


def no_empty_lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: no_empty_lists(v) for k, v in value.items() if v != [] or k in LISTS}
    if isinstance(value, list):
        return [no_empty_lists(v) for v in value]
    return value


def quotes_only(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: [e["quote"] for e in v] if k == "evidence" else quotes_only(v) for k, v in value.items()}
    if isinstance(value, list):
        return [quotes_only(v) for v in value]
    return value


def no_evidence(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: no_evidence(v) for k, v in value.items() if k not in ("evidence", "missing", "missing_facts")}
    if isinstance(value, list):
        return [no_evidence(v) for v in value]
    return value


def _schema_keys(schema: Any) -> Any:
    """The schema with the shorter keys: property names and the names each object requires."""
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if k == "properties":
                out[k] = {KEYS.get(name, name): _schema_keys(sub) for name, sub in v.items()}
            elif k == "required":
                out[k] = [KEYS.get(name, name) for name in v]
            else:
                out[k] = _schema_keys(v)
        return out
    if isinstance(schema, list):
        return [_schema_keys(v) for v in schema]
    return schema


def recount(server: ScriptedServer, since: int, rewrites: list[Callable[[Any], Any]]) -> list[dict[str, Any]]:
    """The calls from `since` on, each judge call's reply (and, with the shorter keys, its schema)
    rewritten by `rewrites` in order and counted again."""
    calls = server.calls(since)
    for (body, content), call in zip(server.exchanges[since:], calls, strict=True):
        if call["task"] not in JUDGES:
            continue
        reply = json.loads(content)
        for rewrite in rewrites:
            reply = rewrite(reply)
        call["output"] += tokens(json.dumps(reply, separators=(",", ":"))) - tokens(content)
        if shorter_keys in rewrites:
            schema = body["response_format"]["json_schema"]["schema"]
            before = tokens(json.dumps(schema, separators=(",", ":")))
            call["input"] += tokens(json.dumps(_schema_keys(schema), separators=(",", ":"))) - before
    return calls


def measure(server: ScriptedServer, batch_size: int | None = None) -> int:
    """The six traces through this Veralith (decomposer gpt-4o-mini) against `server`; the index of its
    first exchange."""
    import veralith
    from veralith.config import settings

    since = len(server.exchanges)
    extra = {"batch_size": batch_size} if batch_size else {}
    for oracle in ORACLES:
        with settings.override(backend="openai", base_url=server.base_url, api_key="bench", judge_model="gpt-4o",
                               decomposer_model="gpt-4o-mini", cache=False, max_retries=0, **extra):
            result = veralith.evaluate(oracle["query"], oracle["context"], oracle["response"], persist=False)
        assert not result.errors, (oracle["name"], result.errors)
    return since


def still_to_cut(calls: list[dict[str, Any]], target: float) -> int:
    """gpt-4o prompt tokens (over the six traces) whose removal brings `calls` to `target` USD per trace."""
    return max(0, round((usd(calls) - target) * len(ORACLES) * 1e6 / PRICES["gpt-4o"][0]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, help="the original's virtual environment (peer_cost.py's default)")
    parser.add_argument("--fresh", action="store_true", help="build that environment again")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(REPO / "tests"), str(REPO)]
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))
    import peer_cost

    python = peer_cost.original_python(args.venv or peer_cost.DEFAULT_VENV, args.fresh)
    with ScriptedServer(peer_cost.answerer("compact")) as server:
        peer_cost.run_original(python, server)
        original = usd(server.calls())
        since = measure(server)
        rows = [("Veralith now", recount(server, since, []))]
        levers: list[Callable[[Any], Any]] = []
        for name, lever in (("+ shorter keys", shorter_keys), ("+ no empty lists", no_empty_lists),
                            ("+ evidence as quotes only", quotes_only)):
            levers.append(lever)
            rows.append((name, recount(server, since, list(levers))))
        rows.append(("shorter keys, no empty lists, no evidence at all",
                     recount(server, since, [shorter_keys, no_empty_lists, no_evidence])))
        rows.append(("Veralith now, VERALITH_BATCH_SIZE=8 (measured)", recount(server, measure(server, 8), [])))
    print(f"### Levers on the six traces (decomposer gpt-4o-mini; the original `veralith` "
          f"{peer_cost.VERSION}: ${original:.5f} per trace)\n")
    print("| | gpt-4o in / out | USD per trace | against the original | gpt-4o prompt tokens still to cut |")
    print("|---|---:|---:|---:|---:|")
    for name, calls in rows:
        gpt4o = [c for c in calls if c["model"] == "gpt-4o"]
        cost = usd(calls)
        print(f"| {name} | {sum(c['input'] for c in gpt4o):,} / {sum(c['output'] for c in gpt4o):,} | "
              f"${cost:.5f} | {cost / original - 1:+.1%} | {still_to_cut(calls, original):,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
