"""Cancelling the judge calls in flight, for a process that is stopping (Ctrl-C, SIGTERM).

`cancel_calls()` is the hook a run loop calls when it is told to stop. From then on every judge call
of the process raises veralith.errors.JudgeCallCancelled: a call waiting for a reply within a
fraction of a second, its request closed (veralith.llm.retry: the sync path shuts the connection its
thread reads from, the async path cancels the request's task), and any later call at once, until
`allow_calls()`. Calls waiting for a server slot or backing off before a retry give up too. The
cancellation is process-wide: stopping means every judge call, whichever thread or loop made it.

A caller tells a cancelled call apart by its type; to the pipeline and the store it is a
JudgeServerDown (nothing was judged, the trace goes back to pending).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from veralith.errors import JudgeCallCancelled

__all__ = ["allow_calls", "cancel_calls", "cancelled", "check", "on_cancel", "pause"]

_cancelled = threading.Event()
_wakers: set[Callable[[], None]] = set()
_lock = threading.Lock()


def cancel_calls() -> None:
    """Cancel every judge call in flight and refuse new ones (see the module doc). Thread-safe, cheap,
    safe to call from a signal handler's thread; returns at once (the calls end on their own threads)."""
    _cancelled.set()
    with _lock:
        wakers = list(_wakers)
    for wake in wakers:
        wake()


def allow_calls() -> None:
    """Let judge calls run again (a run that starts after a cancelled one)."""
    _cancelled.clear()


def cancelled() -> bool:
    return _cancelled.is_set()


def check() -> None:
    """Raise JudgeCallCancelled when calls are cancelled."""
    if _cancelled.is_set():
        raise JudgeCallCancelled()


@contextlib.contextmanager
def on_cancel(wake: Callable[[], None]) -> Iterator[None]:
    """Within the block, `wake()` runs (on the cancelling thread) when calls are cancelled; at once
    when they already are. `wake` must be quick and must not raise."""
    with _lock:
        _wakers.add(wake)
    try:
        if _cancelled.is_set():
            wake()
        yield
    finally:
        with _lock:
            _wakers.discard(wake)


def pause(seconds: float) -> None:
    """Sleep `seconds` (a retry's backoff), or raise JudgeCallCancelled as soon as calls are cancelled."""
    if _cancelled.wait(seconds):
        raise JudgeCallCancelled()
