"""Issue 41's twelve places where a prompt, its check and the code disagreed, each held to one contract
through the real SDK against the scripted server (tests/fake_openai_server.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fake_openai_server import task_of

from veralith.config import settings
from veralith.llm.client import OpenAIClient
from veralith.llm.tasks import CLAIMS, COMPLETENESS, ClaimIn, ClaimsInput, CompletenessInput, Sentence, SubQuestionIn
from veralith.models import Relation
from veralith.pipeline.evaluate import evaluate

TODAY = {"as_of": "2026-03-31"}                      # the cutoff for now is then 2025-03-31 (365 days)
HARBOUR_Q = "Who is the current harbour master of Port Velloc?"
HARBOUR = "The harbour master of Port Velloc is Idris Carne."


def _openai(server):
    return settings.override(backend="openai", base_url=server.base_url, api_key="sk-test", judge_model="gpt-4o",
                             cache=False, max_retries=0)


def _answers(server, **by_task: Callable[[dict[str, Any]], Any]) -> None:
    """Script some tasks (body -> reply); the others get the server's auto reply."""
    server.responder = lambda body: by_task[task_of(body)](body) if task_of(body) in by_task else None


def _bodies(server, task: str) -> list[dict[str, Any]]:
    return [b for b in server.requests if task_of(b) == task]


def _item(relation: str, dates=(), grounding=("c0",), contradicting=(), claim="k1", quote="Idris Carne") -> dict:
    # The grounding chunks are the ones the evidence quotes (schemas.FaithfulnessItem): none quoted, none grounding.
    quoted = grounding[:1] or [c for c in contradicting if c == "c0"]
    return {"claim_id": claim, "evidence": [{"chunk_id": c, "quote": quote} for c in quoted],
            "dates": list(dates), "reasoning": "r", "relation": relation,
            "contradicting_chunk_ids": list(contradicting)}


def _in_turn(items: list[dict]) -> Callable[[dict], dict]:
    replies = iter(items)
    return lambda body: {"items": [next(replies)]}


# ---------------------------------------------------------------- 1. stale over-calls

def test_1_a_stale_verdict_its_cutoff_does_not_allow_is_asked_again(openai_server):
    recent = {"text": HARBOUR, "metadata": {"date": "2026-02-15"}}   # last month
    dated = {"chunk_id": "c0", "date": "2026-02-15", "quote": ""}
    for query, why in (("Who is the harbour master of Port Velloc?", "has no cutoff, names no time of its own"),
                       (HARBOUR_Q, "is not before its cutoff 2025-03-31")):
        before = len(_bodies(openai_server, "faithfulness"))
        _answers(openai_server, faithfulness=_in_turn([_item("stale", [dated]), _item("supported")]))
        with _openai(openai_server):
            result = evaluate(query, [recent], HARBOUR, persist=False, metadata=TODAY)
        asked = _bodies(openai_server, "faithfulness")[before:]
        assert len(asked) == 2 and why in asked[1]["messages"][-1]["content"]
        assert [j.relation for j in result.faithfulness] == [Relation.supported]


# ---------------------------------------------------------------- 2. "current" belongs to the claim it asks about

ORBIT_Q = "Who founded Orbit and what is its current price?"
ORBIT = {"text": "Orbit was founded by Ana Ruiz. Orbit costs $40 a month.", "metadata": {"date": "2022-05-01"}}


def _orbit(server) -> None:
    _answers(server,
             questions=lambda b: {"sub_questions": [{"id": "q1", "text": "Who founded Orbit?"},
                                                    {"id": "q2", "text": "What is Orbit's current price?"}]},
             claims=lambda b: {"claims": [
                 {"id": "k1", "source_sentence_ids": ["S1"], "text": "Orbit was founded by Ana Ruiz.", "note": ""},
                 {"id": "k2", "source_sentence_ids": ["S2"], "text": "Orbit costs $40 a month.",
                  "note": "current price, as asked"}], "gaps": [], "remarks": [], "asks_clarification": False},
             faithfulness=lambda b: {"items": [
                 _item("supported", claim="k1", quote="Orbit was founded by Ana Ruiz"),
                 _item("supported", claim="k2", quote="Orbit costs $40 a month")]})


