"""Reading judge replies leniently (veralith.llm.salvage): only where the meaning is unambiguous."""

from __future__ import annotations

import json

import pytest

from veralith.llm.salvage import Unusable, extract_json, read_items, read_whole, settle
from veralith.llm.tasks import FAITHFULNESS, QUESTIONS, ChunkIn, ClaimIn, FaithfulnessInput, QuestionsInput

CHUNKS = [ChunkIn(id="c0", text="The tower is 330 metres tall.")]
QUOTE = "330 metres tall"
PAYLOAD = FaithfulnessInput(query="How tall?", chunks=CHUNKS,
                            claims=[ClaimIn(id="k1", text="It is 330 m."), ClaimIn(id="k2", text="It is old.")])


def item(cid: str, relation: str = "supported", chunk: str = "c0") -> dict:
    grounded = relation in ("supported", "Supported", "SUPPORTED.")   # its grounding: the chunks it quotes
    return {"claim_id": cid, "evidence": [{"chunk_id": chunk, "quote": QUOTE}] if grounded else [], "reasoning": "r",
            "relation": relation, "contradicting_chunk_ids": []}


def test_json_is_found_in_a_fence_in_prose_and_before_a_cut():
    body = {"items": [item("k1")]}
    assert extract_json(json.dumps(body), {"items"}) == (body, [])
    data, repairs = extract_json("Here you go:\n```json\n" + json.dumps(body) + "\n```\nBye", {"items"})
    assert data == body and repairs[0][0] == "json_in_fence"
    data, repairs = extract_json("The answer is " + json.dumps(body) + " as asked.", {"items"})
    assert data == body and repairs[0][0] == "json_in_prose"
    cut = json.dumps({"items": [item("k1"), item("k2")]})[:-40]
    data, repairs = extract_json(cut, {"items"}, ("items",))
    assert data == {"items": [item("k1")]} and repairs[0][0] == "cut_off_reply"
    assert extract_json("no JSON here {not: json}", {"items"}) == (None, [])
    # a JSON object in the prose that has none of the expected keys is not taken for the reply
    assert extract_json('I think {"mood": "happy"} is fine', {"items"}) == (None, [])


def test_case_and_punctuation_are_repaired_and_recorded_but_not_guesses():
    reply = {"items": [item("K1", "Supported"), item("k2", "SUPPORTED.", chunk="C0")]}
    reading = read_items(FAITHFULNESS, PAYLOAD, json.dumps(reply))
    assert set(reading.items) == {("items", "k1"), ("items", "k2")} and not reading.bad
    assert reading.items[("items", "k2")]["grounding_chunk_ids"] == ["c0"]
    assert sorted(k for k, _ in reading.repairs) == ["enum_value", "enum_value", "id_case", "id_case"]
    reading = read_items(FAITHFULNESS, PAYLOAD, json.dumps({"items": [item("k1", "mostly supported"), item("k2")]}))
    assert set(reading.bad) == {("items", "k1")} and not reading.repairs   # not unambiguous: not repaired


def test_settle_keeps_good_items_and_names_every_bad_one():
    reply = {"items": [item("k1"), item("k2", "unsupported", chunk="c0")]}
    reading = read_items(FAITHFULNESS, PAYLOAD, json.dumps(reply))
    reading.items[("items", "k2")]["contradicting_chunk_ids"] = ["c0"]   # unsupported yet contradicted: inconsistent
    output, bad = settle(FAITHFULNESS, PAYLOAD, reading.items, reading.bad)
    assert [i.claim_id for i in output.items] == ["k1"] and list(bad) == [("items", "k2")]
    assert "lists contradicting chunks" in bad[("items", "k2")][0]
    output, bad = settle(FAITHFULNESS, PAYLOAD, {("items", "k1"): reading.items[("items", "k1")]}, {})
    assert bad == {("items", "k2"): ["no item for claim k2; give one"]}


def test_extraction_replies_are_read_whole():
    payload = QuestionsInput(query="Why?")
    output, repairs = read_whole(QUESTIONS, payload, '```json\n{"sub_questions": [{"id": "q1", "text": "Why?"}]}\n```')
    assert output.sub_questions[0].id == "q1" and repairs[0][0] == "json_in_fence"
    with pytest.raises(Unusable):
        read_whole(QUESTIONS, payload, '{"sub_questions": []}')   # the query is not empty


def test_chunk_ids_a_reply_writes_though_not_asked_are_not_taken():
    # The grounding chunks are the ones the quotes cite (schemas.DERIVED): a JSON-mode reply that lists one
    # without quoting it has grounded nothing, and is re-asked as one that quotes nothing.
    reply = {"items": [{**item("k1"), "evidence": [], "grounding_chunk_ids": ["c0"]}, item("k2", "unsupported")]}
    reading = read_items(FAITHFULNESS, PAYLOAD, json.dumps(reply))
    output, bad = settle(FAITHFULNESS, PAYLOAD, reading.items, reading.bad)
    assert [i.claim_id for i in output.items] == ["k2"] and "quotes no chunk that states it" in bad[("items", "k1")][0]


def test_an_item_given_twice_verbatim_is_a_duplicate_not_a_contradiction():
    """The derived chunk lists (schemas.DERIVED) are set on the kept item when it is validated; the
    copy is compared in the same validated form, so an exact duplicate is kept once, not made bad."""
    for first in (item("k1"), {**item("k1"), "grounding_chunk_ids": ["c0"]}):   # as the schema asked, or echoed
        reply = {"items": [first, first, item("k2", "unsupported")]}
        reading = read_items(FAITHFULNESS, PAYLOAD, json.dumps(reply))
        assert set(reading.items) == {("items", "k1"), ("items", "k2")} and not reading.bad, reading.bad
        assert [k for k, _ in reading.repairs] == ["duplicate_item"]
        assert reading.items[("items", "k1")]["grounding_chunk_ids"] == ["c0"]
    # an item that fails validation, given twice verbatim: bad for what is wrong with it, not for the repeat
    broken = {**item("k1"), "relation": "mostly supported"}
    reading = read_items(FAITHFULNESS, PAYLOAD, json.dumps({"items": [broken, broken, item("k2")]}))
    assert list(reading.bad) == [("items", "k1")]
    assert not any("twice" in p for p in reading.bad[("items", "k1")]), reading.bad
    # two different items for one id stay a contradiction
    reading = read_items(FAITHFULNESS, PAYLOAD, json.dumps({"items": [item("k1"), item("k1", "unsupported"),
                                                                      item("k2")]}))
    assert reading.bad == {("items", "k1"): ["it was given twice, differently; give it once"]}
