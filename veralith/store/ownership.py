"""Ownership of work on a trace: lease renewal, the "still mine?" check before an outcome is
written, and the history of superseded outcomes.

Kept apart from repository.py (which writes and reads traces) because it is the one place that
decides whether this process may write a trace's outcome.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

from veralith.errors import StoreError
from veralith.store import leases
from veralith.store.errors import TraceNotFound
from veralith.store.rows import dumps
from veralith.store.sql import Db

__all__ = ["LeaseLost", "check_owner", "drop_lease", "history", "keep_history", "register", "renew", "renewer"]

# How the renewer thread reaches each database it holds leases in: Db.key -> a context manager
# giving a connection of that thread's own (registered by each store when it is opened).
_connectors: dict[str, Callable[[], contextlib.AbstractContextManager[Db]]] = {}
_connectors_lock = threading.Lock()


def register(key: str, connect: Callable[[], contextlib.AbstractContextManager[Db]]) -> None:
    """Tell the renewer how to reach the database whose `Db.key` is `key`."""
    with _connectors_lock:
        _connectors.setdefault(key, connect)


class LeaseLost(StoreError):
    """This process's lease on a trace was taken over (it looked stale); its result is not saved."""


def renew(keys: set[tuple[str, int]]) -> None:
    """Bump the lease time of our running traces, given as (Db.key, trace id); on the calling
    thread's own connections (the Renewer's thread, every RENEW_EVERY_S)."""
    host, pid, token, at = leases.mine()
    by_key: dict[str, list[int]] = {}
    for key, trace_id in keys:
        if key:
            by_key.setdefault(key, []).append(trace_id)
    for key, ids in by_key.items():
        with _connectors_lock:
            connect = _connectors.get(key)
        if connect is None:
            continue
        with connect() as db, db.write():
            # In id order, so two transactions never take row locks in opposite orders.
            db.executemany("UPDATE traces SET lease_at = ? WHERE id = ? AND status = 'running'"
                           " AND lease_host = ? AND lease_pid = ? AND lease_token = ?",
                           [(at, i, host, pid, token) for i in sorted(ids)])


renewer = leases.Renewer(renew)


def check_owner(db: Db, trace_id: int, held: bool) -> tuple[Any, ...]:
    """Inside a write transaction: the trace row, if this process may write its outcome.

    Held (we claimed it): it must still be running under our lease. Not held (evaluate(trace_id=)
    re-judging a stored trace): it must not be running under another process's live lease.
    """
    row = db.execute("SELECT status, lease_host, lease_pid, lease_token, lease_at, error_message, quality_gate,"
                     " evaluated_at, failure_cell, backend, judge_model, prompt_versions FROM traces WHERE id = ?"
                     + db.dialect.for_update, [trace_id]).fetchone()
    if row is None:
        raise _not_found(trace_id)
    ours = leases.is_mine(*row[1:4])
    if held and not (row[0] == "running" and ours):
        raise LeaseLost(f"trace {trace_id} was taken over by another process (its lease looked stale); "
                        "this evaluation's result is not saved")
    if not held and row[0] == "running" and not ours and not leases.stale(*row[1:5]):
        raise LeaseLost(f"trace {trace_id} is being evaluated by another process; not overwritten")
    return row


def keep_history(db: Db, trace_id: int, row: tuple[Any, ...], now: str) -> None:
    """Record the outcome being superseded (a stored result or a failure), if the trace had one:
    `resume --failed` and re-judging in place keep what each earlier evaluation ended with."""
    message, gate = row[5], row[6]
    if not message and gate is None:  # a first evaluation: nothing is superseded
        return
    errors = [dict(r) for r in db.query("SELECT phase, kind, message, attempts FROM judge_errors"
                                         " WHERE trace_id = ? ORDER BY position", [trace_id])]
    db.execute("INSERT INTO trace_history (trace_id, recorded_at, evaluated_at, status, quality_gate,"
               " error_message, judge_errors, failure_cell, backend, judge_model, prompt_versions)"
               " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
               [trace_id, now, row[7], "error" if message else "done", gate, message,
                dumps(errors, what="judge errors"), *row[8:12]])


def history(db: Db, trace_id: int) -> list[dict[str, Any]]:
    """Earlier outcomes of a trace, oldest first (judge_errors and prompt_versions decoded)."""
    rows = list(db.query("SELECT recorded_at, evaluated_at, status, quality_gate, error_message, judge_errors,"
                         " failure_cell, backend, judge_model, prompt_versions"
                         " FROM trace_history WHERE trace_id = ? ORDER BY id", [trace_id]))
    for row in rows:
        row["judge_errors"] = json.loads(row["judge_errors"])
        row["prompt_versions"] = json.loads(row["prompt_versions"]) if row["prompt_versions"] else {}
    return rows


def drop_lease(db: Db, trace_id: int) -> None:
    """Stop renewing this process's lease on a trace whose evaluation ended without an outcome."""
    renewer.drop((db.key, trace_id))




def _not_found(trace_id: int) -> StoreError:
    return TraceNotFound(f"no trace with id {trace_id}")
