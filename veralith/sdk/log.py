"""log(): persist a trace at once, evaluate it in the background; never disturb the host program.

The caller's thread only validates, checks the budget and writes the trace as `pending`
(reserved for this process's queue). It waits at most `settings.log_timeout_ms` for the write
lock; when another process holds it longer, the trace goes to this process's spool file under an
id reserved in advance (veralith.store.spool) and the worker moves it into the database. One
daemon worker per process then claims each trace, evaluates it under the caller's settings and
stores the result. Nothing a background evaluation does is raised into the host: a failure is
stored on the trace (status `error`, message) and logged. A full queue never blocks: the trace
stays pending, unreserved, for the worker's next sweep, `resume()` or `veralith resume`.

At exit the worker drains for at most `settings.shutdown_timeout_s` (traces that overflowed the
queue included); what is left stays pending and one line on stderr says how many and that
`veralith resume` finishes them.

A crash loses no trace: it is on disk (database or spool), pending or running under a lease whose
process is gone, and `resume()` (or any worker starting later) picks it up. Claims are atomic, so
a trace is never evaluated twice at once, whichever processes race for it.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import logging
import os
import queue
import sqlite3
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from veralith.config import Settings, settings
from veralith.errors import StoreError
from veralith.models import EvaluationResult
from veralith.pipeline.inputs import check_knowledge_base, check_metadata, check_query, check_text, normalize_context
from veralith.validate import check_stored_inputs

__all__ = ["log", "resume", "shutdown"]

logger = logging.getLogger("veralith.sdk")
_STOP = object()


class _Store:
    """The store modules, imported on first use: sqlite-utils (and the numpy it pulls in) should
    not load at `import veralith`, only once something is logged."""

    def __getattr__(self, name: str) -> Any:
        from veralith.store import db, repository, spool
        object.__setattr__(self, "db", db)
        object.__setattr__(self, "repo", repository)
        object.__setattr__(self, "spool", spool)
        return getattr(self, name)


_store = _Store()


def log(query: str, context: Any, response: str, *, sync: bool | None = None, knowledge_base: str = "default",
        metadata: dict[str, Any] | None = None) -> int | EvaluationResult:
    """Store the trace and return its id; evaluation follows in the background.

    Returns within about `settings.log_timeout_ms` even while another process holds the database's
    write lock (the trace is then spooled, durable, under its final id). With `sync=True` (or
    settings.sync) evaluate now and return the EvaluationResult. Bad arguments raise
    TypeError/ValueError and an over-budget trace raises BudgetExceeded, both before anything is
    written.
    """
    query, response = check_query(query), check_text("response", response)
    chunks = normalize_context(context)
    knowledge_base, metadata = check_knowledge_base(knowledge_base), check_metadata(metadata)
    check_stored_inputs(query, chunks, response, metadata)
    if sync is not None and not isinstance(sync, bool):
        raise TypeError(f"sync must be a bool or None, got {type(sync).__name__}")
    if settings.per_trace_budget_usd is not None:
        from veralith.observability.cost import enforce_budget  # loads tiktoken; only when a budget is set
        enforce_budget(query, chunks, response)
    path = _store.db.resolve_path()
    db = _store.db.open_db(path)
    fields = dict(query=query, context=chunks, response=response, knowledge_base=knowledge_base, metadata=metadata)
    if settings.sync if sync is None else sync:
        # Reserved, so that no sweep (ours or another process's) can take it before we claim it.
        trace_id = _store.repo.create_trace(db, **fields, queued=True)
        result = _evaluate_claimed(db, trace_id, raise_errors=True)
        if result is None:  # only if another process broke our reservation, which claims rule out
            raise StoreError(f"trace {trace_id} was taken by another process before it could be evaluated")
        return result
    worker = _worker()
    snapshot = settings.snapshot()
    has_room = not worker.queue.full()
    trace_id, spooled = _write(db, path, worker, fields, queued=has_room)
    worker.outstanding[trace_id] = (path, snapshot)
    if not (has_room and worker.submit(trace_id, path, snapshot)):
        if has_room and not spooled:  # another thread filled the last slot meanwhile
            # Bounded like the write; if the lock is busy it stays reserved to us, and the worker's
            # final drain (it is in `outstanding`) or, after our exit, any resume takes it.
            with contextlib.suppress(sqlite3.OperationalError), _store.db.lock_wait(db, settings.log_timeout_ms):
                _store.repo.release_trace(db, trace_id)
        worker.overflowed.set()
    return trace_id


def _write(db: Any, path: str, worker: _Worker, fields: dict[str, Any], *, queued: bool) -> tuple[int, bool]:
    """Write the trace within the log bound, else spool it: (id, spooled).

    Ids come from the block this process reserved (so a spooled trace's id is final and ids stay
    consecutive within a process); with none reserved yet, the database picks one.
    """
    trace_id = worker.ids.take(path, db, settings.log_timeout_ms)
    try:
        with _store.db.lock_wait(db, settings.log_timeout_ms):
            return _store.repo.create_trace(db, **fields, queued=queued, trace_id=trace_id), False
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
    if trace_id is None:
        # No id reserved yet (the first traces of this process met a busy lock): wait for the lock
        # this once rather than return an id that might not be final.
        return _store.repo.create_trace(db, **fields, queued=queued), False
    from veralith.store.rows import now_iso
    worker.spool(path).append(trace_id, now_iso(), fields)
    return trace_id, True


def resume(*, concurrency: int | None = None, failed: bool = False) -> int:
    """Evaluate every resumable trace of the configured database (pending and nobody's, or left
    running by a dead process, or spooled by one), `concurrency` at a time (default
    settings.concurrency), and return how many results it stored. A trace that fails again is
    marked error and logged.

    With `failed=True`, instead re-judge the stored traces whose last evaluation failed (judge
    errors, e.g. during a judge outage, or status error); what they ended with before is kept in
    the trace's history (`veralith.store.repository.history`).
    """
    path = _store.db.resolve_path()
    db = _store.db.open_db(path)
    if not failed:
        _store.spool.recover(db, path)
    ids = _store.repo.resumable_trace_ids(db, failed=failed)
    if not ids:
        return 0
    workers = max(1, concurrency or settings.concurrency)

    def one(trace_id: int) -> bool:
        return _evaluate_claimed(_store.db.open_db(path), trace_id, raise_errors=False, claim=True,
                                 failed=failed) is not None

    if workers == 1:
        return sum(one(i) for i in ids)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="veralith-resume") as pool:
        # Each call in a copy of this context, so the caller's settings overrides reach the threads.
        return sum(pool.map(lambda i: contextvars.copy_context().run(one, i), ids))


def shutdown(wait: bool = True, timeout: float | None = None) -> int:
    """Stop the background worker. With `wait`, first evaluate everything this process logged and
    has not evaluated yet, queued or overflowed (for at most `timeout` seconds, if given; what is
    left then stays pending). Returns how many traces were left unevaluated.

    Traces left behind stay pending; once the process has exited they are resumable. Registered
    to run (with `wait`, for at most settings.shutdown_timeout_s) at interpreter exit.
    """
    global _current
    with _lock:
        worker, _current = _current, None
    if worker is None or worker.pid != os.getpid():
        return 0
    worker.stop(wait, timeout)
    return len(worker.outstanding)


class _Worker:
    """One daemon thread with its own connection, fed by a bounded queue of
    (trace id, db path, the caller's settings)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=settings.queue_size)
        self.overflowed = threading.Event()
        self.abandon = False  # set by stop(wait=False) or a timeout: leave the rest pending
        # Logged here and not evaluated yet: id -> (db path, settings). Plain dict operations are
        # atomic under the GIL, and only counts and membership are read across threads.
        self.outstanding: dict[int, tuple[str, Settings]] = {}
        self._spools: dict[str, Any] = {}
        # The thread runs in a copy of the creator's context: its start-up sweep and id reservation
        # use the settings (database) in force where the first trace was logged.
        self.thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,),
                                       name="veralith-log-worker", daemon=True)
        self.thread.start()
        from veralith.store.idblocks import IdBlocks
        self.ids = IdBlocks(alive=self.thread.is_alive)

    def submit(self, trace_id: int, path: str, snapshot: Settings) -> bool:
        try:
            self.queue.put_nowait((trace_id, path, snapshot))
        except queue.Full:
            return False
        return True

    def spool(self, path: str) -> Any:
        spool = self._spools.get(path)
        if spool is None:
            spool = self._spools.setdefault(path, _store.spool.Spool(path))
        return spool

    def stop(self, wait: bool, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not wait:
            self.abandon = True
        try:  # blocks only while the queue is full, i.e. until the worker takes an item
            self.queue.put(_STOP, timeout=timeout)
        except queue.Full:
            self.abandon = True
            return
        if wait:
            self.thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            self.abandon = True  # on timeout: finish the current trace, leave the rest pending

    def _run(self) -> None:
        try:
            self._sweep()  # at start: pick up what earlier processes left behind
            while True:
                if self.overflowed.is_set() and self.queue.empty():
                    self.overflowed.clear()
                    self._sweep()
                self._move_spools()
                try:
                    item = self.queue.get(timeout=0.5)
                except queue.Empty:
                    continue
                if self.abandon:
                    return
                if item is _STOP:
                    self._drain_overflow()
                    return
                self._process(*item)
        finally:
            _store.db.close_all()

    def _process(self, trace_id: int, path: str, snapshot: Settings) -> None:
        try:
            with settings.using(snapshot):  # evaluate as the caller configured, into its database
                self._move_spools(path)
                _evaluate_claimed(_store.db.open_db(path), trace_id, raise_errors=False)
        except Exception:  # e.g. the file became unreadable; the host must never see it
            logger.exception("veralith: background evaluation of trace %s failed", trace_id)
        finally:
            self.outstanding.pop(trace_id, None)

    def _drain_overflow(self) -> None:
        """At stop: the traces that overflowed the queue are ours to finish too."""
        self._move_spools()
        for trace_id in sorted(self.outstanding):
            if self.abandon:
                return
            path, snapshot = self.outstanding[trace_id]
            try:
                with settings.using(snapshot):
                    _evaluate_claimed(_store.db.open_db(path), trace_id, raise_errors=False, claim=True)
            except Exception:
                logger.exception("veralith: background evaluation of trace %s failed", trace_id)
            finally:
                self.outstanding.pop(trace_id, None)

    def _move_spools(self, only: str | None = None) -> None:
        for path, spool in list(self._spools.items()):
            if (only is None or path == only) and spool.pending():
                try:
                    spool.move_into(_store.db.open_db(path))
                except Exception:  # stays in the spool file; moved on a later round or by resume
                    logger.warning("veralith: could not move spooled traces into %s", path, exc_info=True)

    def _sweep(self) -> None:
        try:
            path = _store.db.resolve_path()
            db = _store.db.open_db(path)
            _store.spool.recover(db, path)
            ids = _store.repo.resumable_trace_ids(db)
        except Exception:  # the host must never see a background failure
            logger.exception("veralith: could not look for resumable traces")
            return
        for trace_id in ids:
            if self.abandon:
                return
            _evaluate_claimed(_store.db.open_db(path), trace_id, raise_errors=False, claim=True)
            self.outstanding.pop(trace_id, None)


def _evaluate_claimed(db: Any, trace_id: int, *, raise_errors: bool, claim: bool = True,
                      failed: bool = False) -> EvaluationResult | None:
    """Claim, evaluate and store one trace. Returns None when it was not ours to take or failed."""
    from veralith.llm import get_client
    from veralith.pipeline.evaluate import evaluate_checked

    claimed = False
    try:
        if claim and not _store.repo.claim_trace(db, trace_id, failed=failed):
            return None
        claimed = True
        query, chunks, response, knowledge_base, metadata = _store.repo.load_trace_input(db, trace_id)
        # Validated and budget-checked when it was logged; stored into the db it was logged to.
        return evaluate_checked(query, chunks, response, db=db, client=get_client(), trace_id=trace_id,
                                knowledge_base=knowledge_base, metadata=metadata)
    except _store.repo.LeaseLost as exc:
        logger.warning("veralith: %s", exc)
        return None
    except Exception as exc:
        if _exiting.is_set():
            # The exit deadline passed and the interpreter is shutting down under us ("cannot
            # schedule new futures..."): not the trace's fault. Our lease dies with the process,
            # so the trace stays resumable instead of being marked error.
            return None
        from veralith.redact import redact_configured

        message = redact_configured(f"{type(exc).__name__}: {exc}")  # stored and logged: no secrets
        if not raise_errors:
            logger.warning("veralith: evaluating trace %s failed: %s", trace_id, message)
        _quietly(lambda: _store.repo.mark_error(db, trace_id, message))
        if raise_errors:
            raise
        return None
    finally:
        if claimed:
            _store.repo.drop_lease(db, trace_id)  # no-op once saved or marked


def _quietly(action: Any) -> None:
    try:
        action()
    except Exception:
        logger.exception("veralith: could not update the trace store")


_lock = threading.Lock()
_current: _Worker | None = None
_exiting = threading.Event()  # set once the at-exit drain's deadline has passed


def _worker() -> _Worker:
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid() or not _current.thread.is_alive():
            _current = _Worker()  # first use, or a forked child (threads do not survive fork)
        return _current


def _at_exit() -> None:
    try:
        try:
            timeout = settings.shutdown_timeout_s
        except Exception:  # an invalid environment: still never hang the exit
            timeout = 10.0
        left = shutdown(wait=True, timeout=timeout)
        _exiting.set()
        if left:
            print(f"veralith: {left} logged trace(s) not evaluated within VERALITH_SHUTDOWN_TIMEOUT_S={timeout:g}s; "
                  "they stay pending: run `veralith resume` to finish them", file=sys.stderr, flush=True)
    except Exception:
        logger.exception("veralith: draining background evaluations at exit failed")


# threading's own exit hooks run before atexit's and before concurrent.futures stops accepting
# work, so draining there lets evaluate() still use its thread pool; registered after importing
# concurrent.futures so that (hooks run in reverse) ours runs first.
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(_at_exit)
else:  # pragma: no cover - interpreters without the private hook
    atexit.register(_at_exit)
