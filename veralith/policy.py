"""The status layers and the quality gate, as pure functions of what was judged.

`status()` is the one place that turns a judged trace into `Status`: execution (did the phases
run), availability (was there anything to assess), and the gate. Which cells fail the gate is the
project's policy (`fail_cells()`, from VERALITH_GATE_FAIL_CELLS; by default every cell but
complete_grounded); the rules below hold whatever it says. The gate never says `pass` when
nothing was assessed: no cell means `indeterminate`, and a response without claims that is not a
refusal fails.

A refusal (full or partial) is judged by what it declines: it passes only when every claim it
does make is grounded, it makes no claim nobody asked for, and every sub-question it leaves
uncovered is one the context cannot answer (per-sub-question sufficiency, not the trace's level).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

from veralith.models import (
    Availability,
    Correctness,
    Coverage,
    Execution,
    FactCorrectness,
    FailureCell,
    Gate,
    JudgeError,
    Phase,
    ReferenceAssessment,
    ResponseKind,
    Status,
)

__all__ = ["INPUT_REFUSALS", "REFUSAL_KINDS", "REVIEW_BELOW", "fail_cells", "quality_gate", "reference_gate", "status"]

REFUSAL_KINDS = frozenset({ResponseKind.full_refusal, ResponseKind.partial_refusal})
# Judge error kinds that say the judge declined the input itself (the offline judge: too large for
# it, or not English); an indeterminate gate gives that as its reason.
INPUT_REFUSALS = frozenset({"input_too_large", "unsupported_language"})
# The review flag's default cut-off (veralith.pipeline.review): a binary verdict is right with
# probability >= 0.5 by construction; below 0.7 the judge is closer to a coin than to sure. Here, not
# in the pipeline, because a knowledge base's cut-off fitted to labels (veralith.store.review_cutoff)
# falls back to it and the store may not import the pipeline.
REVIEW_BELOW = 0.7


def fail_cells() -> frozenset[FailureCell]:
    """The cells that fail the gate under the configured policy (VERALITH_GATE_FAIL_CELLS; default:
    every cell but complete_grounded). The one place the policy is read; a name that is not a cell,
    or complete_grounded (which always passes), is a ConfigError naming the variable."""
    from veralith.config import settings

    return _cells(settings.gate_fail_cells)


@functools.lru_cache(maxsize=8)
def _cells(names: tuple[str, ...]) -> frozenset[FailureCell]:
    from veralith.config import ConfigError

    unknown = [n for n in names if n not in FailureCell.__members__]
    if unknown:
        allowed = ", ".join(c.value for c in FailureCell if c is not FailureCell.complete_grounded)
        raise ConfigError(f"VERALITH_GATE_FAIL_CELLS: {', '.join(map(repr, unknown))} is not a failure cell; "
                          f"give a comma-separated list of {allowed}")
    if FailureCell.complete_grounded.value in names:
        raise ConfigError("VERALITH_GATE_FAIL_CELLS: complete_grounded always passes the gate; leave it out")
    return frozenset(FailureCell(n) for n in names)


def quality_gate(*, failure_cell: FailureCell | None, availability: Availability,
                 response_kind: ResponseKind | None = None, coverage: Mapping[str, Coverage] | None = None,
                 sufficient: Mapping[str, bool] | None = None, n_extra_claims: int = 0,
                 failing: frozenset[FailureCell] | None = None) -> tuple[Gate, str, str]:
    """Return (gate, reason code, one-sentence summary).

    `coverage` is per sub-question (veralith.models.Coverage); `sufficient` says per sub-question
    whether the context can answer it, None when the Sufficiency judge failed. `failing`: the cells
    that fail the gate (default: the configured policy, `fail_cells()`); a cell outside it passes,
    refusal or not, with reason `cell_allowed`.
    """
    if availability is Availability.not_evaluated or failure_cell is None:
        return (Gate.indeterminate, "not_classified",
                "No failure cell could be determined because a judge failed; nothing is claimed about quality.")
    if availability is Availability.no_assessable_claims:
        return Gate.fail, "no_assessable_claims", "The response makes no claim that answers the query."
    if failure_cell is FailureCell.complete_grounded:
        return Gate.pass_, "complete_grounded", "Every part of the query is answered by claims grounded in the context."
    if failure_cell not in (fail_cells() if failing is None else failing):
        return (Gate.pass_, "cell_allowed", f"The trace is {failure_cell.value}, a cell this project's gate policy "
                "lets pass (VERALITH_GATE_FAIL_CELLS).")
    if response_kind in REFUSAL_KINDS:
        return _refusal_gate(failure_cell, response_kind, coverage or {}, sufficient, n_extra_claims)
    return Gate.fail, failure_cell.value, _FAIL_SUMMARY[failure_cell]


def _refusal_gate(cell: FailureCell, kind: ResponseKind, coverage: Mapping[str, Coverage],
                  sufficient: Mapping[str, bool] | None, n_extra: int) -> tuple[Gate, str, str]:
    what = "declines part of the query" if kind is ResponseKind.partial_refusal else "declines to answer"
    if cell.value.endswith("_ungrounded"):
        return Gate.fail, cell.value, f"The response {what}, and claims it does make are not grounded in the context."
    uncovered = [q for q, c in coverage.items() if c is not Coverage.answered]
    if sufficient is None:
        return (Gate.indeterminate, "refusal_sufficiency_unknown",
                f"The response {what}, and whether the context could have answered is unknown.")
    answerable = [q for q in uncovered if sufficient.get(q, False)]
    if answerable:
        return (Gate.fail, "unnecessary_refusal",
                f"The response {what} although the context answers {', '.join(answerable)}.")
    if n_extra:
        return (Gate.fail, "refusal_with_extra_claims",
                f"The response rightly {what}, but adds claims the query did not ask for.")
    if kind is ResponseKind.partial_refusal:
        return (Gate.pass_, "correct_partial_refusal",
                "The response answers what the context supports and rightly declines the rest.")
    return Gate.pass_, "correct_refusal", "The response declines, and the context indeed cannot answer."


_FAIL_SUMMARY = {
    FailureCell.complete_ungrounded: "Every part is answered, but some claims are not grounded in the context.",
    FailureCell.incomplete_grounded: "The claims are grounded, but part of the query is left unanswered.",
    FailureCell.incomplete_ungrounded: "Part of the query is unanswered and some claims are not grounded.",
    FailureCell.extra_grounded: "The answer is grounded but adds claims the query did not ask for.",
    FailureCell.extra_ungrounded: "The answer adds claims the query did not ask for, and some are not grounded.",
}

_JUDGES = frozenset({Phase.sufficiency, Phase.faithfulness, Phase.completeness})


def status(*, errors: Iterable[JudgeError], failure_cell: FailureCell | None, response_kind: ResponseKind | None,
           n_claims: int, coverage: Mapping[str, Coverage] | None = None,
           sufficient: Mapping[str, bool] | None = None, n_extra_claims: int = 0) -> Status:
    """Every status layer of a judged trace. `response_kind` is None when decomposition failed."""
    errors = list(errors)
    phases = {e.phase for e in errors}
    failed = errors if response_kind is None else [e for e in errors if e.phase in _JUDGES]
    if not errors:
        execution = Execution.success
    elif response_kind is None or phases >= _JUDGES:
        # Nothing could be judged: say whether the server's slowness is why.
        execution = Execution.timeout if all(e.kind == "timeout" for e in failed) else Execution.error
    else:
        execution = Execution.partial
    refused = next((e for e in errors if e.kind in INPUT_REFUSALS), None)
    if response_kind is None:
        kind = errors[0].kind if errors else "unknown"
        if refused is not None:
            return Status(execution=execution, availability=Availability.not_evaluated,
                          quality_gate=Gate.indeterminate, reason=refused.kind,
                          summary=f"Not judged: {refused.message}.")
        return Status(execution=execution, availability=Availability.not_evaluated, quality_gate=Gate.indeterminate,
                      reason="decomposition_failed", summary=f"Decomposition failed ({kind}); nothing was judged.")
    if failure_cell is None:
        availability = Availability.not_evaluated
    elif n_claims == 0 and response_kind not in REFUSAL_KINDS:
        availability = Availability.no_assessable_claims
    else:
        availability = Availability.assessed
    gate, reason, summary = quality_gate(failure_cell=failure_cell, availability=availability,
                                         response_kind=response_kind, coverage=coverage, sufficient=sufficient,
                                         n_extra_claims=n_extra_claims)
    if gate is Gate.indeterminate and refused is not None:
        reason, summary = refused.kind, f"Not judged: {refused.message}."
    if errors:
        summary = f"{summary} (Failed: {', '.join(sorted(p.value for p in phases))}.)"
    return Status(execution=execution, availability=availability, quality_gate=gate, reason=reason, summary=summary)


def reference_gate(st: Status, reference: ReferenceAssessment | None, *,
                   require_correct: bool | None = None) -> Status:
    """The gate with the team's reference answer taken into account; without one, `st` unchanged.

    A response that contradicts a reference fact fails, whatever its cell: it is grounded in, or
    complete against, the wrong thing. With `require_correct` (default: VERALITH_GATE_REQUIRE_CORRECT)
    anything but `correct` fails too, and a reference whose verdicts are missing turns a pass into
    indeterminate: the gate never passes on a reference nobody judged. A fail is never turned into
    anything else."""
    if reference is None or reference.answer is None or st.quality_gate is Gate.fail:
        return st
    if require_correct is None:
        from veralith.config import settings
        require_correct = settings.gate_require_correct
    layer = reference.correctness
    if any(f.correctness is FactCorrectness.contradicted for f in reference.facts):
        return st.model_copy(update={"quality_gate": Gate.fail, "reason": "contradicts_reference",
                                     "summary": f"{reference.summary} {st.summary}"})
    if not require_correct or layer is Correctness.correct:
        return st
    if layer is Correctness.not_assessed:
        if st.quality_gate is not Gate.pass_:
            return st
        return st.model_copy(update={"quality_gate": Gate.indeterminate, "reason": "reference_not_assessed",
                                     "summary": f"{reference.summary} The gate requires a correct answer "
                                                "(VERALITH_GATE_REQUIRE_CORRECT)."})
    return st.model_copy(update={"quality_gate": Gate.fail, "reason": f"reference_{layer.value}",
                                 "summary": f"{reference.summary} The gate requires every reference fact "
                                            "(VERALITH_GATE_REQUIRE_CORRECT)."})
