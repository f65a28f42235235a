"""Batch evaluation for `veralith eval` and `veralith resume`: read lazily, evaluate concurrently,
hand results back in input order.

Memory stays flat however large the input is: lines are read one at a time, and at most
`2 x concurrency` records are in flight (read but not yet handed back). Twice the worker count keeps
every worker busy while the oldest record finishes, without reading ahead of what can be evaluated.
(The one exception: a small digest per record id, so an id used twice in a file is caught.)

Stored traces are claimed, evaluated and finished through veralith.sdk.stored, the path the SDK's
worker and `resume()` take too.

Interrupts (Ctrl-C) are the caller's to show, but this module decides what survives one: records not
yet started are cancelled (their traces stay `pending` for `veralith resume`), records already running
are waited for so their results are stored; a second Ctrl-C abandons them too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from veralith.cli.records import BadLine, Record, read_records
from veralith.errors import JudgeCallCancelled, JudgeServerDown
from veralith.models import EvaluationResult, cell_name
from veralith.store import ops
from veralith.usage import CallUsage
from veralith.work.pool import LoopPool

if TYPE_CHECKING:  # the store loads sqlite-utils; `veralith --help` should not
    from veralith.store.protocol import Store, TraceInfo, TraceInput

__all__ = ["Interrupted", "LoopPool", "Reporter", "Tally", "aevaluate_record", "eval_jobs", "evaluate_record",
           "existing_trace", "judged_alike", "recent", "record_outcome", "release", "resume_jobs", "run_ordered",
           "server_down", "stop_on_sigterm"]

J = TypeVar("J")


class Interrupted(Exception):
    """Ctrl-C stopped the run. `cancelled` were never started; `abandoned` were still running."""

    def __init__(self, cancelled: list[Any], abandoned: list[Any]) -> None:
        super().__init__(f"interrupted: {len(cancelled)} not started, {len(abandoned)} abandoned")
        self.cancelled = cancelled
        self.abandoned = abandoned


@dataclass
class _Slot(Generic[J]):
    job: J
    future: Future[Any]
    done: bool = False


def run_ordered(jobs: Iterable[J], work: Callable[[J], Any], *, concurrency: int,
                on_done: Callable[[J, Any, BaseException | None], None],
                on_flush: Callable[[J, Any, BaseException | None], None], asynchronous: bool = False) -> None:
    """Run `work(job)` on up to `concurrency` threads, at most 2 x concurrency jobs in flight.

    `asynchronous`: `work(job)` is a coroutine, and up to `concurrency` of them run at once on one
    event loop (LoopPool) instead of a thread each; everything else here is the same.

    `on_done` is called (in this thread) as each job finishes, for progress; `on_flush` in input
    order, for ordered output. Each job runs in a copy of the caller's contextvars, so settings
    overrides and cost scopes set around the batch reach the workers. On Ctrl-C (or SIGTERM, under
    `stop_on_sigterm`) the judge calls in flight are cancelled (veralith.llm.cancel.cancel_calls), so
    the running jobs end within moments, their traces handed back as pending; then Interrupted is
    raised (at once on a second Ctrl-C).
    """
    from veralith.llm.cancel import allow_calls, cancel_calls

    allow_calls()   # a run starts with judge calls allowed, whatever an earlier run in this process did
    window: deque[_Slot[J]] = deque()
    source = iter(jobs)
    exhausted = False
    taken: Any = _END  # a job read from `source` and not yet in the window (a Ctrl-C may land between)
    pool: ThreadPoolExecutor | LoopPool = (
        LoopPool(concurrency) if asynchronous
        else ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="veralith-eval"))

    def start(job: J) -> Future[Any]:
        if isinstance(pool, LoopPool):
            return pool.submit(work, job)
        return pool.submit(contextvars.copy_context().run, work, job)

    try:
        while True:
            while not exhausted and len(window) < 2 * concurrency:
                job = taken = next(source, _END)
                if job is _END:
                    exhausted = True
                    break
                window.append(_Slot(job, start(job)))
                taken = _END
            if not window:
                break
            _settle(window, on_done, on_flush, block=True)
    except KeyboardInterrupt:
        cancel_calls()   # the running jobs' judge calls raise JudgeCallCancelled: their traces go back to pending
        cancelled = [s.job for s in window if not s.done and s.future.cancel()]
        if taken is not _END and all(s.job is not taken for s in window):
            cancelled.append(taken)  # read but never started
        running = [s for s in window if not s.future.cancelled()]
        window = deque(running)
        try:
            while any(not s.done for s in window):
                _settle(window, on_done, on_flush, block=True)
            _settle(window, on_done, on_flush, block=False)
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise Interrupted(cancelled, [s.job for s in window if not s.done]) from None
        pool.shutdown(wait=True)
        raise Interrupted(cancelled, []) from None
    except BaseException:
        # A fatal error in this thread (e.g. a configuration error found while reading): start nothing
        # more, let running evaluations finish and store their results, then report the error.
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


_END: Any = object()


def _settle(window: deque[_Slot[J]], on_done: Callable[..., None], on_flush: Callable[..., None], *,
            block: bool) -> None:
    pending = [s.future for s in window if not s.done]
    if block and pending:
        # A timeout keeps the main thread waking up, so Ctrl-C is seen promptly on every platform.
        wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
    for slot in window:
        if not slot.done and slot.future.done():
            slot.done = True
            on_done(slot.job, *_outcome(slot.future))
    while window and window[0].done:
        slot = window.popleft()
        on_flush(slot.job, *_outcome(slot.future))


def _outcome(future: Future[Any]) -> tuple[Any, BaseException | None]:
    error = future.exception()
    return (None, error) if error is not None else (future.result(), None)


@dataclass
class Tally:
    """Running totals for the summary. USD stays None once any result's price was unknown."""

    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    total: int | None = None          # records expected, for the progress bar (None when unknown)
    evaluated: int = 0
    cells: Counter[str] = field(default_factory=Counter)
    gates: Counter[str] = field(default_factory=Counter)
    bad_lines: int = 0
    blank_lines: int = 0
    failed: int = 0                   # records whose evaluation raised or was refused (budget)
    skipped: int = 0                  # claimed by another process meanwhile; not ours to evaluate
    unchanged: int = 0                # re-run records whose stored result stands (same inputs and judges)
    without_id: int = 0               # stored as new traces: a record without an id is never matched again
    with_judge_errors: int = 0        # evaluated, but at least one judge recorded an error
    usage: CallUsage = field(default_factory=CallUsage)   # summed by CallUsage.add, the one rule for it
    stored: int = 0
    ids: tuple[int, int] | None = None    # lowest and highest trace id stored, to point `inspect` at them
    interrupted: bool = False
    left_pending: int = 0
    left_running: int = 0
    last_line: int = 0                # last input line read (eval), to say where an interrupt stopped
    unread: bool = False              # the input had lines left when the run stopped

    def add(self, result: EvaluationResult, *, stored: bool) -> None:
        self.evaluated += 1
        self.stored += stored
        if stored and result.trace_id is not None:
            low, high = self.ids or (result.trace_id, result.trace_id)
            self.ids = (min(low, result.trace_id), max(high, result.trace_id))
        self.cells[cell_name(result.failure_cell)] += 1
        self.gates[result.status.quality_gate.value] += 1
        self.with_judge_errors += bool(result.errors)
        self.usage.add(result.usage)

    calls = property(lambda self: self.usage.calls, doc="Requests that reached a server.")
    cache_hits = property(lambda self: self.usage.cache_hits, doc="Replies served from the reply cache.")
    input_tokens = property(lambda self: self.usage.input_tokens)
    output_tokens = property(lambda self: self.usage.output_tokens)
    usd = property(lambda self: self.usage.usd, doc="None once any result's price was unknown.")

    @property
    def processed(self) -> int:
        """Non-blank lines (or traces) dealt with so far, whatever the outcome: the progress count."""
        return self.evaluated + self.failed + self.bad_lines + self.skipped + self.unchanged

    @property
    def errors(self) -> int:
        return self.bad_lines + self.failed + self.with_judge_errors

    @property
    def wall_s(self) -> float:
        return (self.finished or time.monotonic()) - self.started


