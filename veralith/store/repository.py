"""The store's API: traces in, results out, work claimed under leases.

A trace's life: `create_trace` (pending) → `claim_trace` (running, leased to one process) →
`save_result` (done, in one transaction with every judgment) or `mark_error` (error, message kept).
A crash leaves the trace pending or running under a lease whose process is gone; such traces are
`resumable_trace_ids` and can be claimed again. Two processes never evaluate one trace at once
because a claim is a single `BEGIN IMMEDIATE` check-and-update; while an evaluation runs its lease
is renewed, and its result is saved only while this process still owns the lease (`LeaseLost`
otherwise), so a slow evaluation is never taken over and paid for twice.

Traces whose last evaluation failed (judge errors, or status error) can be re-judged:
`resumable_trace_ids(failed=True)` and `claim_trace(failed=True)`; any trace nobody is evaluating
can be re-judged in place with `claim_trace(again=True)`. Whatever outcome a new one replaces is
kept in `trace_history`.

A trace may carry an external id (the caller's own id for it), unique within its knowledge base:
`find_external` and `resolve` look traces up by it.

New trace ids are always above every block of ids a process reserved (`reserve_ids`), so an id
handed out from a block (a trace spooled while the database was locked) is never taken by another.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from sqlite_utils import Database

from veralith.errors import StoreError
from veralith.models import ContextChunk, EvaluationResult
from veralith.store import leases
from veralith.store.db import open_db, write
from veralith.store.errors import AmbiguousTraceId, TraceNotEvaluated, TraceNotFound
from veralith.store.ownership import LeaseLost, check_owner, db_path, drop_lease, history, keep_history, renewer
from veralith.store.protocol import StoredResult, TraceInfo, TraceInput
from veralith.store.queries import list_traces, stats
from veralith.store.rows import chunk_rows, dumps, from_rows, now_iso, result_columns, to_rows

__all__ = ["AmbiguousTraceId", "DuplicateExternalId", "LeaseLost", "TraceNotEvaluated", "TraceNotFound",
           "claim_trace", "create_trace", "drop_lease", "find_external", "history", "iter_results", "iter_stored",
           "list_traces", "load_input", "load_result", "load_trace_input", "mark_error", "release_trace",
           "reserve_ids", "resolve", "resumable_trace_ids", "save_result", "stats", "trace_created_at",
           "trace_info"]

_CHILD_TABLES = {  # table -> its columns in insert order (matches rows.to_rows)
    "context_chunks": ("trace_id", "position", "chunk_id", "source", "metadata", "text"),
    "sub_questions": ("trace_id", "position", "sub_question_id", "text"),
    "claims": ("trace_id", "position", "claim_id", "text", "char_start", "char_end"),
    "gaps": ("trace_id", "position", "gap_id", "text", "char_start", "char_end"),
    "remarks": ("trace_id", "position", "remark_id", "text", "char_start", "char_end"),
    "sufficiency_judgments": ("trace_id", "position", "sub_question_id", "verdict", "reasoning", "chunk_ids",
                              "prompt_version", "confidence"),
    "faithfulness_judgments": ("trace_id", "position", "claim_id", "verdict", "relation", "reasoning",
                               "prompt_version", "confidence", "evidence"),
    "grounding": ("trace_id", "judgment_position", "kind", "position", "claim_id", "chunk_id"),
    "judge_errors": ("trace_id", "position", "phase", "kind", "message", "attempts"),
    "completeness": ("trace_id", "reasoning", "uncovered_sub_question_ids", "prompt_version", "supports", "statuses",
                     "gap_links", "confidence"),
    "completeness_mappings": ("trace_id", "sq_position", "position", "sub_question_id", "claim_id"),
    "completeness_extras": ("trace_id", "position", "claim_id"),
}
_ORDER = {"completeness": "trace_id", "completeness_mappings": "sq_position, position",
          "grounding": "judgment_position, kind, position"}


class DuplicateExternalId(StoreError):
    """The knowledge base already has a trace with this external id."""


def create_trace(db: Database, *, query: str, context: list[ContextChunk], response: str,
                 knowledge_base: str = "default", metadata: dict[str, Any] | None = None,
                 queued: bool = False, trace_id: int | None = None, created_at: str | None = None,
                 run_id: int | None = None, run: str | None = None, external_id: str | None = None) -> int:
    """Write a pending trace and its context in one transaction; return its id.

    `run_id` tags it with an open run (an eval run); `run` with the SDK run of that name, created
    in the same transaction when it is new (veralith.store.runs).

    `queued=True` reserves it for this process's in-memory queue (the lease records host, pid and
    token), so that no other process resumes it while this one is alive and about to evaluate it.
    `trace_id` (from `reserve_ids`) and `created_at` write a spooled trace under the id and time
    `log()` gave it; writing the same spooled trace twice is a no-op. An `external_id` already used
    in the knowledge base raises DuplicateExternalId and writes nothing.
    """
    now = now_iso()
    meta = dumps(metadata or {}, what="metadata")
    lease = leases.mine() if queued else (None, None, None, None)
    with write(db):
        if trace_id is None:
            trace_id = _next_id(db)
        elif db.execute("SELECT 1 FROM traces WHERE id = ?", [trace_id]).fetchone() is not None:
            return int(trace_id)  # already moved in from the spool
        try:
            db.execute(
                "INSERT INTO traces (id, created_at, updated_at, status, lease_host, lease_pid, lease_token, lease_at,"
                " knowledge_base, metadata, query, response, external_id)"
                " VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [trace_id, created_at or now, now, *lease, knowledge_base, meta, query, response, external_id])
        except sqlite3.IntegrityError as exc:
            if external_id is not None and "external_id" in str(exc):
                raise DuplicateExternalId(f"knowledge base {knowledge_base!r} already has a trace with external id "
                                          f"{external_id!r}") from None
            raise
        _insert(db, "context_chunks", chunk_rows(trace_id, context))
        if run is not None:
            from veralith.store.runs import sdk_run_id

            run_id = sdk_run_id(db, run)
        if run_id is not None:
            db.execute("UPDATE traces SET run_id = ? WHERE id = ?", [run_id, trace_id])
    return int(trace_id)


def _next_id(db: Database) -> int:
    """Above every trace and every reserved block (inside the caller's write transaction)."""
    row = db.execute("SELECT max(coalesce((SELECT max(id) FROM traces), 0),"
                     " coalesce((SELECT hi FROM trace_id_blocks ORDER BY lo DESC LIMIT 1), 0))").fetchone()
    return int(row[0]) + 1


def reserve_ids(db: Database, count: int) -> range:
    """Reserve `count` trace ids for this process (for traces spooled while the lock is busy)."""
    with write(db):
        lo = _next_id(db)
        db.execute("INSERT INTO trace_id_blocks (lo, hi, owner, taken_at) VALUES (?, ?, ?, ?)",
                   [lo, lo + count - 1, leases.owner(), now_iso()])
    return range(lo, lo + count)


def claim_trace(db: Database, trace_id: int, *, lease_timeout_s: float | None = None, failed: bool = False,
                again: bool = False) -> bool:
    """Atomically take a trace for evaluation: pending → running under this process's lease.

    Also takes a running trace whose lease is stale (its process is gone from this host, or the
    lease is older than the timeout). Refuses a pending trace reserved by another live process's
    queue, and anything done or in error — unless `failed`, which also takes a trace whose last
    evaluation failed (status error, or done with judge errors), or `again`, which takes any done
    or error trace (re-judging in place). Raises TraceNotFound for an unknown id. The lease is
    renewed in the background until the result or error is saved.
    """
    with write(db):
        row = db.execute("SELECT status, lease_host, lease_pid, lease_token, lease_at FROM traces WHERE id = ?",
                         [trace_id]).fetchone()
        if row is None:
            raise TraceNotFound(f"no trace with id {trace_id}")
        if not (leases.claimable(*row, timeout_s=lease_timeout_s) or (again and row[0] in ("done", "error"))
                or (failed and _failed(db, trace_id, row[0]))):
            return False
        host, pid, token, at = leases.mine()
        db.execute("UPDATE traces SET status = 'running', lease_host = ?, lease_pid = ?, lease_token = ?,"
                   " lease_at = ?, attempts = attempts + 1, updated_at = ? WHERE id = ?",
                   [host, pid, token, at, now_iso(), trace_id])
    renewer.hold((db_path(db), trace_id))
    return True


def _failed(db: Database, trace_id: int, status: str) -> bool:
    if status == "error":
        return True
    return status == "done" and db.execute("SELECT 1 FROM judge_errors WHERE trace_id = ? LIMIT 1",
                                           [trace_id]).fetchone() is not None


def release_trace(db: Database, trace_id: int) -> None:
    """Drop this process's reservation of a pending trace (its queue was full): anyone may resume it."""
    host, pid, token, _ = leases.mine()
    with write(db):
        db.execute("UPDATE traces SET lease_host = NULL, lease_pid = NULL, lease_token = NULL, lease_at = NULL,"
                   " updated_at = ? WHERE id = ? AND status = 'pending' AND lease_host = ? AND lease_pid = ?"
                   " AND lease_token IS ?", [now_iso(), trace_id, host, pid, token])


def save_result(db: Database, result: EvaluationResult) -> int:
    """Store a result and mark its trace done, all in one transaction; return the trace id.

    Without `result.trace_id` a new trace is created; with it, that trace's inputs and judgments
    are replaced in place. The result object itself is not modified.
    """
    now = now_iso()
    columns = result_columns(result)
    inputs = {"knowledge_base": result.knowledge_base, "metadata": dumps(result.metadata, what="metadata"),
              "query": result.query, "response": result.response}
    # Rows are built before taking the write lock, so the lock is held only for SQL; they carry
    # a placeholder id (0) when the trace is new, swapped for the real one below.
    child_rows = to_rows(result.trace_id or 0, result)
    key = (db_path(db), result.trace_id or 0)
    held = result.trace_id is not None and key in renewer.held()
    with write(db):
        trace_id = result.trace_id
        if trace_id is None:
            trace_id = _next_id(db)
            db.execute("INSERT INTO traces (id, created_at, updated_at, query, response) VALUES (?, ?, ?, '', '')",
                       [trace_id, now, now])
        else:
            keep_history(db, trace_id, check_owner(db, trace_id, held), now)
        for table in reversed(list(_CHILD_TABLES)):  # children of completeness first
            db.execute(f"DELETE FROM {table} WHERE trace_id = ?", [trace_id])
        values = {**inputs, **columns, "status": "done", "lease_host": None, "lease_pid": None, "lease_at": None,
                  "lease_token": None, "error_message": None, "evaluated_at": now, "updated_at": now}
        assignments = ", ".join(f"{name} = ?" for name in values)
        db.execute(f"UPDATE traces SET {assignments} WHERE id = ?", [*values.values(), trace_id])
        for table, rows in child_rows.items():
            _insert(db, table, rows if result.trace_id else [(trace_id, *row[1:]) for row in rows])
    if held:
        renewer.drop(key)
    return int(trace_id)


def mark_error(db: Database, trace_id: int, message: str) -> bool:
    """Record that evaluating the trace failed. A result stored earlier, if any, stays readable.

    Returns False (and writes nothing) when this process had claimed the trace but lost the lease:
    the process that took it over decides the outcome.
    """
    key = (db_path(db), trace_id)
    held = key in renewer.held()
    try:
        with write(db):
            try:
                row = check_owner(db, trace_id, held)
            except LeaseLost:
                return False
            keep_history(db, trace_id, row, now_iso())
            db.execute("UPDATE traces SET status = 'error', error_message = ?, lease_host = NULL,"
                       " lease_pid = NULL, lease_token = NULL, lease_at = NULL, updated_at = ? WHERE id = ?",
                       [str(message), now_iso(), trace_id])
    finally:
        if held:
            renewer.drop(key)
    return True


def load_result(trace_id: int, db: Database | None = None) -> EvaluationResult:
    """The stored result of a trace, equal to the one that was saved.

    Raises TraceNotFound for an unknown id, TraceNotEvaluated when no result is stored yet.
    """
    db = open_db() if db is None else db
    # One read transaction, so a concurrent re-evaluation cannot mix two results.
    with db.atomic():
        trace = _trace_row(db, trace_id)
        if trace["execution"] is None:
            raise TraceNotEvaluated(trace_id, trace["status"], trace["error_message"])
        children = {table: list(db.query(
            f"SELECT * FROM {table} WHERE trace_id = ? ORDER BY {_ORDER.get(table, 'position')}", [trace_id]))
            for table in _CHILD_TABLES}
    return from_rows(trace, children)


def load_trace_input(db: Database, trace_id: int) -> tuple[str, list[ContextChunk], str, str, dict[str, Any]]:
    """What was logged: (query, context, response, knowledge_base, metadata)."""
    found = load_input(db, trace_id)
    return found.query, found.context, found.response, found.knowledge_base, found.metadata


def load_input(db: Database, trace_id: int) -> TraceInput:
    """What was logged for the trace, external id included."""
    with db.atomic():
        rows = list(db.query("SELECT query, response, knowledge_base, metadata, external_id FROM traces"
                             " WHERE id = ?", [trace_id]))
        if not rows:
            raise TraceNotFound(f"no trace with id {trace_id}")
        trace = rows[0]
        chunks = [ContextChunk(id=c["chunk_id"], text=c["text"], source=c["source"],
                               metadata=json.loads(c["metadata"]))
                  for c in db.query("SELECT * FROM context_chunks WHERE trace_id = ? ORDER BY position", [trace_id])]
    return TraceInput(query=trace["query"], context=chunks, response=trace["response"],
                      knowledge_base=trace["knowledge_base"], metadata=json.loads(trace["metadata"]),
                      external_id=trace["external_id"])


_INFO = ("SELECT id, knowledge_base, external_id, status, created_at, updated_at, evaluated_at, execution,"
         " backend, judge_model, prompt_versions FROM traces")


def _info(row: tuple[Any, ...]) -> TraceInfo:
    has_result = row[7] is not None
    return TraceInfo(trace_id=row[0], knowledge_base=row[1], external_id=row[2], status=row[3], created_at=row[4],
                     updated_at=row[5], evaluated_at=row[6] if has_result else None, has_result=has_result,
                     backend=row[8], judge_model=row[9],
                     prompt_versions=json.loads(row[10]) if has_result and row[10] else {})


def trace_info(db: Database, trace_id: int) -> TraceInfo:
    """The trace's bookkeeping (status, times, external id, the judge configuration of its result)."""
    row = db.execute(_INFO + " WHERE id = ?", [trace_id]).fetchone()
    if row is None:
        raise TraceNotFound(f"no trace with id {trace_id}")
    return _info(row)


def find_external(db: Database, knowledge_base: str, external_id: str) -> TraceInfo | None:
    """The trace of `knowledge_base` whose external id is `external_id`, if any."""
    row = db.execute(_INFO + " WHERE knowledge_base = ? AND external_id = ?", [knowledge_base, external_id]).fetchone()
    return None if row is None else _info(row)


def resolve(db: Database, ref: str, *, knowledge_base: str | None = None) -> int:
    """The trace a person means by `ref` (a command-line argument).

    `#N` is trace id N and nothing else. A bare number names trace N, unless it is also the
    external id of another trace: then AmbiguousTraceId names both trace ids (files often number
    their records 1, 2, ..., so guessing would open the wrong trace). Anything else is an external
    id. Raises TraceNotFound when nothing matches and AmbiguousTraceId when the external id is
    used in several knowledge bases and none was given. `knowledge_base`, when given, limits the
    lookup to it.
    """
    text = str(ref).strip()
    forced = text.startswith("#")
    digits = text[1:] if forced else text
    by_id: int | None = None
    if digits.isascii() and digits.isdecimal() and len(digits) <= 18:  # below 2**63, SQLite's largest id
        row = db.execute("SELECT knowledge_base FROM traces WHERE id = ?", [int(digits)]).fetchone()
        if row is not None and knowledge_base in (None, row[0]):
            by_id = int(digits)
    if forced:
        if by_id is None:
            where = "" if knowledge_base is None else f" in knowledge base {knowledge_base!r}"
            raise TraceNotFound(f"no trace with id {digits}{where}")
        return by_id
    sql, params = "SELECT id, knowledge_base FROM traces WHERE external_id = ?", [str(ref)]
    if knowledge_base is not None:
        sql += " AND knowledge_base = ?"
        params.append(knowledge_base)
    rows = [r for r in db.execute(sql + " ORDER BY knowledge_base", params).fetchall() if r[0] != by_id]
    if by_id is not None:
        if rows:
            others = ", ".join(f"#{r[0]}" for r in rows)
            raise AmbiguousTraceId(str(ref), [r[1] for r in rows],
                                   message=f"{text!r} is trace #{by_id} and also the external id of trace "
                                           f"{others}; name the one you mean: #{by_id} or {others.split(', ')[0]}")
        return by_id
    if len(rows) == 1:
        return int(rows[0][0])
    if rows:
        raise AmbiguousTraceId(str(ref), [r[1] for r in rows])
    where = "" if knowledge_base is None else f" in knowledge base {knowledge_base!r}"
    raise TraceNotFound(f"no trace with id or external id {str(ref)!r}{where}")


def trace_created_at(db: Database, trace_id: int) -> str | None:
    """When the trace was first written (ISO-8601 UTC), or None for an unknown id."""
    row = db.execute("SELECT created_at FROM traces WHERE id = ?", [trace_id]).fetchone()
    return None if row is None else str(row[0])


def resumable_trace_ids(db: Database, *, lease_timeout_s: float | None = None, failed: bool = False) -> list[int]:
    """Traces nobody is working on: pending and unreserved (or reserved by a gone process), or
    running under a stale lease. Never another live process's fresh work. Oldest first.

    With `failed`, instead the traces whose last evaluation failed: status error, or done with
    judge errors (a judge outage leaves them `indeterminate`)."""
    if failed:
        return [r[0] for r in db.execute(
            "SELECT id FROM traces WHERE status = 'error' OR (status = 'done' AND EXISTS"
            " (SELECT 1 FROM judge_errors WHERE judge_errors.trace_id = traces.id)) ORDER BY id").fetchall()]
    rows = db.execute("SELECT id, status, lease_host, lease_pid, lease_token, lease_at FROM traces"
                      " WHERE status IN ('pending', 'running') ORDER BY id").fetchall()
    return [row[0] for row in rows if leases.claimable(*row[1:], timeout_s=lease_timeout_s, own_is_fresh=True)]


def iter_results(db: Database, since: str | dt.datetime | None = None,
                 on_error: Callable[[int, Exception], None] | None = None) -> Iterator[EvaluationResult]:
    """Every stored result, oldest first; `since` keeps traces created at or after it (an ISO-8601
    string or a datetime; a naive datetime is taken as UTC, the zone timestamps are stored in).

    With `on_error`, a trace that cannot be read (a damaged page of the file) is reported to it
    and skipped, so one bad page does not end an export; without, the error is raised."""
    for stored in iter_stored(db, since=since, on_error=on_error):
        yield stored.result


def iter_stored(db: Database, since: str | dt.datetime | None = None,
                on_error: Callable[[int, Exception], None] | None = None,
                trace_ids: list[int] | None = None) -> Iterator[StoredResult]:
    """`iter_results` with each trace's bookkeeping (times, external id); `trace_ids` keeps only those."""
    if isinstance(since, dt.datetime):
        since = (since if since.tzinfo else since.replace(tzinfo=dt.timezone.utc)).astimezone(
            dt.timezone.utc).isoformat(timespec="microseconds")
    last = 0
    while True:  # keyset pages, so a long export never holds one read transaction open
        sql = "SELECT id FROM traces WHERE id > ? AND execution IS NOT NULL"
        params: list[Any] = [last]
        if since is not None:
            sql += " AND created_at >= ?"
            params.append(str(since))
        if trace_ids is not None:
            sql += f" AND id IN ({', '.join('?' for _ in trace_ids)})"
            params.extend(trace_ids)
        ids = [r[0] for r in db.execute(sql + " ORDER BY id LIMIT 500", params).fetchall()]
        if not ids:
            return
        for trace_id in ids:
            try:
                with db.atomic():  # the result and its bookkeeping from one snapshot
                    stored = StoredResult(load_result(trace_id, db), trace_info(db, trace_id))
            except (sqlite3.DatabaseError, ValueError) as exc:  # ValueError: unreadable stored JSON
                if on_error is None:
                    raise
                on_error(trace_id, exc)
                continue
            yield stored
        last = ids[-1]


def _trace_row(db: Database, trace_id: int) -> dict[str, Any]:
    rows = list(db.query("SELECT * FROM traces WHERE id = ?", [trace_id]))
    if not rows:
        raise TraceNotFound(f"no trace with id {trace_id}")
    return rows[0]


def _insert(db: Database, table: str, rows: list[tuple]) -> None:
    if rows:
        columns = _CHILD_TABLES[table]
        marks = ", ".join("?" for _ in columns)
        db.conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)

