"""Run comparison: which cell each trace moved between, and whether the change is real.

`compare_runs(db, "baseline", "candidate")` loads both runs' rows, compares them
(`compare_rows`, a pure function the web view and tests use directly) and fills in the reason of
each changed trace from the stored results. `to_markdown` renders it for a pull-request comment;
`Comparison.to_dict()` is the JSON form.
"""

from __future__ import annotations

from typing import Any

from veralith.compare.core import CELLS, Change, Comparison, TraceRow, compare_rows, severity, with_reasons
from veralith.compare.markdown import to_markdown

__all__ = ["CELLS", "Change", "Comparison", "TraceRow", "compare_rows", "compare_runs", "severity", "to_markdown",
           "with_reasons"]


def compare_runs(db: Any, a: str | int, b: str | int) -> Comparison:
    """Compare run `a` (before) with run `b` (after), each a run id or name; RunNotFound if unknown."""
    from veralith.store.runs import failure_details, resolve_run, trace_rows

    run_a, run_b = resolve_run(db, str(a)), resolve_run(db, str(b))
    rows_a = [TraceRow._make(r) for r in trace_rows(db, run_a)]
    rows_b = [TraceRow._make(r) for r in trace_rows(db, run_b)]
    comparison = compare_rows(rows_a, rows_b, run_a=run_a.to_dict(), run_b=run_b.to_dict())
    return with_reasons(comparison, failure_details(db, comparison.reason_trace_ids()))