def eval_jobs(path: Path, *, default_kb: str, persist: bool, store: Store | None, client: Any, tally: Tally,
              report: Callable[[str], None], run_id: int | None = None, rejudge: bool = False,
              yield_unchanged: bool = False, items: Iterable[Record | BadLine] | None = None) -> Iterator[Record]:
    """Valid records of `path` (or of `items`, records read from it by another reader, such as
    `veralith import`), each budget-checked and (when persisting) stored as a pending trace (tagged
    with the eval run `run_id`, when given).

    The trace is written before it is evaluated, so a crash or Ctrl-C leaves it `pending` for
    `veralith resume` instead of losing it. Bad lines and over-budget records are reported as
    `FILE:LINE: what is wrong` and skipped; nothing is written for them.

    Re-running a file is idempotent by the records' own ids: a record whose id names a trace of its
    knowledge base that already holds a result for the same inputs, judged the same way
    (`judged_alike`), is counted in `tally.unchanged` and not evaluated again; any other such record
    re-judges that trace in place (its earlier outcome goes to the trace's history), and so does
    every one with `rejudge`. With `yield_unchanged`, an unchanged record is yielded too, marked
    `unchanged` and naming its trace, for a caller that writes every result out. An id used twice
    in one knowledge base of the file is a bad line the second time (ids are unique per knowledge
    base); to tell, the run keeps an 8-byte digest and a line number per id (about 100 bytes
    each): the one part of its memory that grows with the file.
    """
    from veralith.pipeline.budget import BudgetExceeded, enforce_budget

    seen: dict[bytes, int] = {}  # blake2b(knowledge base, id) -> the line that used it first
    for item in read_records(path, default_kb=default_kb) if items is None else items:
        tally.last_line = item.line
        tally.unread = True
        if isinstance(item, BadLine):
            tally.blank_lines += item.blank
            tally.bad_lines += not item.blank
            report(f"{path}:{item.line}: {item.message}")
            continue
        if item.external_id is not None:
            key = hashlib.blake2b(f"{item.knowledge_base}\0{item.external_id}".encode(), digest_size=8).digest()
            first = seen.setdefault(key, item.line)
            if first != item.line:
                tally.bad_lines += 1
                report(f"{path}:{item.line}: id {item.external_id!r} was already used on line {first} "
                       f"(knowledge base {item.knowledge_base!r}); ids are unique per knowledge base")
                continue
        existing = None
        if store is not None and item.external_id is not None:
            existing = existing_trace(store, item, client, rejudge=rejudge)
            if existing == "unchanged":
                tally.unchanged += 1
                if run_id is not None:  # its stored result stands for this run too
                    from veralith.cli.runs import file_unchanged

                    file_unchanged(store, item, run_id)
                if yield_unchanged:
                    info = store.read(ops.find_external, item.knowledge_base, item.external_id)
                    if info is not None:
                        yield replace(item, trace_id=info.trace_id, unchanged=True)
                continue
        try:
            enforce_budget(item.query, item.context, item.response, client=client)
        except BudgetExceeded as exc:
            tally.failed += 1
            report(f"{path}:{item.line}: {exc}")
            continue
        created: int | None = None  # a trace stored for this record and not yet handed to the caller
        try:
            if store is not None:
                from veralith.store.errors import DuplicateExternalId
                from veralith.work import intake
                from veralith.work.policy import Action, intake as intake_policy

                try:
                    if isinstance(existing, int):
                        trace_id = existing  # re-judged in place: claimed (again) when its turn comes
                        if run_id is not None:  # the run keeps it even if this evaluation fails
                            store.write(ops.tag_trace, run_id, trace_id)
                    else:
                        # queued: reserved for this live process, so a concurrent `veralith resume` leaves it to us.
                        trace_id = created = intake.create(store, _input(item), queued=True, run_id=run_id)
                        tally.without_id += item.external_id is None
                except DuplicateExternalId as exc:  # another run of this file stored it a moment ago
                    tally.skipped += 1
                    report(f"{path}:{item.line}: {exc}; left to the run that stored it")
                    continue
                except Exception as exc:
                    if intake_policy(exc).action is not Action.SET_ASIDE:
                        raise   # the store is away or stopped taking writes: the run ends (exit 2)
                    tally.failed += 1  # this record only (a value the store refuses); go on
                    report(f"{path}:{item.line}: not stored: {type(exc).__name__}: {exc}")
                    continue
                item = replace(item, trace_id=trace_id)
            yield item
        except KeyboardInterrupt:
            # Ctrl-C between storing the trace and handing it over: it is one of the traces left
            # pending (counted and released like the cancelled ones), not a silent leftover.
            if created is not None and store is not None:
                from veralith.work.claims import claims_for

                tally.left_pending += 1
                claims_for(store).release(created)
            raise
    tally.unread = False


