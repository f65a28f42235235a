"""log(): persist a trace at once, evaluate it in the background; never disturb the host program.

The caller's thread only validates, checks the budget and writes the trace as `pending`
(reserved for this process's queue) through the store (veralith.store.protocol). The write waits
at most `settings.log_timeout_ms`; when another process holds the lock longer, the store keeps the
trace durable elsewhere under its final id (SQLite: this process's spool file) and the worker's
`flush()` moves it in. One daemon worker per process then claims each trace, evaluates it under
the caller's settings and stores the result (veralith.sdk.stored, as every resume does). Nothing
a background evaluation does is raised into the host: a failure is stored on the trace (status
`error`, message) and logged. A full queue never blocks: the trace stays pending, unreserved, for
the worker's next sweep, `resume()` or `veralith resume`.

At exit the worker drains for at most `settings.shutdown_timeout_s` (traces that overflowed the
queue included); what is left stays pending and one line on stderr says how many and that
`veralith resume` finishes them.

A crash loses no trace: it is on disk (database or spool), pending or running under a lease whose
process is gone, and `resume()` (or any worker starting later) picks it up. Claims are atomic, so
a trace is never evaluated twice at once, whichever processes race for it.
"""

from __future__ import annotations

import atexit
import contextvars
import logging
import os
import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from veralith.config import Settings, settings
from veralith.errors import StoreError
from veralith.models import EvaluationResult
from veralith.pipeline import inputs
from veralith.pipeline.inputs import check_knowledge_base, check_metadata, check_query, check_text, normalize_context
from veralith.validate import check_stored_inputs

if TYPE_CHECKING:
    from veralith.store.protocol import TraceStore

__all__ = ["log", "resume", "shutdown"]

logger = logging.getLogger("veralith.sdk")
_STOP = object()


# The store is imported on first use: sqlite-utils (and the numpy it pulls in) should not load at
# `import veralith`, only once something is logged.

def _store_path() -> str:
    """Where the configured store is (its identity: the worker keeps one store object per path)."""
    from veralith.store.db import resolve_path
    return resolve_path()


def _open(path: str, alive: Any = None) -> TraceStore:
    from veralith.store import open_store
    return open_store(path, alive=alive)


def log(query: str, context: Any, response: str, *, sync: bool | None = None, knowledge_base: str = "default",
        metadata: dict[str, Any] | None = None, run: str | None = None,
        latency_ms: float | dict[str, float] | None = None) -> int | EvaluationResult:
    """Store the trace and return its id; evaluation follows in the background.

    `run` (default: settings.run, VERALITH_RUN) files the trace under the SDK run of that name,
    created on first use, for `veralith runs` and `veralith compare`. `latency_ms` is the app's own
    time for the call: a number of milliseconds, or {"total": ..., "retrieval": ..., "generation": ...}
    (any of them); it is stored beside the trace and shown by inspect, stats, export and the web view.

    Returns within about `settings.log_timeout_ms` even while another process holds the database's
    write lock (the trace is then spooled, durable, under its final id). With `sync=True` (or
    settings.sync) evaluate now and return the EvaluationResult. Bad arguments raise
    TypeError/ValueError and an over-budget trace raises BudgetExceeded, both before anything is
    written.
    """
    query, response = check_query(query), check_text("response", response)
    chunks = normalize_context(context)
    knowledge_base, metadata = check_knowledge_base(knowledge_base), check_metadata(metadata)
    app_latency_ms = inputs.check_latency(latency_ms)
    check_stored_inputs(query, chunks, response, metadata)
    if sync is not None and not isinstance(sync, bool):
        raise TypeError(f"sync must be a bool or None, got {type(sync).__name__}")
    if run is None:
        run = settings.run
    if run is not None:
        from veralith.store.runs import check_run_name
        run = check_run_name(run)
    if settings.per_trace_budget_usd is not None:
        from veralith.pipeline.budget import enforce_budget  # loads tiktoken; only when a budget is set
        enforce_budget(query, chunks, response)
    from veralith.store.protocol import TraceInput

    path = _store_path()
    trace = TraceInput(query=query, context=chunks, response=response, knowledge_base=knowledge_base,
                       metadata=metadata, app_latency_ms=app_latency_ms)
    if settings.sync if sync is None else sync:
        store = _open(path)
        # Reserved, so that no sweep (ours or another process's) can take it before we claim it.
        trace_id = store.create_trace(trace, queued=True, run=run)
        result = _evaluate_claimed(store, trace_id, raise_errors=True)
        if result is None:  # only if another process broke our reservation, which claims rule out
            raise StoreError(f"trace {trace_id} was taken by another process before it could be evaluated")
        return result
    worker = _worker()
    store = worker.store(path)
    snapshot = settings.snapshot()
    has_room = not worker.queue.full()
    # Returns within the log bound: a busy store keeps the trace durable elsewhere (a spool) under
    # its final id and the worker's flush() moves it in.
    trace_id = store.create_trace(trace, queued=has_room, wait_ms=settings.log_timeout_ms, run=run)
    worker.outstanding[trace_id] = (path, snapshot)
    if not (has_room and worker.submit(trace_id, path, snapshot)):
        if has_room:  # another thread filled the last slot meanwhile
            # Bounded like the write; if the store stays busy it stays reserved to us, and the worker's
            # final drain (it is in `outstanding`) or, after our exit, any resume takes it.
            store.release(trace_id, wait_ms=settings.log_timeout_ms)
        worker.overflowed.set()
    return trace_id


