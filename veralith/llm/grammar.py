"""The schema a llama.cpp grammar is given for one call: the task's strict schema, bounded by the
call's own data.

A server that constrains decoding with the schema (veralith.llm.server.CONSTRAINED) can only write
what the schema allows. The task's schema allows any id, any number of items and strings of any
length, so a small model can still run on until `max_tokens`: items for ids nobody asked about, a
reasoning string that never closes. For a llama.cpp-based server on this machine (llama-server,
llama-cpp-python's server: veralith.llm.transport decides) the schema sent is narrowed to this call:

* each judged item list (Task.items) holds exactly one item per expected id, in order, its id fixed,
  each item one of the variants its label allows, its quotes spans of the chunk it cites
  (veralith.llm.grammar_items);
* a field that names chunks, sub-questions or sentences (`chunk_id`, `*_chunk_ids`, `sub_question_ids`,
  `source_sentence_ids`) takes only the ids the call's data holds;
* the extraction lists (sub-questions, claims, gaps, remarks) hold at most as many items as the
  call's text can need (one more than the clauses the estimate counts in the query or the response,
  veralith.llm.estimate.claim_count; gaps and remarks at most one per sentence), at least one
  sub-question for a query with words, their ids in the prompt's numbering (q1, k1, g1, r1, ...);
* a claim, gap or remark cites at least one sentence of a response that has any;
* a claim's text holds no digits but the digit runs of the query and of the sentence it cites (a
  claim's numbers come from its sentences or the query: the claims task's own check): one variant
  of the claim per sentence with digit runs the query lacks, citing that sentence alone, and one
  citing any sentences whose text has the query's digits only;
* a list of ids holds at most as many entries as there are ids to name; every other list holds at
  most MAX_ITEMS entries (other top-level lists MAX_EXTRACTED);
* free text (reasoning, missing facts, the extracted texts, notes, dates, the explanation's fields)
  is one line, no raw newline, tab, quote or backslash, of at most a bound derived from what the
  prompt asks of it (`text_chars`: a reasoning of at most 20 words gets REASONING_CHARS characters;
  an extracted text the longest sentence it may restate plus TEXT_SLACK). A small base model
  otherwise runs on in a free-text field until `max_tokens` (a loop of the same words, or of blank
  lines), the main cause of its malformed replies on a CPU. The bound is a pattern quantifier
  `{0,N}`: llama.cpp's json-schema-to-grammar (llama-cpp-python's port included) reads `maxLength`
  only on a string without a pattern. It is spelled out as one optional group per character, which
  makes the grammar longer, not the sampling slower.

The reply still goes through the same reading and checks; the cache key and the prompt use the
task's schema, so a reply means the same whichever server wrote it. Other servers get the task's
schema as it is: OpenAI's strict mode documents fewer keywords, and what another grammar engine
makes of them is not checked here.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from veralith.llm.estimate import claim_count
from veralith.llm.grammar_items import covered, resolved, tupled
from veralith.llm.tasks import Task

__all__ = ["MAX_EXTRACTED", "MAX_ITEMS", "NO_DIGITS", "REASONING_CHARS", "TEXT_MAX", "TEXT_SLACK", "bounded",
           "line_of", "numbers_only_from", "text_chars"]

MAX_ITEMS = 8          # evidence, facts, chunk ids per item
MAX_EXTRACTED = 32     # claims, gaps, remarks, sub-questions of one trace
# JSON string content: any character but a digit, a quote, a backslash or a control character (the
# grammar writes characters as they are, so none of these could be escaped) ...
_PLAIN = '[^0-9"\\\\\\n\\r\\t]'
NO_DIGITS = f"^{_PLAIN}*$"
# ... and the same with digits: one line of free text.
_LINE = _PLAIN.replace("0-9", "")

# Free text's length in characters (module doc), from what the prompt asks of each field.
REASONING_CHARS = 200   # "one sentence of at most 20 words" (veralith.llm.prompts), ten characters a word
TEXT_SLACK = 80         # an extracted text: the longest text it may restate, plus the words that resolve it
TEXT_MAX = 400          # ... but no more than this
TEXT_FLOOR = 120        # ... and no less
_CHARS = {"reasoning": REASONING_CHARS, "missing_facts": 200, "note": 160, "date": 16, "quote": 250,
          "missing_fact": 200, "what_went_wrong": 400, "change_to_try": 300}
_OTHER_CHARS = 300


def text_chars(name: str, payload: BaseModel) -> int:
    """The most characters free-text field `name` may hold in a call about `payload` (module doc)."""
    if name != "text":
        return _CHARS.get(name, _OTHER_CHARS)
    restated = _sentences(payload) or [str(getattr(payload, "query", ""))]
    return min(TEXT_MAX, max(TEXT_FLOOR, max(len(t) for t in restated) + TEXT_SLACK))


def line_of(most: int) -> str:
    """A pattern for one line of free text (no quote, backslash or control character) of at most `most`
    characters."""
    return f"^{_LINE}{{0,{most}}}$"


def numbers_only_from(text: str, most: int | None = None) -> str:
    """A pattern for JSON string content whose digits come only as the digit runs of `text` (llama.cpp's
    pattern grammar: capturing groups only), of at most `most` characters and digit runs when given."""
    runs = sorted(set(re.findall(r"[0-9]+", text)), key=lambda r: (-len(r), r))
    times = "*" if most is None else f"{{0,{most}}}"
    if not runs:
        return f"^{_PLAIN}{times}$"
    return f"^({'|'.join([_PLAIN, *runs])}){times}$"


# Which ids a field may hold, by the end of its name: (suffix, the payload attribute listing them).
_ID_FIELDS = (("chunk_id", "chunks"), ("chunk_ids", "chunks"), ("sub_question_ids", "sub_questions"),
              ("sentence_ids", "sentences"))


def bounded(task: Task, payload: BaseModel, schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of `schema` bounded by `payload` (see the module doc)."""
    out = copy.deepcopy(schema)
    defs = out.get("$defs", {})
    for spec in task.items:
        ids = [str(i) for i in spec.expected(payload)]
        listed = out["properties"].get(spec.field)
        if listed is None:
            continue
        listed["minItems"] = listed["maxItems"] = len(ids)
        item = resolved(listed.get("items", {}), defs)
        if ids and spec.id_field in item.get("properties", {}):
            item["properties"][spec.id_field] = {"type": "string", "enum": ids}
    judged = {spec.field for spec in task.items}
    for name, prop in out["properties"].items():
        if prop.get("type") == "array" and name not in judged:
            prop["maxItems"] = MAX_EXTRACTED
            extracted = _EXTRACTED.get((task.name, name))
            if extracted is not None:
                prefix, most, least = extracted
                prop["maxItems"] = min(MAX_EXTRACTED, max(most(payload), least(payload)))
                prop["minItems"] = min(least(payload), prop["maxItems"])
                item = resolved(prop.get("items", {}), defs)
                if "id" in item.get("properties", {}):
                    item["properties"]["id"] = {"type": "string",
                                                "enum": [f"{prefix}{n}" for n in range(1, prop["maxItems"] + 1)]}
    if task.name == "claims":
        if _sentences(payload):   # every claim, gap and remark cites a sentence (the claims task's check)
            for name in ("ExtractedClaim", "ExtractedGap", "ExtractedRemark"):
                cited = defs.get(name, {}).get("properties", {}).get("source_sentence_ids")
                if cited is not None:
                    cited["minItems"] = 1
        claim = defs.get("ExtractedClaim", {}).get("properties", {})
        if claim.get("text", {}).get("type") == "string":   # the query's digits only; the sentences' below
            query = str(getattr(payload, "query", ""))
            claim["text"] = {"type": "string", "pattern": numbers_only_from(query, text_chars("text", payload))}
    seen: set[int] = set()
    blank = task.name == "explain"   # its quotes of the response name no chunk ("")
    for node in [out, *defs.values()]:
        _limit(node, payload, seen, blank)
    if task.name == "claims" and "pattern" in defs.get("ExtractedClaim", {}).get("properties", {}).get("text", {}):
        _claims_per_sentence(defs, payload)
    tupled(task, payload, out)   # the judged lists: one item per id, each shaped by its label
    return covered(task, payload, out)   # completeness: the statuses its roles allow