def _input(record: Record) -> TraceInput:
    from veralith.store.protocol import TraceInput

    return TraceInput(query=record.query, context=record.context, response=record.response,
                      knowledge_base=record.knowledge_base, metadata=record.metadata, external_id=record.external_id,
                      app_latency_ms=record.latency_ms)


def existing_trace(store: Store, record: Record, client: Any, *, rejudge: bool) -> int | str | None:
    """For a record with an id: None when its knowledge base has no trace with that external id,
    "unchanged" when that trace's result stands (same inputs, judged alike, a verdict rather than
    only judge errors, and no `rejudge`), else the trace's id, to re-judge in place.

    The one rule for what a re-run skips: `eval_jobs` applies it, and `veralith eval --dry-run`
    asks it over a read-only store to leave skipped records out of its estimate. It only reads
    (`find_external`, `load_input`, `load_result`); `client` needs only `backend`, `model` and `prompt_version`."""
    assert record.external_id is not None
    info = store.read(ops.find_external, record.knowledge_base, record.external_id)
    if info is None:
        return None
    if (not rejudge and info.status == "done" and info.has_result and judged_alike(info, client)
            and store.read(ops.load_input, info.trace_id).same_inputs(_input(record))
            and not _not_judged(store.read(ops.load_result, info.trace_id))):
        return "unchanged"
    return info.trace_id


