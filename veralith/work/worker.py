"""The fleet worker's loop (`veralith worker`): judge pending traces from any host, until told to stop.

Fleet mode: app servers record traces (`VERALITH_EVALUATE=remote`, or `log(evaluate=False)`) and N
workers, on any hosts, judge them. A worker loops:

1. claims up to as many traces as it has free slots (atomic, a lease per trace, `FOR UPDATE SKIP
   LOCKED` on PostgreSQL, so workers never wait for or double-judge each other's traces), oldest
   first, and every minute also ships the spools of dead processes on its host and takes over
   traces whose lease died with a process of this host;
2. judges each with the runner (veralith.work.runner), on a thread of its own or, with
   VERALITH_ASYNC_CALLS, on one event loop;
3. acts on what each outcome says (veralith.work.policy): a dead judge server stops the claiming
   for its cool-down (said once per outage; `once` stops instead, the rest left pending); a store
   that went away is waited for (said once), and the results computed meanwhile are written when it
   is back, or given back; a store that stopped taking writes ends the loop (WritesStopped).

`stop` (the CLI sets it on SIGTERM or Ctrl-C) ends claiming: the traces being judged get `grace_s`
seconds to finish; those still running then, and those whose result could not be written, are
given back (pending, for another worker) and the call returns. With `once`, it returns as soon as
nothing is waiting, nothing is running and nothing waits to be written.
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

from veralith.errors import JudgeCallCancelled, JudgeServerDown, StoreError
from veralith.store import ops
from veralith.store.errors import StoreUnavailable
from veralith.work import shipper
from veralith.work.policy import STORE_BACKOFF_MAX_S, Action
from veralith.work.pool import LoopPool
from veralith.work.runner import Judge, Outcome, Runner

if TYPE_CHECKING:
    from veralith.store.protocol import Store

__all__ = ["WorkerReport", "run"]

logger = logging.getLogger("veralith.work")
_SWEEP_EVERY_S = 60.0


@dataclass
class WorkerReport:
    """What a worker did (for its progress lines and its last line)."""

    judged: int = 0            # results stored
    failed: int = 0            # evaluations that failed (recorded on their traces)
    given_back: int = 0        # claimed, unfinished at the stop (or unwritable), released to pending
    judge_down: JudgeServerDown | None = None   # `once` stopped on it (the CLI exits 2 with its line)
    started: float = field(default_factory=time.monotonic)

    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.judged / elapsed if elapsed > 0 else 0.0


class _Loop:
    """One worker's state: what runs, what waits to be written, what was said about outages."""

    def __init__(self, store: Store, judge: Judge, *, concurrency: int, stop: threading.Event,
                 say: Callable[[str], None], async_calls: bool) -> None:
        self.store, self.stop, self.say, self.concurrency = store, stop, say, concurrency
        self.runner = Runner(store, judge)
        self.totals = WorkerReport()
        self.running: dict[Future[Outcome], int] = {}
        self.kept: dict[int, Outcome] = {}          # KEEP outcomes: written (or given back) once the store is back
        self.abandoned: list[int] = []              # left by processes of this host that are gone, not yet taken
        self.down: JudgeServerDown | None = None    # a dead judge server seen since the last wait
        self.outage_since: float | None = None      # the judge server's outage (said once, and its end)
        self.away_since: float | None = None        # the store's outage (said once, and its end)
        self.pool: Any = (LoopPool(concurrency) if async_calls
                          else ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="veralith-worker"))

    def submit(self, trace_id: int, *, claim: bool) -> None:
        if isinstance(self.pool, LoopPool):   # it runs each job in a copy of this context itself
            self.running[self.pool.submit(self._arun, trace_id, claim)] = trace_id
        else:   # each in a copy of this context: the settings in force here reach the judging thread
            self.running[self.pool.submit(contextvars.copy_context().run, self._run, trace_id, claim)] = trace_id

    def _run(self, trace_id: int, claim: bool) -> Outcome:
        return self.runner.run(trace_id, claim=claim)

    async def _arun(self, trace_id: int, claim: bool) -> Outcome:
        return await self.runner.arun(trace_id, claim=claim)

    def reap(self, finished: set[Future[Outcome]]) -> None:
        """Count what finished and note what its outcome asks of the loop; STOP raises its error."""
        for future in finished:
            trace_id = self.running.pop(future)
            self.note(future.result() if future.exception() is None else _crashed(trace_id, future.exception()))

    def note(self, outcome: Outcome) -> None:
        action = outcome.action
        if action is Action.SAVED:
            self.totals.judged += 1
            if self.outage_since is not None:
                self.say(f"the judge server answers again after {time.monotonic() - self.outage_since:.0f} s")
                self.outage_since = None
        elif action is Action.RECORD:
            self.totals.failed += 1
            logger.warning("veralith: evaluating trace %s failed: %s", outcome.trace_id, outcome.error)
        elif action is Action.GIVE_BACK and isinstance(outcome.error, JudgeCallCancelled):
            self.totals.given_back += 1   # its judge call was cancelled at the stop: pending again
        elif action is Action.GIVE_BACK and isinstance(outcome.error, JudgeServerDown):
            if self.outage_since is None:
                self.outage_since = time.monotonic()
                self.say(f"{outcome.error}; traces stay pending, claiming again every "
                         f"{outcome.error.retry_after_s:.0f} s until it answers")
            self.down = outcome.error
        elif action is Action.KEEP:
            self.kept[outcome.trace_id] = outcome
            self.store_away(outcome.error)
        elif action is Action.STOP:
            raise outcome.error if outcome.error is not None else StoreError("the worker cannot go on")

    def store_away(self, error: BaseException | None) -> None:
        if self.away_since is None:
            self.away_since = time.monotonic()
            self.say(f"waiting for the store: {error}")

    def store_back(self) -> None:
        if self.away_since is not None:
            self.say(f"the store is back after {time.monotonic() - self.away_since:.0f} s")
            self.away_since = None

    def settle_kept(self) -> bool:
        """Write (or give back) what waits for the store; True when nothing waits any more."""
        for trace_id, outcome in list(self.kept.items()):
            settled = self.runner.settle(outcome)
            if settled.action is Action.KEEP:
                return False
            del self.kept[trace_id]
            self.totals.judged += settled.action is Action.SAVED
        return True

    def finish(self, grace_s: float, cancel: Callable[[], None] | None) -> None:
        """At the stop: what is being judged may finish within the grace period; then the judge calls
        still in flight are cancelled (`cancel`), and the rest, and what could not be written, goes
        back to pending (for another worker)."""
        if self.running:
            done, _ = wait(list(self.running), timeout=grace_s)
            if len(done) < len(self.running) and cancel is not None:
                cancel()   # their calls end now; the runner gives their traces back
                done, _ = wait(list(self.running), timeout=5.0)
            for future in done:
                try:
                    self.reap({future})
                except StoreError:
                    continue
        self.settle_kept()
        for trace_id in [*self.running.values(), *self.kept]:
            if self.runner.give_back(trace_id):
                self.totals.given_back += 1
        self.pool.shutdown(wait=False, cancel_futures=True)


