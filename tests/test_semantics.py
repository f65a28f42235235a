"""DESIGN §3-4 semantics with scripted verdicts: coverage roles, partial answers, gap statements,
refusal gate rules, empty inputs, confidence and needs_review."""

from __future__ import annotations

import pytest
from fakes import FakeClient, decomposition, mapping, suff, supported, unsupported

from veralith.models import Coverage, FailureCell, Gate, ResponseKind
from veralith.pipeline.evaluate import evaluate

CTX = ["Acme was founded in 1947 by Ruth Calder in Leeds.", "Acme makes garden tools."]


def run(client: FakeClient, query: str = "Who founded Acme and when?", context=CTX, response: str = "First one. Second one. Third one."):
    return evaluate(query, context, response, persist=False, client=client)


def test_one_claim_answers_two_sub_questions():
    client = decomposition(FakeClient(), ["Who founded Acme?", "When was Acme founded?"],
                           [("Acme was founded by Ruth Calder in 1947.", ["S1"])])
    client.enqueue("sufficiency", {"items": [suff("q1", True), suff("q2", True)]})
    client.enqueue("faithfulness", {"items": [supported("k1")]})
    client.enqueue("completeness", mapping({"k1": ["q1", "q2"]}))
    result = run(client, response="Acme was founded by Ruth Calder in 1947.")
    assert result.failure_cell is FailureCell.complete_grounded and result.passed
    assert result.completeness.mappings == {"q1": ["k1"], "q2": ["k1"]}


def test_a_grounded_caveat_does_not_cover_an_invented_answer():
    # c1 is background (grounded), c2 the answer (invented): the sub-question is not covered.
    client = decomposition(FakeClient(), ["When was Acme founded?"],
                           [("Acme makes garden tools.", ["S1"]), ("Acme was founded in 1952.", ["S2"])])
    client.enqueue("sufficiency", {"items": [suff("q1", True)]})
    client.enqueue("faithfulness", {"items": [supported("k1"), unsupported("k2")]})
    client.enqueue("completeness", mapping({"k1": ["q1"], "k2": ["q1"]}, roles={"k1": "supports"}))
    result = run(client, query="When was Acme founded?", response="Acme makes garden tools. Acme was founded in 1952.")
    assert result.failure_cell is FailureCell.incomplete_ungrounded
    assert result.diagnosis.coverage == {"q1": Coverage.ungrounded_answer}
    assert result.completeness.supports == {"q1": ["k1"]} and result.completeness.extra_claim_ids == []


def test_a_partial_answer_is_not_complete():
    client = decomposition(FakeClient(), ["Who founded Acme?"], [("It depends on the source.", ["S1"])])
    client.enqueue("sufficiency", {"items": [suff("q1", True)]})
    client.enqueue("faithfulness", {"items": [supported("k1")]})
    client.enqueue("completeness", mapping({"k1": ["q1"]}, statuses={"q1": "partial"}))
    result = run(client, query="Who founded Acme?")
    assert result.failure_cell is FailureCell.incomplete_grounded and not result.passed
    assert result.diagnosis.n_partial_sub_questions == 1
    assert result.diagnosis.coverage["q1"] is Coverage.partial


def _partial_refusal(q2_sufficient: bool, c1_grounded: bool = True, extra: bool = False) -> FakeClient:
    claims = [("Acme was founded by Ruth Calder.", ["S1"])] + ([("Leeds has a canal.", ["S3"])] if extra else [])
    client = decomposition(FakeClient(), ["Who founded Acme?", "How many staff does Acme have?"], claims,
                           gaps=[("how many staff Acme has", ["S2"])])
    client.enqueue("sufficiency", {"items": [suff("q1", True), suff("q2", q2_sufficient)]})
    client.enqueue("faithfulness", {"items": [supported("k1") if c1_grounded else unsupported("k1")]
                                    + ([supported("k2")] if extra else [])})
    client.enqueue("completeness", mapping({"k1": ["q1"], **({"k2": []} if extra else {})}, sqs=["q1", "q2"],
                                           gaps={"g1": ["q2"]}))
    return client


@pytest.mark.parametrize("q2_sufficient, grounded, extra, gate, reason", [
    (False, True, False, Gate.pass_, "correct_partial_refusal"),
    (True, True, False, Gate.fail, "unnecessary_refusal"),
    (False, False, False, Gate.fail, "incomplete_ungrounded"),
    (False, True, True, Gate.fail, "refusal_with_extra_claims"),
])
def test_partial_refusal_gate(q2_sufficient, grounded, extra, gate, reason):
    result = run(_partial_refusal(q2_sufficient, grounded, extra), query="Who founded Acme, and how many staff?")
    assert result.response_kind is ResponseKind.partial_refusal and result.refusal
    assert [g.text for g in result.gaps] == ["how many staff Acme has"]
    assert (result.status.quality_gate, result.status.reason) == (gate, reason)
    assert result.diagnosis.coverage["q2"] is Coverage.declined


