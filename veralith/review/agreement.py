"""How often the judge agrees with the people who labelled its traces (`veralith agreement`).

Each current label (the newest on its part of a trace) is compared with what the trace's stored
result says now (veralith.review.verdicts.judged). For each judge (sufficiency: a sub-question's
Y/N; faithfulness: a claim's relation; completeness: a sub-question's coverage) and for the cell
and the gate:

- agreement = agreeing labels / labels the judge gave a value for, with a 95 % Wilson score
  interval (it stays inside [0, 1] and is honest at small n, unlike the normal approximation);
- the confusion matrix (the label's value by the judge's), and Cohen's kappa: agreement beyond
  what the two marginals would give by chance (None when chance agreement is 1, e.g. one class);
- the same split by the result's `needs_review` flag (is the flag worth reading?) and by judge
  model and prompt version (did a change help?).

A figure on fewer than `min_labels` labels is marked `too_few`: reported, never concluded from.
Labels whose part the judge gave no value (a judge that failed) are counted as `not_judged`, not
as disagreements.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from veralith.models import EvaluationResult
from veralith.review.verdicts import JUDGE_OF, judged
from veralith.store.labels import Label

__all__ = ["JUDGES", "Report", "Tally", "agreement", "cohen_kappa", "wilson"]

JUDGES = ("sufficiency", "faithfulness", "completeness", "cell", "gate")
Z95 = 1.959963984540054


def wilson(agree: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion agree/n (None for n = 0)."""
    if n <= 0:
        return None
    p = agree / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def cohen_kappa(confusion: dict[tuple[str, str], int]) -> float | None:
    """Cohen's kappa of a confusion matrix {(label, judged): count}; None when undefined."""
    n = sum(confusion.values())
    if n == 0:
        return None
    observed = sum(c for (a, b), c in confusion.items() if a == b) / n
    rows: dict[str, int] = {}
    cols: dict[str, int] = {}
    for (a, b), c in confusion.items():
        rows[a] = rows.get(a, 0) + c
        cols[b] = cols.get(b, 0) + c
    chance = sum(rows.get(k, 0) * cols.get(k, 0) for k in set(rows) | set(cols)) / (n * n)
    return None if chance >= 1 else (observed - chance) / (1 - chance)


@dataclass
class Tally:
    confusion: dict[tuple[str, str], int] = field(default_factory=dict)
    not_judged: int = 0

    def add(self, label: str, judge: str | None) -> None:
        if judge is None:
            self.not_judged += 1
        else:
            self.confusion[(label, judge)] = self.confusion.get((label, judge), 0) + 1

    @property
    def n(self) -> int:
        return sum(self.confusion.values())

    @property
    def agree(self) -> int:
        return sum(c for (a, b), c in self.confusion.items() if a == b)

    @property
    def rate(self) -> float | None:
        return self.agree / self.n if self.n else None

    def figures(self, min_labels: int) -> dict[str, Any]:
        interval = wilson(self.agree, self.n)
        return {"labels": self.n, "agree": self.agree, "agreement": self.rate,
                "interval_95": list(interval) if interval else None, "kappa": cohen_kappa(self.confusion),
                "not_judged": self.not_judged, "too_few": self.n < min_labels,
                "confusion": [{"label": a, "judge": b, "n": c} for (a, b), c in sorted(self.confusion.items())]}


@dataclass
class Report:
    min_labels: int
    judges: dict[str, Tally] = field(default_factory=dict)
    by_cell: dict[str, Tally] = field(default_factory=dict)          # cell labels, by the cell people gave
    by_review: dict[str, dict[str, Tally]] = field(default_factory=dict)    # judge -> flagged|not flagged
    by_version: dict[str, dict[str, Tally]] = field(default_factory=dict)   # judge -> "model prompt"
    traces: int = 0

    def to_json(self) -> dict[str, Any]:
        def each(tallies: dict[str, Tally]) -> dict[str, Any]:
            return {k: t.figures(self.min_labels) for k, t in tallies.items()}

        return {"min_labels": self.min_labels, "traces": self.traces, "judges": each(self.judges),
                "by_cell": each(self.by_cell), "by_review": {j: each(v) for j, v in self.by_review.items()},
                "by_version": {j: each(v) for j, v in self.by_version.items()}}


def _version(result: EvaluationResult, judge: str) -> str:
    """The judge model and the prompt version behind a judge's verdicts (for the cell and the gate:
    every prompt's)."""
    versions = result.prompt_versions
    prompt = versions.get(judge) if judge in versions else "+".join(f"{v}" for _, v in sorted(versions.items()))
    return f"{result.judge_model} {prompt or '?'}"


def agreement(pairs: Iterable[tuple[Label, EvaluationResult]], *, min_labels: int = 30) -> Report:
    """The report over (current label, the trace's stored result) pairs (see the module docstring)."""
    report = Report(min_labels=min_labels)
    seen: set[int] = set()
    for label, result in pairs:
        seen.add(label.trace_id)
        judge = JUDGE_OF[label.target]
        said = judged(result, label.target, label.item)
        report.judges.setdefault(judge, Tally()).add(label.value, said)
        if label.target == "cell":
            report.by_cell.setdefault(label.value, Tally()).add(label.value, said)
        flag = "needs_review" if result.needs_review else "not_flagged"
        report.by_review.setdefault(judge, {}).setdefault(flag, Tally()).add(label.value, said)
        report.by_version.setdefault(judge, {}).setdefault(_version(result, judge), Tally()).add(label.value, said)
    report.traces = len(seen)
    report.judges = {j: report.judges[j] for j in JUDGES if j in report.judges}
    return report
