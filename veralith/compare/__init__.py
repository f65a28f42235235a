"""Run comparison: which cell each trace moved between, and whether the change is real.

`compare_runs(store, "baseline", "candidate")` loads both runs' rows, compares them
(`compare_rows`, a pure function the web view and tests use directly) and fills in the reason of
each changed trace from the stored results. `to_markdown` renders it for a pull-request comment;
`Comparison.to_dict()` is the JSON form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veralith.compare.core import CELLS, Change, Comparison, TraceRow, compare_rows, pair_rows, severity, with_reasons
from veralith.compare.markdown import to_markdown

if TYPE_CHECKING:
    from veralith.store.protocol import RunStore

__all__ = ["CELLS", "Change", "Comparison", "TraceRow", "compare_rows", "compare_runs", "pair_rows", "severity",
           "to_markdown", "with_reasons"]


def compare_runs(store: RunStore, a: str | int, b: str | int) -> Comparison:
    """Compare run `a` (before) with run `b` (after), each a run id or name; RunNotFound if unknown."""
    run_a, run_b = store.resolve_run(str(a)), store.resolve_run(str(b))
    rows_a = [TraceRow._make(r) for r in store.trace_rows(run_a)]
    rows_b = [TraceRow._make(r) for r in store.trace_rows(run_b)]
    comparison = compare_rows(rows_a, rows_b, run_a=run_a.to_dict(), run_b=run_b.to_dict())
    return with_reasons(comparison, store.failure_details(comparison.reason_trace_ids()))
