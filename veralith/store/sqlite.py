"""SQLiteStore: the TraceStore over one SQLite file (veralith.store.protocol has the contract).

One store object serves every thread of a process: each call runs on the calling thread's own
connection (veralith.store.db), unless the store was built `over()` one connection, which then
belongs to the thread that made it. The SQL lives in repository, queries, calibration and
ownership; this class adds what the protocol promises on top of it:

- `create_trace(wait_ms=...)` returns within about `wait_ms` while another process holds the
  write lock: the trace goes to this process's spool file (veralith.store.spool) under an id from
  a block reserved beforehand (veralith.store.idblocks), and `flush()` moves it in later.
- A database that stops accepting writes (full disk, read-only file) raises WritesStopped.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from sqlite_utils import Database

from veralith.models import EvaluationResult
from veralith.store import db as dbmod, ownership, queries, repository, spool
from veralith.store.calibration import SQLiteCalibration, calibration_count as _calibration_count
from veralith.store.errors import writes_stopped
from veralith.store.protocol import StoredResult, TraceInfo, TraceInput, TraceStore
from veralith.store.replies import ReplyTable

__all__ = ["SQLiteStore"]

F = TypeVar("F", bound=Callable[..., Any])


def _writes(method: F) -> F:
    """A write whose failure because the file stopped taking writes raises WritesStopped."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            stop = writes_stopped(exc)
            if stop is not None:
                raise stop from exc
            raise
    return wrapper  # type: ignore[return-value]


