"""A llama.cpp grammar's judged items, one per expected id, each shaped so that its own checks hold.

veralith.llm.grammar bounds a call's schema by its data; this module goes on from there for the
judged item lists (Task.items) of the three judges, so that what a small model writes can fail no
structural check of veralith.llm.checks that belongs to one item:

* the list is a tuple (`prefixItems`): one item per expected id, in the order given, its id fixed.
  No id can be left out, repeated or invented;
* an item is one of a few variants, chosen by the label it is about to write, whose other fields
  are what the label needs (veralith.llm.rules): sufficiency "yes" has evidence and supporting
  chunks and no missing facts, "no" the reverse; faithfulness "supported" has grounding and no
  contradicting chunks, "unsupported" neither, "contradicted" only contradicting, "conflicting" both,
  "stale" grounding and dates, and only "stale" has dates; a completeness role other than "extra"
  names a sub-question, "extra" none. The fields before the label (evidence, dates) are in the
  variants too, so the grammar keeps every variant open until the label is written;
* an evidence item names a chunk and quotes it: its quote is one of that chunk's sentences or
  clauses of at most QUOTE_MAX_WORDS words, written exactly. A quote is then always one span of the
  chunk it cites, as the verbatim check demands; the check still runs. Each chunk's list is written
  once, in `$defs`, and referred to by every item and variant that may cite it; a chunk with more
  than QUOTABLE_MAX of them, or whose list would take the call's lists past QUOTES_MAX_CHARS, is
  quoted as free text (the verbatim check alone holds it), and a chunk with nothing to quote (blank)
  offers no quote at all. An evidence list holds no more quotes than the chunks it may cite offer
  (unbounded when one of them is quoted as free text).
  Where a schema still asks a sufficiency "yes" for its supporting chunks, they are exactly the
  chunks its quotes may come from (one variant per set of chunks, up to TIED_CHUNKS chunks; beyond
  that the set is not tied and the check alone holds it); a "supported", "conflicting" or "stale"
  claim quotes at least one chunk, from which its grounding chunks are derived, and a "conflicting"
  one (up to TIED_CHUNKS chunks) names one contradicting chunk and quotes only the others.

A completeness status follows from the roles written before it: "answered" or "partial" exactly
when some claim has role "answers" for the sub-question. A JSON Schema cannot carry state along a
list, so `covered` writes the reply out once per way it can hold: per set S of answered
sub-questions and per choice of a claim answering each of them, the claims tuple in which those
claims answer them and no claim answers a sub-question outside S (an "answers" claim names a
non-empty subset of S, in the order given), then the statuses S allows. There are (claims + 1) **
sub-questions such variants; a call with more than COVERED_MAX keeps the single reply shape and the
check and re-ask hold the statuses, as before.

What no grammar of this kind can hold stays with the checks and the re-ask: a stale verdict's dates
against each other, a sufficiency "yes" for a sub-question about now against its chunks' dates.

The verdict itself is the model's: each variant is open to it until it writes the label.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from typing import Any, NamedTuple

from pydantic import BaseModel

from veralith.llm.tasks import Task
from veralith.llm.text import QUOTE_MAX_WORDS, sentence_spans

__all__ = ["COVERED_MAX", "QUOTABLE_MAX", "QUOTES_MAX_CHARS", "TIED_CHUNKS", "covered", "quotable", "resolved",
           "tupled"]

QUOTABLE_MAX = 256     # quotes listed per chunk (its sentences and clauses); a chunk with more: free text
QUOTES_MAX_CHARS = 64_000   # the quote lists of one call's schema, as JSON; a chunk past it: free text
TIED_CHUNKS = 4        # 2**4 - 1 = 15 variants of a "yes" item at most
COVERED_MAX = 64       # whole completeness replies written out at most (`covered`)
_CLAUSE = re.compile(r"(?<=[,;:])\s+")
_WORDS = re.compile(r"\S+")

_NONE: dict[str, Any] = {"maxItems": 0}
_SOME: dict[str, Any] = {"minItems": 1}
# (task, list field) -> the label field and, per label, the size each other list field must have.
_VARIANTS: dict[tuple[str, str], tuple[str, dict[str, dict[str, dict[str, Any]]]]] = {
    ("sufficiency", "items"): ("sufficient", {
        "yes": {"evidence": _SOME, "missing_facts": _NONE, "supporting_chunk_ids": _SOME},
        "no": {"evidence": _NONE, "missing_facts": _SOME, "supporting_chunk_ids": _NONE}}),
    ("faithfulness", "items"): ("relation", {
        "supported": {"evidence": _SOME, "dates": _NONE, "grounding_chunk_ids": _SOME,
                      "contradicting_chunk_ids": _NONE},
        "unsupported": {"dates": _NONE, "grounding_chunk_ids": _NONE, "contradicting_chunk_ids": _NONE},
        "contradicted": {"dates": _NONE, "grounding_chunk_ids": _NONE, "contradicting_chunk_ids": _SOME},
        "conflicting": {"evidence": _SOME, "dates": _NONE, "grounding_chunk_ids": _SOME,
                        "contradicting_chunk_ids": _SOME},
        "stale": {"evidence": _SOME, "dates": _SOME, "grounding_chunk_ids": _SOME}}),
    ("completeness", "claims"): ("role", {
        "answers": {"sub_question_ids": _SOME}, "supports": {"sub_question_ids": _SOME},
        "extra": {"sub_question_ids": _NONE}}),
}


def quotable(text: str) -> list[str]:
    """The quotes a grammar offers from `text`: its sentences, then their clauses (split after a comma,
    semicolon or colon), each cut to QUOTE_MAX_WORDS words, without repeats, at most QUOTABLE_MAX.
    Each is one span of `text` up to whitespace (veralith.llm.text.quote_in)."""
    return _spans(text, QUOTABLE_MAX)


def _spans(text: str, most: int) -> list[str]:
    sentences = [text[a:b] for a, b in sentence_spans(text)]
    found: dict[str, None] = {}
    for part in [*sentences, *(c for s in sentences for c in _CLAUSE.split(s))]:
        words = _WORDS.findall(part)
        quote = " ".join(words[:QUOTE_MAX_WORDS]).rstrip(",;:")
        if quote:
            found[quote] = None
            if len(found) >= most:
                break
    return list(found)


class _Quotes(NamedTuple):
    """How a chunk is quoted: the `$ref` to its list and how many quotes it offers, or (None, None) for
    free text (the quote as the bounded schema already has it: one line of bounded length)."""

    node: dict[str, Any] | None
    offers: int | None


def _quote_lists(payload: BaseModel, out: dict[str, Any]) -> dict[str, _Quotes | None] | None:
    """Each chunk's id -> the schema of a quote of it: a `$ref` to its list, written once in `out`'s
    `$defs`, or a free string (more than QUOTABLE_MAX quotes, or past QUOTES_MAX_CHARS); None for a
    blank chunk (nothing to quote). None when the call has no chunks."""
    chunks = [c for c in getattr(payload, "chunks", None) or [] if getattr(c, "id", "")]
    if not chunks:
        return None
    defs = out.setdefault("$defs", {})
    left = QUOTES_MAX_CHARS
    found: dict[str, _Quotes | None] = {}
    for n, chunk in enumerate(chunks):
        quotes = _spans(chunk.text, QUOTABLE_MAX + 1)
        if not quotes:
            found[str(chunk.id)] = None   # blank: nothing to quote, so no evidence cites it
            continue
        size = len(json.dumps(quotes))
        if len(quotes) > QUOTABLE_MAX or size > left:
            found[str(chunk.id)] = _Quotes(None, None)
            continue
        left -= size
        name = f"veralith_quotes_{n}"
        defs[name] = {"type": "string", "enum": quotes}
        found[str(chunk.id)] = _Quotes({"$ref": f"#/$defs/{name}"}, len(quotes))
    return found


def tupled(task: Task, payload: BaseModel, out: dict[str, Any]) -> None:
    """Make each judged item list of the bounded schema `out` a tuple of per-id variants (module doc)."""
    defs = out.get("$defs", {})
    chunks = _quote_lists(payload, out)
    for spec in task.items:
        listed = out["properties"].get(spec.field)
        ids = [str(i) for i in spec.expected(payload)]
        if listed is None or not ids or "items" not in listed:
            continue
        item = _inlined(listed.pop("items"), defs)
        listed["prefixItems"] = [{"anyOf": _variants(task.name, spec.field, item, spec.id_field, i, chunks)}
                                 for i in ids]


def covered(task: Task, payload: BaseModel, out: dict[str, Any]) -> dict[str, Any]:
    """The tupled completeness schema `out` as one variant per set of answered sub-questions and choice
    of the claims answering them (module doc); `out` itself for another task or too many variants."""
    props = out.get("properties", {})
    claims = props.get("claims", {}).get("prefixItems")
    statuses = props.get("sub_questions", {}).get("prefixItems")
    asked = [str(q.id) for q in getattr(payload, "sub_questions", None) or []]
    if task.name != "completeness" or not claims or not statuses or len(statuses) != len(asked):
        return out
    if (len(claims) + 1) ** len(asked) > COVERED_MAX:
        return out
    body = {k: v for k, v in out.items() if k != "$defs"}
    defs: dict[str, Any] = dict(out.get("$defs") or {})
    shared: dict[str, str] = {}

    def ref(shape: dict[str, Any]) -> dict[str, Any]:
        """`shape` as a reference to one definition: the variants repeat their items, the grammar
        holds each once."""
        key = json.dumps(shape, sort_keys=True)
        if key not in shared:
            shared[key] = f"Covered{len(shared) + 1}"
            defs[shared[key]] = shape
        return {"$ref": f"#/$defs/{shared[key]}"}

    variants = []
    for size in range(len(asked) + 1):
        for answered in itertools.combinations(asked, size):
            for answerers in itertools.product(range(len(claims)), repeat=size):
                variant = copy.deepcopy(body)
                variant["properties"]["claims"]["prefixItems"] = [
                    {"anyOf": [ref(r) for r in _roles(item["anyOf"], answered,
                                                      [q for q, at in zip(answered, answerers, strict=True)
                                                       if at == n])]}
                    for n, item in enumerate(claims)]
                items = []
                for item, q in zip(statuses, asked, strict=True):
                    shapes = copy.deepcopy(item["anyOf"])
                    for shape in shapes:
                        shape["properties"]["status"] = {"type": "string", "enum": (
                            ["answered", "partial"] if q in answered else ["unanswered"])}
                    items.append({"anyOf": [ref(shape) for shape in shapes]})
                variant["properties"]["sub_questions"]["prefixItems"] = items
                variants.append(variant)
    return {"$defs": defs, "anyOf": variants}


def _roles(shapes: list[dict[str, Any]], answered: tuple[str, ...], must: list[str]) -> list[dict[str, Any]]:
    """A claim's role variants when the sub-questions `answered` are those answered and it must answer
    those in `must`: an "answers" claim names a non-empty subset of `answered` holding `must`."""
    kept = []
    for shape in shapes:
        role = shape["properties"]["role"].get("enum", [None])[0]
        if role == "answers":
            names = [list(c) for n in range(1, len(answered) + 1) for c in itertools.combinations(answered, n)
                     if set(must) <= set(c)]
            if not names:
                continue
            shape = copy.deepcopy(shape)
            shape["properties"]["sub_question_ids"] = {"anyOf": [
                {"type": "array", "prefixItems": [{"type": "string", "enum": [q]} for q in c]} for c in names]}
        elif must:
            continue
        kept.append(shape)
    return kept


def _variants(task: str, field: str, item: dict[str, Any], id_field: str, item_id: str,
              quotes: dict[str, _Quotes | None] | None) -> list[dict[str, Any]]:
    base = copy.deepcopy(item)
    base["properties"][id_field] = {"type": "string", "enum": [item_id]}
    found = _VARIANTS.get((task, field))
    if found is None:
        return _quoted(base, quotes)
    chunks = quotes or {}
    quotable_chunks: dict[str, _Quotes | None] = {c: q for c, q in chunks.items() if q is not None}
    label, sizes = found
    allowed = base["properties"].get(label, {}).get("enum", [])
    variants: list[dict[str, Any]] = []
    for value in allowed:
        variant = copy.deepcopy(base)
        variant["properties"][label] = {"type": "string", "enum": [value]}
        for name, size in sizes.get(value, {}).items():
            if name in variant["properties"]:
                variant["properties"][name].update(size)
        # Supporting chunks are tied to the quotes only where the schema asks for them (a schema that
        # derives them from the quotes, veralith.llm.schemas, leaves nothing to tie).
        if (task == "sufficiency" and value == "yes" and 0 < len(quotable_chunks) <= TIED_CHUNKS
                and "supporting_chunk_ids" in variant["properties"]):
            variants += _tied(variant, quotable_chunks)
        elif task == "faithfulness" and value == "conflicting" and 1 < len(chunks) <= TIED_CHUNKS:
            variants += _apart(variant, chunks)
        else:
            variants += _quoted(variant, quotes)
    return variants


def _tied(variant: dict[str, Any], chunks: dict[str, _Quotes | None]) -> list[dict[str, Any]]:
    """A "yes" item once per set of chunks: quotes from those chunks only, those chunks as its support."""
    tied = []
    for n in range(1, len(chunks) + 1):
        for chosen in itertools.combinations(chunks, n):
            one = copy.deepcopy(variant)
            one["properties"]["supporting_chunk_ids"] = {
                "type": "array", "prefixItems": [{"type": "string", "enum": [c]} for c in chosen]}
            tied += _quoted(one, {c: chunks[c] for c in chosen})
    return tied


def _apart(variant: dict[str, Any], chunks: dict[str, _Quotes | None]) -> list[dict[str, Any]]:
    """A "conflicting" item once per contradicting chunk: its quotes from the other chunks, so that the
    grounding derived from them (the quoted chunks less the contradicting ones) is never empty."""
    apart = []
    for against in chunks:
        one = copy.deepcopy(variant)
        one["properties"]["contradicting_chunk_ids"] = {
            "type": "array", "prefixItems": [{"type": "string", "enum": [against]}]}
        apart += _quoted(one, {c: q for c, q in chunks.items() if c != against})
    return apart


def _quoted(item: dict[str, Any], quotes: dict[str, _Quotes | None] | None) -> list[dict[str, Any]]:
    """`item` with its evidence quotes drawn from the chunks they cite (module doc): [item], or [] when
    it must quote and no chunk it may cite has anything to quote (no such variant). `quotes` None: the
    call has no chunks, the item stays as it is."""
    evidence = item["properties"].get("evidence")
    if evidence is None or evidence.get("maxItems") == 0 or quotes is None:
        return [item]
    given = {c: q for c, q in quotes.items() if q is not None}
    if not given:   # only blank chunks: no evidence can be given
        if evidence.get("minItems", 0) > 0:
            return []
        evidence["maxItems"] = 0
        return [item]
    free = (evidence.get("items") or {}).get("properties", {}).get("quote", {"type": "string"})
    evidence["items"] = {"anyOf": [
        {"type": "object", "properties": {"chunk_id": {"type": "string", "enum": [c]},
                                          "quote": free if quote.node is None else quote.node},
         "required": ["chunk_id", "quote"], "additionalProperties": False}
        for c, quote in given.items()]}
    counts = [quote.offers for quote in given.values()]
    if None not in counts:   # no more quotes than there are to give
        offered = sum(n for n in counts if n is not None)
        evidence["maxItems"] = min(evidence.get("maxItems", offered), offered)
    return [item]


def _inlined(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A copy of `node` with its `$ref`s to `defs` (one level, and each property's items) written out."""
    node = copy.deepcopy(resolved(node, defs))
    for name, prop in (node.get("properties") or {}).items():
        node["properties"][name] = prop = copy.deepcopy(resolved(prop, defs))
        if isinstance(prop.get("items"), dict):
            prop["items"] = copy.deepcopy(resolved(prop["items"], defs))
    return node


def resolved(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The definition a `$ref` node points to in `defs`, else the node itself."""
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found: dict[str, Any] = defs.get(ref.rsplit("/", 1)[-1], node)
        return found
    return node
