"""The six cells: Completeness row x Faithfulness column, `<completeness>_<faithfulness>`.

A sub-question is covered only when the Completeness judge calls it answered in full *and* at
least one claim that answers it is grounded: a fabricated answer is not an answer, a claim that
only supports or qualifies an answer covers nothing, and a partial answer is not complete. Row
precedence is incomplete > extra > complete. Zero claims count as grounded (there is nothing to
be ungrounded about), so a refusal lands in incomplete_grounded. Sufficiency never moves a trace
between cells; it only picks the wording of the suggestion (and, for refusals, the gate).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from veralith.models import (
    Claim,
    CompletenessJudgment,
    CompletenessStatus,
    Coverage,
    FailureCell,
    FaithfulnessJudgment,
    Gap,
    ResponseKind,
    SubQuestion,
    SufficiencyJudgment,
    SufficiencyLevel,
    Verdict,
)

__all__ = ["Classification", "classify", "coverage", "response_kind", "sufficiency_level"]


@dataclass(frozen=True)
class Classification:
    failure_cell: FailureCell | None
    faithfulness_fraction: float | None
    n_uncovered_sub_questions: int | None
    n_extra_claims: int | None
    n_partial_sub_questions: int | None = None
    coverage: dict[str, Coverage] = field(default_factory=dict)


def coverage(sub_questions: list[SubQuestion], grounded: set[str],
             completeness: CompletenessJudgment) -> dict[str, Coverage]:
    """How each sub-question fared: only `answered` covers it (see the module docstring)."""
    declined = {q for linked in completeness.gaps.values() for q in linked}
    out: dict[str, Coverage] = {}
    for q in sub_questions:
        answering = completeness.mappings.get(q.id, [])
        status = completeness.statuses.get(q.id, CompletenessStatus.answered if answering
                                           else CompletenessStatus.unanswered)
        if answering and not any(c in grounded for c in answering):
            out[q.id] = Coverage.ungrounded_answer
        elif answering and status is CompletenessStatus.answered:
            out[q.id] = Coverage.answered
        elif answering and status is CompletenessStatus.partial:
            out[q.id] = Coverage.partial
        else:
            out[q.id] = Coverage.declined if q.id in declined else Coverage.unanswered
    return out


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
    covered = coverage(sub_questions, grounded, completeness)
    n_uncovered = sum(c is not Coverage.answered for c in covered.values())
    n_partial = sum(c is Coverage.partial for c in covered.values())
    row = "incomplete" if n_uncovered else "extra" if n_extra else "complete"
    column = "grounded" if len(grounded) == len(claims) else "ungrounded"
    return Classification(FailureCell(f"{row}_{column}"), fraction, n_uncovered, n_extra, n_partial, covered)


def response_kind(claims: list[Claim], gaps: list[Gap], completeness: CompletenessJudgment | None,
                  asks_clarification: bool) -> ResponseKind:
    """What the response does, from its claims and the gaps that decline something asked.

    A gap about something nobody asked does not make an answer a refusal. Without a completeness
    judgment (it failed) every gap is taken to decline the question; the cell is unknown then anyway.
    """
    if not claims:
        if gaps:
            return ResponseKind.full_refusal
        return ResponseKind.clarification_request if asks_clarification else ResponseKind.no_factual_content
    linked = completeness is None and bool(gaps) or completeness is not None and any(
        completeness.gaps.get(g.id) for g in gaps)
    return ResponseKind.partial_refusal if linked else ResponseKind.answer


def sufficiency_level(judgments: list[SufficiencyJudgment] | None, n_sub_questions: int,
                      threshold: float) -> tuple[SufficiencyLevel, float | None]:
    """HIGH iff fraction >= threshold. Unknown (judge failed, or nothing to judge) is LOW."""
    if judgments is None or n_sub_questions == 0:
        return SufficiencyLevel.low, None
    fraction = sum(j.verdict is Verdict.Y for j in judgments) / n_sub_questions
    return (SufficiencyLevel.high if fraction >= threshold else SufficiencyLevel.low), fraction
