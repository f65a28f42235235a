"""What goes into each judge task and what must come back: the input and output models.

Output models put evidence and reasoning before the label: structured outputs generate keys in
schema order, and reasoning written before the verdict makes judges more accurate (PROMPTS.md §0).
Every output field has a reader and a rule in the task's contract (veralith.llm.contract), which is
also what the prompt says about it and what the checks (veralith.llm.checks) hold it to.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator
from pydantic.json_schema import SkipJsonSchema

__all__ = [
    "DERIVED", "GROUNDED", "ChunkIn", "ClaimIn", "ClaimRole", "ClaimsInput", "ClaimsOutput",
    "CompletenessGaplessOutput", "CompletenessInput", "CompletenessOutput",
    "DateEvidence", "Evidence", "ExplainInput", "ExplainOutput", "ExplainQuote", "ExtractedClaim", "ExtractedGap",
    "ExtractedRemark", "FaithfulnessInput", "FaithfulnessItem", "FaithfulnessOutput", "FaithfulnessUntimedOutput",
    "FastBareOutput", "FastInput", "FastOutput", "FastReaskInput", "GapIn", "GapLink", "JudgedClaimIn",
    "JudgedSubQuestionIn", "QuestionItem", "QuestionsInput", "QuestionsOutput", "Sentence", "SubQuestionIn",
    "SubQuestionStatus", "SufficiencyInput", "SufficiencyItem", "SufficiencyOutput", "UntimedItem",
    "fast_reask_output",
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
    date: str | None = None      # from its metadata, an ISO label (veralith.llm.dates), shown as its date attribute


class SubQuestionIn(_In):
    id: str
    text: str
    cutoff: str | None = None    # it asks about now: a chunk dated before this day cannot answer it (llm.frames)


class ClaimIn(_In):
    id: str
    text: str
    context_note: str | None = None   # words from the query or response that interpret the claim; not evidence
    cutoff: str | None = None         # it is about now: a chunk dated before this day cannot state it as current


class GapIn(_In):
    id: str
    text: str


class Evidence(_Out):
    chunk_id: str
    quote: str


class DateEvidence(_Out):
    chunk_id: str
    date: str                    # ISO at the precision its words give: 2019, 2019-Q3, 2019-03, 2019-03-14
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
    # Required in the schema sent to a model like every field; empty when absent from a reply.
    remarks: list[ExtractedRemark] = Field(default_factory=list)
    asks_clarification: bool     # the response asks the user something back


# ---------------------------------------------------------------- sufficiency (never sees the response)

class SufficiencyInput(_In):
    query: str
    sub_questions: list[SubQuestionIn]
    chunks: list[ChunkIn]
    as_of: str | None = None     # today (YYYY-MM-DD): what "this year" and the cutoffs are counted from


class SufficiencyItem(_Out):
    sub_question_id: str
    evidence: list[Evidence]     # for "yes": the quotes that answer it; empty for "no"
    missing_facts: list[str]     # for "no": what no chunk gives; empty for "yes"
    reasoning: str
    sufficient: Literal["yes", "no"]
    # Not asked of a model (not in the schema): the chunks its evidence quotes, in order, so every chunk
    # a "yes" rests on is quoted verbatim and checked, and no reply pays for the ids twice. The offline
    # judge gives its own (a chunk that adds terms without a quote of its own).
    supporting_chunk_ids: SkipJsonSchema[list[str]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _quoted_chunks(self) -> SufficiencyItem:
        if "supporting_chunk_ids" not in self.model_fields_set:
            self.supporting_chunk_ids = list(dict.fromkeys(e.chunk_id for e in self.evidence))
        return self


class SufficiencyOutput(_Out):
    items: list[SufficiencyItem]


# ---------------------------------------------------------------- faithfulness

class FaithfulnessInput(_In):
    query: str
    claims: list[ClaimIn]
    chunks: list[ChunkIn]
    as_of: str | None = None


GROUNDED = ("supported", "conflicting", "stale")   # the relations whose claim some chunk states
# Item fields derived in code from the evidence, never asked of a model: a reply that writes one anyway
# (a JSON-mode server reads the schema as an instruction only) is read without it (veralith.llm.salvage).
DERIVED = frozenset({"supporting_chunk_ids", "grounding_chunk_ids"})


class FaithfulnessItem(_Out):
    claim_id: str
    evidence: list[Evidence]
    # The dates a stale verdict rests on; empty for any other relation. Required in the schema sent to
    # a model, empty when absent from a reply.
    dates: list[DateEvidence] = Field(default_factory=list)
    reasoning: str
    relation: Literal["supported", "unsupported", "contradicted", "conflicting", "stale"]
    contradicting_chunk_ids: list[str]
    # Not asked of a model (not in the schema): for a relation in GROUNDED, the chunks its evidence
    # quotes that are not against it; else none. Every grounding chunk is then quoted verbatim and
    # checked, and no reply pays for the ids twice. The offline judge gives its own.
    grounding_chunk_ids: SkipJsonSchema[list[str]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _quoted_chunks(self) -> FaithfulnessItem:
        if "grounding_chunk_ids" not in self.model_fields_set:
            quoted = dict.fromkeys(e.chunk_id for e in self.evidence)
            self.grounding_chunk_ids = [c for c in quoted if c not in self.contradicting_chunk_ids] \
                if self.relation in GROUNDED else []
        return self


class FaithfulnessOutput(_Out):
    items: list[FaithfulnessItem]


class UntimedItem(FaithfulnessItem):
    """A faithfulness item of a call where nothing is dated and nothing asks about now (prompts.timed):
    no date can make a claim stale there, so the schema asks for neither `dates` nor "stale" (the
    stale-claim review, veralith.llm.temporal, still reads dates in the chunks' words). A subclass, so
    the pipeline reads it as any FaithfulnessItem; the short name is what the schema repeats."""

    dates: SkipJsonSchema[list[DateEvidence]] = Field(default_factory=list)
    relation: Literal["supported", "unsupported", "contradicted", "conflicting"]


class FaithfulnessUntimedOutput(FaithfulnessOutput):
    items: list[UntimedItem]   # type: ignore[assignment]


# ---------------------------------------------------------------- completeness

class CompletenessInput(_In):
    query: str
    sub_questions: list[SubQuestionIn]
    claims: list[ClaimIn]
    gaps: list[GapIn] = []


class ClaimRole(_Out):
    claim_id: str
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


class CompletenessGaplessOutput(CompletenessOutput):
    """The reply to a call whose response states no gap (most): the schema does not ask for `gaps`,
    and the prompt says nothing of them (veralith.llm.prompts). A subclass, read as any CompletenessOutput."""

    gaps: SkipJsonSchema[list[GapLink]] = Field(default_factory=list)


# ---------------------------------------------------------------- explain (one failing trace, after judging)

class JudgedClaimIn(_In):
    id: str
    text: str
    relation: str                 # the faithfulness verdict: supported | unsupported | ... | stale
    cutoff: str | None = None     # as faithfulness was shown it


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
    as_of: str | None = None


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
    fresh_from: str | None = None   # the cutoff of a claim or sub-question about now (veralith.llm.frames)


class FastOutput(_Out):
    # Schema order is generation order (PROMPTS.md §0): what the question and the chunks alone decide
    # (sub-questions, sufficiency) is written before anything about the response, then the response's
    # claims, then the judges that read them.
    sub_questions: list[QuestionItem]
    sufficiency: list[SufficiencyItem]
    claims: list[ExtractedClaim]
    gaps: list[ExtractedGap]
    remarks: list[ExtractedRemark]
    asks_clarification: bool
    faithfulness: list[FaithfulnessItem]
    completeness: CompletenessOutput


class FastBareOutput(_Out):
    """The single call's reply when there are no chunks: nothing to judge sufficiency or faithfulness
    against, so the schema does not ask for them (the pipeline decides both in code)."""

    sub_questions: list[QuestionItem]
    claims: list[ExtractedClaim]
    gaps: list[ExtractedGap]
    remarks: list[ExtractedRemark]
    asks_clarification: bool
    completeness: CompletenessOutput


class FastReaskInput(_In):
    """The single call's one re-ask: the call as it was, its reply, and what is wrong with which items."""

    fast: FastInput
    reply: str                    # the first reply, as the model wrote it
    problems: tuple[str, ...]     # one line per bad item: what is wrong and the fix
    sections: tuple[str, ...]     # the judged lists asked again: sufficiency, faithfulness, completeness


_SECTIONS: dict[str, Any] = {"sufficiency": list[SufficiencyItem], "faithfulness": list[FaithfulnessItem],
                             "completeness": CompletenessOutput}


@cache
def fast_reask_output(sections: tuple[str, ...]) -> type[BaseModel]:
    """The re-ask's reply model: only the judged lists that hold a bad item, in FastOutput's order."""
    fields: dict[str, Any] = {name: (_SECTIONS[name], ...) for name in _SECTIONS if name in sections}
    model: type[BaseModel] = create_model("FastReaskOutput", __base__=_Out, **fields)
    return model
