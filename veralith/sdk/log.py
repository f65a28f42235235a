"""log(): record a trace at once, evaluate it in the background; never disturb the host program.

The caller's thread only validates, checks the budget and appends the trace to this process's
local spool under its final id (veralith.work.spooler: a line copied into a mapped file and an
id counted in memory, so no system call and no release of the GIL once warm; no database library
loaded, never a wait on the database, whether SQLite's write lock is held by another process or
PostgreSQL is slow or down). The trace is durable when `log()` returns. Two daemon threads of the
work layer do the rest (veralith.work.background): a shipper moves spooled traces into the store,
and an evaluator judges the ones this process should judge with the work layer's runner, under the
settings in force where each was logged.

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
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

# Imported here, not on log()'s first call: it registers its own at-exit close, which must run after
# the drain (registered later, when the first worker starts), and importing it costs milliseconds.
import veralith.llm.cache  # noqa: F401

# log()'s own path, loaded with the SDK: none of it loads a database library (veralith.work.spooler).
import veralith.store.location  # noqa: F401
from veralith.config import settings
from veralith.errors import StoreError
from veralith.models import EvaluationResult
from veralith.pipeline import inputs
from veralith.pipeline.inputs import check_knowledge_base, check_metadata, check_query, check_text, normalize_context
from veralith.pipeline.reference_inputs import check_reference
from veralith.store import store_url
from veralith.store.protocol import TraceInput
from veralith.validate import check_run_name, check_stored_inputs
from veralith.work import leases
from veralith.work.background import Background
from veralith.work.spooler import spooler_for

# What log()'s first call would otherwise do on the caller's thread, done once at import: the module
# store_url() imports (veralith.store.location, above), and this process's lease token (a read of
# /proc/<pid>/stat) that names its spool segment and id record. Neither has a side effect (the token
# is drawn again after a fork).
leases.token()

if TYPE_CHECKING:
    from veralith.store.protocol import Store

__all__ = ["log", "resume", "shutdown"]

logger = logging.getLogger("veralith.sdk")


# The store is imported on first use: sqlite-utils (and the numpy it pulls in) should not load at
# `import veralith`, only once something is logged.

def _open(url: str | None = None) -> Store:
    from veralith.store import open_store
    return open_store(url)


def _url() -> str:
    return store_url()


def log(query: str, context: Any, response: str, *, sync: bool | None = None, knowledge_base: str = "default",
        metadata: dict[str, Any] | None = None, run: str | None = None,
        evaluate: bool | None = None, latency_ms: float | dict[str, float] | None = None,
        reference: str | None = None, reference_contexts: Any = None) -> int | EvaluationResult:
    """Record the trace and return its id; evaluation follows in the background.

    Never waits on the store: the trace is made durable in a local spool under its final id and
    shipped into the store by a background thread. `run` (default: settings.run, VERALITH_RUN)
    files the trace under the SDK run of that name, created on first use, for `veralith runs` and
    `veralith compare`. `evaluate` (default: settings.evaluate == "local") says whether this
    process judges it; False records it for a `veralith worker`. `latency_ms` is the app's own
    time for the call: a number of milliseconds, or {"total": ..., "retrieval": ..., "generation": ...}
    (any of them); it is stored beside the trace and shown by inspect, stats, export and the web view.
    `reference` (the answer a person wrote) and `reference_contexts` (the chunks that should have been
    retrieved: texts or ids) are stored with the trace and judged with it (see `evaluate`).

    With `sync=True` (or settings.sync) the trace is written to the store and evaluated now, and
    the EvaluationResult is returned. Bad arguments raise TypeError/ValueError and an over-budget
    trace raises BudgetExceeded, both before anything is written; a spool that cannot be written
    (full disk, read-only folder) raises WritesStopped.
    """
    query, response = check_query(query), check_text("response", response)
    chunks = normalize_context(context)
    knowledge_base, metadata = check_knowledge_base(knowledge_base), check_metadata(metadata)
    app_latency_ms = inputs.check_latency(latency_ms)
    given = check_reference(reference, reference_contexts)
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
        enforce_budget(query, chunks, response, reference=given.answer if given else None)
    trace = TraceInput(query=query, context=chunks, response=response, knowledge_base=knowledge_base,
                       metadata=metadata, app_latency_ms=app_latency_ms, reference=given)
    url = _url()
    if settings.sync if sync is None else sync:
        store = _open(url)
        # Reserved, so that no sweep (ours or another process's) can take it before we claim it.
        from veralith.work import intake

        trace_id = intake.create(store, trace, queued=True, run=run)
        return _evaluate_claimed(store, trace_id)
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
    from veralith.work import shipper
    from veralith.work.claims import claims_for
    from veralith.work.policy import Action
    from veralith.work.runner import Runner

    store = _open()
    if not failed:
        shipper.recover(store)  # what processes gone from this host left spooled, moved in first
    ids = claims_for(store).resumable(failed=failed)
    if not ids:
        return 0
    workers = max(1, concurrency or settings.concurrency)
    runner = Runner(store, _judge())

    def one(trace_id: int) -> bool:
        outcome = runner.run(trace_id, failed=failed)
        if outcome.action is Action.RECORD:
            logger.warning("veralith: evaluating trace %s failed: %s", trace_id, outcome.error)
        return outcome.action is Action.SAVED

    if workers == 1:
        return sum(one(i) for i in ids)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="veralith-resume") as pool:
        # Each call in a copy of this context, so the caller's settings overrides reach the threads.
        return sum(pool.map(lambda i: contextvars.copy_context().run(one, i), ids))


def shutdown(wait: bool = True, timeout: float | None = None) -> int:
    """Stop the background threads. With `wait`, first ship what is spooled and evaluate everything
    this process logged and has not evaluated yet (for at most `timeout` seconds, if given; what is
    left then stays pending, and what could not be shipped stays spooled for the next process or
    `veralith resume`). Returns how many traces this process logged were left unevaluated: still to
    judge, or still spooled (in remote mode too: no store took them yet).

    Registered to run (with `wait`, for at most settings.shutdown_timeout_s) at interpreter exit.
    """
    global _current
    with _lock:
        worker, _current = _current, None
    if worker is None or worker.pid != os.getpid():
        return 0
    worker.stop(wait, timeout)
    return worker.left()


def _evaluate_claimed(store: Store, trace_id: int) -> EvaluationResult:
    """`log(sync=True)`: judge the trace this process just stored (reserved for it) and write the
    result through the work layer's runner; the trace's own failure is recorded on it and raised."""
    from veralith.work.policy import Action
    from veralith.work.runner import Runner

    outcome = Runner(store, _judge()).run(trace_id)
    if outcome.action is Action.SAVED and outcome.result is not None:
        return outcome.result
    if outcome.action is Action.NOT_OURS:  # only if another process broke our reservation, which claims rule out
        raise StoreError(f"trace {trace_id} was taken by another process before it could be evaluated")
    assert outcome.error is not None
    raise outcome.error


def _judge() -> Any:
    """The pipeline with the judge client of the settings in force (veralith.work.runner.Judge)."""
    from veralith.llm import get_client
    from veralith.pipeline.evaluate import TraceJudge

    return TraceJudge(get_client())


_lock = threading.Lock()
_current: Background | None = None
_exiting = threading.Event()  # set once the at-exit drain's deadline has passed


def _worker() -> Background:
    global _current
    with _lock:
        if _current is None or not _current.alive():
            _register_exit_drain()
            # first use, or a forked child (threads do not survive fork)
            _current = Background(_open, _judge, _exiting.is_set)
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
        atexit.register(_at_exit)
        _drain_registered = True