def resume(*, concurrency: int | None = None, failed: bool = False) -> int:
    """Evaluate every resumable trace of the configured database (pending and nobody's, or left
    running by a dead process, or spooled by one), `concurrency` at a time (default
    settings.concurrency), and return how many results it stored. A trace that fails again is
    marked error and logged.

    With `failed=True`, instead re-judge the stored traces whose last evaluation failed (judge
    errors, e.g. during a judge outage, or status error); what they ended with before is kept in
    the trace's history (`veralith.store.repository.history`).
    """
    from veralith.sdk.stored import resumable

    store = _open(_store_path())
    ids = resumable(store, failed=failed)
    if not ids:
        return 0
    workers = max(1, concurrency or settings.concurrency)

    def one(trace_id: int) -> bool:
        return _evaluate_claimed(store, trace_id, raise_errors=False, failed=failed) is not None

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
        self._stores: dict[str, TraceStore] = {}
        # The thread runs in a copy of the creator's context: its start-up sweep and id reservation
        # use the settings (database) in force where the first trace was logged.
        self.thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,),
                                       name="veralith-log-worker", daemon=True)
        self.thread.start()

    def submit(self, trace_id: int, path: str, snapshot: Settings) -> bool:
        try:
            self.queue.put_nowait((trace_id, path, snapshot))
        except queue.Full:
            return False
        return True

    def store(self, path: str) -> TraceStore:
        """The store at `path`, one object per path for this worker: its background helpers (id
        reservation) live as long as the worker thread."""
        store = self._stores.get(path)
        if store is None:
            store = self._stores.setdefault(path, _open(path, alive=self.thread.is_alive))
        return store

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
                self._flush()
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
            for store in list(self._stores.values()):
                store.close()

    def _process(self, trace_id: int, path: str, snapshot: Settings) -> None:
        try:
            with settings.using(snapshot):  # evaluate as the caller configured, into its database
                self._flush(path)
                _evaluate_claimed(self.store(path), trace_id, raise_errors=False)
        except Exception:  # e.g. the file became unreadable; the host must never see it
            logger.exception("veralith: background evaluation of trace %s failed", trace_id)
        finally:
            self.outstanding.pop(trace_id, None)

    def _drain_overflow(self) -> None:
        """At stop: the traces that overflowed the queue are ours to finish too."""
        self._flush()
        for trace_id in sorted(self.outstanding):
            if self.abandon:
                return
            path, snapshot = self.outstanding[trace_id]
            try:
                with settings.using(snapshot):
                    _evaluate_claimed(self.store(path), trace_id, raise_errors=False)
            except Exception:
                logger.exception("veralith: background evaluation of trace %s failed", trace_id)
            finally:
                self.outstanding.pop(trace_id, None)

    def _flush(self, only: str | None = None) -> None:
        for path, store in list(self._stores.items()):
            if only is None or path == only:
                try:
                    store.flush()
                except Exception:  # stays where it is (a spool file); moved on a later round or by resume
                    logger.warning("veralith: could not move spooled traces into %s", path, exc_info=True)

    def _sweep(self) -> None:
        try:
            from veralith.sdk.stored import resumable

            store = self.store(_store_path())
            ids = resumable(store)
        except Exception:  # the host must never see a background failure
            logger.exception("veralith: could not look for resumable traces")
            return
        for trace_id in ids:
            if self.abandon:
                return
            _evaluate_claimed(store, trace_id, raise_errors=False)
            self.outstanding.pop(trace_id, None)


def _evaluate_claimed(store: TraceStore, trace_id: int, *, raise_errors: bool,
                      failed: bool = False) -> EvaluationResult | None:
    """Claim, evaluate and store one trace (veralith.sdk.stored). Returns None when it was not ours
    to take or failed; a failure is stored on the trace and logged, and raised with `raise_errors`."""
    from veralith.sdk.stored import evaluate_stored, failure_message

    try:
        # At exit, once the drain's deadline passed, the interpreter shuts down under us ("cannot
        # schedule new futures..."): not the trace's fault. Our lease dies with the process, so the
        # trace stays resumable instead of being marked error.
        return evaluate_stored(store, trace_id, failed=failed, record_failure=lambda: not _exiting.is_set())
    except Exception as exc:
        if _exiting.is_set():
            return None
        if raise_errors:
            raise
        logger.warning("veralith: evaluating trace %s failed: %s", trace_id, failure_message(exc))
        return None


_lock = threading.Lock()
_current: _Worker | None = None
_exiting = threading.Event()  # set once the at-exit drain's deadline has passed


def _worker() -> _Worker:
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid() or not _current.thread.is_alive():
            _register_exit_drain()
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


_drain_registered = False


def _register_exit_drain() -> None:
    """Register `_at_exit` with `atexit`, once per process, when the first worker starts.

    Order at interpreter exit: threading first joins non-daemon threads and stops
    concurrent.futures pools (the worker is a daemon thread and keeps running); then `atexit`
    runs its handlers last-registered first: this drain, then the reply cache's `_close_all`
    (imported just before registering, so it is registered before the drain), then logging's
    shutdown. With the pools stopped, the pipeline runs each drained trace's judge calls one
    after another (pipeline/evaluate.py falls back to inline calls when a pool refuses work), and
    the drain as a whole is bounded by settings.shutdown_timeout_s.
    """
    global _drain_registered
    if not _drain_registered:
        import veralith.llm.cache  # noqa: F401 - registers its own at-exit close, which must run after the drain

        atexit.register(_at_exit)
        _drain_registered = True
