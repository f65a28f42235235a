"""The four judge tasks as typed contracts: what goes in, what must come back, and how to check it.

Both backends speak these types. The OpenAI backend renders an input into delimited prompt
messages and parses the reply into the output model (strict JSON Schema); the local backend
computes the same output model with heuristics. `check` returns the problems a reply has beyond
its schema (ids not echoed, ids invented, contradictory fields); a non-empty list is a malformed
reply and the OpenAI backend re-asks once with those problems spelled out.

Output models put evidence and reasoning before the label: structured outputs generate keys in
schema order, and reasoning written before the verdict makes judges more accurate (PROMPTS.md §0).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

__all__ = [
    "COMPLETENESS", "DECOMPOSE", "FAITHFULNESS", "SUFFICIENCY", "TASKS",
    "ChunkIn", "ClaimIn", "CompletenessInput", "CompletenessItem", "CompletenessOutput",
    "DecomposeInput", "DecomposeOutput", "DecomposedClaim", "DecomposedSubQuestion", "Evidence",
    "FaithfulnessInput", "FaithfulnessItem", "FaithfulnessOutput", "Sentence", "SubQuestionIn",
    "SufficiencyInput", "SufficiencyItem", "SufficiencyOutput", "Task",
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Out(BaseModel):
    # Every field required and no extras: the shape OpenAI's strict structured outputs demand.
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- shared input pieces

class Sentence(_In):
    id: str      # "S1", "S2", ... assigned by code, in response order
    text: str


class ChunkIn(_In):
    id: str
    text: str
    source: str | None = None


class SubQuestionIn(_In):
    id: str
    text: str


class ClaimIn(_In):
    id: str
    text: str
    context_note: str | None = None


class Evidence(_Out):
    chunk_id: str
    quote: str


# ---------------------------------------------------------------- decompose

class DecomposeInput(_In):
    query: str
    response: str
    sentences: list[Sentence]


class DecomposedSubQuestion(_Out):
    id: str                      # "q1", "q2", ...
    text: str
    ambiguity_note: str | None


class DecomposedClaim(_Out):
    id: str                      # "c1", "c2", ...
    source_sentence_ids: list[str]
    claim: str
    context_note: str | None
    modality: Literal["asserted", "hedged", "conditional", "attributed_to_source"]


class DecomposeOutput(_Out):
    response_kind: Literal["answer", "partial_refusal", "full_refusal", "clarification_request",
                           "no_factual_content"]
    sub_questions: list[DecomposedSubQuestion]
    claims: list[DecomposedClaim]


# ---------------------------------------------------------------- sufficiency (never sees the response)

class SufficiencyInput(_In):
    query: str
    sub_questions: list[SubQuestionIn]
    chunks: list[ChunkIn]


class SufficiencyItem(_Out):
    sub_question_id: str
    required_facts: list[str]
    evidence: list[Evidence]
    missing_facts: list[str]
    reasoning: str
    sufficient: Literal["yes", "no"]
    supporting_chunk_ids: list[str]


class SufficiencyOutput(_Out):
    items: list[SufficiencyItem]


# ---------------------------------------------------------------- faithfulness

class FaithfulnessInput(_In):
    query: str
    claims: list[ClaimIn]
    chunks: list[ChunkIn]


class FaithfulnessItem(_Out):
    claim_id: str
    evidence: list[Evidence]
    reasoning: str
    relation: Literal["supported", "unsupported", "contradicted", "conflicting"]
    grounding_chunk_ids: list[str]
    contradicting_chunk_ids: list[str]


class FaithfulnessOutput(_Out):
    items: list[FaithfulnessItem]


# ---------------------------------------------------------------- completeness

class CompletenessInput(_In):
    query: str
    sub_questions: list[SubQuestionIn]
    claims: list[ClaimIn]


class CompletenessItem(_Out):
    claim_id: str
    reasoning: str
    sub_question_ids: list[str]   # empty: the claim answers nothing that was asked (an "extra" claim)


class CompletenessOutput(_Out):
    reasoning: str
    items: list[CompletenessItem]


# ---------------------------------------------------------------- checks

_ALPHA = re.compile(r"[^\W\d_]", re.UNICODE)


def _ids_problems(label: str, expected: list[str], got: list[str]) -> list[str]:
    problems = []
    dupes = sorted({i for i in got if got.count(i) > 1})
    if dupes:
        problems.append(f"{label} ids repeated: {dupes}")
    missing = [i for i in expected if i not in got]
    extra = sorted(set(got) - set(expected))
    if missing:
        problems.append(f"no item for {label} ids {missing}; return exactly one item per id")
    if extra:
        problems.append(f"unknown {label} ids {extra}; use only the ids given")
    return problems


def _subset(label: str, got: list[str], allowed: set[str]) -> list[str]:
    unknown = sorted(set(got) - allowed)
    return [f"{label} {unknown} do not exist; use only the ids given"] if unknown else []


def _check_decompose(inp: DecomposeInput, out: DecomposeOutput) -> list[str]:
    problems: list[str] = []
    sentence_ids = {s.id for s in inp.sentences}
    sq_ids = [q.id for q in out.sub_questions]
    if len(set(sq_ids)) != len(sq_ids):
        problems.append("sub-question ids must be unique")
    if inp.query.strip() and not out.sub_questions:
        problems.append("the query is not empty, so list at least one sub-question")
    claim_ids = [c.id for c in out.claims]
    if len(set(claim_ids)) != len(claim_ids):
        problems.append("claim ids must be unique")
    for claim in out.claims:
        problems += _subset(f"claim {claim.id} source_sentence_ids", claim.source_sentence_ids, sentence_ids)
        if not _ALPHA.search(claim.claim):
            problems.append(f"claim {claim.id} has no content; drop it")
    if out.response_kind == "full_refusal" and out.claims:
        problems.append("a full_refusal has no claims; use partial_refusal when the response also states facts")
    return problems


def _check_sufficiency(inp: SufficiencyInput, out: SufficiencyOutput) -> list[str]:
    chunk_ids = {c.id for c in inp.chunks}
    problems = _ids_problems("sub_question", [q.id for q in inp.sub_questions], [i.sub_question_id for i in out.items])
    for item in out.items:
        problems += _subset(f"supporting_chunk_ids of {item.sub_question_id}", item.supporting_chunk_ids, chunk_ids)
        problems += _subset(f"evidence chunk ids of {item.sub_question_id}", [e.chunk_id for e in item.evidence], chunk_ids)
        if item.sufficient == "yes" and not item.supporting_chunk_ids:
            problems.append(f"{item.sub_question_id} is 'yes' but cites no supporting chunk")
    return problems


def _check_faithfulness(inp: FaithfulnessInput, out: FaithfulnessOutput) -> list[str]:
    chunk_ids = {c.id for c in inp.chunks}
    problems = _ids_problems("claim", [c.id for c in inp.claims], [i.claim_id for i in out.items])
    for item in out.items:
        problems += _subset(f"grounding_chunk_ids of {item.claim_id}", item.grounding_chunk_ids, chunk_ids)
        problems += _subset(f"contradicting_chunk_ids of {item.claim_id}", item.contradicting_chunk_ids, chunk_ids)
        problems += _subset(f"evidence chunk ids of {item.claim_id}", [e.chunk_id for e in item.evidence], chunk_ids)
        if item.relation in ("supported", "conflicting") and not item.grounding_chunk_ids:
            problems.append(f"{item.claim_id} is '{item.relation}' but cites no grounding chunk")
        if item.relation in ("contradicted", "conflicting") and not item.contradicting_chunk_ids:
            problems.append(f"{item.claim_id} is '{item.relation}' but cites no contradicting chunk")
    return problems


def _check_completeness(inp: CompletenessInput, out: CompletenessOutput) -> list[str]:
    sq_ids = {q.id for q in inp.sub_questions}
    problems = _ids_problems("claim", [c.id for c in inp.claims], [i.claim_id for i in out.items])
    for item in out.items:
        problems += _subset(f"sub_question_ids of {item.claim_id}", item.sub_question_ids, sq_ids)
    return problems


# ---------------------------------------------------------------- task registry

I = TypeVar("I", bound=BaseModel)
O = TypeVar("O", bound=BaseModel)


@dataclass(frozen=True)
class Task(Generic[I, O]):
    name: str
    input_model: type[I]
    output_model: type[O]
    check: Callable[[I, O], list[str]]


DECOMPOSE = Task("decompose", DecomposeInput, DecomposeOutput, _check_decompose)
SUFFICIENCY = Task("sufficiency", SufficiencyInput, SufficiencyOutput, _check_sufficiency)
FAITHFULNESS = Task("faithfulness", FaithfulnessInput, FaithfulnessOutput, _check_faithfulness)
COMPLETENESS = Task("completeness", CompletenessInput, CompletenessOutput, _check_completeness)
TASKS = {t.name: t for t in (DECOMPOSE, SUFFICIENCY, FAITHFULNESS, COMPLETENESS)}
