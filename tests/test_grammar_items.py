"""The narrowed grammar of a judge call (veralith.llm.grammar, veralith.llm.grammar_items): every reply
it allows passes the task's per-item checks, and the verdict stays open (every label is reachable)."""

from __future__ import annotations

from typing import Any

import pytest

from veralith.llm.client import strict_schema
from veralith.llm.grammar import bounded
from veralith.llm.grammar_items import QUOTABLE_MAX, quotable
from veralith.llm.tasks import (
    COMPLETENESS,
    FAITHFULNESS,
    SUFFICIENCY,
    ChunkIn,
    ClaimIn,
    CompletenessInput,
    FaithfulnessInput,
    GapIn,
    SubQuestionIn,
    SufficiencyInput,
)
from veralith.llm.text import QUOTE_MAX_WORDS, quote_in, word_count

CHUNKS = [ChunkIn(id="kb-12", text="To reset your password, open Settings, choose Security, and click Reset "
                                    "password. We email you a link that stays valid for 30 minutes."),
          ChunkIn(id="kb-40", text="Two-factor authentication can be turned on from the Security page with an "
                                   "authenticator app; it protects the account even when the password leaks.")]
SUBS = [SubQuestionIn(id="q1", text="How do I reset my password?"), SubQuestionIn(id="q2", text="How long is the link valid?")]
CLAIMS = [ClaimIn(id="k1", text="Open Settings."), ClaimIn(id="k2", text="Click Reset password.")]


def _one_at_a_time(parts: list[list[Any]]) -> list[list[Any]]:
    """Each option of each part once, the other parts at their first option."""
    first = [p[0] for p in parts]
    return [first] + [[*first[:n], option, *first[n + 1:]] for n, part in enumerate(parts) for option in part[1:]]


