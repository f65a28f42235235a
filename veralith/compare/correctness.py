"""The correctness layer between two runs: how it moved, and whether the change is real.

Beside the six cells (reference-free, compared by veralith.compare.core), a trace judged against a
reference answer has a correctness layer (issue 42: `correct`, `partly_correct`, `incorrect`,
`not_assessed`). Over the matched pairs judged in both runs in which either side had a reference:

- the transition matrix of the layer, rows A, columns B, with a side that had no reference read as
  `not_assessed` (it was not assessed against one);
- the paired test compare uses for the gate (veralith.compare.stats, one implementation), with
  *correct* in the place of *pass*: McNemar's exact test on correct → not and not → correct, and
  Newcombe's interval on the difference of the share correct;
- the pairs whose layer changed between two assessed values, least correct first.

Only pairs assessed on both sides (correct, partly_correct or incorrect in A and in B) enter the test
and the list; the rest (`not_assessed` on a side, a reference on one side only, or a side whose layer
is not known: a run copy taken before runs kept it) stay in the matrix and are counted as left out, so
a judge outage or a reference added to the golden set between the runs never reads as a change of
correctness.

Each side is the layer that run had (veralith.store.runs keeps it in each eval run's own copy of the
trace's outcome), so a trace judged again in place by the later run still reads as the earlier run
saw it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from veralith.compare.stats import PairedTest, paired_test
from veralith.models import Correctness

if TYPE_CHECKING:
    from veralith.compare.core import TraceRow

__all__ = ["ASSESSED", "LAYERS", "CorrectnessChange", "CorrectnessComparison", "compare_correctness",
           "correctness_note"]

# The matrix's rows and columns, in the order the layer is defined (veralith.models.Correctness).
LAYERS: tuple[str, ...] = tuple(layer.value for layer in Correctness)
NOT_ASSESSED = Correctness.not_assessed.value
ASSESSED = frozenset(LAYERS) - {NOT_ASSESSED}
# Least correct first: the order of the list of changes.
_WORST_FIRST = {Correctness.incorrect.value: 0, Correctness.partly_correct.value: 1, Correctness.correct.value: 2}


@dataclass(frozen=True)
class CorrectnessChange:
    """A matched pair whose correctness layer changed between two assessed values."""

    key: str                      # external id, else the query
    knowledge_base: str
    old_trace_id: int
    new_trace_id: int
    old: str
    new: str


@dataclass(frozen=True)
class CorrectnessComparison:
    pairs: int                                 # matched pairs judged in both with a reference on a side
    matrix: dict[str, dict[str, int]]          # A's layer -> B's layer -> pairs (every layer present)
    test: PairedTest                           # "pass" read as correct, over the pairs assessed in both
    changes: list[CorrectnessChange] = field(default_factory=list)
    # Pairs left out of the test and the changes: {"not_assessed": n, "no_reference": n, "not_recorded": n}
    # (a side not_assessed; a reference on one side only; a side whose layer is not known, TraceRow's
    # correctness_known).
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def left_out_total(self) -> int:
        return sum(self.left_out.values())

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "matrix": self.matrix,
                "paired_test": {**asdict(self.test), "ci95": list(self.test.ci95) if self.test.ci95 else None,
                                "method": self.test.method + "; correct read as pass"},
                "changes": [asdict(c) for c in self.changes], "left_out": self.left_out,
                "left_out_total": self.left_out_total}


def compare_correctness(pairs: Sequence[tuple[TraceRow, TraceRow]], key: Any) -> CorrectnessComparison | None:
    """The comparison over `pairs` (matched, judged in both runs); None when no side of any pair had a
    reference (every view then says nothing about correctness). `key(row)` names a pair in the list."""
    with_reference = [(a, b) for a, b in pairs if a.correctness is not None or b.correctness is not None]
    if not with_reference:
        return None
    moves = Counter((a.correctness or NOT_ASSESSED, b.correctness or NOT_ASSESSED) for a, b in with_reference)
    matrix = {old: dict.fromkeys(LAYERS, 0) for old in LAYERS}
    table = [0, 0, 0, 0]  # both correct, correct->not, not->correct, neither
    for (old, new), n in moves.items():
        matrix[old][new] += n
        if old in ASSESSED and new in ASSESSED:
            correct_a, correct_b = old == Correctness.correct.value, new == Correctness.correct.value
            table[(0 if correct_a else 2) + (0 if correct_b else 1)] += n
    # A side with no layer: no reference, or (a copy taken before runs kept the layer) not known.
    unknown = sum(1 for pair in with_reference
                  if any(x.correctness is None and not x.correctness_known for x in pair))
    one_sided = sum(1 for a, b in with_reference if a.correctness is None or b.correctness is None) - unknown
    not_assessed = (sum(n for (old, new), n in moves.items() if not (old in ASSESSED and new in ASSESSED))
                    - one_sided - unknown)
    changes = [CorrectnessChange(key(a), a.knowledge_base, a.id, b.id, str(a.correctness), str(b.correctness))
               for a, b in with_reference
               if a.correctness in ASSESSED and b.correctness in ASSESSED and a.correctness != b.correctness]
    changes.sort(key=lambda c: (_WORST_FIRST[c.new], -_WORST_FIRST[c.old], c.knowledge_base, c.new_trace_id))
    return CorrectnessComparison(pairs=len(with_reference), matrix=matrix, test=paired_test(*table), changes=changes,
                                 left_out={"not_assessed": not_assessed, "no_reference": one_sided,
                                           "not_recorded": unknown})


def correctness_note(c: CorrectnessComparison) -> str | None:
    """One line saying which pairs the correctness test leaves out and why (None when none)."""
    if not c.left_out_total:
        return None
    parts = [f"{c.left_out['not_assessed']} not assessed in A or B" if c.left_out.get("not_assessed") else "",
             f"{c.left_out['no_reference']} with a reference in one run only" if c.left_out.get("no_reference")
             else "",
             f"{c.left_out['not_recorded']} from a run recorded before runs kept the layer (not known)"
             if c.left_out.get("not_recorded") else ""]
    return (f"{c.left_out_total} pair(s) without a reference judgement on both sides, left out "
            f"({', '.join(p for p in parts if p)}); the test is over the {c.test.n} pair(s) assessed in both")
