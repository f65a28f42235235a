"""Assertions for an application's own test suite: "this answer must be complete and grounded".

    from veralith.testing import assert_diagnosis

    def test_refund_answer():
        assert_diagnosis("How long do I have to return an item?", chunks, answer, cell="complete_grounded")

`assert_diagnosis` evaluates the trace (without writing to the database) and raises AssertionError
when the cell or the gate differ from what is expected. The message is the diagnosis a person
needs to fix the answer: the cell and gate found, each ungrounded claim with its relation and the
chunks against it, each uncovered sub-question, the extra claims and any judge error, not a bare
`assert False`. The pytest plugin (veralith.pytest_plugin) offers the same through the `veralith`
fixture, with the backend chosen once for the session.

`assert_agreement` checks the judge itself against people: it judges a labelled export (`veralith
export --labelled`) and fails when its agreement with the expected verdicts is below a minimum, the
computation and rule of `veralith eval FILE --expect --min-agreement X` (veralith.review.regression).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from veralith.models import EvaluationResult, FailureCell

if TYPE_CHECKING:
    from veralith.review.regression import Comparison

__all__ = ["AgreementBelow", "DiagnosisMismatch", "assert_agreement", "assert_diagnosis", "explain",
           "uncovered_sub_questions"]

_GATES = ("pass", "fail", "indeterminate")
_CORRECTNESS = ("correct", "partly_correct", "incorrect", "not_assessed")


class DiagnosisMismatch(AssertionError):
    """The trace's diagnosis is not the expected one; `result` is the full EvaluationResult."""

    def __init__(self, message: str, result: EvaluationResult) -> None:
        super().__init__(message)
        self.result = result


def assert_diagnosis(query: str, context: Any, response: str, *, cell: str | FailureCell | None = None,
                     gate: str | None = "pass", knowledge_base: str = "default",
                     metadata: dict[str, Any] | None = None, reference: str | None = None,
                     reference_contexts: Any = None, correctness: str | None = None) -> EvaluationResult:
    """Evaluate (query, context, response) and check its failure cell and quality gate.

    `cell` (a cell name or FailureCell; None: any) and `gate` ("pass", "fail", "indeterminate";
    None: any) are what the trace must get. With a `reference` answer (and `reference_contexts`), the
    gate counts it (a contradicted reference fact fails) and `correctness` ("correct", "partly_correct",
    "incorrect", "not_assessed"; None: any) is checked too. Returns the result when all hold; raises
    DiagnosisMismatch (an AssertionError) explaining the diagnosis otherwise. Bad arguments raise
    ValueError before anything is evaluated. Nothing is written to the database.
    """
    __tracebackhide__ = True  # pytest: the failure points at the caller's line, not ours
    expected_cell = _cell(cell)
    if gate is not None and gate not in _GATES:
        raise ValueError(f"gate must be one of {', '.join(_GATES)} or None, got {gate!r}")
    if correctness is not None and correctness not in _CORRECTNESS:
        raise ValueError(f"correctness must be one of {', '.join(_CORRECTNESS)} or None, got {correctness!r}")
    if correctness is not None and reference is None:
        raise ValueError("correctness is judged against a reference answer: pass reference=...")
    import veralith

    result = veralith.evaluate(query, context, response, persist=False, knowledge_base=knowledge_base,
                               metadata=metadata, reference=reference, reference_contexts=reference_contexts)
    found_cell = result.failure_cell.value if result.failure_cell else None
    found_gate = result.status.quality_gate.value
    wrong = []
    if expected_cell is not None and found_cell != expected_cell:
        wrong.append(f"cell {found_cell or 'none (indeterminate)'}, expected {expected_cell}")
    if gate is not None and found_gate != gate:
        wrong.append(f"gate {found_gate}, expected {gate}")
    found_correctness = result.reference.correctness.value if result.reference else None
    if correctness is not None and found_correctness != correctness:
        wrong.append(f"correctness {found_correctness}, expected {correctness}")
    if wrong:
        raise DiagnosisMismatch("veralith: " + "; ".join(wrong) + "\n" + explain(result), result)
    return result


class AgreementBelow(AssertionError):
    """The judge agrees with the expected verdicts less than required; `comparison` has the figures."""

    def __init__(self, message: str, comparison: Comparison) -> None:
        super().__init__(message)
        self.comparison = comparison