def _instances(node: dict[str, Any], defs: dict[str, Any]) -> list[Any]:
    """Values the schema allows: every anyOf variant and enum value, one field or item varied at a
    time; lists at their least and (for open lists) one item; free strings "x"."""
    if "$ref" in node:
        return _instances(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    if "anyOf" in node:
        return [v for sub in node["anyOf"] for v in _instances(sub, defs)]
    if "enum" in node:
        return list(node["enum"])
    if node.get("type") == "object":
        return [dict(zip(node["properties"], c, strict=True))
                for c in _one_at_a_time([_instances(v, defs) for v in node["properties"].values()])]
    if node.get("type") == "array":
        if "prefixItems" in node:
            return _one_at_a_time([_instances(p, defs) for p in node["prefixItems"]])
        least, most = node.get("minItems", 0), node.get("maxItems", 8)
        options = _instances(node["items"], defs)
        sizes = sorted({least, min(max(least, 1), most)})
        return [[options[n % len(options)] for n in range(size)] for size in sizes for _ in range(1)] + (
            [[o] for o in options[1:4]] if least <= 1 <= most else [])
    if node.get("type") == "boolean":
        return [False]
    return ["x"]


@pytest.mark.parametrize(("task", "payload", "label"), [
    (SUFFICIENCY, SufficiencyInput(query="Reset?", sub_questions=SUBS, chunks=CHUNKS), ("items", "sufficient")),
    (FAITHFULNESS, FaithfulnessInput(query="Reset?", claims=CLAIMS, chunks=CHUNKS), ("items", "relation")),
    (COMPLETENESS, CompletenessInput(query="Reset?", sub_questions=SUBS, claims=CLAIMS,
                                     gaps=[GapIn(id="g1", text="No word on the app.")]), ("claims", "role")),
])
def test_every_reply_the_narrowed_grammar_allows_passes_the_item_checks(task, payload, label):
    schema = bounded(task, payload, strict_schema(task, payload))
    replies = _instances(schema, schema.get("$defs", {}))
    assert replies
    labels = set()
    model = task.output_for(payload)
    for reply in replies:
        output = model.model_validate(reply)
        problems = [p for p in task.problems(payload, output)
                    # across items, which no per-item grammar can hold (the module doc)
                    if p.rule.name not in ("status_needs_answer", "unanswered_has_none")]
        assert not problems, (reply, problems)
        labels |= {item[label[1]] for item in reply[label[0]]}
    enum = strict_schema(task, payload)["$defs"]
    offered = {v for d in enum.values() for v in (d.get("properties", {}).get(label[1], {}).get("enum") or [])}
    assert labels == offered   # the grammar leaves the verdict to the model: every label is reachable


def test_quotes_offered_are_spans_of_their_chunk_within_the_word_bound():
    long = " ".join(f"word{n}" for n in range(40)) + ". Short one, with a clause."
    for text in (CHUNKS[0].text, long):
        offered = quotable(text)
        assert offered and len(offered) <= QUOTABLE_MAX
        assert all(quote_in(q, text) and word_count(q) <= QUOTE_MAX_WORDS for q in offered)
    assert "We email you a link that stays valid for 30 minutes." in quotable(CHUNKS[0].text)


def test_judged_items_are_a_tuple_of_the_expected_ids_in_order():
    payload = FaithfulnessInput(query="Reset?", claims=CLAIMS, chunks=CHUNKS)
    listed = bounded(FAITHFULNESS, payload, strict_schema(FAITHFULNESS, payload))["properties"]["items"]
    assert "items" not in listed
    ids = [{v["properties"]["claim_id"]["enum"][0] for v in p["anyOf"]} for p in listed["prefixItems"]]
    assert ids == [{"k1"}, {"k2"}]


def _nodes(node: Any) -> list[Any]:
    """Every dict in a schema, nested ones included (but those inside a list that must stay empty)."""
    found = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            found.append(n)
            if n.get("maxItems") != 0:
                stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
    return found


def _quote_nodes(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each chunk id an evidence variant may cite -> the schema of its quote (a $ref resolved)."""
    defs = schema.get("$defs", {})
    found: dict[str, dict[str, Any]] = {}
    for n in _nodes(schema["properties"]):   # what the reply's items use ($defs only through their $refs)
        props = n.get("properties") or {}
        if set(props) == {"chunk_id", "quote"} and "enum" in props["chunk_id"]:
            quote = props["quote"]
            if "$ref" in quote:
                quote = defs[quote["$ref"].rsplit("/", 1)[-1]]
            found[props["chunk_id"]["enum"][0]] = quote
    return found


def test_each_chunks_quotes_are_listed_once_and_every_sentence_is_quotable():
    """The quote list of a chunk is in the schema once ($defs), however many claims and variants cite it:
    the schema stays small, and a chunk's later sentences are quotable too (not only its first 24)."""
    import json

    long = ChunkIn(id="long", text=" ".join(f"Fact number {n} is stated here." for n in range(60)))
    claims = [ClaimIn(id=f"k{n}", text=f"Claim {n}.") for n in range(12)]
    payload = FaithfulnessInput(query="Reset?", claims=claims, chunks=[*CHUNKS, long])
    schema = bounded(FAITHFULNESS, payload, strict_schema(FAITHFULNESS, payload))
    text = json.dumps(schema)
    assert text.count(json.dumps("We email you a link that stays valid for 30 minutes.")) == 1
    assert len(text) < 100_000, len(text)   # (151 kB with each list written out per claim and variant)
    assert "Fact number 59 is stated here." in _quote_nodes(schema)["long"]["enum"]


def test_a_chunk_beyond_the_size_cap_is_quoted_as_free_text():
    from veralith.llm import grammar_items

    huge = ChunkIn(id="huge", text=" ".join(f"Word{'x' * 400}{n}." for n in range(200)))   # 82 kB of quotes
    payload = FaithfulnessInput(query="Reset?", claims=CLAIMS, chunks=[*CHUNKS, huge])
    schema = bounded(FAITHFULNESS, payload, strict_schema(FAITHFULNESS, payload))
    import json

    assert len(json.dumps(schema)) < grammar_items.QUOTES_MAX_CHARS + 20_000
    quotes = _quote_nodes(schema)
    assert quotes["huge"] == {"type": "string"}                   # unconstrained: the verbatim check holds it
    assert "enum" in quotes["kb-12"] and "enum" in quotes["kb-40"]  # the others still listed


@pytest.mark.parametrize("task", [SUFFICIENCY, FAITHFULNESS])
def test_a_blank_chunk_offers_no_quote_and_no_empty_choice(task):
    blank = ChunkIn(id="blank", text="   \n ")
    for chunks in ([blank], [CHUNKS[0], blank]):
        payload = (SufficiencyInput(query="Reset?", sub_questions=SUBS, chunks=chunks) if task is SUFFICIENCY
                   else FaithfulnessInput(query="Reset?", claims=CLAIMS, chunks=chunks))
        schema = bounded(task, payload, strict_schema(task, payload))
        assert not [n for n in _nodes(schema) if n.get("anyOf") == []]
        assert "blank" not in _quote_nodes(schema)
        model = task.output_for(payload)
        for reply in _instances(schema, schema.get("$defs", {})):   # every reply it allows is valid and checked
            output = model.model_validate(reply)
            assert not task.problems(payload, output), reply
