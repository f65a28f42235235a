"""A regression set from labels: labelled traces written as `eval` records with the verdicts people
expect (`veralith export --labelled`), and those expectations read back and compared with what the
judge says now (`veralith eval FILE --expect [--min-agreement X]`, a CI gate on the judge itself).

A record is the trace's inputs (id, query, context, response, knowledge_base, metadata) plus
`expected`: {"cell": ..., "gate": ..., "claims": {"k2": {"relation": ..., "text": ...}},
"sufficiency": {"q1": {"verdict": "Y", "text": ...}}, "coverage": {"q1": {"coverage": ..., "text": ...}}}.
A claim or sub-question is matched by its id and checked by its text: a judge that now decomposes
the trace differently (another model, another prompt) cannot be compared on it, and that is
counted (`moved`), never scored as agreement or disagreement.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from veralith.models import EvaluationResult
from veralith.review.agreement import Report, agreement
from veralith.store.labels import Label, LabelError, check

__all__ = ["Comparison", "Expected", "compare", "expected_labels", "moved", "record"]

_ITEM_KEYS = {"claim": ("claims", "relation"), "sufficiency": ("sufficiency", "verdict"),
              "coverage": ("coverage", "coverage")}


def record(inputs: dict[str, Any], result: EvaluationResult, labels: Iterable[Label]) -> dict[str, Any]:
    """One regression record: `inputs` (id, query, context, response, knowledge_base, metadata) with
    the current labels of its trace as `expected`."""
    texts = {"claim": {c.id: c.text for c in result.claims},
             "sufficiency": {q.id: q.text for q in result.sub_questions},
             "coverage": {q.id: q.text for q in result.sub_questions}}
    expected: dict[str, Any] = {}
    for label in labels:
        if label.target in ("cell", "gate"):
            expected[label.target] = label.value
        else:
            group, key = _ITEM_KEYS[label.target]
            expected.setdefault(group, {})[label.item] = {key: label.value,
                                                          "text": texts[label.target].get(label.item, "")}
    return {**inputs, "expected": expected}


@dataclass(frozen=True)
class Expected:
    target: str
    item: str
    value: str
    text: str | None


def expected_labels(expected: Any) -> list[Expected]:
    """The expectations of one record (LabelError when one is malformed)."""
    if not isinstance(expected, dict):
        raise LabelError("`expected` must be a JSON object")
    out: list[Expected] = []
    for target in ("cell", "gate"):
        if target in expected:
            _, _, value = check(target, "", str(expected[target]))
            out.append(Expected(target, "", value, None))
    for target, (group, key) in _ITEM_KEYS.items():
        items = expected.get(group) or {}
        if not isinstance(items, dict):
            raise LabelError(f"`expected.{group}` must map ids to verdicts")
        for item, spec in items.items():
            given, text = (spec.get(key), spec.get("text")) if isinstance(spec, dict) else (spec, None)
            _, name, value = check(target, str(item), str(given))
            out.append(Expected(target, name, value, str(text) if text else None))
    return out


def moved(result: EvaluationResult, want: Expected) -> bool:
    """Whether the claim or sub-question the expectation names is no longer the one it was given on."""
    if want.target in ("cell", "gate") or want.text is None:
        return False
    pool = result.claims if want.target == "claim" else result.sub_questions
    now = next((x.text for x in pool if x.id == want.item), None)
    return now is None or " ".join(now.split()) != " ".join(want.text.split())


@dataclass(frozen=True)
class Comparison:
    """Expected verdicts against what the judge says now: the agreement report (veralith.review.agreement),
    the expectations left out because the judge now splits the trace differently, and the records that
    could not be compared at all."""

    report: Report
    moved: int = 0
    problems: int = 0

    @property
    def agree(self) -> int:
        return sum(t.agree for t in self.report.judges.values())

    @property
    def total(self) -> int:
        return sum(t.n for t in self.report.judges.values())

    @property
    def overall(self) -> float | None:
        """Agreement over every expected verdict compared (the CI gate's figure)."""
        return self.agree / self.total if self.total else None

    def failure(self, min_agreement: float | None) -> str | None:
        """Why the gate `--min-agreement` fails (None: it holds, or there is no gate): the rule of
        `veralith eval --expect` and of veralith.testing.assert_agreement alike."""
        if min_agreement is None:
            return None
        overall = self.overall
        if overall is None:
            return "nothing could be compared"
        if overall < min_agreement:
            return f"{overall:.3f} is below {min_agreement}"
        return f"{self.problems} record(s) could not be compared" if self.problems else None


def compare(found: Iterable[tuple[EvaluationResult, Any]], *, min_labels: int, problems: int = 0) -> Comparison:
    """Each (result, its record's `expected`) compared the way `veralith agreement` compares a label; a
    result without a trace id counts by its place (a result the caller did not store). LabelError when
    an expectation is malformed."""
    pairs: list[tuple[Label, EvaluationResult]] = []
    shifted = 0
    for n, (result, expected) in enumerate(found):
        for want in expected_labels(expected):
            if moved(result, want):
                shifted += 1
                continue
            trace = int(result.trace_id) if result.trace_id is not None else -1 - n
            pairs.append((Label(trace_id=trace, target=want.target, item=want.item, value=want.value,
                                reviewer="expected"), result))
    return Comparison(agreement(pairs, min_labels=min_labels), shifted, problems)
