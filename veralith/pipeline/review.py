"""Which low-confidence verdicts decide the outcome, so a person should review the trace.

A verdict *decides* the cell or the gate when flipping it alone would change either. Each verdict
is flipped in turn and the trace re-classified (`deciders`); the deciding ones below the cut-off
are listed, and `needs_review` is true when there is any. The cut-off is REVIEW_BELOW (0.7) unless
the knowledge base has enough reviewers' labels to fit its own (veralith.store.review_cutoff). A
verdict whose confidence is unknown (None) is never flagged: unknown is not low.
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
from veralith.policy import REVIEW_BELOW, status

__all__ = ["REVIEW_BELOW", "Outcome", "deciders", "flagged_by", "least_sure", "outcome", "review"]


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


def deciders(sub_questions: list[SubQuestion], claims: list[Claim], gaps: list[Gap], asks_clarification: bool,
             sufficiency: list[SufficiencyJudgment] | None, faithfulness: list[FaithfulnessJudgment] | None,
             completeness: CompletenessJudgment | None) -> list[tuple[str, float]]:
    """(id, confidence) of every verdict with a known confidence whose flip alone changes the cell or
    the gate (claims, then sub-questions' sufficiency, then their coverage; an id once)."""
    args = (sub_questions, claims, gaps, asks_clarification)
    base = outcome(*args, sufficiency, faithfulness, completeness)
    if base.cell is None:
        return []   # nothing was concluded, so nothing hinges on a verdict
    found: dict[str, float] = {}
    for i, j in enumerate(faithfulness or []):
        if j.confidence is not None:
            flipped = list(faithfulness or [])
            flipped[i] = _flip_faithfulness(j)
            if outcome(*args, sufficiency, flipped, completeness) != base:
                found.setdefault(j.claim_id, j.confidence)
    for i, s in enumerate(sufficiency or []):
        if s.confidence is not None:
            flipped_s = list(sufficiency or [])
            flipped_s[i] = s.model_copy(update={"verdict": Verdict.N if s.verdict is Verdict.Y else Verdict.Y})
            if outcome(*args, flipped_s, faithfulness, completeness) != base:
                found[s.sub_question_id] = min(s.confidence, found.get(s.sub_question_id, 1.0))
    if completeness is not None:
        for q, conf in completeness.confidence.items():
            current = completeness.statuses.get(q)
            if conf is None or current is None or current is CompletenessStatus.unanswered:
                continue   # an unanswered status has no answering claim to promote
            answered = CompletenessStatus.answered
            other = CompletenessStatus.partial if current is answered else answered
            changed = completeness.model_copy(update={"statuses": {**completeness.statuses, q: other}})
            if outcome(*args, sufficiency, faithfulness, changed) != base:
                found[q] = min(conf, found.get(q, 1.0))
    return list(found.items())


def review(sub_questions: list[SubQuestion], claims: list[Claim], gaps: list[Gap], asks_clarification: bool,
           sufficiency: list[SufficiencyJudgment] | None, faithfulness: list[FaithfulnessJudgment] | None,
           completeness: CompletenessJudgment | None, below: float = REVIEW_BELOW) -> list[str]:
    """Ids of the verdicts below `below` confidence that decide the cell or the gate (claim, sub-question ids)."""
    return flagged_by(deciders(sub_questions, claims, gaps, asks_clarification, sufficiency, faithfulness,
                               completeness), below)


def flagged_by(found: list[tuple[str, float]], below: float) -> list[str]:
    """The deciding verdicts (`deciders`) a cut-off flags: those under it."""
    return [item for item, confidence in found if confidence < below]


def least_sure(found: list[tuple[str, float]]) -> float:
    """The lowest confidence among the deciding verdicts, 1.0 when none decides: a trace is flagged under
    a cut-off c exactly when this is below c (what a cut-off is fitted to, veralith.store.review_cutoff)."""
    return min((confidence for _, confidence in found), default=1.0)


def _flip_faithfulness(j: FaithfulnessJudgment) -> FaithfulnessJudgment:
    if j.verdict is Verdict.Y:
        return j.model_copy(update={"verdict": Verdict.N, "relation": Relation.unsupported})
    return j.model_copy(update={"verdict": Verdict.Y, "relation": Relation.supported})
