"""The evaluation worker behind `veralith worker`: judge pending traces from any host, until told to stop.

Fleet mode: app servers record traces (`VERALITH_EVALUATE=remote`, or `log(evaluate=False)`) and N
workers, on any hosts, judge them. A worker loops:

1. claims up to as many traces as it has free slots (`Store.claim_batch`: atomic, a lease per
   trace, `FOR UPDATE SKIP LOCKED` on PostgreSQL, so workers never wait for or double-judge each
   other's traces), oldest first;
2. judges each on a thread of its own (veralith.sdk.stored, the path every resume takes), its lease
   renewed in the background until the result or the failure is stored;
3. every minute, also ships the spools of dead processes on its host and takes over traces whose
   lease died with a process of this host (a crash is noticed sooner than the lease timeout).

`stop` (the CLI sets it on SIGTERM or Ctrl-C) ends claiming: the traces being judged get
`grace_s` seconds to finish; those still running then are given back (pending, for another
worker) and the call returns. With `once`, it returns as soon as nothing is waiting and nothing is
running. A store that cannot be reached for a while is waited out (with a line saying so), not a
reason to exit; one that stopped taking writes (full disk) ends the loop with WritesStopped.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veralith.errors import JudgeServerDown, StoreError
from veralith.pipeline.pool import LoopPool

if TYPE_CHECKING:
    from veralith.store.protocol import Store

__all__ = ["WorkerReport", "run_worker"]

logger = logging.getLogger("veralith.sdk")
_SWEEP_EVERY_S = 60.0
_UNAVAILABLE_MAX_WAIT_S = 30.0


@dataclass
class WorkerReport:
    """What a worker did (for its progress lines and its last line)."""

    judged: int = 0            # results stored
    failed: int = 0            # evaluations that failed (recorded on their traces)
    given_back: int = 0        # claimed, still running at the stop, released to pending
    started: float = field(default_factory=time.monotonic)

    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.judged / elapsed if elapsed > 0 else 0.0


def run_worker(store: Store, *, concurrency: int, stop: threading.Event, knowledge_base: str | None = None,
               once: bool = False, client: Any = None, report: Callable[[str], None] | None = None,
               every_s: float = 10.0, poll_s: float = 1.0, grace_s: float = 10.0) -> WorkerReport:
    """Judge pending traces of `store`, `concurrency` at a time, until `stop` is set (see the module
    docstring); `report` receives a progress line every `every_s` seconds. Returns the totals."""
    from veralith.config import settings
    from veralith.sdk.stored import aevaluate_stored, evaluate_stored

    if client is None:
        from veralith.llm import get_client

        client = get_client()
    say = report or (lambda line: None)
    totals = WorkerReport()
    running: dict[Future[Any], int] = {}
    abandoned: list[int] = []   # left by processes of this host that are gone, not yet taken
    judge_down: list[Any] = []  # a JudgeServerDown seen since the last round (the trace is pending again)
    # VERALITH_ASYNC_CALLS: one event loop judges every claimed trace (no thread each); else a thread per trace.
    pool: Any = (LoopPool(concurrency) if settings.async_calls
                 else ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="veralith-worker"))
    last_line, last_sweep, unavailable_since = time.monotonic(), float("-inf"), None

    def judge(trace_id: int, *, claim: bool) -> Any:
        return evaluate_stored(store, trace_id, client=client, claim=claim)

    async def ajudge(trace_id: int, claim: bool) -> Any:
        return await aevaluate_stored(store, trace_id, client=client, claim=claim)

    def submit(trace_id: int, *, claim: bool) -> None:
        if isinstance(pool, LoopPool):   # it runs each job in a copy of this context itself
            running[pool.submit(ajudge, trace_id, claim)] = trace_id
            return
        # Each in a copy of this context: the settings in force here reach the judging thread.
        running[pool.submit(contextvars.copy_context().run, judge, trace_id, claim=claim)] = trace_id

    def reap(finished: set[Future[Any]]) -> None:
        for future in finished:
            trace_id = running.pop(future)
            error = future.exception()
            if error is None:
                totals.judged += future.result() is not None
            elif isinstance(error, StoreError) and _ends_the_run(error):
                raise error
            elif isinstance(error, JudgeServerDown):
                judge_down.append(error)
            else:
                totals.failed += 1
                logger.warning("veralith: evaluating trace %s failed: %s", trace_id, error)

    try:
        while not stop.is_set():
            reap({f for f in running if f.done()})
            if judge_down:
                # Nothing claimed until the server's cool-down is over; what it held is pending again.
                down = judge_down[-1]
                judge_down.clear()
                say(f"{down}; waiting {down.retry_after_s:.0f} s before claiming more")
                stop.wait(down.retry_after_s)
                continue
            free = concurrency - len(running)
            claimed: list[int] = []
            try:
                if time.monotonic() - last_sweep >= _SWEEP_EVERY_S:
                    last_sweep = time.monotonic()
                    store.recover()
                    busy = set(running.values())
                    abandoned = [i for i in store.abandoned() if i not in busy]
                while abandoned and free > 0:
                    submit(abandoned.pop(0), claim=True)  # claimed inside: skipped if another worker was faster
                    free -= 1
                if free > 0:
                    claimed = store.claim_batch(free, knowledge_base=knowledge_base)
                if unavailable_since is not None:
                    say(f"the store is back after {time.monotonic() - unavailable_since:.0f} s")
                    unavailable_since = None
            except StoreError as exc:
                if _ends_the_run(exc):
                    raise
                if unavailable_since is None:
                    unavailable_since = time.monotonic()
                    say(f"waiting for the store: {exc}")
                stop.wait(min(_UNAVAILABLE_MAX_WAIT_S, poll_s * 5))
                continue
            for trace_id in claimed:
                submit(trace_id, claim=False)
            if once and not claimed and not running and not abandoned:
                break
            if not claimed:
                if running:
                    wait(list(running), timeout=poll_s, return_when=FIRST_COMPLETED)
                else:
                    stop.wait(poll_s)
            if time.monotonic() - last_line >= every_s:
                last_line = time.monotonic()
                say(progress_line(store, totals, len(running), knowledge_base))
    finally:
        # Stopping: what is being judged may finish within the grace period; the rest goes back.
        if running:
            done, _ = wait(list(running), timeout=grace_s)
            for future in done:
                try:
                    reap({future})
                except StoreError:
                    continue
            for trace_id in list(running.values()):
                if store.release(trace_id):
                    totals.given_back += 1
        pool.shutdown(wait=False, cancel_futures=True)
    return totals


def progress_line(store: Store, totals: WorkerReport, in_flight: int, knowledge_base: str | None) -> str:
    try:
        waiting = store.stats(kb=knowledge_base)["by_status"].get("pending", 0)
        queue = f", {waiting:,} waiting"
    except StoreError:
        queue = ""
    return (f"{totals.judged:,} judged, {totals.failed:,} failed, {in_flight} running{queue} "
            f"({totals.rate():.1f}/s)")


def _ends_the_run(exc: StoreError) -> bool:
    """Only a store that is unavailable for now (locked, a server restarting, a file moved) is worth
    waiting for; any other store error (writes stopped, a file that is not a database, a newer schema)
    stays until a person acts, so the worker stops with it (exit 2) instead of waiting forever."""
    from veralith.store.errors import StoreUnavailable

    return not isinstance(exc, StoreUnavailable)
