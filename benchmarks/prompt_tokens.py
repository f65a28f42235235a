"""How many prompt tokens a trace costs with the OpenAI backend, per call and per trace.

    .venv/bin/python benchmarks/prompt_tokens.py [--model gpt-4o-mini]

Two traces: the quickstart (1 chunk, 2 claims, 2 sub-questions) and a 5-chunk / 8-claim trace
(2 sub-questions; 8 claims make two faithfulness calls at the default batch size of 6). Each is
evaluated by the real pipeline through the real SDK against the fake OpenAI server on 127.0.0.1
in `count_tokens` mode; the server's questions reply is scripted to the sub-questions a model
would list, the rest are its auto replies (one claim per sentence). Every request the server
received is counted with tiktoken (o200k_base, offline from ../shared/tiktoken):

* `messages`: per message 3 + tokens(role + content), plus 3 to prime the reply. This is what
  prompt-text counts (and the DeepEval figures the targets come from, 3,134 and 5,388) measure; RAGAS's
  figures on the same traces (5,466 and 11,803) are printed beside them.
* `schema`: the compact JSON of the response_format schema, which structured outputs bill as input.
* `raw` = messages + schema, what OpenAI reports as prompt_tokens.
* `cacheable`: the static prefix (schema + system message) OpenAI's prompt cache could serve on a
  warm cache: nothing below 1,024 tokens, else 1,024 + a multiple of 128 within the prefix.
* `effective` = raw − cacheable × (1 − cached price / input price) for `--model`: the tokens
  billed at the input rate once the cache is warm.

The static system prompt of each task (no data in it) is printed first, then the budget's output-token
allowance per task. Each figure is printed beside BEFORE, the same script's figures for the prompts and
allowances before the judges' contracts were written once (prompts questions-v2, claims-v4,
sufficiency-v2, faithfulness-v4, completeness-v3, explain-v1, fast-v1), so the change shows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))

from fake_openai_server import FakeOpenAIServer, counted_usage, task_of  # noqa: E402

import veralith  # noqa: E402
from veralith.config import settings  # noqa: E402
from veralith.llm import prompts  # noqa: E402
from veralith.llm.estimate import OUTPUT_ALLOWANCE  # noqa: E402
from veralith.observability.pricing import price_of  # noqa: E402
from veralith.pipeline.budget import estimate_trace  # noqa: E402

DEEPEVAL = {"1 chunk / 2 claims": 3134, "5 chunks / 8 claims": 5388}
# RAGAS's prompt tokens on the same two traces, measured side by side against the simulated judge server
# with the real SDK when the peers were compared (issue 27: 6 calls / 5,466 and 10 calls / 11,803).
RAGAS = {"1 chunk / 2 claims": 5466, "5 chunks / 8 claims": 11803}

# This script's output for the prompts before the contracts (see the module doc), with gpt-4o-mini.
BEFORE: dict[str, Any] = {
    "system": {"questions": 221, "claims": 517, "sufficiency": 441, "faithfulness": 902, "completeness": 505,
               "explain": 489, "fast": 1554},
    "traces": {"1 chunk / 2 claims": {"messages": 3288, "schema": 1150, "raw": 4438, "output_allowance": 862},
               "5 chunks / 8 claims": {"messages": 5722, "schema": 1436, "raw": 7158, "output_allowance": 2575}},
    "allowance": {"questions_base": 20, "questions_per_item": 20, "claims_base": 40, "claims_per_item": 40, "call": 20,
                  "sufficiency_per_item": 160, "faithfulness_per_item": 140, "completeness_base": 40,
                  "completeness_per_claim": 50, "completeness_per_sub_question": 40, "explain": 400},
}
# The same script's output after the judges' contracts (issue 41; prompts questions-v3, claims-v5, sufficiency-v3,
# faithfulness-v5, completeness-v4), before the prompts of issue 39 left time out where nothing is dated.
CONTRACTS: dict[str, dict[str, int]] = {
    "1 chunk / 2 claims": {"messages": 3566, "schema": 1119, "raw": 4685},
    "5 chunks / 8 claims": {"messages": 5999, "schema": 1405, "raw": 7404},
}
# What the allowance of a task lost, and why: the fields no code read, measured on the worked examples.
_DROPPED = {"sufficiency_per_item": "required_facts", "completeness_per_claim": "a role's reasoning"}

TRACES = {
    "1 chunk / 2 claims": {
        "query": "What is a P/E ratio and what was Apple's P/E in 2023?",
        "sub_questions": ["What is a P/E ratio?", "What was Apple's P/E ratio in 2023?"],
        "context": ["The price-to-earnings (P/E) ratio is a company's share price divided by its earnings per share."],
        "response": "A P/E ratio divides share price by earnings per share. Apple's P/E in 2023 was 42.7.",
    },
    "5 chunks / 8 claims": {
        "query": "How did Northwind Bank's lending change in 2024, and what drove its profit?",
        "sub_questions": ["How did Northwind Bank's lending change in 2024?",
                          "What drove Northwind Bank's profit in 2024?"],
        "context": [
            {"text": "Northwind Bank's loan book grew 6 percent in 2024 to 41.2 billion euros, led by mortgages in the "
                     "Netherlands and Belgium. Corporate lending was flat, as clients repaid credit lines drawn "
                     "during 2022.", "source": "annual-report-2024.pdf"},
            {"text": "Net interest income rose 9 percent to 1.8 billion euros because deposit rates lagged the "
                     "central bank's rate rises for most of the year. The bank expects this margin to narrow in "
                     "2025 as deposit rates catch up.", "source": "annual-report-2024.pdf"},
            {"text": "Fee income was 412 million euros, up 3 percent, mostly from payment services. Asset "
                     "management fees fell slightly after two funds were closed in the spring.",
             "source": "results-presentation.pdf"},
            {"text": "Loan loss provisions were 95 million euros, down from 160 million in 2023, after the bank "
                     "released reserves set aside for commercial real estate. Non-performing loans stayed at 1.9 "
                     "percent of the book.", "source": "results-presentation.pdf"},
            {"text": "Net profit reached 720 million euros in 2024. The board proposed a dividend of 0.85 euros "
                     "per share and a buyback of up to 150 million euros, subject to regulatory approval.",
             "source": "press-release.html"},
        ],
        "response": ("Northwind Bank's loan book grew 6 percent in 2024 to 41.2 billion euros. Mortgages in the "
                     "Netherlands and Belgium led the growth. Corporate lending was flat. Profit was driven mainly "
                     "by net interest income, which rose 9 percent to 1.8 billion euros. Lower loan loss "
                     "provisions of 95 million euros also helped. Fee income grew 3 percent to 412 million euros. "
                     "Net profit reached 720 million euros. The bank plans a buyback of up to 150 million euros."),
    },
}


def _tokens(text: str) -> int:
    import tiktoken

    return len(tiktoken.get_encoding("o200k_base").encode(text, disallowed_special=()))


def _cacheable(prefix_tokens: int) -> int:
    """What OpenAI's prompt cache can serve of a static prefix: 0 below 1,024, then 128-token steps."""
    return 0 if prefix_tokens < 1024 else 1024 + (prefix_tokens - 1024) // 128 * 128


