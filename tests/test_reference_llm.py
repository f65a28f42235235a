"""Reference answers on the LLM path, through the real `openai` SDK against the fake server (issue 42):
every fact gets both verdicts, and a trace without a reference sends byte-identical request bodies."""

from __future__ import annotations

import json

import veralith
from veralith.config import settings

QUERY = "When was Acme founded?"
CHUNKS = ["Acme was founded in 1947 by Ruth Calder."]
RESPONSE = "Acme was founded in 1947."


def _bodies(openai_server) -> list[str]:
    return [json.dumps(body, sort_keys=True) for body in openai_server.requests]


def test_the_reference_rides_the_llm_calls_and_leaves_the_other_bodies_byte_identical(openai_server):
    with settings.override(backend="openai", base_url=openai_server.base_url, api_key="test", cache=False):
        veralith.evaluate(QUERY, CHUNKS, RESPONSE, persist=False)   # what the server does is learnt first
        start = len(openai_server.requests)
        plain = veralith.evaluate(QUERY, CHUNKS, RESPONSE, persist=False)
        before = _bodies(openai_server)[start:]
        judged = veralith.evaluate(QUERY, CHUNKS, RESPONSE, persist=False, reference="Acme was founded in 1947.",
                                   reference_contexts=["c0"])
        after = _bodies(openai_server)[start + len(before):]
    assert plain.reference is None and plain.usage.calls == len(before)
    missing = [b for b in before if b not in after]
    assert not missing, [(json.loads(m)["max_tokens"], [json.loads(a).get("max_tokens") for a in after]) for m in missing]
    assert len(after) == len(before) + 3   # the reference's split, its recall and its correctness calls
    ref = judged.reference
    assert ref.facts and all(f.recall is not None and f.correctness is not None for f in ref.facts)
    assert ref.error is None and ref.expected[0].chunk_id == "c0"
    assert judged.usage.calls == plain.usage.calls + 3 and judged.usage.input_tokens > plain.usage.input_tokens
