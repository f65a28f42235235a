"""Failed requests: what kind of failure, whether to retry, how long to wait, and a deadline per request.

The rules are the OpenAI SDK's own: 408, 409, 429, 5xx, timeouts and connection errors are retried,
waiting Retry-After (or retry-after-ms) when the server gives one under a minute, else
0.5 s x 2^n (at most 8 s) less up to 25 % jitter; `x-should-retry` is obeyed. `within` bounds a
whole request, however slowly its reply trickles in (the SDK's timeout bounds each read only).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai

from veralith.errors import JudgeCallCancelled
from veralith.llm import cancel, sockets

__all__ = ["DeadlinePassed", "awithin", "delay", "kind", "retryable", "short", "within"]

_RETRY_STATUS = frozenset({408, 409, 429})


class DeadlinePassed(Exception):
    """The request did not finish within its deadline (`seconds`)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no complete reply within {seconds:g} s")
        self.seconds = seconds


def within(seconds: float, call: Callable[[], Any], *, release: Callable[[], None] | None,
           name: str = "veralith-judge-call") -> Any:
    """Run `call` and return its result, or raise DeadlinePassed after `seconds` (JudgeCallCancelled
    as soon as the process cancels its calls: veralith.llm.cancel); `release` runs when the call has
    ended (so a server slot is held for as long as the server works on the request).

    The call runs on a daemon thread, so it never delays interpreter exit. When the caller gives up
    (deadline or cancellation) the connection the thread reads from is shut down
    (veralith.llm.sockets.abort): the thread ends, and the server sees the client go.
    """
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        box["thread"] = threading.get_ident()
        try:
            box["value"] = call()
        except BaseException as exc:   # handed to the caller's thread
            box["error"] = exc
        finally:
            if release is not None:
                release()
            done.set()

    if cancel.cancelled():   # never sent: the slot is given back at once
        if release is not None:
            release()
        raise JudgeCallCancelled()
    try:
        threading.Thread(target=run, name=name, daemon=True).start()
    except RuntimeError:   # interpreter shutdown (the at-exit drain, Python 3.12+): no new threads
        run()              # the SDK's per-read timeout still applies; the drain has its own deadline
    with cancel.on_cancel(done.set):
        finished = done.wait(seconds)
    if not finished or (cancel.cancelled() and "value" not in box):
        sockets.abort(box.get("thread"))
        if cancel.cancelled():
            raise JudgeCallCancelled()
        raise DeadlinePassed(seconds)
    if "error" in box:
        raise box["error"]
    return box["value"]


async def awithin(seconds: float, call: Awaitable[Any]) -> Any:
    """`within` on the event loop: await `call`, or cancel it (closing its connection) and raise
    DeadlinePassed after `seconds`, JudgeCallCancelled as soon as the process cancels its calls."""
    if cancel.cancelled():
        if asyncio.iscoroutine(call):
            call.close()   # never sent: nothing to await
        raise JudgeCallCancelled()
    loop = asyncio.get_running_loop()
    request = asyncio.ensure_future(call)
    stop: asyncio.Future[None] = loop.create_future()

    def stopped() -> None:
        if not stop.done():
            stop.set_result(None)

    def wake() -> None:   # on the cancelling thread
        with contextlib.suppress(RuntimeError):   # the loop has closed
            loop.call_soon_threadsafe(stopped)

    try:
        with cancel.on_cancel(wake):
            await asyncio.wait((request, stop), timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not request.done():
            request.cancel()   # closes its connection
            with contextlib.suppress(BaseException):
                await request
    succeeded = request.done() and not request.cancelled() and request.exception() is None
    if (stop.done() or cancel.cancelled()) and not succeeded:
        raise JudgeCallCancelled()
    stop.cancel()
    if request.cancelled():
        raise DeadlinePassed(seconds)
    return request.result()


def kind(exc: Exception) -> str:
    if isinstance(exc, (DeadlinePassed, openai.APITimeoutError)):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limited"
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return "auth"
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status >= 500:
        return "server_error"
    if status == 408:
        return "timeout"
    return "bad_request" if isinstance(status, int) else "connection"


def retryable(exc: Exception) -> bool:
    if isinstance(exc, (DeadlinePassed, openai.APITimeoutError, openai.APIConnectionError)):
        return True
    if not isinstance(exc, openai.APIStatusError):
        return False
    should = exc.response.headers.get("x-should-retry")
    if should in ("true", "false"):
        return should == "true"
    return exc.status_code in _RETRY_STATUS or exc.status_code >= 500


def delay(exc: Exception, retries: int) -> float:
    """Seconds to wait before retry number `retries + 1` (the SDK's rule; see the module doc)."""
    headers = exc.response.headers if isinstance(exc, openai.APIStatusError) else {}
    wait: float | None = None
    try:
        if headers.get("retry-after-ms"):
            wait = float(headers["retry-after-ms"]) / 1000
        elif headers.get("retry-after"):
            value = headers["retry-after"]
            try:
                wait = float(value)
            except ValueError:
                when = email.utils.parsedate_to_datetime(value)
                wait = when.timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        wait = None
    if wait is not None and 0 <= wait <= 60:
        return wait
    return min(0.5 * 2 ** retries, 8.0) * (1 - 0.25 * random.random())


def short(exc: Exception, timeout_s: float) -> str:
    if isinstance(exc, (DeadlinePassed, openai.APITimeoutError)):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, openai.APIConnectionError):
        return "connection failed"
    return f"HTTP {getattr(exc, 'status_code', '?')}"
