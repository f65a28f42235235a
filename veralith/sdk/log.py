"""log(): persist a trace at once, evaluate it in the background; never disturb the host program.

The caller's thread only validates, checks the budget and writes the trace as `pending`
(reserved for this process's queue). One daemon worker per process then claims it, evaluates it
and stores the result. Nothing a background evaluation does is raised into the host: a failure is
stored on the trace (status `error`, message) and logged. A full queue never blocks: the trace
stays pending, unreserved, for the worker's next sweep, `resume()` or `veralith resume`.

A crash loses no trace: it is already on disk, pending or running under a lease whose process is
gone, and `resume()` (or any worker starting later) picks it up. Claims are atomic, so a trace is
never evaluated twice at once, whichever processes race for it.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from veralith.config import settings
from veralith.errors import StoreError
from veralith.models import EvaluationResult
from veralith.pipeline.inputs import check_knowledge_base, check_metadata, check_query, check_text, normalize_context

__all__ = ["log", "resume", "shutdown"]

logger = logging.getLogger("veralith.sdk")
_STOP = object()


class _Store:
    """The store modules, imported on first use: sqlite-utils (and the numpy it pulls in) should
    not load at `import veralith`, only once something is logged."""

    def __getattr__(self, name: str) -> Any:
        from veralith.store import db, repository
        object.__setattr__(self, "db", db)
        object.__setattr__(self, "repo", repository)
        return getattr(self, name)


_store = _Store()


def log(query: str, context: Any, response: str, *, sync: bool | None = None, knowledge_base: str = "default",
        metadata: dict[str, Any] | None = None) -> int | EvaluationResult:
    """Store the trace and return its id; evaluation follows in the background.

    With `sync=True` (or settings.sync) evaluate now and return the EvaluationResult. Bad
    arguments raise TypeError/ValueError and an over-budget trace raises BudgetExceeded, both
    before anything is written.
    """
    query, response = check_query(query), check_text("response", response)
    chunks = normalize_context(context)
    knowledge_base, metadata = check_knowledge_base(knowledge_base), check_metadata(metadata)
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
    has_room = not worker.queue.full()
    trace_id = _store.repo.create_trace(db, **fields, queued=has_room)
    if not (has_room and worker.submit(trace_id, path)):
        if has_room:  # another thread filled the last slot meanwhile
            _store.repo.release_trace(db, trace_id)
        worker.overflowed.set()
    return trace_id


def resume(*, concurrency: int | None = None) -> int:
    """Evaluate every resumable trace of the configured database (pending and nobody's, or left
    running by a dead process), `concurrency` at a time (default settings.concurrency), and
    return how many results it stored. A trace that fails again is marked error and logged."""
    path = _store.db.resolve_path()
    ids = _store.repo.resumable_trace_ids(_store.db.open_db(path))
    if not ids:
        return 0
    workers = max(1, concurrency or settings.concurrency)

    def one(trace_id: int) -> bool:
        return _evaluate_claimed(_store.db.open_db(path), trace_id, raise_errors=False, claim=True) is not None

    if workers == 1:
        return sum(one(i) for i in ids)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="veralith-resume") as pool:
        return sum(pool.map(one, ids))


def shutdown(wait: bool = True, timeout: float | None = None) -> None:
    """Stop the background worker. With `wait`, first evaluate everything already queued (for
    at most `timeout` seconds, if given; what is left then stays pending).

    Traces left in the queue stay pending under this process's reservation; once the process has
    exited they are resumable. Registered to run (with `wait`) at interpreter exit.
    """
    global _current
    with _lock:
        worker, _current = _current, None
    if worker is not None and worker.pid == os.getpid():
        worker.stop(wait, timeout)


class _Worker:
    """One daemon thread with its own connection, fed by a bounded queue of (trace id, db path)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=settings.queue_size)
        self.overflowed = threading.Event()
        self.abandon = False  # set by stop(wait=False): leave the rest of the queue pending
        self.overflowed.set()  # sweep once at start: pick up what earlier processes left behind
        self.thread = threading.Thread(target=self._run, name="veralith-log-worker", daemon=True)
        self.thread.start()

    def submit(self, trace_id: int, path: str) -> bool:
        try:
            self.queue.put_nowait((trace_id, path))
        except queue.Full:
            return False
        return True

    def stop(self, wait: bool, timeout: float | None = None) -> None:
        if not wait:
            self.abandon = True
        try:  # blocks only while the queue is full, i.e. until the worker takes an item
            self.queue.put(_STOP, timeout=timeout)
        except queue.Full:
            self.abandon = True
            return
        if wait:
            self.thread.join(timeout)
            self.abandon = True  # on timeout: finish the current trace, leave the rest pending

    def _run(self) -> None:
        try:
            while True:
                if self.overflowed.is_set() and self.queue.empty():
                    self.overflowed.clear()
                    self._sweep()
                try:
                    item = self.queue.get(timeout=0.5)
                except queue.Empty:
                    continue
                if item is _STOP or self.abandon:
                    return
                self._process(*item)
        finally:
            _store.db.close_all()

    def _process(self, trace_id: int, path: str) -> None:
        try:
            if path != _store.db.resolve_path():
                # Settings moved to another database since this was logged, and evaluate() stores
                # into the configured one. Leave it pending for whoever next resumes that file.
                logger.warning("veralith: trace %s of %s left pending: db_path changed", trace_id, path)
                _store.repo.release_trace(_store.db.open_db(path), trace_id)
                return
            _evaluate_claimed(_store.db.open_db(path), trace_id, raise_errors=False)
        except Exception:  # e.g. the file became unreadable; the host must never see it
            logger.exception("veralith: background evaluation of trace %s failed", trace_id)

    def _sweep(self) -> None:
        try:
            path = _store.db.resolve_path()
            ids = _store.repo.resumable_trace_ids(_store.db.open_db(path))
        except Exception:  # the host must never see a background failure
            logger.exception("veralith: could not look for resumable traces")
            return
        for trace_id in ids:
            if self.abandon:
                return
            _evaluate_claimed(_store.db.open_db(path), trace_id, raise_errors=False, claim=True)


def _evaluate_claimed(db: Any, trace_id: int, *, raise_errors: bool, claim: bool = True) -> EvaluationResult | None:
    """Claim, evaluate and store one trace. Returns None when it was not ours to take or failed."""
    from veralith.llm import get_client
    from veralith.pipeline.evaluate import evaluate_checked

    try:
        if claim and not _store.repo.claim_trace(db, trace_id):
            return None
        query, chunks, response, knowledge_base, metadata = _store.repo.load_trace_input(db, trace_id)
        # Validated and budget-checked when it was logged; stored into the db it was logged to.
        return evaluate_checked(query, chunks, response, db=db, client=get_client(), trace_id=trace_id,
                                knowledge_base=knowledge_base, metadata=metadata)
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
        if raise_errors:
            _quietly(lambda: _store.repo.mark_error(db, trace_id, message))
            raise
        logger.warning("veralith: evaluating trace %s failed: %s", trace_id, message)
        _quietly(lambda: _store.repo.mark_error(db, trace_id, message))
        return None


def _quietly(action: Any) -> None:
    try:
        action()
    except Exception:
        logger.exception("veralith: could not update the trace store")


_lock = threading.Lock()
_current: _Worker | None = None


def _worker() -> _Worker:
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid() or not _current.thread.is_alive():
            _current = _Worker()  # first use, or a forked child (threads do not survive fork)
        return _current


def _at_exit() -> None:
    try:
        shutdown(wait=True)
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
