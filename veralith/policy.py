"""The quality gate and the status layers, as pure functions of what was judged.

The gate never says `pass` when nothing was assessed: no cell means `indeterminate`.
"""

from __future__ import annotations

from veralith.models import Availability, FailureCell, Gate, SufficiencyLevel

__all__ = ["quality_gate"]


def quality_gate(
    *,
    failure_cell: FailureCell | None,
    availability: Availability,
    refusal: bool,
    sufficiency_level: SufficiencyLevel,
    sufficiency_failed: bool,
) -> tuple[Gate, str, str]:
    """Return (gate, reason code, one-sentence summary)."""
    if availability is Availability.not_evaluated or failure_cell is None:
        return (Gate.indeterminate, "not_classified",
                "No failure cell could be determined because a judge failed; nothing is claimed about quality.")
    if failure_cell is FailureCell.complete_grounded:
        return Gate.pass_, "complete_grounded", "Every part of the query is answered by claims grounded in the context."
    if refusal:
        if sufficiency_failed:
            return (Gate.indeterminate, "refusal_sufficiency_unknown",
                    "The response refused, and whether the context could have answered is unknown.")
        if sufficiency_level is SufficiencyLevel.low:
            return Gate.pass_, "correct_refusal", "The response refused, and the context indeed could not answer."
        return Gate.fail, "unnecessary_refusal", "The response refused although the context held the answer."
    if availability is Availability.no_assessable_claims:
        return Gate.fail, "no_assessable_claims", "The response makes no claim that answers the query."
    return Gate.fail, failure_cell.value, _FAIL_SUMMARY[failure_cell]


_FAIL_SUMMARY = {
    FailureCell.complete_ungrounded: "Every part is answered, but some claims are not grounded in the context.",
    FailureCell.incomplete_grounded: "The claims are grounded, but part of the query is left unanswered.",
    FailureCell.incomplete_ungrounded: "Part of the query is unanswered and some claims are not grounded.",
    FailureCell.extra_grounded: "The answer is grounded but adds claims the query did not ask for.",
    FailureCell.extra_ungrounded: "The answer adds claims the query did not ask for, and some are not grounded.",
}
