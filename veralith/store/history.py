"""The outcome row a writer locks before replacing it, and the history of superseded outcomes.

Whoever writes a trace's outcome (veralith.work.claims decides who may) first reads the trace's
row with `outcome_row` inside its write transaction (locked where the database locks rows), then
`keep_history` records the outcome being replaced, if there was one, so `resume --failed` and
re-judging in place keep what each earlier evaluation ended with.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from veralith.store.errors import TraceNotFound
from veralith.store.rows import dumps
from veralith.store.sql import Db

__all__ = ["OutcomeRow", "history", "keep_history", "outcome_row"]


class OutcomeRow(NamedTuple):
    """A trace's status and lease (time by the database's clock, as `now`), and its outcome so far."""

    status: str
    lease_host: str | None
    lease_pid: int | None
    lease_token: str | None
    lease_at: float | None
    now: float                  # the database's clock when the row was read
    error_message: str | None
    quality_gate: str | None
    evaluated_at: str | None
    failure_cell: str | None
    backend: str | None
    judge_model: str | None
    prompt_versions: str | None


def outcome_row(db: Db, trace_id: int) -> OutcomeRow:
    """Inside a write transaction: the trace's row, locked until the transaction ends (TraceNotFound
    for an unknown id)."""
    row = db.execute("SELECT status, lease_host, lease_pid, lease_token, lease_at, " + db.dialect.epoch
                     + ", error_message, quality_gate, evaluated_at, failure_cell, backend, judge_model,"
                     " prompt_versions FROM traces WHERE id = ?" + db.dialect.for_update, [trace_id]).fetchone()
    if row is None:
        raise TraceNotFound(f"no trace with id {trace_id}")
    return OutcomeRow(*row)


def keep_history(db: Db, trace_id: int, row: OutcomeRow, now: str) -> None:
    """Record the outcome being superseded (a stored result or a failure), if the trace had one."""
    if not row.error_message and row.quality_gate is None:  # a first evaluation: nothing is superseded
        return
    errors = [dict(r) for r in db.query("SELECT phase, kind, message, attempts FROM judge_errors"
                                         " WHERE trace_id = ? ORDER BY position", [trace_id])]
    db.execute("INSERT INTO trace_history (trace_id, recorded_at, evaluated_at, status, quality_gate,"
               " error_message, judge_errors, failure_cell, backend, judge_model, prompt_versions)"
               " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
               [trace_id, now, row.evaluated_at, "error" if row.error_message else "done", row.quality_gate,
                row.error_message, dumps(errors, what="judge errors"), row.failure_cell, row.backend,
                row.judge_model, row.prompt_versions])


def history(db: Db, trace_id: int) -> list[dict[str, Any]]:
    """Earlier outcomes of a trace, oldest first (judge_errors and prompt_versions decoded)."""
    rows = list(db.query("SELECT recorded_at, evaluated_at, status, quality_gate, error_message, judge_errors,"
                         " failure_cell, backend, judge_model, prompt_versions"
                         " FROM trace_history WHERE trace_id = ? ORDER BY id", [trace_id]))
    for row in rows:
        row["judge_errors"] = json.loads(row["judge_errors"])
        row["prompt_versions"] = json.loads(row["prompt_versions"]) if row["prompt_versions"] else {}
    return rows