def _crashed(trace_id: int, error: BaseException | None) -> Outcome:
    """A job that raised instead of returning its outcome (an interrupt inside it): decided like it."""
    from veralith.work.policy import decide

    assert error is not None
    decision = decide(error)
    return Outcome(trace_id, decision.action, error=error, decision=decision)


def run(store: Store, judge: Judge, *, concurrency: int, stop: threading.Event, knowledge_base: str | None = None,
        once: bool = False, report: Callable[[str], None] | None = None, every_s: float = 10.0, poll_s: float = 1.0,
        grace_s: float = 10.0, async_calls: bool = False, cancel: Callable[[], None] | None = None) -> WorkerReport:
    """Judge pending traces of `store` with `judge`, `concurrency` at a time, until `stop` is set (see the
    module docstring); `report` receives a line when something changes and a progress line every
    `every_s` seconds. Returns the totals (`judge_down` set when `once` stopped on a dead judge).
    `cancel` ends the judge calls in flight (veralith.llm.cancel.cancel_calls), for the stop."""
    say = report or (lambda line: None)
    loop = _Loop(store, judge, concurrency=concurrency, stop=stop, say=say, async_calls=async_calls)
    last_line, last_sweep = time.monotonic(), float("-inf")
    try:
        while not stop.is_set():
            loop.reap({f for f in loop.running if f.done()})
            if loop.down is not None:
                if once:   # a drain stops on a dead judge, the rest pending
                    loop.totals.judge_down = loop.down
                    break
                if not loop.running:   # nothing claimed until its cool-down is over, then try again
                    stop.wait(loop.down.retry_after_s)
                    loop.down = None
                else:
                    wait(list(loop.running), timeout=poll_s, return_when=FIRST_COMPLETED)
                continue
            try:
                if loop.kept and not loop.settle_kept():
                    raise StoreUnavailable("the store is still unavailable")
                claimed = _claim(loop, knowledge_base, sweep=time.monotonic() - last_sweep >= _SWEEP_EVERY_S)
                if claimed is not None:
                    last_sweep = time.monotonic() if claimed[1] else last_sweep
                loop.store_back()
            except StoreError as exc:
                if not isinstance(exc, StoreUnavailable):
                    raise
                if once and not loop.running:
                    raise
                loop.store_away(exc)
                stop.wait(min(STORE_BACKOFF_MAX_S, poll_s * 5))
                continue
            taken = claimed[0] if claimed else []
            if once and not taken and not loop.running and not loop.abandoned and not loop.kept:
                break
            if not taken:
                if loop.running:
                    wait(list(loop.running), timeout=poll_s, return_when=FIRST_COMPLETED)
                else:
                    stop.wait(poll_s)
            if time.monotonic() - last_line >= every_s:
                last_line = time.monotonic()
                say(progress_line(store, loop.totals, len(loop.running), knowledge_base))
    finally:
        loop.finish(grace_s, cancel)
    return loop.totals


def _claim(loop: _Loop, knowledge_base: str | None, *, sweep: bool) -> tuple[list[int], bool] | None:
    """Claim into the free slots; (the traces claimed, whether the sweep ran)."""
    free = loop.concurrency - len(loop.running)
    if sweep:
        shipper.recover(loop.store)
        busy = set(loop.running.values())
        loop.abandoned = [i for i in loop.runner.claims.abandoned() if i not in busy]
    while loop.abandoned and free > 0:
        loop.submit(loop.abandoned.pop(0), claim=True)  # claimed inside: skipped if another worker was faster
        free -= 1
    claimed = loop.runner.claims.claim_batch(free, knowledge_base=knowledge_base) if free > 0 else []
    for trace_id in claimed:
        loop.submit(trace_id, claim=False)
    return claimed, sweep


def progress_line(store: Store, totals: WorkerReport, in_flight: int, knowledge_base: str | None) -> str:
    try:
        waiting = store.read(ops.stats, kb=knowledge_base)["by_status"].get("pending", 0)
        queue = f", {waiting:,} waiting"
    except StoreError:
        queue = ""
    return (f"{totals.judged:,} judged, {totals.failed:,} failed, {in_flight} running{queue} "
            f"({totals.rate():.1f}/s)")
