"""Veralith's exceptions, drawn once here.

    VeralithError
    ├── ConfigError (config.py; also a ValueError)        a setting is unusable; names the variable
    ├── InputError (also a ValueError)                    query/context/response of the wrong shape
    ├── JudgeCallError                                    one judge call failed after retries/re-ask;
    │                                                     caught by the pipeline and recorded as a JudgeError
    ├── BudgetExceeded (observability/cost.py)            estimated cost above the per-trace budget
    └── StoreError                                        the database cannot be used (e.g. newer than the code)

Wrong argument *types* raise the built-in TypeError, naming the argument.
"""

from __future__ import annotations

__all__ = ["InputError", "JudgeCallError", "StoreError", "VeralithError"]


class VeralithError(Exception):
    """Base of every error Veralith raises on purpose."""


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


class StoreError(VeralithError):
    """The database cannot be used as it is."""
