"""Completeness: which claims answer which sub-question, which sub-questions nothing addresses, and
which claims answer nothing that was asked ("extra")."""

from __future__ import annotations

from veralith.llm.tasks import ClaimIn, CompletenessInput, CompletenessOutput, SubQuestionIn
from veralith.models import Claim, CompletenessJudgment, SubQuestion

__all__ = ["assemble", "plan", "without_call"]


def plan(query: str, sub_questions: list[SubQuestion], claims: list[Claim]) -> list[CompletenessInput]:
    if not claims or not sub_questions:
        return []  # decided without a model: see without_call
    return [CompletenessInput(
        query=query,
        sub_questions=[SubQuestionIn(id=q.id, text=q.text) for q in sub_questions],
        claims=[ClaimIn(id=c.id, text=c.text) for c in claims],
    )]


def without_call(sub_questions: list[SubQuestion], claims: list[Claim]) -> CompletenessJudgment:
    """The cases with nothing to align: no claims (every part unanswered) or an empty query."""
    if not claims:
        return CompletenessJudgment(
            mappings={q.id: [] for q in sub_questions},
            uncovered_sub_question_ids=[q.id for q in sub_questions],
            reasoning="The response makes no claims, so no part of the query is answered.")
    return CompletenessJudgment(
        reasoning="The query is empty, so there is nothing the claims could leave unanswered or go beyond.")


def assemble(outputs: list[CompletenessOutput], sub_questions: list[SubQuestion],
             claims: list[Claim]) -> CompletenessJudgment:
    out = outputs[0]
    targets = {item.claim_id: item.sub_question_ids for item in out.items}
    mappings = {q.id: [c.id for c in claims if q.id in targets[c.id]] for q in sub_questions}
    return CompletenessJudgment(
        mappings=mappings,
        uncovered_sub_question_ids=[q for q, mapped in mappings.items() if not mapped],
        extra_claim_ids=[c.id for c in claims if not targets[c.id]],
        reasoning=out.reasoning,
    )
