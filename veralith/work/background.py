"""`log()`'s background work in one process: a shipper thread and an evaluator thread.

- The shipper moves spooled traces into the store (veralith.work.shipper), a batch per transaction
  and at most one round per SHIP_GAP_S while traces keep coming, and backs off while the store is
  unavailable (what waits stays on disk). The first round into a store also ships the spools that
  dead processes of this host left, and queues what nobody is judging.
- The evaluator judges each shipped trace this process should judge with the runner
  (veralith.work.runner), under the settings in force where it was logged, and acts on the outcome
  as veralith.work.policy says: a dead judge server is waited out (said once per outage), a store
  that went away keeps the result until it is back, a trace's own failure is recorded on it.

A full queue never blocks: the trace goes back to pending for anyone, and the evaluator sweeps for it
once the queue has drained. `stop` ships what is spooled, drains (for at most its timeout) and gives
back whatever is still held, so nothing stays `running` under the lease of a process about to exit.
Nothing here is ever raised into the host program.
"""

from __future__ import annotations

import contextvars
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from veralith.config import Settings, settings
from veralith.errors import JudgeServerDown, StoreError
from veralith.work.spooler import spooler_for

# Loaded with log(), whose path loads no database library: the work layer's claims, policy and
# runner (which do) are imported on the background threads, when a store is first opened.
if TYPE_CHECKING:
    from veralith.store.protocol import Store
    from veralith.work.claims import Claims
    from veralith.work.runner import Judge, Outcome, Runner

__all__ = ["Background"]

logger = logging.getLogger("veralith.sdk")
_STOP = object()
SHIP_EVERY_S = 0.2      # how soon a logged trace reaches the store when nothing wakes the shipper
# The least time between two ships: a process logging continuously has its traces shipped in batches
# this far apart, not one small transaction after each call, which would keep the shipper busy (and
# holding the GIL the callers need) the whole time. A trace logged after a quiet spell ships at once.
SHIP_GAP_S = 0.05
BACKOFF_MAX_S = 5.0     # the longest the shipper waits between tries while the store is unavailable