def assert_agreement(path: str | os.PathLike[str], min_agreement: float = 0.9, *,
                     knowledge_base: str = "default") -> Comparison:
    """Judge every record of a labelled export (`veralith export --labelled`: JSON lines with `expected`)
    and check the judge's agreement with those verdicts is at least `min_agreement`.

    The comparison and the rule are `veralith eval FILE --expect --min-agreement X`'s: per expected
    verdict, the same label-against-result comparison as `veralith agreement`; an expected claim or
    sub-question the judge now splits differently is not compared (counted in `moved`); the gate fails
    when nothing could be compared, when the agreement is below `min_agreement`, or when a record could
    not be compared. Returns the Comparison when it holds; raises AgreementBelow (an AssertionError)
    with the per-judge table otherwise. Records are judged without writing to the database (the verdicts
    compared do not depend on a store). A file that cannot be read raises ValueError naming the line.
    """
    __tracebackhide__ = True
    if not 0 <= min_agreement <= 1:
        raise ValueError(f"min_agreement must be from 0 to 1, got {min_agreement!r}")
    import veralith
    from veralith.config import settings
    from veralith.review.regression import compare, expected_labels
    from veralith.review.report import markdown
    from veralith.store.labels import LabelError

    found: list[tuple[EvaluationResult, Any]] = []
    with open(path, encoding="utf-8-sig") as lines:
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or "expected" not in record:
                    continue   # a record without expectations is not part of the check
                expected_labels(record["expected"])
            except (ValueError, LabelError) as exc:
                raise ValueError(f"{path}:{n}: {exc}") from None
            result = veralith.evaluate(str(record.get("query", "")), record.get("context") or [],
                                       str(record.get("response", "")), persist=False,
                                       knowledge_base=str(record.get("knowledge_base") or knowledge_base),
                                       metadata=record.get("metadata") or None)
            found.append((result, record["expected"]))
    comparison = compare(found, min_labels=settings.labels_min)
    why = comparison.failure(min_agreement)
    if why is not None:
        counted = f"{comparison.agree}/{comparison.total}" if comparison.total else "0"
        moved = f"; {comparison.moved} not compared (the judge now splits them differently)" if comparison.moved else ""
        raise AgreementBelow(f"veralith: judge agreement {why} ({counted} expected verdicts agree{moved})\n"
                             + markdown(comparison.report.to_json()), comparison)
    return comparison


def explain(result: EvaluationResult) -> str:
    """The diagnosis as indented plain lines (what assert_diagnosis shows on failure)."""
    lines = [f"  query:    {_one_line(result.query, 200)}",
             f"  response: {_one_line(result.response, 200)}",
             f"  cell:     {result.failure_cell.value if result.failure_cell else 'none'}"
             f"  gate: {result.status.quality_gate.value}"
             + (f" ({result.status.reason})" if result.status.reason else "")]
    if result.status.summary:
        lines.append(f"  status:   {_one_line(result.status.summary, 200)}")
    claims = {c.id: c.text for c in result.claims}
    bad = [j for j in result.faithfulness if j.verdict.value == "N"]
    lines.append(f"  ungrounded claims ({len(bad)} of {len(result.claims)}):" if bad else
                 f"  ungrounded claims: none of {len(result.claims)}")
    for j in bad:
        against = f" by chunk {', '.join(j.contradicting_chunk_ids)}" if j.contradicting_chunk_ids else ""
        lines.append(f"    - {j.claim_id} {j.relation.value}{against}: {_one_line(claims.get(j.claim_id, ''))}")
    comp = result.completeness
    questions = {q.id: q.text for q in result.sub_questions}
    sufficient = {j.sub_question_id: j.verdict.value for j in result.sufficiency}
    uncovered = uncovered_sub_questions(result)
    lines.append(f"  uncovered sub-questions ({len(uncovered)} of {len(result.sub_questions)}):" if uncovered
                 else f"  uncovered sub-questions: none of {len(result.sub_questions)}")
    for q, how in uncovered:
        can = {"Y": "the context answers it", "N": "the context does not answer it"}.get(sufficient.get(q, ""), "")
        lines.append(f"    - {q} {how.replace('_', ' ')}: {_one_line(questions.get(q, ''))}"
                     + (f" ({can})" if can else ""))
    if comp and comp.extra_claim_ids:
        lines.append("  extra claims (answer nothing asked):")
        lines += [f"    - {c}: {_one_line(claims.get(c, ''))}" for c in comp.extra_claim_ids]
    if result.errors:
        lines.append("  judge errors:")
        lines += [f"    - {e.phase.value} {e.kind}: {_one_line(e.message)}" for e in result.errors]
    ref = result.reference
    if ref is not None:
        lines.append(f"  reference: {ref.correctness.value}: {_one_line(ref.summary, 200)}")
        lines += [f"    - {f.id} context {f.recall.value if f.recall else 'not judged'}, response "
                  f"{f.correctness.value if f.correctness else 'not judged'}: {_one_line(f.text)}" for f in ref.facts]
    if result.suggestion is not None:
        lines.append(f"  suggestion: {result.suggestion.title}: {_one_line(result.suggestion.summary, 200)}")
    lines.append(f"  backend:  {result.backend} ({result.judge_model})")
    return "\n".join(lines)


def uncovered_sub_questions(result: EvaluationResult) -> list[tuple[str, str]]:
    """(sub-question id, how it fared) for each sub-question the response does not cover
    (`EvaluationResult.uncovered_sub_questions`)."""
    return result.uncovered_sub_questions()


def _cell(cell: str | FailureCell | None) -> str | None:
    if cell is None:
        return None
    name = cell.value if isinstance(cell, FailureCell) else cell
    if name not in FailureCell.__members__:
        raise ValueError(f"cell must be one of {', '.join(FailureCell.__members__)} or None, got {cell!r}")
    return str(name)


def _one_line(text: str, width: int = 120) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
