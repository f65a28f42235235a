"""The narrowed grammar of a judge call (veralith.llm.grammar, veralith.llm.grammar_items): every reply
it allows passes the task's per-item checks, and the verdict stays open (every label is reachable)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from veralith.llm.client import strict_schema
from veralith.llm.grammar import REASONING_CHARS, bounded
from veralith.llm.grammar_items import COVERED_MAX, QUOTABLE_MAX, quotable
from veralith.llm.tasks import (
    CLAIMS as EXTRACTION,
    COMPLETENESS,
    FAITHFULNESS,
    QUESTIONS,
    SUFFICIENCY,
    ChunkIn,
    ClaimIn,
    ClaimsInput,
    CompletenessInput,
    FaithfulnessInput,
    GapIn,
    QuestionsInput,
    Sentence,
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
        problems = task.problems(payload, output)   # completeness's statuses against roles included
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


def _dicts(node: Any) -> list[Any]:
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


def _quote_dicts(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each chunk id an evidence variant may cite -> the schema of its quote (a $ref resolved)."""
    defs = schema.get("$defs", {})
    found: dict[str, dict[str, Any]] = {}
    for n in _dicts(schema["properties"]):   # what the reply's items use ($defs only through their $refs)
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
    assert "Fact number 59 is stated here." in _quote_dicts(schema)["long"]["enum"]


def test_a_chunk_beyond_the_size_cap_is_quoted_as_free_text():
    from veralith.llm import grammar_items

    huge = ChunkIn(id="huge", text=" ".join(f"Word{'x' * 400}{n}." for n in range(200)))   # 82 kB of quotes
    payload = FaithfulnessInput(query="Reset?", claims=CLAIMS, chunks=[*CHUNKS, huge])
    schema = bounded(FAITHFULNESS, payload, strict_schema(FAITHFULNESS, payload))
    import json

    assert len(json.dumps(schema)) < grammar_items.QUOTES_MAX_CHARS + 20_000
    quotes = _quote_dicts(schema)
    assert "enum" not in quotes["huge"]   # not listed: the verbatim check holds it
    assert re.fullmatch(quotes["huge"]["pattern"], "Word") and not re.fullmatch(quotes["huge"]["pattern"], "a\nb")
    assert "enum" in quotes["kb-12"] and "enum" in quotes["kb-40"]  # the others still listed


@pytest.mark.parametrize("task", [SUFFICIENCY, FAITHFULNESS])
def test_a_blank_chunk_offers_no_quote_and_no_empty_choice(task):
    blank = ChunkIn(id="blank", text="   \n ")
    for chunks in ([blank], [CHUNKS[0], blank]):
        payload = (SufficiencyInput(query="Reset?", sub_questions=SUBS, chunks=chunks) if task is SUFFICIENCY
                   else FaithfulnessInput(query="Reset?", claims=CLAIMS, chunks=chunks))
        schema = bounded(task, payload, strict_schema(task, payload))
        assert not [n for n in _dicts(schema) if n.get("anyOf") == []]
        assert "blank" not in _quote_dicts(schema)
        model = task.output_for(payload)
        for reply in _instances(schema, schema.get("$defs", {})):   # every reply it allows is valid and checked
            output = model.model_validate(reply)
            assert not task.problems(payload, output), reply


SENTENCES = [Sentence(id="S1", text="Open Settings and click Reset password."),
             Sentence(id="S2", text="The link stays valid for 30 minutes."),
             Sentence(id="S3", text="Codes expire after 10 minutes, 3 tries at most.")]
CALLS = [
    (QUESTIONS, QuestionsInput(query="How do I reset my password, and how long is the link valid?")),
    (EXTRACTION, ClaimsInput(query="How do I reset it?", response=" ".join(s.text for s in SENTENCES), sentences=SENTENCES)),
    (SUFFICIENCY, SufficiencyInput(query="Reset?", sub_questions=SUBS, chunks=CHUNKS)),
    (FAITHFULNESS, FaithfulnessInput(query="Reset?", claims=CLAIMS, chunks=CHUNKS)),
    (COMPLETENESS, CompletenessInput(query="Reset?", sub_questions=SUBS, claims=CLAIMS,
                                     gaps=[GapIn(id="g1", text="No word on the app.")])),
]