class SQLiteStore:
    """The trace store in the SQLite file at `path` (default: settings.db_path).

    `alive` bounds the background thread that reserves trace ids for `create_trace(wait_ms=)`
    (the SDK passes its worker's liveness); by default it lives as long as the process.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 alive: Callable[[], bool] | None = None) -> None:
        self.path = dbmod.resolve_path(path)
        self._conn: Database | None = None
        self._alive = alive
        self._lock = threading.Lock()
        self._ids: Any = None
        self._spool: spool.Spool | None = None
        self._reply_table: ReplyTable | None = None

    @classmethod
    def over(cls, db: Database) -> SQLiteStore:
        """A store that uses this one connection (a caller that already holds one)."""
        store = cls(ownership.db_path(db) or ":memory:")
        store._conn = db
        return store

    @property
    def db(self) -> Database:
        """The calling thread's connection to the file."""
        return self._conn if self._conn is not None else dbmod.open_db(self.path)

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- traces in, work claimed and finished ---------------------------------------------------
    @_writes
    def create_trace(self, trace: TraceInput, *, queued: bool = False, wait_ms: float | None = None,
                     run: str | None = None, run_id: int | None = None) -> int:
        fields: dict[str, Any] = dict(query=trace.query, context=trace.context, response=trace.response,
                                      knowledge_base=trace.knowledge_base, metadata=trace.metadata,
                                      app_latency_ms=trace.app_latency_ms)
        extra: dict[str, Any] = {"run": run, "run_id": run_id, "external_id": trace.external_id}
        db = self.db
        if wait_ms is None:
            return repository.create_trace(db, **fields, **extra, queued=queued)
        trace_id = self._id_blocks().take(self.path, db, wait_ms)
        try:
            with dbmod.lock_wait(db, wait_ms):
                return repository.create_trace(db, **fields, **extra, queued=queued, trace_id=trace_id)
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
        if trace_id is None or trace.external_id is not None or run_id is not None:
            # No id reserved yet (the first traces of this process met a busy lock), or something the
            # spool does not carry: wait for the lock this once rather than return an id that might
            # not be final.
            return repository.create_trace(db, **fields, **extra, queued=queued)
        from veralith.store.rows import now_iso

        self._spooled().append(trace_id, now_iso(), {**fields, "run": run})
        return trace_id

    def _id_blocks(self) -> Any:
        with self._lock:
            if self._ids is None:
                from veralith.store.idblocks import IdBlocks

                self._ids = IdBlocks(alive=self._alive or (lambda: True))
            return self._ids

    def _spooled(self) -> spool.Spool:
        with self._lock:
            if self._spool is None:
                self._spool = spool.Spool(self.path)
            return self._spool

    @_writes
    def claim(self, trace_id: int, *, failed: bool = False, again: bool = False) -> bool:
        return repository.claim_trace(self.db, trace_id, failed=failed, again=again)

    @_writes
    def renew(self, trace_ids: Collection[int]) -> None:
        ownership.renew({(self.path, i) for i in trace_ids})

    @_writes
    def release(self, trace_id: int, *, wait_ms: float | None = None) -> bool:
        db = self.db
        if wait_ms is None:
            repository.release_trace(db, trace_id)
            return True
        try:
            with dbmod.lock_wait(db, wait_ms):
                repository.release_trace(db, trace_id)
        except sqlite3.OperationalError:
            return False
        return True

    def drop_lease(self, trace_id: int) -> None:
        repository.drop_lease(self.db, trace_id)

    @_writes
    def save_result(self, result: EvaluationResult) -> int:
        return repository.save_result(self.db, result)

    @_writes
    def mark_error(self, trace_id: int, message: str) -> bool:
        return repository.mark_error(self.db, trace_id, message)

    # -- reads ---------------------------------------------------------------------------------
    def load_input(self, trace_id: int) -> TraceInput:
        return repository.load_input(self.db, trace_id)

    def load_result(self, trace_id: int) -> EvaluationResult:
        return repository.load_result(trace_id, self.db)

    def trace_info(self, trace_id: int) -> TraceInfo:
        return repository.trace_info(self.db, trace_id)

    def find_external(self, knowledge_base: str, external_id: str) -> TraceInfo | None:
        return repository.find_external(self.db, knowledge_base, external_id)

    def resolve(self, ref: str, *, knowledge_base: str | None = None) -> int:
        return repository.resolve(self.db, ref, knowledge_base=knowledge_base)

    def resumable(self, *, failed: bool = False) -> list[int]:
        return repository.resumable_trace_ids(self.db, failed=failed)

    @_writes
    def recover(self) -> list[int]:
        return spool.recover(self.db, self.path)

    @_writes
    def flush(self) -> None:
        found = self._spool
        if found is not None and found.pending():
            found.move_into(self.db)

    def list_traces(self, *, limit: int = 50, cell: str | None = None, kb: str | None = None,
                    status: str | None = None, since: str | None = None,
                    preview_chars: int | None = queries.PREVIEW_CHARS) -> list[dict[str, Any]]:
        return queries.list_traces(self.db, limit=limit, cell=cell, kb=kb, status=status, since=since,
                                   preview_chars=preview_chars)

    def stats(self, *, kb: str | None = None) -> dict[str, Any]:
        return queries.stats(self.db, kb=kb)

    def iter_results(self, since: str | dt.datetime | None = None,
                     on_error: Callable[[int, Exception], None] | None = None,
                     trace_ids: list[int] | None = None) -> Iterator[StoredResult]:
        return repository.iter_stored(self.db, since=since, on_error=on_error, trace_ids=trace_ids)

    # -- calibration ---------------------------------------------------------------------------
    def calibration_count(self, knowledge_base: str) -> int:
        return _calibration_count(self.db, knowledge_base)

    def calibration_values(self, knowledge_base: str, offset: int, limit: int) -> list[float]:
        return SQLiteCalibration(self.db).calibration_values(knowledge_base, offset, limit)

    # -- judge-reply cache ---------------------------------------------------------------------
    def _replies(self) -> ReplyTable:
        with self._lock:
            if self._reply_table is None:
                self._reply_table = ReplyTable(self.path)
            return self._reply_table

    def cache_get(self, key: str) -> str | None:
        return self._replies().get(key)

    @_writes
    def cache_put(self, key: str, value: str, *, task: str = "", model: str = "", prompt_version: str = "") -> None:
        self._replies().put(key, value, task=task, model=model, prompt_version=prompt_version)

    @_writes
    def cache_count_hits(self, hits: Mapping[str, int]) -> None:
        self._replies().count_hits(hits)

    def close(self) -> None:
        if self._conn is None:
            dbmod.close(self.path)
        if self._reply_table is not None:
            self._reply_table.close()


if TYPE_CHECKING:  # mypy checks here that SQLiteStore implements the whole protocol
    def _conforms(store: SQLiteStore) -> TraceStore:
        return store
