"""The store's API: traces in, results out, work claimed under leases.

A trace's life: `create_trace` (pending) → `claim_trace` (running, leased to one process) →
`save_result` (done, in one transaction with every judgment) or `mark_error` (error, message kept).
A crash leaves the trace pending or running under a lease whose process is gone; such traces are
`resumable_trace_ids` and can be claimed again. Two processes never evaluate one trace at once
because a claim is one check-and-update in a write transaction (the row locked where the database
locks rows); while an evaluation runs its lease
is renewed, and its result is saved only while this process still owns the lease (`LeaseLost`
otherwise), so a slow evaluation is never taken over and paid for twice.

Traces whose last evaluation failed (judge errors, or status error) can be re-judged:
`resumable_trace_ids(failed=True)` and `claim_trace(failed=True)`; any trace nobody is evaluating
can be re-judged in place with `claim_trace(again=True)`. Whatever outcome a new one replaces is
kept in `trace_history`.

A trace may carry an external id (the caller's own id for it), unique within its knowledge base:
`find_external` and `resolve` look traces up by it.

Every function takes a `Db` (veralith.store.sql): the SQL here runs unchanged on SQLite and
PostgreSQL. New trace ids are handed out by the store (veralith.store.ids), never chosen here.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any

from veralith.errors import StoreError
from veralith.models import ContextChunk, EvaluationResult, Explanation
from veralith.store import leases
from veralith.store.errors import AmbiguousTraceId, DuplicateExternalId, TraceNotEvaluated, TraceNotFound
from veralith.store.outputsizes import add_output_sizes
from veralith.store.ownership import LeaseLost, check_owner, drop_lease, history, keep_history, renewer
from veralith.store.protocol import StoredResult, TraceInfo, TraceInput
from veralith.store.rows import (
    APP_LATENCY_COLUMNS,
    app_latency,
    app_latency_values,
    chunk_from_row,
    chunk_rows,
    dumps,
    explanation_rows,
    from_rows,
    now_iso,
    result_columns,
    to_rows,
)
from veralith.store.sql import Db
from veralith.usage import output_sizes_of

__all__ = ["AmbiguousTraceId", "DuplicateExternalId", "IdClash", "LeaseLost", "TraceNotEvaluated", "TraceNotFound",
           "claim_trace", "create_trace", "create_traces", "drop_lease", "find_external", "history", "iter_stored",
           "load_input", "load_result", "mark_error", "release_trace", "resolve", "resumable_trace_ids",
           "save_explanation", "save_result", "trace_info"]

_CHILD_TABLES = {  # table -> its columns in insert order (matches rows.to_rows)
    "context_chunks": ("trace_id", "position", "chunk_id", "source", "metadata", "text", "rank", "score"),
    "sub_questions": ("trace_id", "position", "sub_question_id", "text"),
    "claims": ("trace_id", "position", "claim_id", "text", "char_start", "char_end"),
    "gaps": ("trace_id", "position", "gap_id", "text", "char_start", "char_end"),
    "remarks": ("trace_id", "position", "remark_id", "text", "char_start", "char_end"),
    "sufficiency_judgments": ("trace_id", "position", "sub_question_id", "verdict", "reasoning", "chunk_ids",
                              "prompt_version", "confidence"),
    "faithfulness_judgments": ("trace_id", "position", "claim_id", "verdict", "relation", "reasoning",
                               "prompt_version", "confidence", "evidence", "dates"),
    "grounding": ("trace_id", "judgment_position", "kind", "position", "claim_id", "chunk_id"),
    "judge_errors": ("trace_id", "position", "phase", "kind", "message", "attempts"),
    "completeness": ("trace_id", "reasoning", "uncovered_sub_question_ids", "prompt_version", "supports", "statuses",
                     "gap_links", "confidence"),
    "completeness_mappings": ("trace_id", "sq_position", "position", "sub_question_id", "claim_id"),
    "completeness_extras": ("trace_id", "position", "claim_id"),
    "explanations": ("trace_id", "what_went_wrong", "change_to_try", "quotes", "missing_fact", "dropped", "backend",
                     "model", "prompt_version", "call_usage"),
}
_APP_LATENCY = ", ".join(APP_LATENCY_COLUMNS.values())   # the app's own timing columns, in order
_ORDER = {"completeness": "trace_id", "explanations": "trace_id", "completeness_mappings": "sq_position, position",
          "grounding": "judgment_position, kind, position"}


class IdClash(StoreError):
    """A trace id handed out for a new trace already holds another trace (the id counter fell behind,
    or a random id met an existing one). The store gives the trace a new id and writes it again."""

    def __init__(self, trace_id: int) -> None:
        super().__init__(f"trace id {trace_id} already holds another trace")
        self.trace_id = trace_id


def create_trace(db: Db, trace: TraceInput, *, trace_id: int, uid: str | None = None,
                 created_at: str | None = None, queued: bool = False, run_id: int | None = None,
                 run: str | None = None) -> bool:
    """Write a pending trace and its context in one transaction under `trace_id` (handed out by the
    store's id counter). Returns False, writing nothing, when that id already holds this very trace
    (same `uid`: a spooled trace shipped twice); raises IdClash when it holds another.

    `run_id` tags it with an open run (an eval run); `run` with the SDK run of that name, created
    in the same transaction when it is new (veralith.store.runs). `queued=True` reserves it for this
    process's in-memory queue (the lease records host, pid and token), so that no other process
    resumes it while this one is alive and about to evaluate it. An external id already used in the
    knowledge base raises DuplicateExternalId and writes nothing.
    """
    with db.write():
        return _create(db, trace, trace_id=trace_id, uid=uid, created_at=created_at, queued=queued,
                       run_id=run_id, run=run)


def create_traces(db: Db, entries: list[tuple[int, str | None, str | None, TraceInput, str | None, bool]]
                  ) -> tuple[list[int], list[int]]:
    """Write many pending traces in one transaction: (trace_id, uid, created_at, inputs, run,
    queued) each. Returns (the ids written, the ids that clashed with another trace and were not
    written); an id already holding its own trace (same uid) is in neither.

    A few statements per batch, not per trace (a shipped spool can hold thousands): one read of the
    ids already taken, one multi-row insert of the traces, one of their context. Two processes
    shipping the same dead process's spool at once meet in the context insert; the loser's batch
    fails and, tried again, finds the traces there."""
    written: list[int] = []
    clashed: list[int] = []
    if not entries:
        return written, clashed
    now = now_iso()
    with db.write():
        ids = [e[0] for e in entries]
        taken: dict[int, str | None] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            taken.update(db.execute(f"SELECT id, uid FROM traces WHERE id IN ({', '.join('?' for _ in chunk)})",
                                    chunk).fetchall())
        fresh = []
        for entry in entries:
            trace_id, uid = entry[0], entry[1]
            if trace_id not in taken:
                fresh.append(entry)
                taken[trace_id] = uid   # a repeat within the batch is the same trace
            elif uid is None or taken[trace_id] != uid:
                clashed.append(trace_id)
        runs: dict[str, int] = {}
        rows, chunks = [], []
        for trace_id, uid, created_at, trace, run, queued in fresh:
            lease = leases.mine() if queued else (None, None, None, None)
            run_id = None
            if run is not None:
                if run not in runs:
                    from veralith.store.runs import sdk_run_id

                    runs[run] = sdk_run_id(db, run)
                run_id = runs[run]
            rows.append((trace_id, uid, created_at or now, now, *lease, trace.knowledge_base,
                         dumps(trace.metadata, what="metadata"), trace.query, trace.response, trace.external_id,
                         run_id, *app_latency_values(trace.app_latency_ms)))
            chunks += chunk_rows(trace_id, trace.context)
            written.append(trace_id)
        if rows:
            db.executemany(
                "INSERT INTO traces (id, uid, created_at, updated_at, status, lease_host, lease_pid, lease_token,"
                f" lease_at, knowledge_base, metadata, query, response, external_id, run_id, {_APP_LATENCY})"
                " VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                rows)
            _insert(db, "context_chunks", chunks)
    return written, clashed


def _create(db: Db, trace: TraceInput, *, trace_id: int, uid: str | None, created_at: str | None, queued: bool,
            run_id: int | None = None, run: str | None = None) -> bool:
    now = now_iso()
    meta = dumps(trace.metadata, what="metadata")
    lease = leases.mine() if queued else (None, None, None, None)
    try:
        cursor = db.execute(
            "INSERT INTO traces (id, uid, created_at, updated_at, status, lease_host, lease_pid, lease_token, lease_at,"
            f" knowledge_base, metadata, query, response, external_id, {_APP_LATENCY})"
            " VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
            [trace_id, uid, created_at or now, now, *lease, trace.knowledge_base, meta, trace.query, trace.response,
             trace.external_id, *app_latency_values(trace.app_latency_ms)])
    except db.dialect.integrity_error as exc:
        if trace.external_id is not None and "external_id" in str(exc):
            raise DuplicateExternalId(f"knowledge base {trace.knowledge_base!r} already has a trace with external "
                                      f"id {trace.external_id!r}") from None
        raise
    if cursor.rowcount == 0:  # the id is taken: by this trace (shipped before) or by another
        row = db.execute("SELECT uid FROM traces WHERE id = ?", [trace_id]).fetchone()
        if uid is not None and row is not None and row[0] == uid:
            return False
        raise IdClash(trace_id)
    _insert(db, "context_chunks", chunk_rows(trace_id, trace.context))
    if run is not None:
        from veralith.store.runs import sdk_run_id

        run_id = sdk_run_id(db, run)
    if run_id is not None:
        db.execute("UPDATE traces SET run_id = ? WHERE id = ?", [run_id, trace_id])
    return True


def claim_trace(db: Db, trace_id: int, *, lease_timeout_s: float | None = None, failed: bool = False,
                again: bool = False) -> bool:
    """Atomically take a trace for evaluation: pending → running under this process's lease.

    Also takes a running trace whose lease is stale (its process is gone from this host, or the
    lease is older than the timeout). Refuses a pending trace reserved by another live process's
    queue, and anything done or in error — unless `failed`, which also takes a trace whose last
    evaluation failed (status error, or done with judge errors), or `again`, which takes any done
    or error trace (re-judging in place). Raises TraceNotFound for an unknown id. The lease is
    renewed in the background until the result or error is saved.
    """
    with db.write():
        row = db.execute("SELECT status, lease_host, lease_pid, lease_token, lease_at FROM traces WHERE id = ?"
                         + db.dialect.for_update, [trace_id]).fetchone()
        if row is None:
            raise TraceNotFound(f"no trace with id {trace_id}")
        # Ours and running, but no evaluation of ours holds it: one that ended without an outcome (the
        # store went away before its result could be saved) is taken again by this process.
        dropped = row[0] == "running" and leases.is_mine(*row[1:4]) and (db.key, trace_id) not in renewer.held()
        if not (leases.claimable(*row, timeout_s=lease_timeout_s) or dropped or (again and row[0] in ("done", "error"))
                or (failed and _failed(db, trace_id, row[0]))):
            return False
        host, pid, token, at = leases.mine()
        db.execute("UPDATE traces SET status = 'running', lease_host = ?, lease_pid = ?, lease_token = ?,"
                   " lease_at = ?, attempts = attempts + 1, updated_at = ? WHERE id = ?",
                   [host, pid, token, at, now_iso(), trace_id])
    renewer.hold((db.key, trace_id))
    return True


def _failed(db: Db, trace_id: int, status: str) -> bool:
    if status == "error":
        return True
    return status == "done" and db.execute("SELECT 1 FROM judge_errors WHERE trace_id = ? LIMIT 1",
                                           [trace_id]).fetchone() is not None


def claim_batch(db: Db, limit: int, *, knowledge_base: str | None = None,
                lease_timeout_s: float | None = None) -> list[int]:
    """Claim up to `limit` traces nobody is working on, oldest first: pending and unreserved, or
    pending/running under a lease older than the timeout (a reservation or claim of a gone process
    on this host is found sooner by `resumable_trace_ids`). Where the database locks rows, rows
    another worker is claiming at the same moment are skipped, not waited for. `knowledge_base`
    limits it to that knowledge base's traces."""
    timeout = leases.LEASE_TIMEOUT_S if lease_timeout_s is None else lease_timeout_s
    host, pid, token, at = leases.mine()
    kb_clause, params = ("", []) if knowledge_base is None else (" AND knowledge_base = ?", [knowledge_base])
    with db.pipelined(), db.write():   # BEGIN goes with the SELECT, the COMMIT with the UPDATE
        rows = db.execute(
            "SELECT id, status, lease_host, lease_pid, lease_token, lease_at FROM traces"
            " WHERE status IN ('pending', 'running') AND (lease_host IS NULL OR lease_at < ?)" + kb_clause
            + " ORDER BY id LIMIT ?" + db.dialect.skip_locked, [at - timeout, *params, max(1, limit)]).fetchall()
        ids = [r[0] for r in rows if leases.claimable(*r[1:], timeout_s=timeout, own_is_fresh=True)]
        if ids:
            marks = ", ".join("?" for _ in ids)
            db.execute("UPDATE traces SET status = 'running', lease_host = ?, lease_pid = ?, lease_token = ?,"
                       f" lease_at = ?, attempts = attempts + 1, updated_at = ? WHERE id IN ({marks})",
                       [host, pid, token, at, now_iso(), *ids])
    for trace_id in ids:
        renewer.hold((db.key, trace_id))
    return [int(i) for i in ids]


def release_trace(db: Db, trace_id: int) -> None:
    """Give back this process's hold on a trace: its reservation of a pending trace (its queue was
    full), or its claim of a running one (a worker stopping): the trace is pending and anyone's.
    A trace this process does not hold is left as it is."""
    host, pid, token, _ = leases.mine()
    with db.write():
        db.execute("UPDATE traces SET status = 'pending', lease_host = NULL, lease_pid = NULL, lease_token = NULL,"
                   " lease_at = NULL, updated_at = ? WHERE id = ? AND status IN ('pending', 'running')"
                   f" AND lease_host = ? AND lease_pid = ? AND lease_token {db.dialect.same} ?",
                   [now_iso(), trace_id, host, pid, token])
    key = (db.key, trace_id)
    if key in renewer.held():
        renewer.drop(key)


def save_result(db: Db, result: EvaluationResult, *, new_id: int | None = None) -> int:
    """Store a result and mark its trace done, all in one transaction; return the trace id.

    Without `result.trace_id` a new trace is created under `new_id` (from the store's id counter);
    with it, that trace's inputs and judgments are replaced in place. The result object itself is
    not modified.
    """
    if result.trace_id is None and new_id is None:
        raise StoreError("save_result() of a new trace needs the id the store handed out for it")
    now = now_iso()
    columns = result_columns(result)
    inputs = {"knowledge_base": result.knowledge_base, "metadata": dumps(result.metadata, what="metadata"),
              "query": result.query, "response": result.response}
    # Rows are built before taking the write lock, so the lock is held only for SQL; they carry
    # a placeholder id (0) when the trace is new, swapped for the real one below.
    child_rows = to_rows(result.trace_id or 0, result)
    sizes = output_sizes_of(result)   # what --dry-run learns output sizes from; worked out before the lock
    key = (db.key, result.trace_id or 0)
    held = result.trace_id is not None and key in renewer.held()
    # Pipelined: after the owner check (whose row is read), the deletes, the update, the inserts and
    # the commit go to PostgreSQL in one round trip instead of one each (about 25 per result).
    with db.pipelined(), db.write():
        trace_id = result.trace_id
        if trace_id is None:
            trace_id = int(new_id or 0)
            db.execute("INSERT INTO traces (id, uid, created_at, updated_at, query, response)"
                       " VALUES (?, ?, ?, ?, '', '')", [trace_id, secrets.token_hex(16), now, now])
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
        add_output_sizes(db, sizes, now)
    if held:
        renewer.drop(key)
    return int(trace_id)


def save_explanation(db: Db, trace_id: int, explanation: Explanation) -> None:
    """Store (or replace) the explanation of a trace whose result is stored (`inspect --explain`).

    Only the explanation changes: the trace's judgments, cell and rule-based suggestion stay as they were.
    Raises TraceNotFound / TraceNotEvaluated when there is no result to explain.
    """
    rows = explanation_rows(trace_id, explanation)
    with db.write():
        trace = _trace_row(db, trace_id)
        if trace["execution"] is None:
            raise TraceNotEvaluated(trace_id, trace["status"], trace["error_message"])
        db.execute("DELETE FROM explanations WHERE trace_id = ?", [trace_id])
        _insert(db, "explanations", rows)


def mark_error(db: Db, trace_id: int, message: str) -> bool:
    """Record that evaluating the trace failed. A result stored earlier, if any, stays readable.

    Returns False (and writes nothing) when this process had claimed the trace but lost the lease:
    the process that took it over decides the outcome.
    """
    key = (db.key, trace_id)
    held = key in renewer.held()
    try:
        with db.write():
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


def load_result(trace_id: int, db: Db) -> EvaluationResult:
    """The stored result of a trace, equal to the one that was saved.

    Raises TraceNotFound for an unknown id, TraceNotEvaluated when no result is stored yet.
    """
    # One read transaction, so a concurrent re-evaluation cannot mix two results.
    with db.read():
        trace = _trace_row(db, trace_id)
        if trace["execution"] is None:
            raise TraceNotEvaluated(trace_id, trace["status"], trace["error_message"])
        children = {table: list(db.query(
            f"SELECT * FROM {table} WHERE trace_id = ? ORDER BY {_ORDER.get(table, 'position')}", [trace_id]))
            for table in _CHILD_TABLES}
    return from_rows(trace, children)


def load_input(db: Db, trace_id: int) -> TraceInput:
    """What was logged for the trace, external id included."""
    with db.read():
        rows = list(db.query(f"SELECT query, response, knowledge_base, metadata, external_id, {_APP_LATENCY}"
                             " FROM traces WHERE id = ?", [trace_id]))
        if not rows:
            raise TraceNotFound(f"no trace with id {trace_id}")
        trace = rows[0]
        chunks = [ContextChunk(**chunk_from_row(c))
                  for c in db.query("SELECT * FROM context_chunks WHERE trace_id = ? ORDER BY position", [trace_id])]
    return TraceInput(query=trace["query"], context=chunks, response=trace["response"],
                      knowledge_base=trace["knowledge_base"], metadata=json.loads(trace["metadata"]),
                      external_id=trace["external_id"],
                      app_latency_ms=app_latency(trace[c] for c in APP_LATENCY_COLUMNS.values()))


_INFO = ("SELECT id, knowledge_base, external_id, status, created_at, updated_at, evaluated_at, execution,"
         " backend, judge_model, prompt_versions, app_latency_ms, app_retrieval_ms, app_generation_ms FROM traces")


def _info(row: tuple[Any, ...]) -> TraceInfo:
    has_result = row[7] is not None
    return TraceInfo(trace_id=row[0], knowledge_base=row[1], external_id=row[2], status=row[3], created_at=row[4],
                     updated_at=row[5], evaluated_at=row[6] if has_result else None, has_result=has_result,
                     backend=row[8], judge_model=row[9],
                     prompt_versions=json.loads(row[10]) if has_result and row[10] else {},
                     app_latency_ms=app_latency(row[11:14]))


def trace_info(db: Db, trace_id: int) -> TraceInfo:
    """The trace's bookkeeping (status, times, external id, the judge configuration of its result)."""
    row = db.execute(_INFO + " WHERE id = ?", [trace_id]).fetchone()
    if row is None:
        raise TraceNotFound(f"no trace with id {trace_id}")
    return _info(row)


def find_external(db: Db, knowledge_base: str, external_id: str) -> TraceInfo | None:
    """The trace of `knowledge_base` whose external id is `external_id`, if any."""
    row = db.execute(_INFO + " WHERE knowledge_base = ? AND external_id = ?", [knowledge_base, external_id]).fetchone()
    return None if row is None else _info(row)


def resolve(db: Db, ref: str, *, knowledge_base: str | None = None) -> int:
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
    # Ids are below 2**63 (both databases' largest integer), and may have 19 digits: a host without a
    # block of PostgreSQL ids hands out random ones from 2**62 up (veralith.store.ids).
    if digits.isascii() and digits.isdecimal() and len(digits) <= 19 and int(digits) < 2**63:
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


def resumable_trace_ids(db: Db, *, lease_timeout_s: float | None = None, failed: bool = False) -> list[int]:
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


def abandoned_trace_ids(db: Db) -> list[int]:
    """Traces reserved or claimed by a process of this host that is gone (pending or running under
    its lease): claimable now, long before their lease times out. Reads this host's leases only."""
    host = leases.mine()[0]
    rows = db.execute("SELECT id, status, lease_host, lease_pid, lease_token, lease_at FROM traces"
                      " WHERE status IN ('pending', 'running') AND lease_host = ? ORDER BY id", [host]).fetchall()
    return [row[0] for row in rows if leases.claimable(*row[1:], own_is_fresh=True)]


def iter_stored(db: Db, since: str | dt.datetime | None = None,
                on_error: Callable[[int, Exception], None] | None = None,
                trace_ids: list[int] | None = None) -> Iterator[StoredResult]:
    """Every stored result with its bookkeeping (times, external id), oldest first; `trace_ids` keeps
    only those, `since` those created at or after it (an ISO-8601 string or a datetime; a naive
    datetime is taken as UTC, the zone timestamps are stored in).

    With `on_error`, a trace that cannot be read (a damaged page of the file, unreadable stored
    JSON) is reported to it and skipped, so one bad page does not end an export; without, the
    error is raised."""
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
                with db.read():  # the result and its bookkeeping from one snapshot
                    stored = StoredResult(load_result(trace_id, db), trace_info(db, trace_id))
            except Exception as exc:  # a damaged page (the database's own error), unreadable JSON (ValueError)
                if on_error is None or isinstance(exc, (TraceNotFound, TraceNotEvaluated)):
                    raise
                on_error(trace_id, exc)
                continue
            yield stored
        last = ids[-1]


def _trace_row(db: Db, trace_id: int) -> dict[str, Any]:
    rows = list(db.query("SELECT * FROM traces WHERE id = ?", [trace_id]))
    if not rows:
        raise TraceNotFound(f"no trace with id {trace_id}")
    return rows[0]


def _insert(db: Db, table: str, rows: list[tuple]) -> None:
    if rows:
        columns = _CHILD_TABLES[table]
        marks = ", ".join("?" for _ in columns)
        db.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)