def _nodes(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node under `node`, with the property path that leads to it."""
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for name, sub in (node.get("properties") or {}).items():
            found += _nodes(sub, f"{path}.{name}")
        for key in ("items", "$defs"):
            if isinstance(node.get(key), dict):
                found += _nodes(node[key], path) if key == "items" else [
                    n for name, d in node[key].items() for n in _nodes(d, name)]
        for key in ("anyOf", "prefixItems"):
            for sub in node.get(key) or []:
                found += _nodes(sub, path)
    return found


@pytest.mark.parametrize(("task", "payload"), CALLS, ids=[t.name for t, _ in CALLS])
def test_free_text_is_one_bounded_line(task, payload):
    schema = bounded(task, payload, strict_schema(task, payload))
    free = [(path, n) for path, n in _nodes(schema) if n.get("type") == "string" and "enum" not in n]
    assert free
    for path, node in free:
        pattern = node.get("pattern")
        assert pattern, f"{path} is unbounded"
        most = int(re.search(r"\{0,(\d+)\}\$$", pattern).group(1))
        assert 16 <= most <= 400, path
        assert re.fullmatch(pattern, "x") and re.fullmatch(pattern, "x" * most), path
        assert not re.fullmatch(pattern, "x" * (most + 1)), path
        assert not re.fullmatch(pattern, "one line\nand another"), path   # no raw newline: it loops there
        if path.endswith("reasoning"):
            assert most == REASONING_CHARS


@pytest.mark.parametrize(("task", "payload"), [CALLS[1], CALLS[3], CALLS[4]], ids=["claims", "faithfulness",
                                                                                   "completeness"])
def test_an_id_list_holds_at_most_as_many_entries_as_there_are_ids(task, payload):
    schema = bounded(task, payload, strict_schema(task, payload))
    lists = [(path, n) for path, n in _nodes(schema) if n.get("type") == "array"
             and isinstance(n.get("items"), dict) and "enum" in n["items"]]
    assert lists
    for path, node in lists:
        assert node.get("maxItems", 99) <= len(node["items"]["enum"]), path


def test_a_claims_digits_come_from_the_query_and_the_sentence_it_cites():
    task, payload = CALLS[1]
    schema = bounded(task, payload, strict_schema(task, payload))
    variants = schema["$defs"]["ExtractedClaim"]["anyOf"]

    def allowed(cited: list[str], text: str) -> bool:
        for variant in variants:
            ids = variant["properties"]["source_sentence_ids"]
            fixed = [p["enum"][0] for p in ids.get("prefixItems", [])]
            if (fixed == cited or not fixed) and re.fullmatch(variant["properties"]["text"]["pattern"], text):
                return True
        return False

    assert allowed(["S2"], "The link stays valid for 30 minutes.")
    assert allowed(["S3"], "Codes expire after 10 minutes.") and allowed(["S3"], "At most 3 tries.")
    assert not allowed(["S2"], "Codes expire after 10 minutes.")   # 10 is S3's, which it does not cite
    assert not allowed(["S1"], "The link stays valid for 30 minutes.")
    assert not allowed(["S2"], "The link stays valid for 45 minutes.")   # in no sentence
    assert allowed(["S1", "S2"], "Open Settings and click Reset password.")   # no digits: any sentences
    # every claim it allows passes the claims task's checks (numbers cited, ids known)
    model = task.output_for(payload)
    for sentence in SENTENCES:
        claim = {"id": "k1", "source_sentence_ids": [sentence.id], "text": sentence.text, "note": ""}
        assert allowed([sentence.id], sentence.text)
        output = model.model_validate({"claims": [claim], "gaps": [], "remarks": [], "asks_clarification": False})
        assert not task.problems(payload, output), sentence


def test_a_completeness_status_is_what_the_roles_before_it_allow():
    payload = CompletenessInput(query="Reset?", sub_questions=SUBS, claims=CLAIMS, gaps=[])
    schema = bounded(COMPLETENESS, payload, strict_schema(COMPLETENESS, payload))
    assert len(schema["anyOf"]) == (len(CLAIMS) + 1) ** len(SUBS)   # per answered set and choice of answerers
    replies = _instances(schema, schema.get("$defs", {}))
    statuses = {tuple(s["status"] for s in r["sub_questions"]) for r in replies}
    assert {("answered", "answered"), ("unanswered", "unanswered"), ("partial", "unanswered"),
            ("unanswered", "answered")} <= statuses   # every status stays reachable
    for reply in replies:
        answered = {q for c in reply["claims"] if c["role"] == "answers" for q in c["sub_question_ids"]}
        assert {s["sub_question_id"] for s in reply["sub_questions"] if s["status"] != "unanswered"} == answered
    # The reply the model wrote on a real server (q1 "answered" with no claim answering it) is not allowed.
    bad = {"claims": [{"claim_id": "k1", "role": "answers", "sub_question_ids": ["q2"]},
                      {"claim_id": "k2", "role": "supports", "sub_question_ids": ["q1"]}],
           "sub_questions": [{"sub_question_id": "q1", "reasoning": "k1", "status": "answered"},
                             {"sub_question_id": "q2", "reasoning": "k2", "status": "answered"}]}
    assert not any(_allows(v, bad, schema.get("$defs", {})) for v in schema["anyOf"])
    assert any(_allows(v, {**bad, "sub_questions": [{**bad["sub_questions"][0], "status": "unanswered"},
                                                    bad["sub_questions"][1]]}, schema.get("$defs", {}))
               for v in schema["anyOf"])


def test_a_completeness_call_with_too_many_variants_keeps_one_shape():
    many = [ClaimIn(id=f"k{n}", text=f"Step {n}.") for n in range(1, 9)]
    payload = CompletenessInput(query="Reset?", sub_questions=SUBS, claims=many, gaps=[])
    assert (len(many) + 1) ** len(SUBS) > COVERED_MAX
    schema = bounded(COMPLETENESS, payload, strict_schema(COMPLETENESS, payload))
    assert "anyOf" not in schema and len(schema["properties"]["claims"]["prefixItems"]) == 8


def _allows(node: dict[str, Any], value: Any, defs: dict[str, Any]) -> bool:
    """Whether `value` fits `node` (the keywords the narrowed schemas use; free strings fit their pattern)."""
    if "$ref" in node:
        return _allows(defs[node["$ref"].rsplit("/", 1)[-1]], value, defs)
    if "anyOf" in node:
        return any(_allows(sub, value, defs) for sub in node["anyOf"])
    if "enum" in node:
        return value in node["enum"]
    if node.get("type") == "object":
        return isinstance(value, dict) and set(value) == set(node["properties"]) and all(
            _allows(node["properties"][k], v, defs) for k, v in value.items())
    if node.get("type") == "array":
        if "prefixItems" in node:
            return len(value) == len(node["prefixItems"]) and all(
                _allows(p, v, defs) for p, v in zip(node["prefixItems"], value, strict=True))
        return node.get("minItems", 0) <= len(value) <= node.get("maxItems", 99) and all(
            _allows(node["items"], v, defs) for v in value)
    if "pattern" in node:
        return re.fullmatch(node["pattern"], value) is not None
    return True


@pytest.mark.parametrize("task", [SUFFICIENCY, FAITHFULNESS])
def test_an_evidence_list_holds_no_more_quotes_than_its_chunks_offer(task):
    short = [ChunkIn(id="a", text="Open Settings."), ChunkIn(id="b", text="Click Reset password.")]
    payload = (SufficiencyInput(query="Reset?", sub_questions=SUBS, chunks=short) if task is SUFFICIENCY
               else FaithfulnessInput(query="Reset?", claims=CLAIMS, chunks=short))
    schema = bounded(task, payload, strict_schema(task, payload))
    lists = [n["properties"]["evidence"] for n in _dicts(schema["properties"])
             if "evidence" in (n.get("properties") or {}) and n["properties"]["evidence"].get("maxItems") != 0]
    assert lists
    for evidence in lists:   # one quote per chunk here: as many as the chunks it may cite
        cited = {v["properties"]["chunk_id"]["enum"][0] for v in evidence["items"]["anyOf"]}
        assert evidence["maxItems"] == len(cited), evidence
