"""`veralith worker`'s loop with the configured judge: veralith.work.worker with the pipeline and a
judge client (the work layer judges with whatever it is given; the SDK gives it the pipeline)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from veralith.work.worker import WorkerReport, progress_line, run

if TYPE_CHECKING:
    from veralith.store.protocol import Store

__all__ = ["WorkerReport", "progress_line", "run_worker"]


def run_worker(store: Store, *, concurrency: int, stop: threading.Event, knowledge_base: str | None = None,
               once: bool = False, client: Any = None, report: Callable[[str], None] | None = None,
               every_s: float = 10.0, poll_s: float = 1.0, grace_s: float = 10.0,
               totals: WorkerReport | None = None) -> WorkerReport:
    """Judge pending traces of `store` with `client` (default: the configured judge), `concurrency` at
    a time, until `stop` is set (veralith.work.worker.run); the totals."""
    from veralith.config import settings
    from veralith.llm.cancel import allow_calls, cancel_calls
    from veralith.pipeline.evaluate import TraceJudge

    if client is None:
        from veralith.llm import get_client

        client = get_client()
    allow_calls()   # whatever an earlier run in this process cancelled
    return run(store, TraceJudge(client), concurrency=concurrency, stop=stop, knowledge_base=knowledge_base,
               once=once, report=report, every_s=every_s, poll_s=poll_s, grace_s=grace_s,
               async_calls=settings.async_calls, cancel=cancel_calls, totals=totals)
