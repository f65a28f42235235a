"""Traces in and results out: the rows of a trace, written and read on any `Db`.

A trace's life is decided by the work layer (veralith.work: claims, leases, who may write an
outcome); this module only stores what it is given: `create_trace` / `create_traces` write pending
traces (under ids the work layer handed out, optionally reserved for a process: `owner`),
`write_result` replaces a trace's judgments and marks it done, `write_error` records a failed
evaluation, each inside the caller's write transaction where the caller checks ownership first.
Whatever outcome a new one replaces is kept in `trace_history` (veralith.store.history).

A trace may carry an external id (the caller's own id for it), unique within its knowledge base:
`find_external` and `resolve` look traces up by it.

Every function takes a `Db` (veralith.store.sql): the SQL here runs unchanged on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from veralith.errors import StoreError
from veralith.models import ContextChunk, EvaluationResult, Explanation
from veralith.store.errors import AmbiguousTraceId, DuplicateExternalId, TraceNotEvaluated, TraceNotFound
from veralith.store.outputsizes import add_output_sizes
from veralith.store.protocol import StoredResult, TraceInfo, TraceInput
from veralith.store.reference_rows import REFERENCE_TABLES, given_reference, given_row
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
from veralith.usage import OutputSize

__all__ = ["AmbiguousTraceId", "DuplicateExternalId", "IdClash", "Owner", "TraceNotEvaluated", "TraceNotFound",
           "create_trace", "create_traces", "find_external", "iter_stored", "load_input", "load_result", "resolve",
           "save_explanation", "trace_info", "write_error", "write_result"]

# A process that reserves a trace it is about to evaluate: (host, pid, token), as veralith.work.leases
# names it; the store writes it as the trace's lease, timed by the database's clock.
Owner = tuple[str, int, str]

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
    **REFERENCE_TABLES,
}
_APP_LATENCY = ", ".join(APP_LATENCY_COLUMNS.values())   # the app's own timing columns, in order
_ORDER = {"completeness": "trace_id", "explanations": "trace_id", "trace_references": "trace_id",
          "completeness_mappings": "sq_position, position",
          "grounding": "judgment_position, kind, position"}


class IdClash(StoreError):
    """A trace id handed out for a new trace already holds another trace (the id counter fell behind,
    or a random id met an existing one). The store gives the trace a new id and writes it again."""

    def __init__(self, trace_id: int) -> None:
        super().__init__(f"trace id {trace_id} already holds another trace")
        self.trace_id = trace_id


def create_trace(db: Db, trace: TraceInput, *, trace_id: int, uid: str | None = None,
                 created_at: str | None = None, owner: Owner | None = None, run_id: int | None = None,
                 run: str | None = None) -> bool:
    """Write a pending trace and its context in one transaction under `trace_id` (handed out by the
    work layer's id allocator). Returns False, writing nothing, when that id already holds this very
    trace (same `uid`: a spooled trace shipped twice); raises IdClash when it holds another.

    `run_id` tags it with an open run (an eval run); `run` with the SDK run of that name, created
    in the same transaction when it is new (veralith.store.runs). `owner` reserves it for that
    process (its lease, timed by the database's clock), so that nobody else takes it while that
    process is alive and about to evaluate it. An external id already used in the knowledge base
    raises DuplicateExternalId and writes nothing.
    """
    with db.write():
        return _create(db, trace, trace_id=trace_id, uid=uid, created_at=created_at, owner=owner,
                       run_id=run_id, run=run)


Entry = tuple[int, "str | None", "str | None", TraceInput, "str | None", "Owner | None"]


def create_traces(db: Db, entries: list[Entry]) -> tuple[list[int], list[int]]:
    """Write many pending traces in one transaction: (trace_id, uid, created_at, inputs, run, owner)
    each. Returns (the ids written, the ids that clashed with another trace and were not written);
    an id already holding its own trace (same uid) is in neither.

    A few statements per batch, not per trace (a shipped spool can hold thousands): one read of the
    ids already taken, one multi-row insert of the traces, one of their context. Two processes
    shipping the same dead process's spool at once meet in the context insert; the loser's batch
    fails and, tried again, finds the traces there. Any error (a value the database refuses) rolls
    the whole batch back: the caller may split it to find the record that fails."""
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
        rows, chunks, references = [], [], []
        for trace_id, uid, created_at, trace, run, owner in fresh:
            lease = owner or (None, None, None)
            run_id = None
            if run is not None:
                if run not in runs:
                    from veralith.store.runs import sdk_run_id

                    runs[run] = sdk_run_id(db, run)
                run_id = runs[run]
            rows.append((trace_id, uid, created_at or now, now, *lease, lease[0], trace.knowledge_base,
                         dumps(trace.metadata, what="metadata"), trace.query, trace.response, trace.external_id,
                         run_id, *app_latency_values(trace.app_latency_ms)))
            chunks += chunk_rows(trace_id, trace.context)
            if trace.reference is not None:
                references.append(given_row(trace_id, trace.reference))
            written.append(trace_id)
        if rows:
            db.executemany(
                "INSERT INTO traces (id, uid, created_at, updated_at, status, lease_host, lease_pid, lease_token,"
                f" lease_at, knowledge_base, metadata, query, response, external_id, run_id, {_APP_LATENCY})"
                f" VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, {_lease_at(db)}, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (id) DO NOTHING", rows)
            _insert(db, "context_chunks", chunks)
            _insert(db, "trace_references", references)
    return written, clashed


def _lease_at(db: Db) -> str:
    """A reservation's lease time: the database's clock when a holder is given (the parameter is
    the holder's host), else NULL."""
    return f"CASE WHEN CAST(? AS TEXT) IS NULL THEN NULL ELSE {db.dialect.epoch} END"


def _create(db: Db, trace: TraceInput, *, trace_id: int, uid: str | None, created_at: str | None,
            owner: Owner | None, run_id: int | None = None, run: str | None = None) -> bool:
    now = now_iso()
    meta = dumps(trace.metadata, what="metadata")
    lease = owner or (None, None, None)
    try:
        cursor = db.execute(
            "INSERT INTO traces (id, uid, created_at, updated_at, status, lease_host, lease_pid, lease_token, lease_at,"
            f" knowledge_base, metadata, query, response, external_id, {_APP_LATENCY})"
            f" VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, {_lease_at(db)}, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO NOTHING",
            [trace_id, uid, created_at or now, now, *lease, lease[0], trace.knowledge_base, meta, trace.query,
             trace.response, trace.external_id, *app_latency_values(trace.app_latency_ms)])
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
    if trace.reference is not None:
        _insert(db, "trace_references", [given_row(trace_id, trace.reference)])
    if run is not None:
        from veralith.store.runs import sdk_run_id

        run_id = sdk_run_id(db, run)
    if run_id is not None:
        db.execute("UPDATE traces SET run_id = ? WHERE id = ?", [run_id, trace_id])
    return True


def write_result(db: Db, result: EvaluationResult, trace_id: int, *, new: bool, now: str,
                 sizes: Sequence[OutputSize] = ()) -> None:
    """Inside the caller's write transaction (after it checked that it may write this trace's
    outcome): store `result` as trace `trace_id`'s and mark it done; `new` creates the trace row
    first (a result judged without a stored trace, `evaluate(persist=True)`). `sizes`, what the
    result's calls wrote (veralith.usage.OutputSize), are added to the sums `--dry-run` learns from.
    The result object itself is not modified."""
    columns = result_columns(result)
    inputs = {"knowledge_base": result.knowledge_base, "metadata": dumps(result.metadata, what="metadata"),
              "query": result.query, "response": result.response}
    child_rows = to_rows(trace_id, result)
    if new:
        db.execute("INSERT INTO traces (id, uid, created_at, updated_at, query, response)"
                   " VALUES (?, ?, ?, ?, '', '')", [trace_id, secrets.token_hex(16), now, now])
    for table in reversed(list(_CHILD_TABLES)):  # children of completeness first
        db.execute(f"DELETE FROM {table} WHERE trace_id = ?", [trace_id])
    values = {**inputs, **columns, "status": "done", "lease_host": None, "lease_pid": None, "lease_at": None,
              "lease_token": None, "error_message": None, "evaluated_at": now, "updated_at": now}
    assignments = ", ".join(f"{name} = ?" for name in values)
    db.execute(f"UPDATE traces SET {assignments} WHERE id = ?", [*values.values(), trace_id])
    for table, rows in child_rows.items():
        _insert(db, table, rows)
    add_output_sizes(db, sizes, now)


def write_error(db: Db, trace_id: int, message: str, *, now: str) -> None:
    """Inside the caller's write transaction: record that evaluating the trace failed (status
    error, the message kept, the lease ended). A result stored earlier, if any, stays readable."""
    db.execute("UPDATE traces SET status = 'error', error_message = ?, lease_host = NULL,"
               " lease_pid = NULL, lease_token = NULL, lease_at = NULL, updated_at = ? WHERE id = ?",
               [str(message), now, trace_id])


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
        given = [*db.query("SELECT answer, contexts FROM trace_references WHERE trace_id = ?", [trace_id]), None][0]
    return TraceInput(query=trace["query"], context=chunks, response=trace["response"],
                      knowledge_base=trace["knowledge_base"], metadata=json.loads(trace["metadata"]),
                      external_id=trace["external_id"],
                      app_latency_ms=app_latency(trace[c] for c in APP_LATENCY_COLUMNS.values()),
                      reference=given_reference(given))


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

