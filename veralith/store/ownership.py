"""Ownership of work on a trace: lease renewal, the "still mine?" check before an outcome is
written, and the history of superseded failed outcomes.

Kept apart from repository.py (which writes and reads traces) because it is the one place that
decides whether this process may write a trace's outcome.
"""

from __future__ import annotations

import json
from typing import Any

from sqlite_utils import Database

from veralith.errors import StoreError
from veralith.store import leases
from veralith.store.db import open_db, write
from veralith.store.rows import dumps

__all__ = ["LeaseLost", "check_owner", "db_path", "drop_lease", "history", "keep_history", "renewer"]


class LeaseLost(StoreError):
    """This process's lease on a trace was taken over (it looked stale); its result is not saved."""


def _renew(keys: set[tuple[str, int]]) -> None:
    """Bump the lease time of our running traces (the Renewer's thread; its own connections)."""
    host, pid, token, at = leases.mine()
    by_path: dict[str, list[int]] = {}
    for path, trace_id in keys:
        if path:
            by_path.setdefault(path, []).append(trace_id)
    for path, ids in by_path.items():
        db = open_db(path)
        with write(db):
            db.conn.executemany("UPDATE traces SET lease_at = ? WHERE id = ? AND status = 'running'"
                                " AND lease_host = ? AND lease_pid = ? AND lease_token = ?",
                                [(at, i, host, pid, token) for i in ids])


renewer = leases.Renewer(_renew)


def db_path(db: Database) -> str:
    row = db.execute("PRAGMA database_list").fetchone()
    return row[2] or ""


def check_owner(db: Database, trace_id: int, held: bool) -> tuple[Any, ...]:
    """Inside a write transaction: the trace row, if this process may write its outcome.

    Held (we claimed it): it must still be running under our lease. Not held (evaluate(trace_id=)
    re-judging a stored trace): it must not be running under another process's live lease.
    """
    row = db.execute("SELECT status, lease_host, lease_pid, lease_token, lease_at, error_message, quality_gate,"
                     " evaluated_at FROM traces WHERE id = ?", [trace_id]).fetchone()
    if row is None:
        raise _not_found(trace_id)
    ours = leases.is_mine(*row[1:4])
    if held and not (row[0] == "running" and ours):
        raise LeaseLost(f"trace {trace_id} was taken over by another process (its lease looked stale); "
                        "this evaluation's result is not saved")
    if not held and row[0] == "running" and not ours and not leases.stale(*row[1:5]):
        raise LeaseLost(f"trace {trace_id} is being evaluated by another process; not overwritten")
    return row


def keep_history(db: Database, trace_id: int, row: tuple[Any, ...], now: str) -> None:
    """Record the outcome being superseded, when it was a failure (resume --failed keeps it)."""
    errors = [dict(r) for r in db.query("SELECT phase, kind, message, attempts FROM judge_errors"
                                         " WHERE trace_id = ? ORDER BY position", [trace_id])]
    message = row[5]
    if not errors and not message:
        return
    db.execute("INSERT INTO trace_history (trace_id, recorded_at, evaluated_at, status, quality_gate,"
               " error_message, judge_errors) VALUES (?, ?, ?, ?, ?, ?, ?)",
               [trace_id, now, row[7], "error" if message else "done", row[6], message,
                dumps(errors, what="judge errors")])


def history(db: Database, trace_id: int) -> list[dict[str, Any]]:
    """Earlier failed outcomes of a trace, oldest first (judge_errors decoded)."""
    rows = list(db.query("SELECT recorded_at, evaluated_at, status, quality_gate, error_message, judge_errors"
                         " FROM trace_history WHERE trace_id = ? ORDER BY id", [trace_id]))
    for row in rows:
        row["judge_errors"] = json.loads(row["judge_errors"])
    return rows


def drop_lease(db: Database, trace_id: int) -> None:
    """Stop renewing this process's lease on a trace whose evaluation ended without an outcome."""
    renewer.drop((db_path(db), trace_id))




def _not_found(trace_id: int) -> StoreError:
    from veralith.store.repository import TraceNotFound  # defined there, beside the other read errors
    return TraceNotFound(f"no trace with id {trace_id}")