def test_2_a_timeless_claim_is_not_stale_because_another_part_of_the_query_asks_about_now(openai_server):
    _orbit(openai_server)
    with _openai(openai_server):
        result = evaluate(ORBIT_Q, [ORBIT], "Orbit was founded by Ana Ruiz. It costs $40 a month.", persist=False,
                          metadata=TODAY)
    relations = {j.claim_id: j.relation for j in result.faithfulness}
    assert relations == {"k1": Relation.supported, "k2": Relation.stale}
    user = _bodies(openai_server, "faithfulness")[0]["messages"][-1]["content"]
    claims = [line for line in user.splitlines() if line.startswith("<claim-")]
    assert 'cutoff="2025-03-31"' not in claims[0] and 'cutoff="2025-03-31"' in claims[1]


# ---------------------------------------------------------------- 3-5. the single call

def _fast(server, query: str, context: list, response: str) -> dict[str, Any]:
    with _openai(server), settings.override(mode="fast"):
        evaluate(query, context, response, persist=False, metadata=TODAY)
    return _bodies(server, "fast")[0]


def test_3_the_single_call_is_shown_the_chunks_dates_and_the_cutoff(openai_server):
    body = _fast(openai_server, HARBOUR_Q, [{"text": HARBOUR, "metadata": {"date": "2018-06-01"}}], HARBOUR)
    user = body["messages"][-1]["content"]
    assert 'date="2018-06-01"' in user and "Today is 2026-03-31." in user and "cutoff 2025-03-31" in user


def test_4_the_single_call_writes_sub_questions_and_sufficiency_before_it_reads_the_response(openai_server):
    body = _fast(openai_server, HARBOUR_Q, [HARBOUR], "It is Idris Carne.")
    fields = list(body["response_format"]["json_schema"]["schema"]["properties"])
    assert fields[:2] == ["sub_questions", "sufficiency"] and fields.index("claims") > 1
    user = body["messages"][-1]["content"]
    order = [user.index(s) for s in ("Part 1", "<question-", "<chunk-", "Part 2", "It is Idris Carne.")]
    assert order == sorted(order)


def test_5_without_chunks_the_single_call_asks_for_no_chunk_lists(openai_server):
    body = _fast(openai_server, HARBOUR_Q, [], HARBOUR)
    fields = set(body["response_format"]["json_schema"]["schema"]["properties"])
    assert "sufficiency" not in fields and "faithfulness" not in fields and "completeness" in fields


# ---------------------------------------------------------------- 6, 7, 11: what a re-ask says

def _client(server) -> OpenAIClient:
    return OpenAIClient(base_url=server.base_url, api_key="sk-test", timeout_s=5.0, max_retries=0)


def test_6_it_depends_is_a_partial_answer_in_the_example_the_rules_and_the_re_ask(openai_server):
    payload = CompletenessInput(query="Is Acme profitable?", sub_questions=[SubQuestionIn(id="q1", text="Is Acme "
                                                                                        "profitable?")],
                                claims=[ClaimIn(id="k1", text="Acme's profit depends on the year.")])

    def reply(role: str) -> dict:
        return {"claims": [{"claim_id": "k1", "role": role, "sub_question_ids": ["q1"]}], "gaps": [],
                "sub_questions": [{"sub_question_id": "q1", "reasoning": "It depends.", "status": "partial"}]}

    openai_server.enqueue(reply("supports"), reply("answers"))
    result = _client(openai_server).run(COMPLETENESS, payload)
    assert result.output.claims[0].role == "answers"
    system, reask = openai_server.requests[0]["messages"][0]["content"], openai_server.requests[1]["messages"][-1]
    assert "It depends, no answer." not in system and "k3 → answers q3" in system
    assert '"it depends" without the asked case: answers, partial' in system
    assert "give the claim that (partly) answers it role 'answers', or make it 'unanswered'" in reask["content"]


