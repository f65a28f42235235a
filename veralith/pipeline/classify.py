"""The six cells: Completeness row x Faithfulness column, `<completeness>_<faithfulness>`.

A sub-question is covered only when at least one claim mapped to it is grounded: a fabricated
answer is not an answer. Row precedence is incomplete > extra > complete. Zero claims count as
grounded (there is nothing to be ungrounded about), so a refusal lands in incomplete_grounded.
Sufficiency never moves a trace between cells; it only picks the wording of the suggestion.
"""

from __future__ import annotations

from dataclasses import dataclass

from veralith.models import (
    Claim,
    CompletenessJudgment,
    FailureCell,
    FaithfulnessJudgment,
    SubQuestion,
    SufficiencyJudgment,
    SufficiencyLevel,
    Verdict,
)

__all__ = ["Classification", "classify", "sufficiency_level"]


@dataclass(frozen=True)
class Classification:
    failure_cell: FailureCell | None
    faithfulness_fraction: float | None
    n_uncovered_sub_questions: int | None
    n_extra_claims: int | None


def classify(sub_questions: list[SubQuestion], claims: list[Claim],
             faithfulness: list[FaithfulnessJudgment] | None,
             completeness: CompletenessJudgment | None) -> Classification:
    """None for any part that depends on a judge that failed; never a guess."""
    grounded = None if faithfulness is None else {j.claim_id for j in faithfulness if j.verdict is Verdict.Y}
    fraction = None if grounded is None or not claims else len(grounded) / len(claims)
    if completeness is None:
        return Classification(None, fraction, None, None)
    n_extra = len(completeness.extra_claim_ids)
    if grounded is None:
        return Classification(None, fraction, None, n_extra)
    uncovered = [q.id for q in sub_questions
                 if not any(c in grounded for c in completeness.mappings.get(q.id, []))]
    row = "incomplete" if uncovered else "extra" if n_extra else "complete"
    column = "grounded" if len(grounded) == len(claims) else "ungrounded"
    return Classification(FailureCell(f"{row}_{column}"), fraction, len(uncovered), n_extra)


def sufficiency_level(judgments: list[SufficiencyJudgment] | None, n_sub_questions: int,
                      threshold: float) -> tuple[SufficiencyLevel, float | None]:
    """HIGH iff fraction >= threshold. Unknown (judge failed, or nothing to judge) is LOW."""
    if judgments is None or n_sub_questions == 0:
        return SufficiencyLevel.low, None
    fraction = sum(j.verdict is Verdict.Y for j in judgments) / n_sub_questions
    return (SufficiencyLevel.high if fraction >= threshold else SufficiencyLevel.low), fraction