def _not_judged(result: EvaluationResult) -> bool:
    """A stored result that judge errors left without a verdict (an outage): never "already
    evaluated", so re-running the file judges it again."""
    return bool(result.errors) and result.status.quality_gate.value == "indeterminate"


def judged_alike(info: TraceInfo, client: Any) -> bool:
    """Whether the stored result was judged as `client` would judge now: same backend, model and
    version of every prompt the result used, and the same mode (a single-call result used the `fast`
    prompt, veralith.pipeline.fast). A prompt the client no longer knows counts as changed."""
    from veralith.pipeline.fast import effective_mode

    if not info.prompt_versions or (info.backend, info.judge_model) != (client.backend, client.model):
        return False
    if ("fast" in info.prompt_versions) != (effective_mode(client) == "fast"):
        return False
    try:
        return all(client.prompt_version(task) == version for task, version in info.prompt_versions.items())
    except (KeyError, ValueError):
        return False


def resume_jobs(store: Store, trace_ids: Iterable[int]) -> Iterator[Record]:
    """Stored inputs of traces to resume, loaded one at a time as the window has room."""
    for trace_id in trace_ids:
        found = store.read(ops.load_input, trace_id)
        yield Record(line=0, query=found.query, context=found.context, response=found.response,
                     knowledge_base=found.knowledge_base, metadata=found.metadata, trace_id=trace_id,
                     external_id=found.external_id, latency_ms=found.app_latency_ms)