def test_7_a_number_from_an_uncited_sentence_is_asked_to_be_cited_and_a_converted_one_to_be_kept(openai_server):
    sentences = [Sentence(id="S1", text="In 2023 revenue rose."), Sentence(id="S2", text="It hit $5 billion.")]
    payload = ClaimsInput(query="How did revenue do?", response="In 2023 revenue rose. It hit $5 billion.",
                          sentences=sentences)

    def claim(text: str, cited: list[str]) -> dict:
        return {"claims": [{"id": "k1", "source_sentence_ids": cited, "text": text, "note": ""}], "gaps": [],
                "remarks": [], "asks_clarification": False}

    openai_server.enqueue(claim("Revenue hit $5 billion in 2023.", ["S2"]), claim("Revenue hit $5 billion in 2023.",
                                                                                 ["S1", "S2"]))
    assert _client(openai_server).run(CLAIMS, payload).output.claims[0].source_sentence_ids == ["S1", "S2"]
    reask = openai_server.requests[1]["messages"][-1]["content"]
    assert "claim k1 has 2023 from S1, which it does not cite; add S1 to its source_sentence_ids" in reask
    assert "copy numbers exactly" not in reask
    warranty = ClaimsInput(query="How long?", response="The warranty lasts 2 years.",
                           sentences=[Sentence(id="S1", text="The warranty lasts 2 years.")])
    openai_server.enqueue(claim("The warranty lasts 24 months.", ["S1"]), claim("The warranty lasts 2 years.", ["S1"]))
    _client(openai_server).run(CLAIMS, warranty)
    assert "never converted" in openai_server.requests[3]["messages"][-1]["content"]


def test_11_a_re_ask_says_only_what_is_wrong_with_an_item_that_was_given(openai_server):
    both = [_item("supported", grounding=(), claim="k1"), _item("supported", claim="k2", quote="Port Velloc")]
    _answers(openai_server, claims=lambda b: {"claims": [
        {"id": f"k{n}", "source_sentence_ids": [f"S{n}"], "text": HARBOUR, "note": ""} for n in (1, 2)],
        "gaps": [], "remarks": [], "asks_clarification": False},
        faithfulness=lambda b: {"items": both if len(_bodies(openai_server, "faithfulness")) == 1 else
                                [_item("supported", claim="k1")]})
    with _openai(openai_server):
        evaluate("Who is the harbour master of Port Velloc?", [HARBOUR], f"{HARBOUR} {HARBOUR}", persist=False)
    reask = _bodies(openai_server, "faithfulness")[1]["messages"][-1]["content"]
    assert "claim k1: k1 is 'supported' but quotes no chunk that states it; quote the chunks that state it" in reask
    assert "no item for" not in reask and "claim k2" not in reask


# ---------------------------------------------------------------- 8. dates as the chunk gives them

def _stale_once(server, chunks: list, dates: list[dict], **item: Any) -> tuple[Any, list[dict]]:
    _answers(server, faithfulness=lambda b: {"items": [_item("stale", dates, **item)]})
    before = len(_bodies(server, "faithfulness"))
    with _openai(server):
        result = evaluate(HARBOUR_Q, chunks, HARBOUR, persist=False, metadata=TODAY)
    return result, _bodies(server, "faithfulness")[before:]


