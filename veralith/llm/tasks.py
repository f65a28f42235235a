"""The judge tasks as typed contracts: what goes in, what must come back, and how to check it.

`explain` (for --explain) runs only for a failing trace, after the five judges; `fast` is the opt-in
single call that does all five at once, and `fast_reask` its one re-ask of the items it got wrong.

Both backends speak these types (veralith.llm.schemas). The OpenAI backend renders an input into
delimited prompt messages and parses the reply into the output model (strict JSON Schema); the local
backend computes the same output model with heuristics. `check` returns the problems a reply has
beyond its schema (veralith.llm.checks: ids not echoed or invented, a label that contradicts its own
fields, a quote that is not one span of the chunk it cites), each made by a rule of the task's
contract (veralith.llm.contract) and naming the item it belongs to, so the OpenAI backend keeps the
good items of a judge's reply and re-asks only the bad ones, once, with what is wrong and the fix.
The extraction tasks (questions, claims) have no such items and are re-asked whole.

Decomposition is two tasks that run at once: `questions` reads only the query (so the response
can neither narrow nor multiply what was asked, and the reply is cacheable per query), `claims`
reads the response. Gap statements ("the documents don't say...") are their own items, never
claims; which sub-questions they decline is decided by `completeness`, and the response kind is
derived in code from claims and linked gaps (veralith/pipeline/classify.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from veralith.llm import checks
from veralith.llm.checks import QUOTE_NOT_FOUND
from veralith.llm.rules import Problem
from veralith.llm.schemas import (
    ChunkIn,
    ClaimIn,
    ClaimRole,
    ClaimsInput,
    ClaimsOutput,
    CompletenessGaplessOutput,
    CompletenessInput,
    CompletenessOutput,
    DateEvidence,
    Evidence,
    ExplainInput,
    ExplainOutput,
    ExplainQuote,
    ExtractedClaim,
    ExtractedGap,
    ExtractedRemark,
    FaithfulnessInput,
    FaithfulnessItem,
    FaithfulnessOutput,
    FaithfulnessUntimedOutput,
    FastBareOutput,
    FastInput,
    FastOutput,
    FastReaskInput,
    GapIn,
    GapLink,
    JudgedClaimIn,
    JudgedSubQuestionIn,
    QuestionItem,
    QuestionsInput,
    QuestionsOutput,
    Sentence,
    SubQuestionIn,
    SubQuestionStatus,
    SufficiencyInput,
    SufficiencyItem,
    SufficiencyOutput,
    UntimedItem,
    fast_reask_output,
)
from veralith.llm.text import quote_in

__all__ = [
    "CLAIMS", "COMPLETENESS", "DECOMPOSITION", "EXPLAIN", "FAITHFULNESS", "FAST", "FAST_REASK", "QUESTIONS",
    "QUOTE_NOT_FOUND", "SUFFICIENCY", "TASKS", "ChunkIn", "ClaimIn", "ClaimRole", "ClaimsInput", "ClaimsOutput",
    "CompletenessGaplessOutput", "CompletenessInput", "CompletenessOutput", "DateEvidence", "Evidence",
    "ExplainInput", "ExplainOutput",
    "ExplainQuote", "ExtractedClaim", "ExtractedGap", "ExtractedRemark", "FaithfulnessInput", "FaithfulnessItem",
    "FaithfulnessOutput", "FastBareOutput", "FastInput", "FastOutput", "FastReaskInput", "GapIn", "GapLink",
    "ItemList", "JudgedClaimIn", "JudgedSubQuestionIn", "Problem", "QuestionItem", "QuestionsInput",
    "QuestionsOutput", "Sentence", "SubQuestionIn", "SubQuestionStatus", "SufficiencyInput", "SufficiencyItem",
    "SufficiencyOutput", "Task", "UntimedItem", "gapless", "model_for", "quote_in", "timed",
]

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
    # The output model for one input, when it depends on it (a reply asks only for what the input can
    # be judged on); default `output_model`.
    shape: Callable[[I], type[BaseModel]] | None = None

    def check(self, payload: I, output: O) -> list[str]:
        """Every problem of `output` beyond its schema, as the re-ask states it; empty when it can be used."""
        return [p.text for p in self.problems(payload, output)]

    def output_for(self, payload: BaseModel | None) -> type[BaseModel]:
        """The output model a reply to `payload` must have (None: the task's general one)."""
        return self.shape(payload) if self.shape is not None and payload is not None else self.output_model  # type: ignore[arg-type]


def timed(payload: BaseModel) -> bool:
    """Whether time can matter to a judge call: a chunk carries a date, or a sub-question or claim asks
    about now (has a cutoff). Only then do the prompt's rules about dates and staleness, the date line
    and faithfulness's `dates` and "stale" reach the call (veralith.llm.prompts); dates a chunk's words
    give are still read by the stale-claim review in code (veralith.llm.temporal)."""
    items = [*getattr(payload, "sub_questions", ()), *getattr(payload, "claims", ())]
    return any(getattr(c, "date", None) for c in getattr(payload, "chunks", ())) or any(
        getattr(i, "cutoff", None) for i in items)


def gapless(payload: BaseModel) -> bool:
    """Whether a completeness call's response states no gap: its prompt then says nothing of gaps and its
    schema asks for none (schemas.CompletenessGaplessOutput)."""
    return isinstance(payload, CompletenessInput) and not payload.gaps


def _no_problems(_inp: BaseModel, _out: BaseModel) -> list[Problem]:
    # The re-ask of the single call holds judged items only; the pipeline settles each with its judge's checks.
    return []


QUESTIONS = Task("questions", QuestionsInput, QuestionsOutput, checks.check_questions)
CLAIMS = Task("claims", ClaimsInput, ClaimsOutput, checks.check_claims)
SUFFICIENCY = Task("sufficiency", SufficiencyInput, SufficiencyOutput, checks.check_sufficiency, (
    ItemList("items", "sub_question_id", lambda p: [q.id for q in p.sub_questions]),))
FAITHFULNESS = Task("faithfulness", FaithfulnessInput, FaithfulnessOutput, checks.check_faithfulness, (
    ItemList("items", "claim_id", lambda p: [c.id for c in p.claims]),),
    shape=lambda p: FaithfulnessOutput if timed(p) else FaithfulnessUntimedOutput)
COMPLETENESS = Task("completeness", CompletenessInput, CompletenessOutput, checks.check_completeness, (
    ItemList("claims", "claim_id", lambda p: [c.id for c in p.claims]),
    ItemList("gaps", "gap_id", lambda p: [g.id for g in p.gaps]),
    ItemList("sub_questions", "sub_question_id", lambda p: [q.id for q in p.sub_questions])),
    shape=lambda p: CompletenessGaplessOutput if gapless(p) else CompletenessOutput)
# Checked and re-asked whole, like the extraction tasks: an explanation with an invented quote is not kept in part.
EXPLAIN = Task("explain", ExplainInput, ExplainOutput, checks.check_explain)
# Read whole like an extraction task; its judged lists are settled item by item by the pipeline. Without
# chunks the reply has no sufficiency or faithfulness lists: there is nothing to judge them against.
FAST = Task("fast", FastInput, FastOutput, checks.check_fast,
            shape=lambda p: FastOutput if p.chunks else FastBareOutput)
FAST_REASK = Task("fast_reask", FastReaskInput, fast_reask_output(("sufficiency", "faithfulness", "completeness")),
                  _no_problems, shape=lambda p: fast_reask_output(p.sections))
TASKS = {t.name: t for t in (QUESTIONS, CLAIMS, SUFFICIENCY, FAITHFULNESS, COMPLETENESS, EXPLAIN, FAST)}
# The two decomposition calls: they extract rather than judge, so a smaller model can do them.
DECOMPOSITION = frozenset({QUESTIONS.name, CLAIMS.name})


def model_for(task: str, judge_model: str, decomposer_model: str | None) -> str:
    """The model that answers `task`: the decomposer model (when one is set) for a decomposition call,
    else the judge model. The one rule for it: the client, the estimate and the budget all ask here."""
    return decomposer_model or judge_model if task in DECOMPOSITION else judge_model
