"""LoopPool: many evaluations at once on one event loop, with a thread pool's interface.

`veralith eval`, `resume` (veralith.cli.batch.run_ordered) and `veralith worker`
(veralith.work.worker) hand their jobs to a pool and wait on its Futures from their own thread; with
VERALITH_ASYNC_CALLS the pool is this one, and each job is a coroutine (veralith.work.runner.Runner.arun).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["LoopPool"]


class LoopPool:
    """ThreadPoolExecutor's `submit` and `shutdown` for coroutines: one event loop on one thread runs
    up to `concurrency` of them at once, so N evaluations keep their judge requests in flight
    without a thread each (veralith.llm.client.OpenAIClient.arun).

    A job waits for one of the `concurrency` places before it starts, and until then its Future can
    be cancelled, exactly as a thread pool's queued work: so Ctrl-C leaves the jobs that never
    started pending (run_ordered). Each job runs in a copy of the submitting thread's contextvars.
    """

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.loop = asyncio.new_event_loop()
        self._places: asyncio.Semaphore | None = None
        self._futures: set[Future[Any]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread = threading.Thread(target=self.loop.run_forever, name="veralith-eval-loop", daemon=True)
        self._thread.start()

    def submit(self, work: Callable[..., Awaitable[Any]], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)
        context = contextvars.copy_context()

        def start() -> None:
            # Made inside the submitter's context, so the task runs in (a copy of) it.
            task = context.run(self.loop.create_task, self._run(future, work, args))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self.loop.call_soon_threadsafe(start)
        return future

    async def _run(self, future: Future[Any], work: Callable[..., Awaitable[Any]], args: tuple[Any, ...]) -> None:
        if self._places is None:   # made on the loop that uses it
            self._places = asyncio.Semaphore(self.concurrency)
        async with self._places:
            if not future.set_running_or_notify_cancel():
                return   # cancelled before it started
            try:
                result = await work(*args)
            except BaseException as exc:   # handed to the waiting thread, as a thread pool would
                future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """As ThreadPoolExecutor.shutdown: `cancel_futures` cancels the jobs not started; `wait` waits for
        the running ones, then ends the loop (without `wait`, they are abandoned on its daemon thread)."""
        if cancel_futures:
            for future in list(self._futures):
                future.cancel()
        if not wait:
            return
        asyncio.run_coroutine_threadsafe(self._drain(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    async def _drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        # As asyncio.run does before it closes a loop: what holds connections open (the judge client's
        # HTTP sessions) closes with its async generators.
        await asyncio.get_running_loop().shutdown_asyncgens()