def test_8_a_date_from_the_date_attribute_in_words_or_at_its_precision(openai_server):
    chunk = {"text": HARBOUR, "metadata": {"date": "2022-03-10"}}
    result, asked = _stale_once(openai_server, [chunk], [{"chunk_id": "c0", "date": "2022-03-10", "quote": "2022-03-10"}])
    assert len(asked) == 1 and result.faithfulness[0].relation is Relation.stale   # the attribute's value, quoted
    chunk = {"text": HARBOUR, "metadata": {"date": "2022-03"}}
    result, asked = _stale_once(openai_server, [chunk], [{"chunk_id": "c0", "date": "March 2022", "quote": ""}])
    assert len(asked) == 1 and result.faithfulness[0].dates[0].date == "2022-03"   # words read as the label
    assert [r.kind for r in result.repairs] == ["date_label"]
    older = "In 2022, the harbour master of Port Velloc was Idris Carne."
    newer = {"text": "The harbour master of Port Velloc is Mira Holt.", "metadata": {"date": "2022-11"}}
    result, asked = _stale_once(openai_server, [older, newer], [{"chunk_id": "c0", "date": "2022", "quote": "In 2022"},
                                                               {"chunk_id": "c1", "date": "2022-11", "quote": ""}],
                                contradicting=("c1",))
    assert "2022 is not before 2022-11" in asked[0]["messages"][0]["content"]
    assert "c1 (2022-11) is not wholly after c0 (2022)" in asked[1]["messages"][-1]["content"]


# ---------------------------------------------------------------- 9, 10: one standard of "current"

def test_9_sufficiency_is_shown_the_dates_and_the_cutoff_and_held_to_them(openai_server):
    old = {"text": HARBOUR, "metadata": {"date": "2018-06-01"}}
    with _openai(openai_server):
        evaluate(HARBOUR_Q, [old], HARBOUR, persist=False, metadata=TODAY)
    asked = _bodies(openai_server, "sufficiency")
    user = asked[0]["messages"][-1]["content"]
    assert 'date="2018-06-01"' in user and 'cutoff="2025-03-31"' in user and "Today is 2026-03-31." in user
    # The auto reply says "yes" from the only, old, chunk: asked again, with what a "yes" about now needs.
    assert len(asked) == 2 and "asks about now (cutoff 2025-03-31)" in asked[1]["messages"][-1]["content"]


def test_10_explain_is_shown_the_dates_what_stale_means_and_quotes_only_chunks_or_the_response(openai_server):
    old = {"text": HARBOUR, "metadata": {"date": "2018-06-01"}}
    dated = {"chunk_id": "c0", "date": "2018-06-01", "quote": ""}
    quoted = iter([HARBOUR, "It is Idris Carne."])   # first the claim's text, which the response does not say
    _answers(openai_server, faithfulness=lambda b: {"items": [_item("stale", [dated])]},
             claims=lambda b: {"claims": [{"id": "k1", "source_sentence_ids": ["S1"], "text": HARBOUR, "note": ""}],
                               "gaps": [], "remarks": [], "asks_clarification": False},
             explain=lambda b: {"quotes": [{"source": "response", "chunk_id": "", "quote": next(quoted)}],
                                "missing_fact": "", "what_went_wrong": "k1 is stale.", "change_to_try": "Re-index."})
    with _openai(openai_server), settings.override(explain=True):
        result = evaluate(HARBOUR_Q, [old], "It is Idris Carne.", persist=False, metadata=TODAY)
    asked = _bodies(openai_server, "explain")
    system, user = (m["content"] for m in asked[0]["messages"])
    assert "A stale claim:" in system and "Today is 2026-03-31." in user
    assert 'date="2018-06-01"' in user and 'cutoff="2025-03-31"' in user
    assert "a claim's text is not the response" in asked[1]["messages"][-1]["content"]
    assert result.explanation.quotes[0].text == "It is Idris Carne."


# ---------------------------------------------------------------- 12. no field no code reads

def test_12_replies_hold_only_what_code_reads_and_a_yes_keeps_its_quotes(openai_server):
    with _openai(openai_server):
        result = evaluate("Who is the harbour master of Port Velloc?", [HARBOUR], HARBOUR, persist=False)
    schema = {task_of(b): json.dumps(b["response_format"]["json_schema"]["schema"]) for b in openai_server.requests}
    assert "required_facts" not in schema["sufficiency"]
    roles = json.loads(schema["completeness"])["$defs"]["ClaimRole"]["properties"]
    assert set(roles) == {"claim_id", "role", "sub_question_ids"}
    assert 'Found: c0 "The harbour master of Port Velloc is' in result.sufficiency[0].reasoning
