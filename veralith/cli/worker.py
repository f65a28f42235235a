"""`veralith worker`: a long-running evaluator of pending traces (fleet mode; veralith.sdk.worker)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Annotated, Any

import typer
from rich.console import Console

from veralith.cli.render import literal
from veralith.store import ops

__all__ = ["worker_command"]


def worker_command(
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", min=1, max=256, help="Traces judged at once (default: VERALITH_CONCURRENCY).",
        show_default=False)] = None,
    kb: Annotated[str | None, typer.Option("--kb", help="Only traces of this knowledge base.",
                                           show_default=False)] = None,
    once: Annotated[bool, typer.Option("--once", help="Judge what is waiting now, then exit.")] = False,
    every: Annotated[float, typer.Option("--every", min=1.0, help="Seconds between progress lines.")] = 10.0,
) -> None:
    """Judge pending traces, from any host, until stopped (SIGTERM or Ctrl-C: what is being judged
    finishes or goes back to pending, then exit 0).

    App servers that only record set VERALITH_EVALUATE=remote; any number of workers share the work
    (VERALITH_DB_URL names the store).
    """
    from veralith.config import ConfigError, settings
    from veralith.errors import StoreError
    from veralith.sdk.worker import run_worker
    from veralith.store import open_store

    err = Console(stderr=True, highlight=False)

    def say(line: str) -> None:
        err.print(literal(f"veralith worker: {line}"), soft_wrap=True)

    stop = threading.Event()
    interrupts = [0]

    def on_signal(signum: int, frame: Any) -> None:
        interrupts[0] += 1
        if interrupts[0] > 1:  # a second Ctrl-C: leave now; the leases die with the process
            os._exit(130)
        say("stopping: finishing what is being judged (a second Ctrl-C leaves at once)")
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        from veralith.llm import get_client

        workers = concurrency or settings.concurrency
        store = open_store()
        store.read(ops.stats)  # opens the store now: a store that cannot be used is one error line, no banner
        client = get_client()
        # What the first judge call would load is loaded before the line saying it is judging (start-up,
        # not judging: otherwise every thread's first trace waits for it).
        load = getattr(client, "load", None)
        if callable(load):
            load()
        say(f"judging the traces of {store.url}{f' (knowledge base {kb})' if kb else ''} with "
            f"{getattr(client, 'backend', '?')}/{getattr(client, 'model', '?')}, {workers} at a time"
            + ("" if once else "; SIGTERM or Ctrl-C stops"))
        totals = run_worker(store, concurrency=workers, stop=stop, knowledge_base=kb, once=once, client=client,
                            report=say, every_s=every, grace_s=settings.shutdown_timeout_s)
    except ConfigError as exc:
        err.print(literal(f"error: {exc}", "red"), soft_wrap=True)
        raise typer.Exit(2) from None
    except StoreError as exc:
        from veralith.config import redact_configured

        err.print(literal(f"error: {redact_configured(exc)}", "red"), soft_wrap=True)
        raise typer.Exit(2) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if totals.judge_down is not None:
        # A drain (--once) stops on a dead judge server as `eval` does: one line, the rest pending, exit 2.
        err.print(literal(f"error: {totals.judge_down}; stopped after {totals.judged:,} judged: the rest stay "
                          "pending, run `veralith worker --once` again once it answers", "red"), soft_wrap=True)
        _leave(2, totals.given_back)
    say(f"stopped: {totals.judged:,} judged, {totals.failed:,} failed"
        + (f", {totals.given_back} given back to pending" if totals.given_back else ""))
    _leave(0, totals.given_back)


def _leave(code: int, given_back: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if given_back:
        # Judge calls still running on worker threads cannot be interrupted; their traces are pending
        # again (another worker takes them), so the process leaves without waiting for those calls.
        os._exit(code)
    if code:
        raise typer.Exit(code)
