"""Sending a pipeline stage's judge calls, blocking (threads) or awaiting (the event loop).

The pipeline is written once, as generators (veralith.pipeline.evaluate, decompose): each stage
yields a `Batch` of calls that may run at once and is sent back their `Outcome`s, in order. `drive`
sends them on threads, as the sync path always has; `adrive` on the running event loop, through
the client's `arun` (veralith.llm.client.OpenAIClient: AsyncOpenAI) when it has one, else on a
thread per call (the local backend and test fakes), so no stage's logic differs between the two.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
import time
from collections.abc import Generator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from veralith.llm.base import CallResult, JudgeClient
from veralith.llm.tasks import Task

__all__ = ["Batch", "Outcome", "Steps", "adrive", "arun_calls", "drive", "run_calls"]

# A call's result and when it finished (time.perf_counter), or the exception it raised.
Outcome = tuple[CallResult, float] | Exception
T = TypeVar("T")

_MAX_THREADS = 16   # threads one trace's calls may use on the sync path


@dataclass
class Batch:
    """Calls that may run at once. `stop_at_failure`: run one after another (a client that is not
    concurrent), the rest are not made once one fails."""

    calls: list[tuple[Task, BaseModel]]
    stop_at_failure: bool = False


Steps = Generator[Batch, list[Outcome], T]


def drive(steps: Steps[T], client: JudgeClient) -> T:
    """Run a pipeline generator to its end, its calls sent on threads."""
    try:
        batch = next(steps)
        while True:
            batch = steps.send(run_calls(client, batch))
    except StopIteration as done:
        return done.value


async def adrive(steps: Steps[T], client: JudgeClient) -> T:
    """Run a pipeline generator to its end, its calls awaited on the running event loop."""
    try:
        batch = next(steps)
        while True:
            batch = steps.send(await arun_calls(client, batch))
    except StopIteration as done:
        return done.value


def run_calls(client: JudgeClient, batch: Batch) -> list[Outcome]:
    """Every call of `batch`: at once on threads for an I/O-bound client, else one after the other.

    The threads are daemons: a judge call in flight never holds up the interpreter's exit (a
    ThreadPoolExecutor's threads are joined before any at-exit handler runs, which would make a
    process wait out a slow server's reply before the at-exit drain can give its trace back). A call
    whose thread cannot start (interpreter shutdown) runs here instead."""
    calls = batch.calls
    if not client.concurrent or len(calls) < 2:
        return _serial(client, batch)
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    futures: list[Future[Outcome]] = [Future() for _ in calls]
    # Each call runs in a copy of the caller's context, so per-trace cost scopes see it.
    contexts = [contextvars.copy_context() for _ in calls]
    for i in range(len(calls)):
        todo.put(i)

    def work() -> None:
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            if futures[i].set_running_or_notify_cancel():
                task, payload = calls[i]
                futures[i].set_result(contexts[i].run(_timed, client, task, payload))

    for _ in range(min(_MAX_THREADS, len(calls))):
        try:
            threading.Thread(target=work, name="veralith-judge-call", daemon=True).start()
        except RuntimeError:   # no new thread at interpreter shutdown: the calls left run here
            break
    work()
    # Every call is waited for, so a failure never leaves another one running unseen.
    return [f.result() for f in futures]


def _serial(client: JudgeClient, batch: Batch) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for task, payload in batch.calls:
        outcomes.append(_timed(client, task, payload))
        if batch.stop_at_failure and isinstance(outcomes[-1], Exception):
            break
    return outcomes


def _timed(client: JudgeClient, task: Task, payload: BaseModel) -> Outcome:
    try:
        return client.run(task, payload), time.perf_counter()
    except Exception as exc:
        return exc


async def arun_calls(client: JudgeClient, batch: Batch) -> list[Outcome]:
    """Every call of `batch` on the event loop: all at once for an I/O-bound client, else in turn."""
    if not client.concurrent:
        outcomes: list[Outcome] = []
        for task, payload in batch.calls:
            outcomes.append(await _atimed(client, task, payload))
            if batch.stop_at_failure and isinstance(outcomes[-1], Exception):
                break
        return outcomes
    return list(await asyncio.gather(*(_atimed(client, task, payload) for task, payload in batch.calls)))


async def _atimed(client: JudgeClient, task: Task, payload: BaseModel) -> Outcome:
    arun = getattr(client, "arun", None)
    try:
        if arun is not None:
            result: CallResult = await arun(task, payload)
        else:
            # A client without an async path (the local backend, a test fake) runs on a thread, in a copy
            # of this context (asyncio.to_thread copies it), so the loop keeps serving other traces.
            result = await asyncio.to_thread(client.run, task, payload)
        return result, time.perf_counter()
    except Exception as exc:
        return exc


def settled(outcomes: list[Outcome]) -> list[CallResult]:
    """The results of a batch that must succeed whole; else one of its errors is raised (a server that
    is down first: it ends the evaluation), carrying the usage of every call (spent, failed or not)."""
    from veralith.errors import JudgeServerDown
    from veralith.usage import CallUsage

    failures = [o for o in outcomes if isinstance(o, Exception)]
    if not failures:
        return [o[0] for o in outcomes if not isinstance(o, Exception)]
    raised = next((f for f in failures if isinstance(f, JudgeServerDown)), failures[0])
    spent = CallUsage()
    for outcome in outcomes:
        used: Any = outcome[0].usage if not isinstance(outcome, Exception) else getattr(outcome, "usage", None)
        if isinstance(used, CallUsage):
            spent.add(used)
    raised.usage = spent  # type: ignore[attr-defined]
    raise raised
