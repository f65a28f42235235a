"""log(): record a trace at once, evaluate it in the background; never disturb the host program.

The caller's thread only validates, checks the budget and appends the trace to this process's
local spool under its final id (veralith.store.spooler: a line copied into a mapped file and an
id counted in memory, so no system call and no release of the GIL once warm; no database library
loaded, never a wait on the database, whether SQLite's write lock is held by another process or
PostgreSQL is slow or down). The trace is durable when `log()` returns. Two daemon threads do
the rest:

- the shipper moves spooled traces into the store (`Store.ship`), a batch per transaction and at
  most one round per _SHIP_GAP_S while traces keep coming, and backs off while the store is
  unavailable (what waits stays on disk);
- the evaluator claims each shipped trace this process should judge and stores its result, under
  the settings in force where it was logged (veralith.sdk.stored, as every resume does).

Who evaluates: `settings.evaluate` (VERALITH_EVALUATE) `local`, this process; `remote`, nobody here:
the trace is stored pending and a `veralith worker` judges it (fleet mode). `log(evaluate=False)`
records one trace only. Nothing a background step does is raised into the host: a failed
evaluation is stored on the trace (status `error`) and logged. A full queue never blocks: the
trace stays pending, unreserved, for the evaluator's next sweep, `resume()` or `veralith resume`.

At exit (`shutdown`, registered with atexit) the shipper ships what is spooled and the evaluator
drains, together for at most `settings.shutdown_timeout_s`; a trace still being judged then is
given back (pending), and one line on stderr says how many are left and that `veralith resume`
finishes them. A crash loses nothing either: what was spooled is shipped by the next process on
this host (or `veralith resume`), and a trace left running under a dead process's lease is taken
over. Claims are atomic, so a trace is never evaluated twice at once.
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

# log()'s own path, loaded with the SDK: none of it loads a database library (veralith.store.spooler).
from veralith.store import store_url
from veralith.store.protocol import TraceInput
from veralith.store.spooler import spooler_for
from veralith.validate import check_run_name, check_stored_inputs

if TYPE_CHECKING:
    from veralith.store.protocol import Store, TraceStore

__all__ = ["log", "resume", "shutdown"]

logger = logging.getLogger("veralith.sdk")
_STOP = object()
_SHIP_EVERY_S = 0.2      # how soon a logged trace reaches the store when nothing wakes the shipper
# The least time between two ships: a process logging continuously has its traces shipped in
# batches this far apart, not one small transaction after each call, which would keep the shipper
# busy (and holding the GIL the callers need) the whole time. A trace logged after a quiet spell
# is shipped at once.
_SHIP_GAP_S = 0.05
_BACKOFF_MAX_S = 5.0     # the longest the shipper waits between tries while the store is unavailable


# The store is imported on first use: sqlite-utils (and the numpy it pulls in) should not load at
# `import veralith`, only once something is logged.

def _open(url: str | None = None) -> Store:
    from veralith.store import open_store
    return open_store(url)


def _url() -> str:
    return store_url()


def log(query: str, context: Any, response: str, *, sync: bool | None = None, knowledge_base: str = "default",
        metadata: dict[str, Any] | None = None, run: str | None = None,
        evaluate: bool | None = None, latency_ms: float | dict[str, float] | None = None) -> int | EvaluationResult:
    """Record the trace and return its id; evaluation follows in the background.

    Never waits on the store: the trace is made durable in a local spool under its final id and
    shipped into the store by a background thread. `run` (default: settings.run, VERALITH_RUN)
    files the trace under the SDK run of that name, created on first use, for `veralith runs` and
    `veralith compare`. `evaluate` (default: settings.evaluate == "local") says whether this
    process judges it; False records it for a `veralith worker`. `latency_ms` is the app's own
    time for the call: a number of milliseconds, or {"total": ..., "retrieval": ..., "generation": ...}
    (any of them); it is stored beside the trace and shown by inspect, stats, export and the web view.

    With `sync=True` (or settings.sync) the trace is written to the store and evaluated now, and
    the EvaluationResult is returned. Bad arguments raise TypeError/ValueError and an over-budget
    trace raises BudgetExceeded, both before anything is written; a spool that cannot be written
    (full disk, read-only folder) raises WritesStopped.
    """
    query, response = check_query(query), check_text("response", response)
    chunks = normalize_context(context)
    knowledge_base, metadata = check_knowledge_base(knowledge_base), check_metadata(metadata)
    app_latency_ms = inputs.check_latency(latency_ms)
    check_stored_inputs(query, chunks, response, metadata)
    for name, flag in (("sync", sync), ("evaluate", evaluate)):
        if flag is not None and not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool or None, got {type(flag).__name__}")
    if run is None:
        run = settings.run
    if run is not None:
        run = check_run_name(run)
    if settings.per_trace_budget_usd is not None:
        from veralith.pipeline.budget import enforce_budget  # loads tiktoken; only when a budget is set
        enforce_budget(query, chunks, response)
    trace = TraceInput(query=query, context=chunks, response=response, knowledge_base=knowledge_base,
                       metadata=metadata, app_latency_ms=app_latency_ms)
    url = _url()
    if settings.sync if sync is None else sync:
        store = _open(url)
        # Reserved, so that no sweep (ours or another process's) can take it before we claim it.
        trace_id = store.create_trace(trace, queued=True, run=run)
        result = _evaluate_claimed(store, trace_id, raise_errors=True)
        if result is None:  # only if another process broke our reservation, which claims rule out
            raise StoreError(f"trace {trace_id} was taken by another process before it could be evaluated")
        return result
    here = settings.evaluate == "local" if evaluate is None else evaluate
    worker = _worker()
    trace_id = spooler_for(url).append(trace, run=run, evaluate_here=here)
    if here:
        worker.outstanding[trace_id] = (url, settings.snapshot())
    worker.watch(url)
    return trace_id


def resume(*, concurrency: int | None = None, failed: bool = False) -> int:
    """Evaluate every resumable trace of the configured store (pending and nobody's, left running by
    a dead process, or spooled by one on this host), `concurrency` at a time (default
    settings.concurrency), and return how many results it stored. A trace that fails again is
    marked error and logged.

    With `failed=True`, instead re-judge the stored traces whose last evaluation failed (judge
    errors, e.g. during a judge outage, or status error); what they ended with before is kept in
    the trace's history (`Store.history`).
    """
    from veralith.sdk.stored import resumable

    store = _open()
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
    """Stop the background threads. With `wait`, first ship what is spooled and evaluate everything
    this process logged and has not evaluated yet (for at most `timeout` seconds, if given; what is
    left then stays pending, and what could not be shipped stays spooled for the next process or
    `veralith resume`). Returns how many traces were left unevaluated.

    Registered to run (with `wait`, for at most settings.shutdown_timeout_s) at interpreter exit.
    """
    global _current
    with _lock:
        worker, _current = _current, None
    if worker is None or worker.pid != os.getpid():
        return 0
    worker.stop(wait, timeout)
    return len(worker.outstanding)


class _Worker:
    """The shipper and the evaluator of this process, and the stores it has logged into."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=settings.queue_size)
        self.overflowed = threading.Event()
        self.abandon = False  # set by stop(wait=False) or a timeout: leave the rest pending
        # Logged here and not evaluated yet: id -> (store URL, settings). Plain dict operations are
        # atomic under the GIL, and only counts and membership are read across threads.
        self.outstanding: dict[int, tuple[str, Settings]] = {}
        self.shipped: set[int] = set()   # of those, the ones in the store (the rest wait in the spool)
        self._stores: dict[str, Store] = {}
        self._urls: set[str] = set()   # stores logged into; the shipper opens them (never the caller)
        self._swept: set[str] = set()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._base = settings.snapshot()  # for traces this process did not log (recovered spools, sweeps)
        self._pause = 0.0                 # the evaluator's wait after the store went away (doubling)
        self._server_down: str | None = None   # the judge server found down (said once per outage)
        # Both threads run in a copy of the creator's context: the settings in force where the first
        # trace was logged.
        self.shipper = threading.Thread(target=contextvars.copy_context().run, args=(self._ship_loop,),
                                        name="veralith-log-shipper", daemon=True)
        self.thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,),
                                       name="veralith-log-worker", daemon=True)
        self.shipper.start()
        self.thread.start()

    def store(self, url: str) -> Store:
        """The store at `url` (opened on first use: on the worker's threads only)."""
        store = self._stores.get(url)
        if store is None:
            store = self._stores.setdefault(url, _open(url))
        return store

    def watch(self, url: str) -> None:
        """Ship the spool of the store at `url` (soon, on the shipper's thread). The spooler wakes
        the shipper itself when there is something to do (veralith.store.spooler)."""
        if url not in self._urls:
            spooler_for(url).wake = self._wake.set
            self._urls.add(url)
            self._wake.set()

    def stop(self, wait: bool, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not wait:
            self.abandon = True
        self._stopping.set()
        self._wake.set()
        self.shipper.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        try:  # blocks only while the queue is full, i.e. until the evaluator takes an item
            self.queue.put(_STOP, timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except queue.Full:
            self.abandon = True
        else:
            if wait:
                self.thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self.abandon = True  # on timeout: finish the current trace, leave the rest pending
        self._give_back()

    # -- the shipper -----------------------------------------------------------------------------
    def _ship_loop(self) -> None:
        """Ship when woken (a first trace since the last ship) or every _SHIP_EVERY_S, but no sooner
        than _SHIP_GAP_S after the last ship (later while the store is unavailable)."""
        pause = _SHIP_EVERY_S
        earliest = latest = time.monotonic()
        while True:
            self._wake.wait(max(0.0, latest - time.monotonic()))
            self._wake.clear()
            stopping = self._stopping.is_set()
            if not stopping and time.monotonic() < earliest:
                latest = earliest  # woken early: the ship waits for its turn
                continue
            ok = self._ship_all()
            if stopping:
                self._close_all()
                return
            pause = _SHIP_EVERY_S if ok else min(_BACKOFF_MAX_S, pause * 2)
            now = time.monotonic()
            earliest, latest = now + (_SHIP_GAP_S if ok else pause), now + pause

    def _close_all(self) -> None:
        for url in list(self._urls):
            try:
                spooler_for(url).close()
            except Exception:  # the host must never see a background failure
                logger.debug("veralith: could not close the spool of %s", url, exc_info=True)

    def _ship_all(self) -> bool:
        """Ship every store's spool; queue what we are to judge. False if a store was unavailable."""
        ok = True
        for url in list(self._urls):
            try:
                store = self.store(url)
                if url not in self._swept:
                    self._swept.add(url)
                    store.recover()  # spools of processes on this host that are gone
                    if self._base.evaluate == "local":
                        self._submit_sweep(url, store)
                for trace_id in store.ship():
                    self._submit(trace_id, url)
            except StoreError as exc:
                ok = False
                self._swept.discard(url)
                logger.debug("veralith: store %s unavailable, traces stay spooled: %s", url, exc)
            except Exception:  # the host must never see a background failure
                ok = False
                logger.exception("veralith: could not move spooled traces into %s", url)
        return ok

    def _submit(self, trace_id: int, url: str) -> None:
        self.shipped.add(trace_id)
        snapshot = self.outstanding.get(trace_id, (url, self._base))[1]
        try:
            self.queue.put_nowait((trace_id, url, snapshot))
        except queue.Full:
            # Bounded: the trace stays pending for anyone (our reservation given back), and the
            # evaluator sweeps for it once the queue has drained.
            self._stores[url].release(trace_id)
            self.overflowed.set()

    def _submit_sweep(self, url: str, store: Store) -> None:
        from veralith.sdk.stored import resumable

        for trace_id in resumable(store):
            if self.queue.full():
                self.overflowed.set()
                return
            self.queue.put_nowait((trace_id, url, self._base))

    # -- the evaluator ---------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                if self.overflowed.is_set() and self.queue.empty():
                    self.overflowed.clear()
                    for url, store in list(self._stores.items()):
                        self._sweep(url, store)
                try:
                    item = self.queue.get(timeout=0.5)
                except queue.Empty:
                    continue
                if self.abandon:
                    return
                if item is _STOP:
                    self._drain()
                    return
                self._process(*item)
        finally:
            for store in list(self._stores.values()):
                store.close()

    def _process(self, trace_id: int, url: str, snapshot: Settings) -> None:
        from veralith.errors import JudgeServerDown
        from veralith.store.errors import StoreUnavailable

        try:
            with settings.using(snapshot):  # evaluate as the caller configured, into its store
                _evaluate_claimed(self.store(url), trace_id, raise_errors=False)
            self._pause = 0.0
            self._server_down = None
        except JudgeServerDown as exc:
            # Nothing was judged and the trace is pending again. Say so once per outage, and wait out
            # the server's cool-down before the next trace instead of spinning through the queue;
            # at stop, leave the rest pending (`veralith resume` finishes them).
            if self._server_down != exc.server:
                self._server_down = exc.server
                logger.warning("veralith: %s; logged traces stay pending until it answers", exc)
            if self._stopping.is_set():
                self.abandon = True
            else:
                self._stopping.wait(exc.retry_after_s)
                try:
                    self.queue.put_nowait((trace_id, url, snapshot))
                    return
                except queue.Full:
                    self.overflowed.set()
            self._done(trace_id)
        except StoreUnavailable as exc:
            # The store went away mid-evaluation: the trace is judged again once it is back (it stays
            # outstanding), after a pause that doubles while the outage lasts.
            self._pause = min(_BACKOFF_MAX_S * 6, max(1.0, self._pause * 2))
            logger.debug("veralith: store unavailable, trace %s waits %.0f s: %s", trace_id, self._pause, exc)
            if not self.abandon:
                self._stopping.wait(self._pause)
                try:
                    self.queue.put_nowait((trace_id, url, snapshot))
                    return
                except queue.Full:
                    self.overflowed.set()
            self._done(trace_id)
        except Exception:  # e.g. the store became unreadable; the host must never see it
            logger.exception("veralith: background evaluation of trace %s failed", trace_id)
            self._done(trace_id)
        else:
            self._done(trace_id)

    def _done(self, trace_id: int) -> None:
        self.outstanding.pop(trace_id, None)
        self.shipped.discard(trace_id)

    def _drain(self) -> None:
        """At stop: what is queued, then what overflowed the queue, is ours to finish too."""
        while not self.abandon:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                self._process(*item)
        for url, store in list(self._stores.items()):
            if not self.abandon:
                self._sweep(url, store, only_ours=True)

    def _sweep(self, url: str, store: Store, *, only_ours: bool = False) -> None:
        from veralith.sdk.stored import resumable

        try:
            # Ours: those shipped into the store; what is still spooled waits there for the next process.
            ids = resumable(store) if not only_ours else sorted(
                i for i, (u, _) in list(self.outstanding.items()) if u == url and i in self.shipped)
        except Exception:  # the host must never see a background failure
            logger.exception("veralith: could not look for resumable traces")
            return
        for trace_id in ids:
            if self.abandon:
                return
            self._process(trace_id, url, self.outstanding.get(trace_id, (url, self._base))[1])

    def _give_back(self) -> None:
        """Traces still being judged when the drain ended go back to pending (nobody's), so they are
        not left `running` under the lease of a process that is about to exit."""
        for store in list(self._stores.values()):
            try:
                for trace_id in store.held():
                    store.release(trace_id)
            except Exception:  # the lease dies with the process anyway
                logger.debug("veralith: could not give back traces of %s", store.url, exc_info=True)


def _evaluate_claimed(store: TraceStore, trace_id: int, *, raise_errors: bool,
                      failed: bool = False) -> EvaluationResult | None:
    """Claim, evaluate and store one trace (veralith.sdk.stored). Returns None when it was not ours
    to take or failed; a failure is stored on the trace and logged, and raised with `raise_errors`."""
    from veralith.errors import JudgeServerDown
    from veralith.sdk.stored import evaluate_stored, failure_message
    from veralith.store.errors import StoreUnavailable

    try:
        # At exit, once the drain's deadline passed, the interpreter shuts down under us ("cannot
        # schedule new futures..."): not the trace's fault. The trace is given back (pending) or
        # its lease dies with the process, so it stays resumable instead of being marked error.
        return evaluate_stored(store, trace_id, failed=failed, record_failure=lambda: not _exiting.is_set())
    except (StoreUnavailable, JudgeServerDown):
        raise  # not the trace's failure: the caller waits for the store or the server, and tries again
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
        if (_current is None or _current.pid != os.getpid() or not _current.thread.is_alive()
                or not _current.shipper.is_alive()):
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
    concurrent.futures pools (the worker threads are daemons and keep running); then `atexit`
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