def measure(name: str, trace: dict[str, Any], model: str) -> dict[str, int]:
    server = FakeOpenAIServer(count_tokens=True).start()
    server.responder = lambda body: ({"sub_questions": [{"id": f"q{n}", "text": t} for n, t in
                                                        enumerate(trace["sub_questions"], 1)]}
                                     if task_of(body) == "questions" else None)
    try:
        with settings.override(backend="openai", base_url=server.base_url, api_key="bench", judge_model=model,
                               cache=False, max_retries=0):
            result = veralith.evaluate(trace["query"], trace["context"], trace["response"], persist=False)
            estimate = estimate_trace(trace["query"], trace["context"], trace["response"])
        requests = server.requests
    finally:
        server.stop()
    assert not result.errors, result.errors
    price = price_of(model)
    discount = 1 - price.cached_input / price.input if price and price.input else 0.0
    print(f"\n### {name}: {len(result.claims)} claims, {len(result.sub_questions)} sub-questions, "
          f"{len(requests)} calls\n")
    print("| call | messages | schema | raw | static prefix | cacheable | effective |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    totals = dict.fromkeys(("messages", "schema", "raw", "cacheable", "effective"), 0)
    for body in sorted(requests, key=lambda b: list(prompts.PROMPT_VERSIONS).index(task_of(b))):
        schema = json.dumps(body["response_format"]["json_schema"]["schema"], separators=(",", ":"))
        schema_tokens = _tokens(schema)
        raw = counted_usage(body, "")["prompt_tokens"]
        messages = raw - schema_tokens
        prefix = schema_tokens + 4 + _tokens("system" + body["messages"][0]["content"])
        cacheable = _cacheable(prefix)
        effective = round(raw - cacheable * discount)
        row = {"messages": messages, "schema": schema_tokens, "raw": raw, "cacheable": cacheable,
               "effective": effective}
        for key, value in row.items():
            totals[key] += value
        print(f"| {task_of(body)} | {messages:,} | {schema_tokens:,} | {raw:,} | {prefix:,} | {cacheable:,} | "
              f"{effective:,} |")
    print(f"| **trace** | **{totals['messages']:,}** | {totals['schema']:,} | **{totals['raw']:,}** | | "
          f"{totals['cacheable']:,} | {totals['effective']:,} |")
    target, before = DEEPEVAL[name], BEFORE["traces"][name]
    verdict = "below" if totals["messages"] < target else "NOT below"
    print(f"\nprompt text {totals['messages']:,} tokens vs DeepEval {target:,}: {verdict} "
          f"({totals['messages'] / target - 1:+.0%}); with the schema {totals['raw']:,} "
          f"({totals['raw'] / target - 1:+.0%}); budget estimate {estimate.input_tokens:,} input tokens in "
          f"{estimate.calls} calls ({estimate.input_tokens / totals['raw'] - 1:+.1%}).")
    ragas = RAGAS[name]
    text_vs, raw_vs = ("below" if n < ragas else "NOT below" for n in (totals["messages"], totals["raw"]))
    print(f"vs RAGAS {ragas:,}: prompt text {text_vs} ({totals['messages'] / ragas - 1:+.0%}), with the schema "
          f"{raw_vs} ({totals['raw'] / ragas - 1:+.0%}).")
    print(f"change against BEFORE: prompt text {_change(totals['messages'], before['messages'])}, schemas "
          f"{_change(totals['schema'], before['schema'])}, prompt tokens {_change(totals['raw'], before['raw'])}, "
          f"output allowance {_change(estimate.output_tokens, before['output_allowance'])}.")
    contracts = CONTRACTS[name]
    print(f"change against the contracts' prompts (issue 41): prompt text "
          f"{_change(totals['messages'], contracts['messages'])}, schemas "
          f"{_change(totals['schema'], contracts['schema'])}, prompt tokens "
          f"{_change(totals['raw'], contracts['raw'])}.")
    totals["output_allowance"] = estimate.output_tokens
    return totals


def _change(now: int, before: int) -> str:
    return f"{before:,} → {now:,} ({now - before:+,}, {now / before - 1:+.1%})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt-4o-mini", help="judge model whose cache discount `effective` uses")
    args = parser.parse_args(argv)
    print("### Static system prompt per task (no data; identical on every call)\n")
    print("| task | version | system prompt tokens | before | change |")
    print("|---|---|---:|---:|---:|")
    for task, version in prompts.PROMPT_VERSIONS.items():
        now, before = _tokens(prompts.system_prompt(task)), BEFORE["system"][task]
        print(f"| {task} | {version} | {now:,} | {before:,} | {now - before:+,} |")
    print("\n### Output-token allowance per task (the budget's upper bound for a reply)\n")
    print("| allowance | now | before | change | why |")
    print("|---|---:|---:|---:|---|")
    for key, now in OUTPUT_ALLOWANCE.items():
        before = BEFORE["allowance"][key]
        why = f"{_DROPPED[key]} no longer asked" if key in _DROPPED else ""
        print(f"| {key} | {now} | {before} | {now - before:+} | {why} |")
    rows = {name: measure(name, trace, args.model) for name, trace in TRACES.items()}
    print("\n### Cost per trace (input as counted, output at the budget's generous allowance)\n")
    print("| trace | model | input tokens | output allowance | USD at most |")
    print("|---|---|---:|---:|---:|")
    for name, totals in rows.items():
        for model in ("gpt-4o-mini", "gpt-4o"):
            price = price_of(model)
            usd = (totals["raw"] * price.input + totals["output_allowance"] * price.output) / 1e6
            print(f"| {name} | {model} | {totals['raw']:,} | {totals['output_allowance']:,} | ${usd:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
