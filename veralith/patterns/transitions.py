"""Which failing cells traces moved to between two runs, grouped by move.

The traces of the two runs are matched as `veralith compare` matches them (veralith.compare.pair_rows:
external id, then knowledge base + query). A pair counts when the later trace fails the gate and
either its cell changed or it passed before (a trace that failed in the same cell both times did not
move). Reading the rows costs one query per run (Store.trace_rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veralith.compare import TraceRow, pair_rows, severity
from veralith.compare.core import cell_of, gate_of
from veralith.store import ops

if TYPE_CHECKING:
    from veralith.store.protocol import Store
    from veralith.store.runs import Run

__all__ = ["Move", "Transitions", "transitions"]


@dataclass(frozen=True)
class Move:
    key: str                      # "old_cell → new_cell"
    severity: int                 # of the new cell, 0 the worst (veralith.compare.severity)
    rows: list[TraceRow]          # the later run's traces that moved, newest (highest id) first
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Transitions:
    moves: list[Move]
    note: str                     # which runs, how many traces matched, and whether the judges differed


def transitions(store: Store, run_a: Run, run_b: Run, *, kb: str | None = None) -> Transitions:
    """The moves from run A (earlier) to run B, only knowledge base `kb`'s traces when given."""
    rows_a = [TraceRow._make(r) for r in store.read(ops.trace_rows, run_a)]
    rows_b = [TraceRow._make(r) for r in store.read(ops.trace_rows, run_b)]
    if kb is not None:
        rows_a = [r for r in rows_a if r.knowledge_base == kb]
        rows_b = [r for r in rows_b if r.knowledge_base == kb]
    pairs = pair_rows(rows_a, rows_b)
    moved: dict[tuple[str, str], list[tuple[TraceRow, TraceRow]]] = {}
    for a, b in pairs:
        if gate_of(b) != "fail" or (cell_of(a) == cell_of(b) and gate_of(a) == "fail"):
            continue
        moved.setdefault((cell_of(a), cell_of(b)), []).append((a, b))
    moves = []
    for (old, new), found in moved.items():
        passed = sum(gate_of(a) == "pass" for a, _ in found)
        was = f"; {passed} of them passed in {run_a.label}" if passed else ""
        moves.append(Move(f"{old} → {new}", severity(new), sorted((b for _, b in found), key=lambda r: -r.id),
                          detail=f"{len(found)} trace(s) moved from {old} to {new}{was}",
                          figures={"from": old, "to": new, "traces": len(found), "passed_before": passed,
                                   "run_a": run_a.label, "run_b": run_b.label}))
    note = f"{run_a.label} → {run_b.label}: {len(pairs)} trace(s) matched"
    judge_a = (run_a.backend, run_a.model, run_a.prompt_versions)
    judge_b = (run_b.backend, run_b.model, run_b.prompt_versions)
    if judge_a != judge_b:
        note += ("; the two runs were judged differently (backend, model or prompt versions), so some moves may be "
                 "the judges' rather than the application's")
    return Transitions(moves, note)
