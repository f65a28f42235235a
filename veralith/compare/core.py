"""Comparing two runs: a pure function over their loaded rows.

Traces are matched as veralith.compare.match says. Each matched pair moves from a cell to a cell
(or to/from `indeterminate`: no cell, because a judge failed) and from a gate to a gate. A
*regression* is pass → fail, an *improvement* fail → pass; a pair that gained or lost
`indeterminate` on either side is a gate change of its own kind, never counted as either, because a
judge outage says nothing about the application. A pair with no result on a side (never judged) is
no change at all: it is listed apart and left out of every paired figure, and the views say how
many were left out.

`compare_rows` needs only the rolled-up rows (fast: no judgment is read); `with_reasons` then adds
the one-line reason of each changed pair from the stored details of just those traces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple

from veralith.compare.correctness import CorrectnessComparison, compare_correctness
from veralith.compare.match import match
from veralith.compare.reasons import failure_reason
from veralith.compare.stats import PairedTest, paired_test
from veralith.errors import VeralithError
from veralith.models import CELLS_BY_SEVERITY, NO_CELL, cell_severity

__all__ = ["CELLS", "INDETERMINATE", "NOT_JUDGED", "Change", "Comparison", "MixedModes", "Only", "TraceRow",
           "cell_of", "compare_rows", "gate_of", "left_out_note", "mixed_modes_note", "modes_of", "paired_label",
           "severity", "with_reasons"]

# A gate or a cell that is not there reads as "indeterminate" (the one name, veralith.models.NO_CELL).
INDETERMINATE = NO_CELL
# The side of a pair that has no result at all (pending, running, its evaluation failed).
NOT_JUDGED = "not judged"
# Worst first (veralith.models.CELLS_BY_SEVERITY): the transition matrix's rows and columns.
CELLS = CELLS_BY_SEVERITY


class TraceRow(NamedTuple):
    """One trace of a run, as veralith.store.runs.trace_rows reads it."""

    id: int
    external_id: str | None
    knowledge_base: str
    query: str
    failure_cell: str | None
    quality_gate: str | None      # None: no stored result (pending, running, error)
    status: str
    sufficiency_fraction: float | None
    faithfulness_fraction: float | None
    n_claims: int | None
    n_extra_claims: int | None
    reason: str | None = None     # the stored one-line why (eval runs), else built by with_reasons
    mode: str | None = None       # "full" | "fast" (veralith.pipeline.fast); None without a result
    correctness: str | None = None  # the correctness layer the run had (None: no reference or no result)
    # False: an eval run's copy taken before runs kept the layer (migration 0026) that it could not fill:
    # whether the trace had a reference then is not known (its `correctness` None says nothing).
    correctness_known: bool = True


def cell_of(row: TraceRow) -> str:
    return row.failure_cell or INDETERMINATE


def gate_of(row: TraceRow) -> str:
    return row.quality_gate or INDETERMINATE


def severity(cell: str | None) -> int:
    """Rank of a cell, 0 the worst (CELLS order); None counts as indeterminate."""
    return cell_severity(cell)


@dataclass(frozen=True)
class Change:
    """A matched pair whose gate changed."""

    key: str                      # external id, else the query
    knowledge_base: str
    old_trace_id: int
    new_trace_id: int
    old_cell: str
    new_cell: str
    old_gate: str
    new_gate: str
    reason: str | None = None     # one line, from the stored result (with_reasons)


@dataclass(frozen=True)
class Only:
    """A trace present in one run only."""

    key: str
    knowledge_base: str
    trace_id: int
    cell: str
    gate: str


@dataclass(frozen=True)
class Comparison:
    run_a: dict[str, Any]
    run_b: dict[str, Any]
    matched: int
    matched_by_external_id: int
    matrix: dict[str, dict[str, int]]          # old cell -> new cell -> pairs (every cell present)
    pass_rate_a: float | None                  # over all traces of the run that have a result
    pass_rate_b: float | None
    test: PairedTest                           # over the matched pairs
    regressions: list[Change]
    improvements: list[Change]
    indeterminate_changes: list[Change]        # to or from indeterminate on either side
    shifts: dict[str, dict[str, float | None]]  # judge -> {a, b, delta} over the matched pairs
    only_in_a: list[Only] = field(default_factory=list)
    only_in_b: list[Only] = field(default_factory=list)
    # The judging modes of each run's results ("full", "fast"); two different sets were compared only
    # because the caller allowed it (compare_runs' allow_mixed_modes), and every view says so.
    modes_a: list[str] = field(default_factory=list)
    modes_b: list[str] = field(default_factory=list)
    # Matched pairs where a side has no result: never judged, so left out of every paired figure.
    not_judged: list[Change] = field(default_factory=list)
    # Matched pairs the paired test leaves out: {"not_judged": n, "indeterminate": n}.
    left_out: dict[str, int] = field(default_factory=dict)
    # The correctness layer's transitions and paired test (veralith.compare.correctness); None when
    # no pair judged in both runs had a reference on either side.
    correctness: CorrectnessComparison | None = None

    @property
    def mixed_modes(self) -> bool:
        return len({*self.modes_a, *self.modes_b}) > 1

    def reason_trace_ids(self) -> list[int]:
        """The traces whose details `with_reasons` needs: the failing side of every change that
        has no stored reason yet."""
        ids = [c.new_trace_id for c in self.regressions if c.reason is None]
        ids += [c.old_trace_id for c in self.improvements if c.reason is None]
        ids += [c.new_trace_id if c.new_gate == INDETERMINATE else c.old_trace_id
                for c in self.indeterminate_changes if c.reason is None]
        return ids

    def to_dict(self) -> dict[str, Any]:
        """Everything, JSON-ready (the `--json` output; `--format markdown` shows the same)."""
        return {
            "run_a": self.run_a, "run_b": self.run_b,
            "matched": self.matched, "matched_by_external_id": self.matched_by_external_id,
            "pass_rate_a": self.pass_rate_a, "pass_rate_b": self.pass_rate_b,
            "paired_test": {**asdict(self.test), "ci95": list(self.test.ci95) if self.test.ci95 else None},
            "matrix": self.matrix,
            "regressions": [asdict(c) for c in self.regressions],
            "improvements": [asdict(c) for c in self.improvements],
            "indeterminate_changes": [asdict(c) for c in self.indeterminate_changes],
            "shifts": self.shifts,
            "only_in_a": [asdict(o) for o in self.only_in_a],
            "only_in_b": [asdict(o) for o in self.only_in_b],
            "modes_a": self.modes_a, "modes_b": self.modes_b, "mixed_modes": self.mixed_modes,
            "not_judged": [asdict(c) for c in self.not_judged], "left_out": self.left_out,
            "correctness": self.correctness.to_dict() if self.correctness is not None else None,
        }


def compare_rows(rows_a: Sequence[TraceRow], rows_b: Sequence[TraceRow], *, run_a: Mapping[str, Any] | None = None,
                 run_b: Mapping[str, Any] | None = None) -> Comparison:
    """Compare run A (before) with run B (after). Rows are taken in the order given (id order
    from the store), which decides how duplicate queries pair up.

    A pair where either side has no result (never judged: pending, running, or its evaluation
    failed) is listed under `not_judged` and left out of the matrix, the paired test and the shifts;
    a pair with an `indeterminate` gate on either side stays in the matrix but is left out of the
    paired test, which needs a pass or a fail on both sides. `left_out` counts both."""
    pairs, by_external, only_a, only_b = match(rows_a, rows_b)
    judged = [(a, b) for a, b in pairs if a.quality_gate is not None and b.quality_gate is not None]
    # One tally per (old cell, new cell, old gate, new gate): the matrix and the 2x2 table of the
    # paired test come from a few dozen keys, and only pairs whose gate moved become Changes.
    moves = Counter((cell_of(a), cell_of(b), gate_of(a), gate_of(b)) for a, b in judged)
    matrix = {old: dict.fromkeys(CELLS, 0) for old in CELLS}
    table = [0, 0, 0, 0]  # both pass, pass->not, not->pass, neither
    indeterminate_pairs = 0
    for (cell_a, cell_b, gate_a, gate_b), n in moves.items():
        matrix[cell_a][cell_b] += n
        if INDETERMINATE in (gate_a, gate_b):
            indeterminate_pairs += n
        else:
            table[(0 if gate_a == "pass" else 2) + (0 if gate_b == "pass" else 1)] += n
    regressions, improvements, indeterminate, not_judged = [], [], [], []
    for a, b in pairs:
        if a.quality_gate is None or b.quality_gate is None:
            not_judged.append(_unjudged(a, b))
            continue
        gate_a, gate_b = gate_of(a), gate_of(b)
        if gate_a == gate_b:
            continue
        change = Change(_key(a), a.knowledge_base, a.id, b.id, cell_of(a), cell_of(b), gate_a, gate_b)
        if INDETERMINATE in (gate_a, gate_b):
            failing, prefix = (b, "") if gate_b == INDETERMINATE else (a, "was: ")
            indeterminate.append(_reasoned(change, failing, prefix))
        elif gate_a == "pass":
            regressions.append(_reasoned(change, b, ""))
        else:
            improvements.append(_reasoned(change, a, "fixed: "))
    # Worst first, then in id order within a knowledge base (ids, not their text: big-2 before big-10).
    regressions.sort(key=lambda c: (severity(c.new_cell), c.knowledge_base, c.new_trace_id))
    improvements.sort(key=lambda c: (severity(c.old_cell), c.knowledge_base, c.old_trace_id))
    indeterminate.sort(key=lambda c: (c.knowledge_base, c.new_trace_id))
    both_pass, pass_to_not, not_to_pass, neither = table
    return Comparison(
        run_a=dict(run_a or {}), run_b=dict(run_b or {}), matched=len(pairs), matched_by_external_id=by_external,
        matrix=matrix, pass_rate_a=_pass_rate(rows_a), pass_rate_b=_pass_rate(rows_b),
        test=paired_test(both_pass, pass_to_not, not_to_pass, neither),
        regressions=regressions, improvements=improvements, indeterminate_changes=indeterminate,
        shifts=_shifts(judged), only_in_a=[_only(r) for r in only_a], only_in_b=[_only(r) for r in only_b],
        modes_a=modes_of(rows_a), modes_b=modes_of(rows_b), not_judged=not_judged,
        left_out={"not_judged": len(not_judged), "indeterminate": indeterminate_pairs},
        correctness=compare_correctness(judged, _key))


def left_out_note(c: Comparison) -> str | None:
    """One line saying which matched pairs the paired test leaves out and why (None when none)."""
    never, unsure = c.left_out.get("not_judged", 0), c.left_out.get("indeterminate", 0)
    if not never and not unsure:
        return None
    parts = [f"{never} never judged in A or B" if never else "",
             f"{unsure} indeterminate in A or B (a judge failed)" if unsure else ""]
    return (f"left out of the paired statistics: {', '.join(p for p in parts if p)}; the test is over the "
            f"{c.test.n} pair(s) with a pass or a fail on both sides")


def paired_label(c: Comparison) -> str:
    """What the paired pass rates are over: the matched pairs, or those left after `left_out`."""
    if c.left_out.get("not_judged", 0) or c.left_out.get("indeterminate", 0):
        return f"{c.test.n} pairs judged pass or fail in both"
    return f"{c.test.n} matched pairs"


class MixedModes(VeralithError):
    """Two runs judged in different modes: a change between them may be the mode's, not the app's."""


def modes_of(rows: Sequence[TraceRow]) -> list[str]:
    """The judging modes of the rows that have a result, sorted."""
    return sorted({r.mode for r in rows if r.mode})


def mixed_modes_note(c: Comparison) -> str | None:
    """One line saying the runs were judged in different modes, when they were (None otherwise)."""
    if not c.mixed_modes:
        return None
    return (f"modes differ: A was judged {'+'.join(c.modes_a) or 'n/a'}, B {'+'.join(c.modes_b) or 'n/a'}; "
            "the fast mode agrees less with careful labels, so some changes may be the mode's, not the app's")


def with_reasons(comparison: Comparison, details: Mapping[int, Mapping[str, Any]]) -> Comparison:
    """The comparison with each change's reason filled in from `details` (trace id -> what
    veralith.store.runs.failure_details returns); a trace missing from `details` keeps None."""
    def fill(change: Change, trace_id: int, prefix: str) -> Change:
        detail = details.get(trace_id)
        if detail is None or change.reason is not None:
            return change
        return replace(change, reason=prefix + failure_reason(detail))

    return replace(
        comparison,
        regressions=[fill(c, c.new_trace_id, "") for c in comparison.regressions],
        improvements=[fill(c, c.old_trace_id, "fixed: ") for c in comparison.improvements],
        indeterminate_changes=[
            fill(c, c.new_trace_id, "") if c.new_gate == INDETERMINATE else fill(c, c.old_trace_id, "was: ")
            for c in comparison.indeterminate_changes])


# --- internals ----------------------------------------------------------------------------------


def _unjudged(a: TraceRow, b: TraceRow) -> Change:
    """A pair with no result on a side: what each side is, and which side was never judged."""
    def side(row: TraceRow) -> tuple[str, str]:
        return (NOT_JUDGED, NOT_JUDGED) if row.quality_gate is None else (cell_of(row), gate_of(row))

    (cell_a, gate_a), (cell_b, gate_b) = side(a), side(b)
    missing = [f"{name} ({row.status})" for name, row in (("A", a), ("B", b)) if row.quality_gate is None]
    return Change(_key(a), a.knowledge_base, a.id, b.id, cell_a, cell_b, gate_a, gate_b,
                  reason="no result in " + " and ".join(missing))


def _reasoned(change: Change, failing: TraceRow, prefix: str) -> Change:
    return change if failing.reason is None else replace(change, reason=prefix + failing.reason)


def _key(row: TraceRow) -> str:
    return row.external_id if row.external_id is not None else row.query


def _only(row: TraceRow) -> Only:
    return Only(_key(row), row.knowledge_base, row.id, cell_of(row), gate_of(row))


def _pass_rate(rows: Sequence[TraceRow]) -> float | None:
    judged = [r for r in rows if r.quality_gate is not None]
    return sum(r.quality_gate == "pass" for r in judged) / len(judged) if judged else None


def _shifts(pairs: Sequence[tuple[TraceRow, TraceRow]]) -> dict[str, dict[str, float | None]]:
    """Per-judge means over the matched pairs: sufficiency rate (mean fraction of sub-questions
    the context suffices for), faithfulness fraction (mean fraction of grounded claims), and the
    extra-claim rate (extra claims / claims, pooled over the pairs)."""
    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    def side(rows: list[TraceRow]) -> dict[str, float | None]:
        claims = sum(r.n_claims or 0 for r in rows if r.n_claims is not None)
        extra = sum(r.n_extra_claims or 0 for r in rows if r.n_claims is not None)
        return {"sufficiency_rate": mean([r.sufficiency_fraction for r in rows if r.sufficiency_fraction is not None]),
                "faithfulness_fraction": mean([r.faithfulness_fraction for r in rows
                                               if r.faithfulness_fraction is not None]),
                "extra_claim_rate": extra / claims if claims else None}

    a, b = side([p[0] for p in pairs]), side([p[1] for p in pairs])
    out: dict[str, dict[str, float | None]] = {}
    for name in a:
        va, vb = a[name], b[name]
        out[name] = {"a": va, "b": vb, "delta": None if va is None or vb is None else vb - va}
    return out
