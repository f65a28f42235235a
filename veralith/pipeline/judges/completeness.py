"""Completeness: which claims answer which sub-question (and which only support an answer), which
sub-questions the response declines, how fully each sub-question is answered, and which claims
answer nothing that was asked ("extra")."""

from __future__ import annotations

from veralith.llm.base import CallResult
from veralith.llm.tasks import ClaimIn, CompletenessInput, CompletenessOutput, GapIn, SubQuestionIn
from veralith.models import Claim, CompletenessJudgment, CompletenessStatus, Gap, SubQuestion

__all__ = ["assemble", "plan", "without_call"]


def plan(query: str, sub_questions: list[SubQuestion], claims: list[Claim], gaps: list[Gap],
         notes: dict[str, str | None] | None = None) -> list[CompletenessInput]:
    if not claims or not sub_questions:
        return []  # decided without a model: see without_call
    notes = notes or {}
    return [CompletenessInput(
        query=query,
        sub_questions=[SubQuestionIn(id=q.id, text=q.text) for q in sub_questions],
        claims=[ClaimIn(id=c.id, text=c.text, context_note=notes.get(c.id)) for c in claims],
        gaps=[GapIn(id=g.id, text=g.text) for g in gaps],
    )]


def without_call(sub_questions: list[SubQuestion], claims: list[Claim], gaps: list[Gap]) -> CompletenessJudgment:
    """The cases with nothing to align: no claims (nothing is answered; a gap declines the question
    as a whole) or no sub-questions (nothing could be left unanswered or gone beyond)."""
    if not claims:
        ids = [q.id for q in sub_questions]
        return CompletenessJudgment(
            mappings={q: [] for q in ids}, supports={q: [] for q in ids},
            statuses={q: CompletenessStatus.unanswered for q in ids},
            gaps={g.id: list(ids) for g in gaps}, uncovered_sub_question_ids=ids,
            confidence={q: 1.0 for q in ids},
            reasoning=("The response makes no claims, so no part of the query is answered"
                       + (" and it says the documents lack the answer." if gaps else ".")))
    return CompletenessJudgment(
        gaps={g.id: [] for g in gaps},
        reasoning="There are no sub-questions, so the claims can neither leave one unanswered nor go beyond them.")


def assemble(calls: list[CallResult], sub_questions: list[SubQuestion], claims: list[Claim],
             gaps: list[Gap]) -> CompletenessJudgment:
    call = calls[0]
    out: CompletenessOutput = call.output  # type: ignore[assignment]
    roles = {item.claim_id: item for item in out.claims}
    statuses = {s.sub_question_id: s for s in out.sub_questions}

    def claims_with(role: str, q: str) -> list[str]:
        return [c.id for c in claims
                if c.id in roles and roles[c.id].role == role and q in roles[c.id].sub_question_ids]

    # An item with no usable verdict even after the re-ask is left out (a claim without a role, a
    # sub-question without a status): the pipeline decides around it (veralith.pipeline.partial).
    ids = [q.id for q in sub_questions]
    judged = [q for q in ids if q in statuses]
    status = {q: CompletenessStatus(statuses[q].status) for q in judged}
    reasons = [f"{q}: {statuses[q].status} ({statuses[q].reasoning.strip()})" for q in judged]
    return CompletenessJudgment(
        mappings={q: claims_with("answers", q) for q in ids},
        supports={q: claims_with("supports", q) for q in ids},
        statuses=status,
        gaps={g.gap_id: list(g.sub_question_ids) for g in out.gaps},
        uncovered_sub_question_ids=[q for q in judged if status[q] is not CompletenessStatus.answered],
        extra_claim_ids=[c.id for c in claims if c.id in roles and roles[c.id].role == "extra"],
        reasoning=" ".join(reasons),
        confidence={q: call.confidence.get(q) for q in judged},
    )
