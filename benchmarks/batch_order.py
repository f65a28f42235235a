"""Batches keep their ids straight: a judge that answers items out of order changes nothing.

    .venv/bin/python benchmarks/batch_order.py [--traces 20] [--seeds 3]

The real pipeline (veralith.evaluate, OpenAI backend, real SDK) runs against the fake OpenAI
server on 127.0.0.1 whose scripted judge knows the right answer for every item from its text and
returns the items of every reply in a shuffled order: faithfulness items, sufficiency items, and
completeness claims and statuses. Each claim says "Fact k holds" or "Fact k fails"; the judge
calls the first supported and the second unsupported, writes the claim's text into its reasoning,
and reports a log-probability for the label that encodes k (probability 0.5 + k / 200). The
script then checks, for every claim of every trace, that its verdict, reasoning and confidence are
the ones its own text called for, at batch sizes 1, 3 and 6 (one claim per call, several, all).

A positional bug (verdict i given to claim i) would show up as mismatches; the pipeline must match
on the echoed ids. This checks the plumbing, not a model: whether a real model judges each claim
of a batch as it would alone is for calibration on labelled data (PROMPTS.md §5.1).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))

from fake_openai_server import FakeOpenAIServer, Reply, blocks, task_of  # noqa: E402

import veralith  # noqa: E402
from veralith.config import settings  # noqa: E402

_FACT = re.compile(r"Fact (\d+) (holds|fails)")


def _probability(text: str) -> float:
    return 0.5 + int(_FACT.search(text).group(1)) / 200


REORDERED = {"lists": 0, "moved": 0}   # reply lists of 2+ items, and those whose order the shuffle changed


def shuffling_judge(seed: int) -> Any:
    """A responder that judges each item from its own text and shuffles the order of its reply."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def shuffled(items: list[Any]) -> list[Any]:
        with lock:
            before = list(items)
            rng.shuffle(items)
            if len(items) > 1:
                REORDERED["lists"] += 1
                REORDERED["moved"] += items != before
        return items

    def respond(body: dict[str, Any]) -> Any:
        task, b = task_of(body), blocks(body)
        chunk = b["chunk"][0][0]["id"] if "chunk" in b else None
        if task == "faithfulness":
            items = []
            for attrs, text in b["claim"]:
                holds = _FACT.search(text).group(2) == "holds"
                items.append({"claim_id": attrs["id"], "evidence": [], "reasoning": f"judged: {text}",
                              "relation": "supported" if holds else "unsupported",
                              "grounding_chunk_ids": [chunk] if holds else [], "contradicting_chunk_ids": []})
            items = shuffled(items)
            texts = {a["id"]: t for a, t in b["claim"]}
            probs = [{i["relation"]: _probability(texts[i["claim_id"]]),
                      "unsupported" if i["relation"] == "supported" else "supported":
                      1 - _probability(texts[i["claim_id"]])} for i in items]
            return Reply.of({"items": items}, label_probs=probs)
        if task == "sufficiency":
            first = " ".join(b["chunk"][0][1].split()[:8])
            return {"items": shuffled([{"sub_question_id": a["id"], "evidence": [{"chunk_id": chunk, "quote": first}],
                                        "missing_facts": [], "reasoning": f"judged: {t}", "sufficient": "yes",
                                        "supporting_chunk_ids": [chunk]} for a, t in b["subq"]])}
        if task == "completeness":
            sq = [a["id"] for a, _ in b["subq"]]
            return {"claims": shuffled([{"claim_id": a["id"], "role": "answers",
                                         "sub_question_ids": sq[:1]} for a, t in b["claim"]]),
                    "gaps": [],
                    "sub_questions": shuffled([{"sub_question_id": q, "reasoning": "r",
                                                "status": "answered" if n == 0 else "unanswered"}
                                               for n, q in enumerate(sq)])}
        if task == "questions":
            return {"sub_questions": [{"id": "q1", "text": "Which facts hold?"},
                                      {"id": "q2", "text": "Which facts fail?"}]}
        return None   # claims: the fake's own one claim per sentence

    return respond


def trace(n: int, rng: random.Random) -> dict[str, Any]:
    facts = [f"Fact {k} {rng.choice(['holds', 'fails'])}." for k in range(1, rng.randint(4, 12) + 1)]
    return {"query": f"Which facts hold and which fail in case {n}?",
            "context": [f"Case {n} lists facts."], "response": " ".join(facts)}


def run(traces: int, seed: int, batch_size: int) -> tuple[int, int]:
    """(claims checked, mismatches) for one seed and batch size."""
    rng = random.Random(seed)
    server = FakeOpenAIServer().start()
    server.responder = shuffling_judge(seed)
    checked = mismatches = 0
    try:
        with settings.override(backend="openai", base_url=server.base_url, api_key="bench", cache=False,
                               max_retries=0, batch_size=batch_size):
            for n in range(traces):
                row = trace(n, rng)
                result = veralith.evaluate(row["query"], row["context"], row["response"], persist=False)
                assert not result.errors, result.errors
                claims = {c.id: c.text for c in result.claims}
                for judgment in result.faithfulness:
                    text = claims[judgment.claim_id]
                    want = "Y" if "holds" in text else "N"
                    ok = (judgment.verdict.value == want and judgment.reasoning == f"judged: {text}"
                          and judgment.confidence is not None
                          and abs(judgment.confidence - _probability(text)) < 1e-9)
                    checked += 1
                    mismatches += not ok
                assert len(result.faithfulness) == len(claims)
                assert set(result.completeness.mappings["q1"]) == set(claims)
    finally:
        server.stop()
    return checked, mismatches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    print("| batch size | seeds | traces | claims checked | mismatched verdict, reasoning or confidence |")
    print("|---:|---:|---:|---:|---:|")
    total = 0
    for batch_size in (1, 3, 6):
        checked = wrong = 0
        for seed in range(args.seeds):
            c, w = run(args.traces, seed, batch_size)
            checked, wrong = checked + c, wrong + w
        total += wrong
        print(f"| {batch_size} | {args.seeds} | {args.traces} | {checked} | {wrong} |")
    assert total == 0, f"{total} judgments landed on the wrong claim"
    assert REORDERED["moved"] > 0
    print(f"\n{REORDERED['moved']} of {REORDERED['lists']} reply lists with two or more items came back in another "
          "order; every verdict, reasoning and confidence stayed with its claim.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