async def aevaluate_record(record: Record, *, persist: bool, client: Any, failed: bool = False,
                           again: bool = False, store: Store | None = None) -> EvaluationResult | None:
    """`evaluate_record` on the event loop (LoopPool): the judge calls awaited, the store's work on a thread."""
    if persist and record.trace_id is not None:
        if store is None:
            from veralith.store import open_store

            store = await asyncio.to_thread(open_store)
        runner = _runner(store, client)
        return _returned(await runner.arun(record.trace_id, failed=failed, again=again, trace=_input(record)))
    from veralith.pipeline.evaluate import aevaluate_checked

    return await aevaluate_checked(record.query, record.context, record.response, store=None, client=client,
                                   trace_id=None, knowledge_base=record.knowledge_base, metadata=record.metadata)


def evaluate_record(record: Record, *, persist: bool, client: Any, failed: bool = False,
                    again: bool = False, store: Store | None = None) -> EvaluationResult | None:
    """Evaluate one record in a worker thread; None when another process claimed the trace first.

    A stored record's trace is judged by the work layer's runner (veralith.work.runner: claimed first,
    so a concurrent `veralith resume` never evaluates it twice). `failed`: the trace is re-judged after
    a failed evaluation (`veralith resume --failed`); `again`: whatever its state (a re-run record
    re-judged in place). `store`: where the trace is (default: the configured one). The trace's own
    failure is recorded on it and raised; a dead judge server or a store that went away or stopped
    taking writes is raised as it is (it ends the run, veralith.work.policy)."""
    if persist and record.trace_id is not None:
        if store is None:
            from veralith.store import open_store

            store = open_store()
        runner = _runner(store, client)
        return _returned(runner.run(record.trace_id, failed=failed, again=again, trace=_input(record)))
    from veralith.pipeline.evaluate import evaluate_checked

    # The record was validated when read and budget-checked in eval_jobs.
    return evaluate_checked(record.query, record.context, record.response, store=None, client=client,
                            trace_id=None, knowledge_base=record.knowledge_base, metadata=record.metadata)


def _runner(store: Store, client: Any) -> Any:
    from veralith.pipeline.evaluate import TraceJudge
    from veralith.work.runner import Runner

    return Runner(store, TraceJudge(client))


def _returned(outcome: Any) -> EvaluationResult | None:
    """What a drain makes of a runner's outcome: the result, None when the trace was not ours, else the
    error raised (the trace's own failure is recorded on it already; the others end the run)."""
    from veralith.work.policy import Action

    if outcome.action is Action.SAVED:
        return outcome.result
    if outcome.action is Action.NOT_OURS:
        return None
    raise outcome.error


def record_outcome(tally: Tally, job: Record, result: EvaluationResult | None, error: BaseException | None, *,
                   persist: bool, report: Callable[[str], None], where: str) -> None:
    """Count one finished record and report what went wrong with it, naming where it came from.

    A stored record's failure is already recorded on its trace (evaluate_record); a database that
    stopped taking writes or cannot be reached ends the batch (WritesStopped / StoreUnavailable is raised)."""
    if isinstance(error, JudgeCallCancelled):
        tally.left_pending += 1   # the run is stopping; its trace was handed back as pending (sdk.stored)
        return
    if isinstance(error, JudgeServerDown):
        raise error   # ends the batch (veralith.cli.app): not this record's failure, and no line of its own
    if error is not None:
        from veralith.work.runner import failure_message

        tally.failed += 1
        report(f"{where}: evaluation failed: {failure_message(error)}")
        from veralith.store.errors import StoreUnavailable, WritesStopped

        if isinstance(error, (WritesStopped, StoreUnavailable)):
            raise error  # its trace stays pending/running under a lease that dies with us: resumable
    elif result is None:
        tally.skipped += 1
        report(f"{where}: trace {job.trace_id} was claimed by another process; left to it")
    else:
        tally.add(result, stored=persist)
        if result.errors:
            errs = "; ".join(f"{e.phase.value} {e.kind} after {e.attempts} attempt(s): {_clip(e.message)}"
                             for e in result.errors)
            report(f"{where}: trace {result.trace_id if result.trace_id is not None else '(unsaved)'}: "
                   f"judge errors: {errs}")


