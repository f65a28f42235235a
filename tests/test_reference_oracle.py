"""Reference answers with a perfect judge (a scripted oracle): the correctness layer and its first cause
match hand labels on traces built for it, and the reference rides the calls' rounds (issue 42)."""

from __future__ import annotations

import re

import pytest
from fakes import FakeClient

from veralith.config import settings
from veralith.llm.calls import run_calls
from veralith.models import ThresholdSource
from veralith.pipeline.evaluate import _pipeline, evaluate_checked
from veralith.pipeline.inputs import normalize_context
from veralith.pipeline.reference_inputs import check_reference

FOUNDED_47 = "Acme was founded in 1947."
FOUNDED_52 = "Acme was founded in 1952."
BY_CALDER = "Ruth Calder founded Acme."
GAP = "The documents don't say when Acme was founded."

# What a perfect judge knows: (statement, source text) -> relation; anything else is unsupported.
TRUTH = {
    (FOUNDED_52, FOUNDED_52): "supported", (FOUNDED_47, FOUNDED_47): "supported",
    (FOUNDED_47, FOUNDED_52): "contradicted", (FOUNDED_52, FOUNDED_47): "contradicted",
    (BY_CALDER, "Acme was founded in 1947 by Ruth Calder."): "supported",
    (FOUNDED_47, "Acme was founded in 1947 by Ruth Calder."): "supported",
    (BY_CALDER, BY_CALDER): "supported",
}

# (name, query, chunks, response, reference) -> hand labels (correctness, first cause)
TRACES = [
    ("faithful to the wrong chunk", "When was Acme founded?", [FOUNDED_52], FOUNDED_52, FOUNDED_47,
     ("incorrect", "never_retrieved")),
    ("a fact never retrieved", "When was Acme founded?", ["Acme makes anvils."], GAP, FOUNDED_47,
     ("incorrect", "never_retrieved")),
    ("retrieved but unused", "Who founded Acme and when?", ["Acme was founded in 1947 by Ruth Calder."], BY_CALDER,
     f"{BY_CALDER} {FOUNDED_47}", ("partly_correct", "retrieved_unused")),
    ("a wrong number", "When was Acme founded?", [FOUNDED_47], FOUNDED_52, FOUNDED_47,
     ("incorrect", "stated_wrongly")),
    ("correct", "When was Acme founded?", [FOUNDED_47], FOUNDED_47, FOUNDED_47, ("correct", None)),
]


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=\.)\s+", text.strip()) if s]


def oracle() -> FakeClient:
    client = FakeClient()
    client.respond("questions", lambda p: {"sub_questions": [{"id": "q1", "text": p.query}]})

    def claims(p):
        found = [{"id": f"x{i}", "source_sentence_ids": [s.id], "text": s.text, "note": ""}
                 for i, s in enumerate(p.sentences, 1) if s.text != GAP]
        gaps = [{"id": "g1", "source_sentence_ids": [s.id], "text": s.text} for s in p.sentences if s.text == GAP]
        return {"claims": found, "gaps": gaps, "asks_clarification": False}

    def faithfulness(p):
        items = []
        for c in p.claims:
            found = {ch.id: TRUTH.get((c.text, ch.text), "unsupported") for ch in p.chunks}
            relation = ("supported" if "supported" in found.values() else
                        "contradicted" if "contradicted" in found.values() else "unsupported")
            items.append({"claim_id": c.id, "evidence": [], "reasoning": "oracle", "relation": relation,
                          "grounding_chunk_ids": [i for i, r in found.items() if r == "supported"],
                          "contradicting_chunk_ids": [i for i, r in found.items() if r == "contradicted"]
                          if relation == "contradicted" else []})
        return {"items": items}

    client.respond("claims", claims)
    client.respond("faithfulness", faithfulness)
    client.respond("sufficiency", lambda p: {"items": [
        {"sub_question_id": q.id, "evidence": [], "missing_facts": [], "reasoning": "oracle", "sufficient": "yes",
         "supporting_chunk_ids": [p.chunks[0].id]} for q in p.sub_questions]})
    client.respond("completeness", lambda p: {
        "claims": [{"claim_id": c.id, "role": "answers", "sub_question_ids": ["q1"]} for c in p.claims],
        "gaps": [{"gap_id": g.id, "sub_question_ids": ["q1"]} for g in p.gaps],
        "sub_questions": [{"sub_question_id": "q1", "reasoning": "oracle",
                           "status": "answered" if p.claims else "unanswered"}]})
    return client


@pytest.mark.parametrize("name,query,chunks,response,reference,labels", TRACES, ids=[t[0] for t in TRACES])
def test_correctness_matches_hand_labels_with_a_perfect_judge(name, query, chunks, response, reference, labels):
    result = evaluate_checked(query, normalize_context(chunks), response, store=None, client=oracle(),
                              reference=check_reference(reference))
    ref = result.reference
    assert (ref.correctness.value, ref.cause) == labels, name
    assert all(f.recall is not None and f.correctness is not None for f in ref.facts)   # two verdicts per fact
    if name == "faithful to the wrong chunk":   # the cells stay reference-free; the gate does not pass
        assert result.failure_cell.value == "complete_grounded" and not result.passed
        assert ref.contradicted_claim_ids == ["k1"]


def _rounds(client: FakeClient, reference) -> int:
    steps = _pipeline(client, "When was Acme founded?", normalize_context([FOUNDED_52]), FOUNDED_52,
                      threshold=1.0, threshold_source=ThresholdSource.fallback, knowledge_base="default",
                      metadata=None, trace_id=None, as_of="2026-01-01", reference=reference)
    rounds = 0
    try:
        batch = next(steps)
        while True:
            rounds += 1
            batch = steps.send(run_calls(client, batch))
    except StopIteration:
        return rounds


def test_a_reference_makes_no_more_round_trips_and_leaves_the_other_requests_as_they_were():
    plain, with_ref = oracle(), oracle()
    assert _rounds(plain, None) == _rounds(with_ref, check_reference(FOUNDED_47, ["c0"])) == 2
    # Every request of the trace without a reference is sent, unchanged, with one.
    sent = [(task, payload.model_dump_json()) for task, payload in with_ref.history]
    for request in ((task, payload.model_dump_json()) for task, payload in plain.history):
        assert request in sent
    extra = [task for task in sent if task not in [(t, p.model_dump_json()) for t, p in plain.history]]
    assert [task for task, _ in extra] == ["claims", "faithfulness", "faithfulness"]


def test_the_single_call_mode_assesses_the_reference_too():
    from fast_oracle import fast_reply

    client = oracle()
    client.respond("fast", lambda payload: fast_reply(client, payload))
    with settings.override(mode="fast"):
        result = evaluate_checked("When was Acme founded?", normalize_context([FOUNDED_47]), FOUNDED_52, store=None,
                                  client=client, reference=check_reference(FOUNDED_47))
    assert result.mode == "fast"
    assert (result.reference.correctness.value, result.reference.cause) == ("incorrect", "stated_wrongly")