def _sentences(payload: Any) -> list[str]:
    return [s.text for s in getattr(payload, "sentences", None) or []]


def _claims_per_sentence(defs: dict[str, Any], payload: Any) -> None:
    """An extracted claim's digits from the query and the sentence it cites (module doc): a variant per
    sentence with digit runs the query lacks, citing it alone; the claim as bounded so far cites any."""
    query = str(getattr(payload, "query", ""))
    asked = set(re.findall(r"[0-9]+", query))
    most = text_chars("text", payload)
    generic = defs["ExtractedClaim"]
    variants = [generic]
    for sentence in getattr(payload, "sentences", None) or []:
        if not set(re.findall(r"[0-9]+", sentence.text)) - asked:
            continue
        variant = copy.deepcopy(generic)
        variant["properties"]["source_sentence_ids"] = {
            "type": "array", "prefixItems": [{"type": "string", "enum": [str(sentence.id)]}]}
        variant["properties"]["text"] = {"type": "string",
                                         "pattern": numbers_only_from(f"{query} {sentence.text}", most)}
        variants.append(variant)
    if len(variants) > 1:
        defs["ExtractedClaim"] = {"anyOf": variants}


# (task, list) -> (id prefix, the most items the call's data can need, the fewest it must have)
_EXTRACTED: dict[tuple[str, str], tuple[str, Callable[[Any], int], Callable[[Any], int]]] = {
    ("questions", "sub_questions"): ("q", lambda p: claim_count(p.query) + 1,
                                     lambda p: 1 if any(c.isalpha() for c in p.query) else 0),
    ("claims", "claims"): ("k", lambda p: claim_count(" ".join(_sentences(p))) + 1, lambda p: 0),
    ("claims", "gaps"): ("g", lambda p: len(_sentences(p)), lambda p: 0),
    ("claims", "remarks"): ("r", lambda p: len(_sentences(p)), lambda p: 0),
}


