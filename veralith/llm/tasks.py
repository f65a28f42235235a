"""The judge tasks as typed contracts: what goes in, what must come back, and how to check it.

`explain` (for --explain) runs only for a failing trace, after the five judges.

Both backends speak these types. The OpenAI backend renders an input into delimited prompt
messages and parses the reply into the output model (strict JSON Schema); the local backend
computes the same output model with heuristics. `check` returns the problems a reply has beyond
its schema (ids not echoed or invented, a label that contradicts its own fields, a quote that is
not in the chunk it cites); each problem names the item it belongs to, so the OpenAI backend keeps
the good items of a judge's reply and re-asks only the bad ones, once, with their problems spelled
out. The extraction tasks (questions, claims) have no such items and are re-asked whole.

Decomposition is two tasks that run at once: `questions` reads only the query (so the response
can neither narrow nor multiply what was asked, and the reply is cacheable per query), `claims`
reads the response. Gap statements ("the documents don't say...") are their own items, never
claims; which sub-questions they decline is decided by `completeness`, and the response kind is
derived in code from claims and linked gaps (veralith/pipeline/classify.py).

Output models put evidence and reasoning before the label: structured outputs generate keys in
schema order, and reasoning written before the verdict makes judges more accurate (PROMPTS.md §0).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from veralith.llm.stale_check import stale_problems
from veralith.llm.text import quote_in

__all__ = [
    "CLAIMS", "COMPLETENESS", "DECOMPOSITION", "EXPLAIN", "FAITHFULNESS", "FAST", "QUESTIONS", "QUOTE_NOT_FOUND",
    "SUFFICIENCY", "TASKS", "ChunkIn", "ClaimIn", "ClaimRole", "ClaimsInput", "ClaimsOutput", "CompletenessInput",
    "CompletenessOutput", "DateEvidence", "Evidence", "ExplainInput", "ExplainOutput", "ExplainQuote",
    "ExtractedClaim", "ExtractedGap", "ExtractedRemark", "FaithfulnessInput", "FaithfulnessItem",
    "FaithfulnessOutput", "FastInput", "FastOutput", "GapIn", "GapLink", "ItemList", "JudgedClaimIn",
    "JudgedSubQuestionIn", "Problem", "QuestionItem", "QuestionsInput", "QuestionsOutput", "Sentence",
    "SubQuestionIn", "SubQuestionStatus", "SufficiencyInput", "SufficiencyItem", "SufficiencyOutput", "Task",
    "model_for", "quote_in",
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
    date: str | None = None      # from its metadata, an ISO label (veralith.llm.dates); faithfulness shows it


class SubQuestionIn(_In):
    id: str
    text: str


class ClaimIn(_In):
    id: str
    text: str
    context_note: str | None = None   # words from the query or response that interpret the claim; not evidence


class GapIn(_In):
    id: str
    text: str


class Evidence(_Out):
    chunk_id: str
    quote: str


class DateEvidence(_Out):
    chunk_id: str
    date: str                    # ISO at its precision: 2019, 2019-Q3, 2019-03, 2019-03-14
    quote: str                   # the chunk's words that give the date; "" when its date attribute gives it


# ---------------------------------------------------------------- questions (never sees the response)

class QuestionsInput(_In):
    query: str


class QuestionItem(_Out):
    id: str                      # "q1", "q2", ...
    text: str


class QuestionsOutput(_Out):
    sub_questions: list[QuestionItem]


# ---------------------------------------------------------------- claims (the response)

class ClaimsInput(_In):
    query: str                   # for resolving references only
    response: str
    sentences: list[Sentence]


class ExtractedClaim(_Out):
    id: str                      # the model's own; the pipeline renumbers claims k1, k2, ...
    source_sentence_ids: list[str]
    text: str
    note: str                    # "" or words needed to interpret it, incl. a source the response names


class ExtractedGap(_Out):
    id: str                      # "g1", "g2", ...
    source_sentence_ids: list[str]
    text: str                    # what the response says the documents do not give


class ExtractedRemark(_Out):
    id: str                      # "r1", "r2", ...
    source_sentence_ids: list[str]
    text: str                    # a sentence that only talks to the user: advice, encouragement, an offer to help


class ClaimsOutput(_Out):
    claims: list[ExtractedClaim]
    gaps: list[ExtractedGap]
    # Required in the schema sent to a model like every field; empty when absent from a reply, so
    # replies cached before remarks existed still read.
    remarks: list[ExtractedRemark] = Field(default_factory=list)
    asks_clarification: bool     # the response asks the user something back


# ---------------------------------------------------------------- sufficiency (never sees the response)

class SufficiencyInput(_In):
    query: str
    sub_questions: list[SubQuestionIn]
    chunks: list[ChunkIn]
    as_of: str | None = None     # the date "current", "latest", "this year" refer to (YYYY-MM-DD)


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
    as_of: str | None = None
    fresh_from: str | None = None   # a question about now needs chunks of this date or later (YYYY-MM-DD)


class FaithfulnessItem(_Out):
    claim_id: str
    evidence: list[Evidence]
    # The dates a stale verdict rests on (and any the judge read); required in the schema sent to a
    # model, empty when absent from a reply.
    dates: list[DateEvidence] = Field(default_factory=list)
    reasoning: str
    relation: Literal["supported", "unsupported", "contradicted", "conflicting", "stale"]
    grounding_chunk_ids: list[str]
    contradicting_chunk_ids: list[str]


class FaithfulnessOutput(_Out):
    items: list[FaithfulnessItem]


# ---------------------------------------------------------------- completeness

class CompletenessInput(_In):
    query: str
    sub_questions: list[SubQuestionIn]
    claims: list[ClaimIn]
    gaps: list[GapIn] = []


class ClaimRole(_Out):
    claim_id: str
    reasoning: str
    role: Literal["answers", "supports", "extra"]
    sub_question_ids: list[str]   # empty exactly when the role is "extra"


class GapLink(_Out):
    gap_id: str
    sub_question_ids: list[str]   # the sub-questions the gap declines; empty: it concerns nothing asked


class SubQuestionStatus(_Out):
    sub_question_id: str
    reasoning: str
    status: Literal["answered", "partial", "unanswered"]


class CompletenessOutput(_Out):
    # Claims first, statuses after them: a status is read off the roles just written.
    claims: list[ClaimRole]
    gaps: list[GapLink]
    sub_questions: list[SubQuestionStatus]


# ---------------------------------------------------------------- explain (one failing trace, after judging)

class JudgedClaimIn(_In):
    id: str
    text: str
    relation: str                 # the faithfulness verdict: supported | unsupported | contradicted | conflicting


class JudgedSubQuestionIn(_In):
    id: str
    text: str
    coverage: str                 # answered | partial | unanswered | declined | ungrounded ...
    sufficient: str               # yes | no | unknown: can the chunks answer it


class ExplainInput(_In):
    query: str
    response: str
    chunks: list[ChunkIn]
    cell: str                     # the failure cell, e.g. "complete_ungrounded"
    suggestion: str               # the rule-based suggestion's title: the explanation makes it specific
    sub_questions: list[JudgedSubQuestionIn]
    claims: list[JudgedClaimIn]


class ExplainQuote(_Out):
    source: Literal["chunk", "response"]
    chunk_id: str                 # the chunk quoted; "" for a quote of the response
    quote: str


class ExplainOutput(_Out):
    # Evidence first, the diagnosis and the fix after it (PROMPTS.md §0: reasoning before the verdict).
    quotes: list[ExplainQuote]
    missing_fact: str             # "" or a fact the question needs that no chunk gives
    what_went_wrong: str
    change_to_try: str
# ---------------------------------------------------------------- fast (all of the above in one call)

class FastInput(_In):
    """Everything a trace has, for the opt-in single-call mode: decompose and judge at once."""

    query: str
    sentences: list[Sentence]
    chunks: list[ChunkIn]
    as_of: str | None = None


class FastOutput(_Out):
    # Extraction first, then the judges in the order each one's reading builds on the last: a verdict
    # is written after the items it is about (PROMPTS.md §0, schema order is generation order).
    sub_questions: list[QuestionItem]
    claims: list[ExtractedClaim]
    gaps: list[ExtractedGap]
    remarks: list[ExtractedRemark]
    asks_clarification: bool
    sufficiency: list[SufficiencyItem]
    faithfulness: list[FaithfulnessItem]
    completeness: CompletenessOutput


# ---------------------------------------------------------------- checks

_ALPHA = re.compile(r"[^\W\d_]", re.UNICODE)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
def _number(text: str) -> str:
    """A number as written, minus separators and leading zeros ("07:15" and "7:15" are one time)."""
    return re.sub(r"(?<!\d)0+(?=\d)", "", text.replace(",", ""))


# A problem with the item it belongs to: (item id, text); None when it belongs to no single item (an
# id nobody asked about). The OpenAI client keeps the items without problems and re-asks only the others.
Problem = tuple[str | None, str]


def _ids_problems(label: str, expected: list[str], got: list[str]) -> list[Problem]:
    problems: list[Problem] = []
    for i in sorted({i for i in got if got.count(i) > 1}):
        problems.append((i, f"{label} id {i} repeated; give exactly one item per id"))
    for i in expected:
        if i not in got:
            problems.append((i, f"no item for {label} id {i}; return exactly one item per id"))
    extra = sorted(set(got) - set(expected))
    if extra:
        problems.append((None, f"unknown {label} ids {extra}; use only the ids given"))
    return problems


def _subset(owner: str, label: str, got: list[str], allowed: set[str]) -> list[Problem]:
    unknown = sorted(set(got) - allowed)
    return [(owner, f"{label} {unknown} do not exist; use only the ids given")] if unknown else []


def _quotes(owner: str, evidence: list[Evidence], chunks: dict[str, str]) -> list[Problem]:
    problems = _subset(owner, f"evidence chunk ids of {owner}", [e.chunk_id for e in evidence], set(chunks))
    for e in evidence:
        if e.chunk_id in chunks and not quote_in(e.quote, chunks[e.chunk_id]):
            problems.append((owner, f"the evidence quote of {owner} is not in chunk {e.chunk_id}; copy it verbatim"))
    return problems


def _check_questions(inp: QuestionsInput, out: QuestionsOutput) -> list[Problem]:
    problems: list[Problem] = []
    ids = [q.id for q in out.sub_questions]
    if len(set(ids)) != len(ids):
        problems.append((None, "sub-question ids must be unique"))
    if inp.query.strip() and not out.sub_questions:
        problems.append((None, "the query is not empty, so list at least one sub-question"))
    if any(not _ALPHA.search(q.text) for q in out.sub_questions):
        problems.append((None, "every sub-question needs words; drop empty ones"))
    return problems


def _check_claims(inp: ClaimsInput, out: ClaimsOutput) -> list[Problem]:
    problems: list[Problem] = []
    sentences = {s.id: s.text for s in inp.sentences}
    for label, items in (("claim", out.claims), ("gap", out.gaps), ("remark", out.remarks)):
        ids = [i.id for i in items]
        if len(set(ids)) != len(ids):
            problems.append((None, f"{label} ids must be unique"))
        for item in items:
            problems += [(None, p) for _, p in _subset(item.id, f"{label} {item.id} source_sentence_ids",
                                                       item.source_sentence_ids, set(sentences))]
            if sentences and not item.source_sentence_ids:
                problems.append((None, f"{label} {item.id} cites no sentence; give its source_sentence_ids"))
            if not _ALPHA.search(item.text):
                problems.append((None, f"{label} {item.id} has no content; drop it"))
    for claim in out.claims:
        # Extraction must not invent details (FActScore's guard): a number in a claim comes from
        # the sentences it cites or from the question that resolves its references.
        source = " ".join(sentences.get(i, "") for i in claim.source_sentence_ids) + " " + inp.query
        digits = {_number(n) for n in _NUMBER.findall(source)}
        invented = sorted({n for n in _NUMBER.findall(claim.text) if _number(n) not in digits})
        if claim.source_sentence_ids and invented:
            problems.append((None, f"claim {claim.id} has numbers {invented} that its sentences do not contain; "
                                   "copy numbers exactly"))
    if not inp.sentences and (out.claims or out.gaps or out.remarks):
        problems.append((None, "the response is empty, so there are no claims, gaps or remarks"))
    return problems


def _check_sufficiency(inp: SufficiencyInput, out: SufficiencyOutput) -> list[Problem]:
    chunks = {c.id: c.text for c in inp.chunks}
    problems = _ids_problems("sub_question", [q.id for q in inp.sub_questions], [i.sub_question_id for i in out.items])
    for item in out.items:
        sq = item.sub_question_id
        problems += _subset(sq, f"supporting_chunk_ids of {sq}", item.supporting_chunk_ids, set(chunks))
        problems += _quotes(sq, item.evidence, chunks)
        if item.sufficient == "yes" and not item.supporting_chunk_ids:
            problems.append((sq, f"{sq} is 'yes' but cites no supporting chunk"))
        if item.sufficient == "yes" and item.missing_facts:
            problems.append((sq, f"{sq} is 'yes' but lists missing facts; it is 'no' when any required fact is "
                                 "missing"))
        if item.sufficient == "no" and item.supporting_chunk_ids:
            problems.append((sq, f"{sq} is 'no' but lists supporting chunks; supporting_chunk_ids is empty for 'no'"))
    return problems


def _check_faithfulness(inp: FaithfulnessInput, out: FaithfulnessOutput) -> list[Problem]:
    chunks = {c.id: c.text for c in inp.chunks}
    problems = _ids_problems("claim", [c.id for c in inp.claims], [i.claim_id for i in out.items])
    for item in out.items:
        cid, rel = item.claim_id, item.relation
        problems += _subset(cid, f"grounding_chunk_ids of {cid}", item.grounding_chunk_ids, set(chunks))
        problems += _subset(cid, f"contradicting_chunk_ids of {cid}", item.contradicting_chunk_ids, set(chunks))
        problems += _quotes(cid, item.evidence, chunks)
        problems += stale_problems(cid, item, inp)
        if rel in ("supported", "conflicting", "stale") and not item.grounding_chunk_ids:
            problems.append((cid, f"{cid} is '{rel}' but cites no grounding chunk"))
        if rel in ("contradicted", "conflicting") and not item.contradicting_chunk_ids:
            problems.append((cid, f"{cid} is '{rel}' but cites no contradicting chunk"))
        if rel in ("unsupported", "contradicted") and item.grounding_chunk_ids:
            problems.append((cid, f"{cid} is '{rel}' but lists grounding chunks; use 'conflicting' when chunks "
                                  "both support and contradict it, else leave grounding_chunk_ids empty"))
        if rel in ("unsupported", "supported") and item.contradicting_chunk_ids:
            problems.append((cid, f"{cid} is '{rel}' but lists contradicting chunks; use 'contradicted' or "
                                  "'conflicting', else leave contradicting_chunk_ids empty"))
    return problems


QUOTE_NOT_FOUND = "is not in the trace"   # the words every invented-quote problem carries (the note names it)


def _check_explain(inp: ExplainInput, out: ExplainOutput) -> list[Problem]:
    chunks = {c.id: c.text for c in inp.chunks}
    problems: list[Problem] = []
    for n, q in enumerate(out.quotes, 1):
        if not _ALPHA.search(q.quote) and not _NUMBER.search(q.quote):
            problems.append((None, f"quote {n} is empty; quote words of the trace"))
        elif q.source == "response" and not quote_in(q.quote, inp.response):
            problems.append((None, f"quote {n} {QUOTE_NOT_FOUND} (not in the response); copy it verbatim"))
        elif q.source == "chunk" and q.chunk_id not in chunks:
            problems.append((None, f"quote {n} names chunk {q.chunk_id[:40]!r}, which {QUOTE_NOT_FOUND}; use only "
                                   "the chunk ids given"))
        elif q.source == "chunk" and not quote_in(q.quote, chunks[q.chunk_id]):
            problems.append((None, f"quote {n} {QUOTE_NOT_FOUND} (not in chunk {q.chunk_id}); copy it verbatim"))
    if not out.quotes and not out.missing_fact.strip():
        problems.append((None, "quote the chunk or response sentence at fault, or name the missing fact"))
    for name in ("what_went_wrong", "change_to_try"):
        if not _ALPHA.search(getattr(out, name)):
            problems.append((None, f"{name} is empty; write one or two sentences"))
    return problems


def _check_completeness(inp: CompletenessInput, out: CompletenessOutput) -> list[Problem]:
    sq_ids = [q.id for q in inp.sub_questions]
    problems = _ids_problems("claim", [c.id for c in inp.claims], [i.claim_id for i in out.claims])
    problems += _ids_problems("gap", [g.id for g in inp.gaps], [g.gap_id for g in out.gaps])
    problems += _ids_problems("sub_question", sq_ids, [s.sub_question_id for s in out.sub_questions])
    answered_by: dict[str, list[str]] = {q: [] for q in sq_ids}
    named_by: dict[str, list[str]] = {q: [] for q in sq_ids}   # claims that name it in another role
    for item in out.claims:
        cid = item.claim_id
        problems += _subset(cid, f"sub_question_ids of {cid}", item.sub_question_ids, set(sq_ids))
        if item.role == "extra" and item.sub_question_ids:
            problems.append((cid, f"{cid} is 'extra' but lists sub-questions; an extra claim lists none"))
        if item.role != "extra" and not item.sub_question_ids:
            problems.append((cid, f"{cid} is '{item.role}' but names no sub-question; name it, or use 'extra'"))
        for q in item.sub_question_ids:
            (answered_by if item.role == "answers" else named_by).setdefault(q, []).append(cid)
    for gap in out.gaps:
        problems += _subset(gap.gap_id, f"sub_question_ids of gap {gap.gap_id}", gap.sub_question_ids, set(sq_ids))
    for status in out.sub_questions:
        sq = status.sub_question_id
        # A status and the roles of the claims it rests on disagree: either side may be the wrong one,
        # so the problem belongs to both.
        if status.status in ("answered", "partial") and not answered_by.get(sq):
            text = f"{sq} is '{status.status}' but no claim has role 'answers' for it"
            problems += [(owner, text) for owner in (sq, *named_by.get(sq, []))]
        if status.status == "unanswered" and answered_by.get(sq):
            text = f"{sq} is 'unanswered' but {answered_by[sq]} answer it; use 'answered' or 'partial'"
            problems += [(owner, text) for owner in (sq, *answered_by[sq])]
    return problems


def _check_fast(inp: FastInput, out: FastOutput) -> list[Problem]:
    """The extraction half only, checked whole as the two decomposition tasks check theirs. The judged
    half is read item by item afterwards (veralith.pipeline.fast) with each judge task's own checks, so
    one inconsistent verdict costs that verdict, not the call."""
    response = " ".join(s.text for s in inp.sentences)
    problems = _check_questions(QuestionsInput(query=inp.query), QuestionsOutput(sub_questions=out.sub_questions))
    problems += _check_claims(ClaimsInput(query=inp.query, response=response, sentences=inp.sentences),
                              ClaimsOutput(claims=out.claims, gaps=out.gaps, remarks=out.remarks,
                                           asks_clarification=out.asks_clarification))
    return problems


# ---------------------------------------------------------------- task registry

I = TypeVar("I", bound=BaseModel)
O = TypeVar("O", bound=BaseModel)


@dataclass(frozen=True)
class ItemList:
    """A list of judged items in a task's output: `field` holds items whose `id_field` echoes an input
    id; `expected(payload)` are the ids that must each get exactly one item."""

    field: str
    id_field: str
    expected: Callable[[Any], list[str]]


@dataclass(frozen=True)
class Task(Generic[I, O]):
    name: str
    input_model: type[I]
    output_model: type[O]
    problems: Callable[[I, O], list[Problem]]
    # Judged item lists (empty for the extraction tasks, which are checked and re-asked whole).
    items: tuple[ItemList, ...] = ()

    def check(self, payload: I, output: O) -> list[str]:
        """Every problem of `output` beyond its schema; empty when it can be used as it is."""
        return [text for _, text in self.problems(payload, output)]


QUESTIONS = Task("questions", QuestionsInput, QuestionsOutput, _check_questions)
CLAIMS = Task("claims", ClaimsInput, ClaimsOutput, _check_claims)
SUFFICIENCY = Task("sufficiency", SufficiencyInput, SufficiencyOutput, _check_sufficiency, (
    ItemList("items", "sub_question_id", lambda p: [q.id for q in p.sub_questions]),))
FAITHFULNESS = Task("faithfulness", FaithfulnessInput, FaithfulnessOutput, _check_faithfulness, (
    ItemList("items", "claim_id", lambda p: [c.id for c in p.claims]),))
COMPLETENESS = Task("completeness", CompletenessInput, CompletenessOutput, _check_completeness, (
    ItemList("claims", "claim_id", lambda p: [c.id for c in p.claims]),
    ItemList("gaps", "gap_id", lambda p: [g.id for g in p.gaps]),
    ItemList("sub_questions", "sub_question_id", lambda p: [q.id for q in p.sub_questions])))
# Checked and re-asked whole, like the extraction tasks: an explanation with an invented quote is not kept in part.
EXPLAIN = Task("explain", ExplainInput, ExplainOutput, _check_explain)
# Read whole like an extraction task; its judged lists are settled item by item by the pipeline.
FAST = Task("fast", FastInput, FastOutput, _check_fast)
TASKS = {t.name: t for t in (QUESTIONS, CLAIMS, SUFFICIENCY, FAITHFULNESS, COMPLETENESS, EXPLAIN, FAST)}
# The two decomposition calls: they extract rather than judge, so a smaller model can do them.
DECOMPOSITION = frozenset({QUESTIONS.name, CLAIMS.name})


def model_for(task: str, judge_model: str, decomposer_model: str | None) -> str:
    """The model that answers `task`: the decomposer model (when one is set) for a decomposition call,
    else the judge model. The one rule for it: the client, the estimate and the budget all ask here."""
    return decomposer_model or judge_model if task in DECOMPOSITION else judge_model
