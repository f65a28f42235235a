"""What the judge said about the part of a trace a label is on, and a label made against a result.

One place for "which value of a result does a label of this target compare with", used by
`veralith label`, the review queue, the web view, imports and `veralith agreement`.
"""

from __future__ import annotations

from typing import Any

from veralith.models import EvaluationResult, cell_name
from veralith.store.labels import Label, LabelError, check

__all__ = ["JUDGE_OF", "items", "judged", "make_label"]

# Which judge a label target measures: claims are the faithfulness judge's, a sub-question's
# sufficiency the sufficiency judge's, its coverage the completeness judge's; the cell and the gate
# are the whole diagnosis.
JUDGE_OF = {"sufficiency": "sufficiency", "claim": "faithfulness", "coverage": "completeness",
            "cell": "cell", "gate": "gate"}


def judged(result: EvaluationResult, target: str, item: str = "") -> str | None:
    """The result's value for (target, item), in the labels' vocabulary; None when it has none (a
    judge that failed, an id it does not hold)."""
    if target == "cell":
        return cell_name(result.failure_cell)
    if target == "gate":
        return result.status.quality_gate.value
    if target == "claim":
        return next((j.relation.value for j in result.faithfulness if j.claim_id == item), None)
    if target == "sufficiency":
        return next((j.verdict.value for j in result.sufficiency if j.sub_question_id == item), None)
    if target == "coverage":
        found = result.diagnosis.coverage.get(item) if result.diagnosis else None
        return None if found is None else found.value
    raise LabelError(f"unknown label target {target!r}")


def items(result: EvaluationResult, target: str) -> list[str]:
    """The ids a label of `target` may name on this result ([""] for the cell and the gate)."""
    if target == "claim":
        return [c.id for c in result.claims]
    if target in ("sufficiency", "coverage"):
        return [q.id for q in result.sub_questions]
    return [""]


def make_label(result: EvaluationResult, target: str, item: str, value: str, *, reviewer: str,
               note: str | None = None, source: str = "veralith", evaluated_at: str | None = None,
               labelled_at: float | None = None, uid: str | None = None) -> Label:
    """A label on `result` (which must carry its trace_id), checked against the vocabulary and the
    ids the result holds; it records what the judge said (LabelError on anything wrong)."""
    target, item, value = check(target, item, value)
    known = items(result, target)
    if item not in known:
        what = "claims" if target == "claim" else "sub-questions"
        raise LabelError(f"trace {result.trace_id} has no {item!r} among its {what}: "
                         f"{', '.join(known) or 'none'}")
    reviewer = reviewer.strip()
    if not reviewer:
        raise LabelError("a label needs a reviewer (--by NAME, or VERALITH_REVIEWER)")
    extra: dict[str, Any] = {} if labelled_at is None else {"labelled_at": labelled_at}
    if uid:
        extra["uid"] = uid
    return Label(trace_id=int(result.trace_id or 0), target=target, item=item, value=value, reviewer=reviewer,
                 note=(note or None), judged=judged(result, target, item), result_at=evaluated_at, source=source,
                 **extra)