class Reporter:
    """Progress on stderr: a rich bar on a terminal, a plain line every 10 % (or 10 s) otherwise,
    and a last one at the end.

    Only the batch's own thread calls it (run_ordered's callbacks), so it needs no lock.
    """

    def __init__(self, console: Any, tally: Tally, *, every_s: float = 10.0) -> None:
        self.console, self.tally, self.every_s = console, tally, every_s
        self.live = console.is_terminal and not console.is_dumb_terminal
        self._progress: Any = None
        self._last_print = time.monotonic()
        self._last_step = 0
        self._printed = 0  # the count the last plain line showed

    def __enter__(self) -> Reporter:
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("evaluating"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("errors {task.fields[errors]}"), TimeElapsedColumn(),
                                      console=self.console)
            self._progress.start()
            self._task = self._progress.add_task("eval", total=self.tally.total, errors=0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self.advance()
            self._progress.stop()
        elif self.tally.processed and self._printed != self.tally.processed:
            self._line()  # a log always ends on where the run got to, however short it was

    def report(self, message: str) -> None:
        from veralith.cli.render import literal

        # soft_wrap: one report stays one line, so `grep FILE:LINE` works on captured stderr.
        self.console.print(literal(message, "yellow"), soft_wrap=True)

    def advance(self) -> None:
        t = self.tally
        if self._progress is not None:
            self._progress.update(self._task, completed=t.processed, errors=t.errors)
            return
        step = t.processed * 10 // t.total if t.total else 0
        now = time.monotonic()
        # Every 10 % but at most once a second (a log, not a ticker), and at least every `every_s`.
        since = now - self._last_print
        if (step > self._last_step and since >= 1.0) or since >= self.every_s:
            self._last_step, self._last_print = step, now
            self._line()

    def _line(self) -> None:
        t = self.tally
        self._printed = t.processed
        of = f"/{t.total}" if t.total else ""
        self.console.print(f"veralith: {t.processed}{of} done, {t.errors} errors, {t.wall_s:.1f} s",
                           soft_wrap=True, markup=False)


def recent(jobs: Iterable[J], window: deque[J]) -> Iterator[J]:
    """`jobs`, each also put in `window` (a bounded deque: the jobs that may still be in flight)."""
    for job in jobs:
        window.append(job)
        yield job


def server_down(down: JudgeServerDown, store: Store | None, in_flight: Iterable[Record],
                unread: Iterator[Record], tally: Tally) -> str:
    """The judge server stopped answering: nothing more is judged. Hand the records read but not
    finished back as plain pending, store the rest of the input as pending too (reading it judges
    nothing), and return the one line that says so, naming the server and `veralith resume`."""
    if store is None:
        rest = sum(1 for _ in unread)
        return (f"{down}; stopped after {tally.evaluated} evaluated, {rest} more records not evaluated "
                "(--no-persist: nothing was stored)")
    from veralith.work.claims import claims_for

    left = 0
    for record in in_flight:   # some finished meanwhile, some were handed back already (the runner)
        if record.trace_id is not None and not record.unchanged:
            claims_for(store).release(record.trace_id)
            left += store.read(ops.trace_info, record.trace_id).status == "pending"
    # The rest is stored pending as it is read, reserved for this process, which ends now: any resume
    # takes them once it has (leases.claimable), so no second write per record is spent on that.
    for record in unread:
        if record.trace_id is not None and not record.unchanged:
            left += store.read(ops.trace_info, record.trace_id).status == "pending"
    return (f"{down}; stopped calling it after {tally.evaluated} evaluated: {left} traces left pending, "
            "run `veralith resume` once it is back")


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM stops the run as Ctrl-C does (run_ordered: the judge calls in flight are
    cancelled and their traces left pending). Only the main thread can set a handler; elsewhere, nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def release(store: Store, cancelled: Iterable[Record]) -> None:
    """Hand never-started traces back as plain pending, so `resume` may take them at once."""
    from veralith.work.claims import claims_for

    for record in cancelled:
        if record.trace_id is not None:
            claims_for(store).release(record.trace_id)


def _clip(text: str, width: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