def test_a_gap_about_something_not_asked_is_not_a_refusal():
    client = decomposition(FakeClient(), ["Who founded Acme?"], [("Ruth Calder founded Acme.", ["S1"])],
                           gaps=[("the weather in Leeds", ["S2"])])
    client.enqueue("sufficiency", {"items": [suff("q1", True)]})
    client.enqueue("faithfulness", {"items": [supported("k1")]})
    client.enqueue("completeness", mapping({"k1": ["q1"]}, gaps={"g1": []}))
    result = run(client, query="Who founded Acme?")
    assert result.response_kind is ResponseKind.answer and not result.refusal
    assert result.failure_cell is FailureCell.complete_grounded and result.passed


def test_empty_query_is_an_input_error_before_any_call():
    client = FakeClient()
    for query in ("", "   \n\t"):
        with pytest.raises(ValueError, match="query"):
            run(client, query=query)
    assert client.history == []


def test_empty_context_is_decided_without_sufficiency_or_faithfulness_calls():
    client = decomposition(FakeClient(), ["Who founded Acme?"], [("Ruth Calder founded Acme.", ["S1"])])
    client.enqueue("completeness", mapping({"k1": ["q1"]}))
    result = run(client, query="Who founded Acme?", context=[])
    assert client.calls("sufficiency") == [] and client.calls("faithfulness") == []
    assert result.failure_cell is FailureCell.incomplete_ungrounded
    assert [j.relation.value for j in result.faithfulness] == ["unsupported"]
    assert result.sufficiency[0].verdict.value == "N" and result.sufficiency[0].confidence == 1.0


def test_an_empty_response_never_passes():
    client = decomposition(FakeClient(), ["Who founded Acme?"], [])
    client.enqueue("sufficiency", {"items": [suff("q1", False)]})
    result = run(client, query="Who founded Acme?", response="")
    assert result.response_kind is ResponseKind.no_factual_content
    assert result.status.reason == "no_assessable_claims" and result.status.quality_gate is Gate.fail


def test_confidence_is_carried_and_a_decisive_low_one_needs_review():
    client = decomposition(FakeClient(), ["Who founded Acme?"],
                           [("Ruth Calder founded Acme.", ["S1"]), ("Acme makes tools.", ["S2"])])
    client.enqueue("sufficiency", {"items": [suff("q1", True)]}, confidence={"q1": 0.9})
    client.enqueue("faithfulness", {"items": [supported("k1"), supported("k2")]}, confidence={"k1": 0.55, "k2": 0.95})
    client.enqueue("completeness", mapping({"k1": ["q1"], "k2": ["q1"]}, roles={"k2": "supports"}))
    result = run(client, query="Who founded Acme?")
    assert [j.confidence for j in result.faithfulness] == [0.55, 0.95]
    assert result.sufficiency[0].confidence == 0.9
    assert result.passed and result.needs_review and result.diagnosis.review_ids == ["k1"]


def test_an_unknown_or_non_decisive_confidence_needs_no_review():
    client = decomposition(FakeClient(), ["Who founded Acme?"],
                           [("Ruth Calder founded Acme.", ["S1"]), ("Acme is on Mars.", ["S2"]), ("It is 9.", ["S3"])])
    client.enqueue("sufficiency", {"items": [suff("q1", True)]})
    # Two ungrounded claims: flipping either alone leaves the trace ungrounded, so neither decides.
    client.enqueue("faithfulness", {"items": [supported("k1"), unsupported("k2"), unsupported("k3")]},
                   confidence={"k2": 0.6, "k3": 0.6})
    client.enqueue("completeness", mapping({"k1": ["q1"], "k2": ["q1"], "k3": ["q1"]},
                                           roles={"c2": "supports", "c3": "supports"}))
    result = run(client, query="Who founded Acme?", response="Ruth Calder founded Acme. Acme is on Mars. It is 9.")
    assert result.failure_cell is FailureCell.complete_ungrounded
    assert result.faithfulness[0].confidence is None and not result.needs_review


def test_as_of_reaches_the_judges_and_a_bad_one_is_an_input_error():
    client = decomposition(FakeClient(), ["What is Acme's latest product?"], [("Acme sells rakes.", ["S1"])])
    client.enqueue("sufficiency", {"items": [suff("q1", True)]})
    client.enqueue("faithfulness", {"items": [supported("k1")]})
    client.enqueue("completeness", mapping({"k1": ["q1"]}))
    result = evaluate("What is Acme's latest product?", CTX, "Acme sells rakes.", persist=False, client=client,
                      metadata={"as_of": "2025-06-30T10:00:00Z"})
    assert result.as_of == "2025-06-30"
    assert client.calls("sufficiency")[0].as_of == "2025-06-30" == client.calls("faithfulness")[0].as_of
    with pytest.raises(ValueError, match="as_of"):
        evaluate("q?", CTX, "r", persist=False, client=FakeClient(), metadata={"as_of": "last Tuesday"})
