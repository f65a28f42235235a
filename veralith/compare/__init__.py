"""Run comparison: which cell each trace moved between, and whether the change is real.

`compare_runs(store, "baseline", "candidate")` loads both runs' rows, compares them
(`compare_rows`, a pure function the web view and tests use directly) and fills in the reason of
each changed trace from the stored results. `to_markdown` renders it for a pull-request comment;
`Comparison.to_dict()` is the JSON form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veralith.compare.core import (
    CELLS,
    Change,
    Comparison,
    MixedModes,
    TraceRow,
    compare_rows,
    left_out_note,
    mixed_modes_note,
    modes_of,
    paired_label,
    severity,
    with_reasons,
)
from veralith.compare.groups import ChangeGroup, group_changes
from veralith.compare.markdown import to_markdown
from veralith.compare.match import pair_rows
from veralith.store import ops

if TYPE_CHECKING:
    from veralith.store.protocol import Connected, Store
    from veralith.store.runs import Run

__all__ = ["CELLS", "Change", "ChangeGroup", "Comparison", "MixedModes", "TraceRow", "compare_rows", "compare_runs",
           "group_changes", "latest_pair", "left_out_note", "mixed_modes_note", "pair_rows", "paired_label",
           "severity", "to_markdown", "with_reasons"]


def compare_runs(store: Store, a: str | int, b: str | int, *, allow_mixed_modes: bool = False) -> Comparison:
    """Compare run `a` (before) with run `b` (after), each a run id or name; RunNotFound if unknown.

    Raises MixedModes when the two runs' results were judged in different modes (`full`, `fast`),
    unless `allow_mixed_modes`: the comparison then says so (Comparison.mixed_modes).
    """
    run_a, run_b = store.read(ops.resolve_run, str(a)), store.read(ops.resolve_run, str(b))
    rows_a = [TraceRow._make(r) for r in store.read(ops.trace_rows, run_a)]
    rows_b = [TraceRow._make(r) for r in store.read(ops.trace_rows, run_b)]
    modes_a, modes_b = modes_of(rows_a), modes_of(rows_b)
    if len({*modes_a, *modes_b}) > 1 and not allow_mixed_modes:
        raise MixedModes(f"runs {run_a.id} and {run_b.id} were judged in different modes (A: {'+'.join(modes_a)}, "
                         f"B: {'+'.join(modes_b)}; VERALITH_MODE), so their differences may be the mode's, not the "
                         "application's; re-run one in the other's mode, or pass --allow-mixed-modes")
    comparison = compare_rows(rows_a, rows_b, run_a=run_a.to_dict(), run_b=run_b.to_dict())
    return with_reasons(comparison, store.read(ops.failure_details, comparison.reason_trace_ids()))


LOOK_BACK = 5   # earlier runs `latest_pair` reads, newest first, looking for one that shares a trace


def latest_pair(store: Connected) -> tuple[Run, Run, list[Run]] | None:
    """What "what did the last run change?" compares: (A, B, skipped) with B the newest run and A the
    newest of the LOOK_BACK runs before it that shares a trace with it (matched as compare matches);
    `skipped` are the newer runs passed over because they share none. When none of them shares
    one, A is the run just before B and `skipped` is empty: the comparison then says nothing matched.
    None with fewer than two runs."""
    from veralith.compare.match import pair_rows
    from veralith.store import runs

    newest = store.read(runs.list_runs, limit=LOOK_BACK + 1)
    if len(newest) < 2:
        return None
    latest = newest[0]
    rows_b = [TraceRow._make(r) for r in store.read(runs.trace_rows, latest)]
    for i, earlier in enumerate(newest[1:]):
        if pair_rows([TraceRow._make(r) for r in store.read(runs.trace_rows, earlier)], rows_b):
            return earlier, latest, newest[1:i + 1]
    return newest[1], latest, []
