"""Which low-confidence verdicts decide the outcome, so a person should review the trace.

A verdict *decides* the cell or the gate when flipping it alone would change either. Each verdict
below REVIEW_BELOW confidence is flipped in turn and the trace re-classified; the ones whose flip
changes the outcome are listed, and `needs_review` is true when there is any. A verdict whose
confidence is unknown (None) is never flagged: unknown is not low.
"""

from __future__ import annotations

from dataclasses import dataclass

from veralith.models import (
    Claim,
    CompletenessJudgment,
    CompletenessStatus,
    FaithfulnessJudgment,
    Gap,
    Relation,
    SubQuestion,
    SufficiencyJudgment,
    Verdict,
)
from veralith.pipeline.classify import classify, response_kind
from veralith.policy import status

__all__ = ["REVIEW_BELOW", "Outcome", "outcome", "review"]

# A binary verdict is right with probability >= 0.5 by construction; below 0.7 the judge is
# closer to a coin than to sure.
REVIEW_BELOW = 0.7


@dataclass(frozen=True)
class Outcome:
    cell: str | None
    gate: str
    reason: str


def outcome(sub_questions: list[SubQuestion], claims: list[Claim], gaps: list[Gap], asks_clarification: bool,
            sufficiency: list[SufficiencyJudgment] | None, faithfulness: list[FaithfulnessJudgment] | None,
            completeness: CompletenessJudgment | None) -> Outcome:
    cls = classify(sub_questions, claims, faithfulness, completeness)
    kind = response_kind(claims, gaps, completeness, asks_clarification)
    sufficient = None if sufficiency is None else {j.sub_question_id: j.verdict is Verdict.Y for j in sufficiency}
    st = status(errors=[], failure_cell=cls.failure_cell, response_kind=kind, n_claims=len(claims),
                coverage=cls.coverage, sufficient=sufficient, n_extra_claims=cls.n_extra_claims or 0)
    return Outcome(cls.failure_cell.value if cls.failure_cell else None, st.quality_gate.value, st.reason)


def review(sub_questions: list[SubQuestion], claims: list[Claim], gaps: list[Gap], asks_clarification: bool,
           sufficiency: list[SufficiencyJudgment] | None, faithfulness: list[FaithfulnessJudgment] | None,
           completeness: CompletenessJudgment | None) -> list[str]:
    """Ids of the low-confidence verdicts that decide the cell or the gate (claim, sub-question ids)."""
    args = (sub_questions, claims, gaps, asks_clarification)
    base = outcome(*args, sufficiency, faithfulness, completeness)
    if base.cell is None:
        return []   # nothing was concluded, so nothing hinges on a verdict
    flagged: list[str] = []
    for i, j in enumerate(faithfulness or []):
        if _low(j.confidence):
            flipped = list(faithfulness or [])
            flipped[i] = _flip_faithfulness(j)
            if outcome(*args, sufficiency, flipped, completeness) != base:
                flagged.append(j.claim_id)
    for i, s in enumerate(sufficiency or []):
        if _low(s.confidence):
            flipped_s = list(sufficiency or [])
            flipped_s[i] = s.model_copy(update={"verdict": Verdict.N if s.verdict is Verdict.Y else Verdict.Y})
            if outcome(*args, flipped_s, faithfulness, completeness) != base and s.sub_question_id not in flagged:
                flagged.append(s.sub_question_id)
    if completeness is not None:
        for q, conf in completeness.confidence.items():
            current = completeness.statuses.get(q)
            if not _low(conf) or current is None or current is CompletenessStatus.unanswered:
                continue   # an unanswered status has no answering claim to promote
            answered = CompletenessStatus.answered
            other = CompletenessStatus.partial if current is answered else answered
            changed = completeness.model_copy(update={"statuses": {**completeness.statuses, q: other}})
            if outcome(*args, sufficiency, faithfulness, changed) != base and q not in flagged:
                flagged.append(q)
    return flagged


def _low(confidence: float | None) -> bool:
    return confidence is not None and confidence < REVIEW_BELOW


def _flip_faithfulness(j: FaithfulnessJudgment) -> FaithfulnessJudgment:
    if j.verdict is Verdict.Y:
        return j.model_copy(update={"verdict": Verdict.N, "relation": Relation.unsupported})
    return j.model_copy(update={"verdict": Verdict.Y, "relation": Relation.supported})
