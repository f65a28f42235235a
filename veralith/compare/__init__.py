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
from veralith.compare.markdown import to_markdown
from veralith.compare.match import pair_rows

if TYPE_CHECKING:
    from veralith.store.protocol import RunStore

__all__ = ["CELLS", "Change", "Comparison", "MixedModes", "TraceRow", "compare_rows", "compare_runs",
           "left_out_note", "mixed_modes_note", "pair_rows", "paired_label", "severity", "to_markdown",
           "with_reasons"]


def compare_runs(store: RunStore, a: str | int, b: str | int, *, allow_mixed_modes: bool = False) -> Comparison:
    """Compare run `a` (before) with run `b` (after), each a run id or name; RunNotFound if unknown.

    Raises MixedModes when the two runs' results were judged in different modes (`full`, `fast`),
    unless `allow_mixed_modes`: the comparison then says so (Comparison.mixed_modes).
    """
    run_a, run_b = store.resolve_run(str(a)), store.resolve_run(str(b))
    rows_a = [TraceRow._make(r) for r in store.trace_rows(run_a)]
    rows_b = [TraceRow._make(r) for r in store.trace_rows(run_b)]
    modes_a, modes_b = modes_of(rows_a), modes_of(rows_b)
    if len({*modes_a, *modes_b}) > 1 and not allow_mixed_modes:
        raise MixedModes(f"runs {run_a.id} and {run_b.id} were judged in different modes (A: {'+'.join(modes_a)}, "
                         f"B: {'+'.join(modes_b)}; VERALITH_MODE), so their differences may be the mode's, not the "
                         "application's; re-run one in the other's mode, or pass --allow-mixed-modes")
    comparison = compare_rows(rows_a, rows_b, run_a=run_a.to_dict(), run_b=run_b.to_dict())
    return with_reasons(comparison, store.failure_details(comparison.reason_trace_ids()))
