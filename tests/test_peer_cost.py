"""The pure parts of benchmarks/peer_cost.py (which installs the original `veralith` 0.2.7 and so never runs
here): the original's requests are told apart from Veralith's, and answered from the same oracle in the
shape the original's prompts ask for (0-based indices, Y/N, chunk ranks, typed claims)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _benchmark(name: str):
    """benchmarks/NAME.py as a module (its own imports of the other benchmark modules resolved)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="module")
def peer():
    yield from _benchmark("peer_cost")


def _body(system: str, user: str, model: str = "gpt-4o") -> dict:
    # As the original's LLMClient.structured sends it: JSON mode, the shape in the system prompt.
    return {"model": model, "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def test_the_originals_five_calls_get_the_oracle_in_its_own_shape(peer):
    northwind = peer.ORACLES[4]
    context = "\n\n".join(f"[chunk {n}]\n{c['text']}" for n, c in enumerate(northwind["context"]))
    asks = peer.original_answer(northwind, _body("You decompose a user query into ...", f"Query:\n{northwind['query']}",
                                                 "gpt-4o-mini"))
    assert asks == {"sub_questions": northwind["sub_questions"]}
    said = peer.original_answer(northwind, _body("You decompose a generated response into ...",
                                                 f"Response:\n{northwind['response']}", "gpt-4o-mini"))
    assert [c["type"] for c in said["claims"]] == ["answer", "elaboration", "answer", "answer", "elaboration",
                                                   "answer", "elaboration", "elaboration"]
    # Batches of 5 (its default), indices within the batch; the second sub-question is insufficient.
    subq = "\n".join(f"[Q{n}] {q}" for n, q in enumerate(northwind["sub_questions"]))
    suff = peer.original_answer(northwind, _body("You are a Sufficiency judge ...",
                                                 f"Context:\n{context}\n\nSub-questions:\n{subq}"))
    assert [(r["sub_question_idx"], r["verdict"], r["supporting_chunk_ranks"]) for r in suff["results"]] == [
        (0, "Y", [0]), (1, "N", [])]
    second = "\n".join(f"[R{n}] {c['text']}" for n, c in enumerate(said["claims"][5:]))
    faith = peer.original_answer(northwind, _body("You are a Faithfulness judge ...",
                                                  f"Context:\n{context}\n\nClaims:\n{second}"))
    assert [(r["claim_idx"], r["verdict"], r["grounding_chunk_ranks"]) for r in faith["results"]] == [
        (0, "N", []), (1, "Y", [2]), (2, "Y", [4])]
    claims = "\n".join(f"[R{n}] {c['text']}" for n, c in enumerate(said["claims"]))
    comp = peer.original_answer(northwind, _body("You are a Completeness judge ...",
                                                 f"Original query:\n{northwind['query']}\n\nSub-questions:\n{subq}"
                                                 f"\n\nClaims:\n{claims}"))
    assert [a["covers_sub_question_idx"] for a in comp["claim_assignments"]] == [0, 0, 0, 1, 1, 1, 1, 1]


def test_a_refusal_has_no_claims_and_a_contradicted_claim_is_not_grounded(peer):
    refusal, swap = peer.ORACLES[5], peer.ORACLES[2]
    assert peer.original_answer(refusal, _body("You decompose a generated response ...",
                                               f"Response:\n{refusal['response']}")) == {"claims": []}
    faith = peer.original_answer(swap, _body("You are a Faithfulness judge ...",
                                             f"Context:\n[chunk 0]\n{swap['context'][0]}\n\nClaims:\n"
                                             f"[R0] {swap['claims'][0][0]}"))
    assert faith == {"results": [{"claim_idx": 0, "verdict": "N", "reasoning": "c0 says 24 months, not 36.",
                                  "grounding_chunk_ranks": []}]}


def test_each_request_finds_its_trace_and_a_strict_schema_is_veraliths(peer):
    ferry = peer.ORACLES[1]
    original = _body("You are a Sufficiency judge ...", f"Context:\n[chunk 0]\n{ferry['context'][0]}\n\n"
                     f"Sub-questions:\n[Q0] {ferry['sub_questions'][0]}")
    oracle_of = sys.modules["six_traces"].oracle_of   # the shared machinery peer_cost imports
    assert oracle_of(original) is ferry
    assert peer.original_task(original) == "sufficiency"
    assert json.loads(peer.answerer("indented")(ferry, original))["results"][0]["verdict"] == "Y"
    with pytest.raises(ValueError):
        oracle_of(_body("You are a Sufficiency judge ...", "Context:\n[chunk 0]\nnothing of the six"))


@pytest.fixture(scope="module")
def levers():
    yield from _benchmark("cost_levers")


def test_each_cost_lever_rewrites_only_what_it_names(levers):
    """benchmarks/cost_levers.py's rewrites of a judge reply: each lever changes what it says and keeps the
    rest, so a saving it reports is that lever's."""
    reply = {"items": [
        {"claim_id": "k1", "evidence": [{"chunk_id": "c0", "quote": "grew 6 percent"}], "reasoning": "c0 says so.",
         "relation": "supported", "contradicting_chunk_ids": []},
        {"claim_id": "k2", "evidence": [], "reasoning": "Nothing says it.", "relation": "unsupported",
         "contradicting_chunk_ids": []}]}
    short = levers.shorter_keys(reply)
    assert short["items"][0] == {"id": "k1", "evidence": [{"chunk": "c0", "quote": "grew 6 percent"}],
                                 "reasoning": "c0 says so.", "relation": "supported", "against": []}
    lean = levers.no_empty_lists(short)
    assert lean["items"][1] == {"id": "k2", "reasoning": "Nothing says it.", "relation": "unsupported"}
    assert levers.no_empty_lists({"items": []}) == {"items": []}          # the reply's own list stays
    assert levers.quotes_only(lean)["items"][0]["evidence"] == ["grew 6 percent"]
    assert "evidence" not in levers.no_evidence(lean)["items"][0]
    schema = {"type": "object", "properties": {"claim_id": {"type": "string"}, "missing_facts": {"type": "array"}},
              "required": ["claim_id", "missing_facts"], "additionalProperties": False}
    assert levers._schema_keys(schema) == {"type": "object", "properties": {"id": {"type": "string"},
                                           "missing": {"type": "array"}}, "required": ["id", "missing"],
                                           "additionalProperties": False}
