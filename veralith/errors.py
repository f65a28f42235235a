"""Veralith's exceptions, drawn once here.

    VeralithError
    ├── ConfigError (config.py; also a ValueError)        a setting is unusable; names the variable
    ├── InputError (also a ValueError)                    query/context/response of the wrong shape
    ├── JudgeCallError                                    one judge call failed after retries/re-ask;
    │   │                                                 caught by the pipeline and recorded as a JudgeError
    │   └── JudgeServerDown                               the judge server failed call after call (circuit
    │       │                                             breaker): NOT recorded per trace; it ends the trace's
    │       │                                             evaluation, which stays pending for a later resume
    │       └── JudgeCallCancelled                        the process is stopping (Ctrl-C, SIGTERM) and cancelled
    │                                                     its calls (veralith.llm.cancel): handled as a server
    │                                                     down (the trace goes back to pending), told apart by type
    ├── BudgetExceeded (observability/cost.py)            estimated cost above the per-trace budget
    └── StoreError                                        the database cannot be used (e.g. newer than the code)

Wrong argument *types* raise the built-in TypeError, naming the argument.

Warnings (the program goes on; something is worth a look):

    VeralithWarning (a UserWarning)
    ├── CostWarning (observability/pricing.py)            a price or a tokenizer is unknown
    ├── TraceWarning (sdk/trace.py)                       @trace could not log a call
    └── VeralithAdapterWarning (adapters/_common.py)      an adapter could not log a call

The `veralith` command shows each as one line, `warning: ...`, never with a file and source line.
"""

from __future__ import annotations

__all__ = ["InputError", "JudgeCallCancelled", "JudgeCallError", "JudgeServerDown", "StoreError", "VeralithError",
           "VeralithWarning"]


class VeralithError(Exception):
    """Base of every error Veralith raises on purpose."""


class VeralithWarning(UserWarning):
    """Base of every warning Veralith emits."""


class InputError(VeralithError, ValueError):
    """An argument has the right type but an unusable value."""


class JudgeCallError(VeralithError):
    """A judge call failed for good. `kind` is one of the JudgeError kinds."""

    def __init__(self, kind: str, message: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.attempts = attempts
        # Tokens a failed call still consumed (an llm.base.CallUsage, set by the client); they are
        # billed, so the result's usage counts them too.
        self.usage: object | None = None


class JudgeServerDown(JudgeCallError):
    """The judge server has failed several calls in a row (connection refused or reset, timeouts, 5xx):
    calling it again now only burns time, so the client stops calling it for `retry_after_s`.

    `server` is its base URL with any user info masked (veralith.redact). Raised by the judge client
    for the call that found the server down and for every call while it stays down; the pipeline lets
    it through instead of recording a judge error, so the trace is not stored as judged. Callers:
    `veralith eval` stops and leaves the rest pending; a background worker waits `retry_after_s`
    before its next trace.
    """

    def __init__(self, server: str, reason: str, *, retry_after_s: float, attempts: int = 0) -> None:
        super().__init__("server_down", f"the judge server at {server} is down: {reason}", attempts=attempts)
        self.server = server
        self.reason = reason
        self.retry_after_s = retry_after_s


class JudgeCallCancelled(JudgeServerDown):
    """A judge call was cancelled because the process is stopping (veralith.llm.cancel.cancel_calls):
    its request was closed, so a server that honours a closed connection stops generating it.

    A JudgeServerDown as far as the pipeline and the store are concerned (nothing was judged: the trace
    is handed back as pending, never recorded as failed); a run loop tells it apart by its type, to count
    the trace as left pending rather than report a server that is down."""

    def __init__(self) -> None:
        super().__init__("-", "cancelled", retry_after_s=0.0)
        self.kind = "cancelled"
        self.message = "the judge call was cancelled: the process is stopping"
        self.args = (self.message,)


class StoreError(VeralithError):
    """The database cannot be used as it is."""