def _limit(node: dict[str, Any], payload: BaseModel, seen: set[int], blank: bool) -> None:
    """Bound the properties of an object schema `node` (each object once)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    for name, prop in (node.get("properties") or {}).items():
        ids = _ids_for(name, payload)
        if prop.get("type") == "array":
            prop.setdefault("maxItems", MAX_ITEMS)
            items = prop.get("items", {})
            if ids and items.get("type") == "string" and "enum" not in items:
                items["enum"] = ids
                prop["maxItems"] = min(prop["maxItems"], len(ids))   # each id at most once
            elif _free(items):
                node["properties"][name]["items"] = {"type": "string", "pattern": line_of(text_chars(name, payload))}
        elif ids and prop.get("type") == "string" and "enum" not in prop:
            prop["enum"] = [*ids, ""] if blank else ids
        elif _free(prop):
            node["properties"][name] = {"type": "string", "pattern": line_of(text_chars(name, payload))}


def _free(node: Any) -> bool:
    """A free-text string: no enum, no pattern, no bound yet."""
    return isinstance(node, dict) and node.get("type") == "string" and not (
        {"enum", "pattern", "const", "maxLength", "format"} & node.keys())


def _ids_for(name: str, payload: BaseModel) -> list[str]:
    for suffix, attribute in _ID_FIELDS:
        if name.endswith(suffix):
            return [str(getattr(x, "id", "")) for x in getattr(payload, attribute, None) or []
                    if getattr(x, "id", "")]
    return []