class Background:
    """The shipper and the evaluator of this process, and the stores it has logged into.

    `open_store(url)` opens a store (on these threads only); `make_judge()` gives the judge for the
    settings in force (called under each trace's settings); `exiting()` says whether the
    interpreter's at-exit drain ran out of time (a failure then is not the trace's)."""

    def __init__(self, open_store: Callable[[str], Store], make_judge: Callable[[], Judge],
                 exiting: Callable[[], bool]) -> None:
        self.pid = os.getpid()
        self._open, self._make_judge, self._exiting = open_store, make_judge, exiting
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=settings.queue_size)
        self.overflowed = threading.Event()
        self.abandon = False  # set by stop(wait=False) or a timeout: leave the rest pending
        # Logged here and not evaluated yet: id -> (store URL, settings). Plain dict operations are
        # atomic under the GIL, and only counts and membership are read across threads.
        self.outstanding: dict[int, tuple[str, Settings]] = {}
        self.shipped: set[int] = set()   # of those, the ones in the store (the rest wait in the spool)
        self.unshipped: set[int] = set()  # at stop: logged here and still spooled (no store took them)
        self.set_aside = 0                # spooled traces the store refused (its dead-letter place)
        self._stores: dict[str, Store] = {}
        self._urls: set[str] = set()     # stores logged into; the shipper opens them (never the caller)
        self._swept: set[str] = set()
        self._shipped_ok = True           # the last shipping round reached every store
        self._kept: dict[int, tuple[str, Outcome]] = {}   # results waiting for a store that went away
        self._active: set[int] = set()    # the trace the evaluator is judging now (logged here or swept)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._base = settings.snapshot()  # for traces this process did not log (recovered spools, sweeps)
        self._pause = 0.0                 # the evaluator's wait while the store is away (doubling)
        self._server_down: str | None = None   # the judge server found down (said once per outage)
        # Both threads run in a copy of the creator's context: the settings in force where the first
        # trace was logged.
        self.shipper = threading.Thread(target=contextvars.copy_context().run, args=(self._ship_loop,),
                                        name="veralith-log-shipper", daemon=True)
        self.thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,),
                                       name="veralith-log-worker", daemon=True)
        # Only the shipper starts here, on the caller's thread (log()'s first call): Thread.start waits
        # until the new thread runs, a wait of a scheduler's turn that on a loaded machine was tens of
        # milliseconds per thread. The shipper starts the evaluator and the spool's preparer itself.
        self.shipper.start()

    def alive(self) -> bool:
        evaluator = self.thread.is_alive() or self.thread.ident is None   # (None: the shipper starts it)
        return self.pid == os.getpid() and evaluator and self.shipper.is_alive()

    def store(self, url: str) -> Store:
        """The store at `url` (opened on first use: on the background threads only)."""
        store = self._stores.get(url)
        if store is None:
            store = self._stores.setdefault(url, self._open(url))
        return store

    def watch(self, url: str) -> None:
        """Ship the spool of the store at `url` (soon, on the shipper's thread). The spooler wakes
        the shipper itself when there is something to do (veralith.work.spooler)."""
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
            if wait and self.thread.ident is not None:
                self.thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self.abandon = True  # on timeout: finish the current trace, leave the rest pending
        self._give_back()

    # -- the shipper -----------------------------------------------------------------------------
    def _ship_loop(self) -> None:
        """Ship when woken (a first trace since the last ship) or every SHIP_EVERY_S, but no sooner
        than SHIP_GAP_S after the last ship (later while the store is unavailable)."""
        self.thread.start()
        pause = SHIP_EVERY_S
        earliest = latest = time.monotonic()
        while True:
            self._wake.wait(max(0.0, latest - time.monotonic()))
            self._wake.clear()
            stopping = self._stopping.is_set()
            if not stopping and time.monotonic() < earliest:
                latest = earliest  # woken early: the ship waits for its turn
                continue
            ok = self._shipped_ok = self._ship_all()
            if stopping:
                self._close_all()
                return
            pause = SHIP_EVERY_S if ok else min(BACKOFF_MAX_S, pause * 2)
            now = time.monotonic()
            earliest, latest = now + (SHIP_GAP_S if ok else pause), now + pause

    def _close_all(self) -> None:
        for url in list(self._urls):
            try:
                spooler_for(url).close()
                self.unshipped |= spooler_for(url).spool.unshipped()
            except Exception:  # the host must never see a background failure
                logger.debug("veralith: could not close the spool of %s", url, exc_info=True)

    def _set_aside(self, ids: list[int]) -> None:
        """Spooled traces the store refused (now in its dead-letter place): nothing to evaluate here."""
        self.set_aside += len(ids)
        for trace_id in ids:
            self._done(trace_id)

    def left(self) -> int:
        """After `stop`: how many traces this process logged are neither evaluated here nor handed on
        (still to judge, or still spooled: not in the store yet)."""
        return len(set(self.outstanding) | self.unshipped)

    def _ship_all(self) -> bool:
        """Ship every store's spool; queue what we are to judge. False if a store was unavailable."""
        from veralith.work import shipper

        ok = True
        for url in list(self._urls):
            try:
                spooler_for(url).start_preparer()   # once per process; not on log()'s path (see __init__)
                store = self.store(url)
                if url not in self._swept:
                    self._swept.add(url)
                    shipper.recover(store)  # spools of processes on this host that are gone
                    if self._base.evaluate == "local":
                        self._submit_sweep(url, store)
                try:   # first round after an outage: at once. Never in the way of shipping itself:
                    shipper.secure(store, now=not self._shipped_ok)
                except StoreError as exc:   # the store gone again: the ship below says so
                    logger.debug("veralith: could not check this host's trace ids against the store: %s", exc)
                except Exception:
                    logger.exception("veralith: could not check this host's trace ids against the store")
                for trace_id in shipper.ship(store, refused=self._set_aside):
                    self._submit(trace_id, url)
            except StoreError as exc:
                ok = False
                self._swept.discard(url)
                logger.debug("veralith: store unavailable, traces stay spooled: %s", exc)
            except Exception:  # the host must never see a background failure
                ok = False
                logger.exception("veralith: could not move spooled traces into the store")
        return ok

    def _submit(self, trace_id: int, url: str) -> None:
        self.shipped.add(trace_id)
        snapshot = self.outstanding.get(trace_id, (url, self._base))[1]
        try:
            self.queue.put_nowait((trace_id, url, snapshot))
        except queue.Full:
            # Bounded: the trace stays pending for anyone (our reservation given back), and the
            # evaluator sweeps for it once the queue has drained.
            _claims(self._stores[url]).release(trace_id)
            self.overflowed.set()

    def _submit_sweep(self, url: str, store: Store) -> None:
        for trace_id in _claims(store).resumable():
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
                    self._settle()
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
        self._active.add(trace_id)
        try:
            with settings.using(snapshot):  # evaluate as the caller configured, into its store
                outcome = self._runner(url, record=True).run(trace_id)
        except Exception:  # e.g. the store became unreadable; the host must never see it
            logger.exception("veralith: background evaluation of trace %s failed", trace_id)
            self._done(trace_id)
            return
        finally:
            self._active.discard(trace_id)
        self._act(outcome, url, snapshot)

    def _runner(self, url: str, *, record: bool = False) -> Runner:
        from veralith.work.runner import Runner

        return Runner(self.store(url), self._make_judge(),
                      record_failure=(lambda: not self._exiting()) if record else None)

    def _act(self, outcome: Outcome, url: str, snapshot: Settings) -> None:
        """What the policy's answer means here (veralith.work.policy)."""
        from veralith.work.policy import STORE_BACKOFF_MAX_S, Action

        trace_id, action = outcome.trace_id, outcome.action
        if action is Action.SAVED:
            self._pause = 0.0
            if self._server_down is not None:
                logger.warning("veralith: the judge server answers again; pending logged traces are judged")
            self._server_down = None
        elif action is Action.RECORD:
            logger.warning("veralith: evaluating trace %s failed: %s", trace_id, outcome.error)
        elif action is Action.GIVE_BACK and isinstance(outcome.error, JudgeServerDown):
            # Nothing was judged and the trace is pending again. Say so once per outage, and wait out the
            # server's cool-down before the next trace instead of spinning through the queue; at stop,
            # leave the rest pending (`veralith resume` finishes them).
            down = outcome.error
            if self._server_down != down.server:
                self._server_down = down.server
                logger.warning("veralith: %s; logged traces stay pending until it answers", down)
            if self._requeue(trace_id, url, snapshot, down.retry_after_s):
                return
        elif action is Action.KEEP:
            # The store went away: the result (if computed) waits, the claim stays ours and renewed.
            self._kept[trace_id] = (url, outcome)
            self._pause = min(STORE_BACKOFF_MAX_S, max(1.0, self._pause * 2))
            logger.debug("veralith: store unavailable, trace %s waits %.0f s: %s", trace_id, self._pause, outcome.error)
            if not self.abandon:
                self._stopping.wait(self._pause)
            return
        elif action is Action.STOP:
            logger.error("veralith: background evaluation stopped: %s", outcome.error)
            self.abandon = True
        self._done(trace_id)

    def _requeue(self, trace_id: int, url: str, snapshot: Settings, wait_s: float) -> bool:
        if self._stopping.is_set():
            self.abandon = True
            return False
        self._stopping.wait(wait_s)
        try:
            self.queue.put_nowait((trace_id, url, snapshot))
            return True
        except queue.Full:
            self.overflowed.set()
            return False

    def _settle(self) -> None:
        """Write what waits for a store that went away (or give it back), once it answers again."""
        if not self._kept:
            return
        from veralith.work.policy import Action

        for trace_id, (url, outcome) in list(self._kept.items()):
            try:
                with settings.using(self.outstanding.get(trace_id, (url, self._base))[1]):
                    settled = self._runner(url).settle(outcome)
            except Exception:
                logger.debug("veralith: could not settle trace %s yet", trace_id, exc_info=True)
                return
            if settled.action is Action.KEEP:
                return
            del self._kept[trace_id]
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
        self._settle()
        for url, store in list(self._stores.items()):
            if not self.abandon:
                self._sweep(url, store, only_ours=True)

    def _sweep(self, url: str, store: Store, *, only_ours: bool = False) -> None:
        try:
            # Ours: those shipped into the store; what is still spooled waits there for the next process.
            ids = _claims(store).resumable() if not only_ours else sorted(
                i for i, (u, _) in list(self.outstanding.items()) if u == url and i in self.shipped)
        except Exception:  # the host must never see a background failure
            logger.exception("veralith: could not look for resumable traces")
            return
        for trace_id in ids:
            if self.abandon:
                return
            self._process(trace_id, url, self.outstanding.get(trace_id, (url, self._base))[1])

    def _give_back(self) -> None:
        """Traces this evaluator still holds when the drain ended (being judged, or a result waiting
        for the store) go back to pending (nobody's), so they are not left `running` under the lease
        of a process that is about to exit; a result that can still be written is written first.
        Claims other code of this process holds (`log(sync=True)`, `resume()`) are theirs to end."""
        self._settle()
        mine = set(self.outstanding) | set(self._kept) | set(self._active)
        for store in list(self._stores.values()):
            claims = _claims(store)
            try:
                for trace_id in claims.held():
                    if trace_id in mine:
                        claims.release(trace_id)
            except Exception:  # the lease dies with the process anyway
                logger.debug("veralith: could not give back traces", exc_info=True)


def _claims(store: Store) -> Claims:
    from veralith.work.claims import claims_for

    return claims_for(store)
