"""@trace: wrap a RAG function; log its (query, context, response); hand the caller the response.

    @veralith.trace
    def answer(question): ...; return response, chunks          # or TraceReturn(response=, context=)

    @veralith.trace(query_arg="q", sync=False, on_error="warn", knowledge_base="docs")
    async def answer(user, q): ...

Telemetry is best-effort. The wrapped function's own exceptions propagate untouched, but a
failure of Veralith's (a return value it cannot read, invalid context, an exceeded budget, a
store error) is handled per `on_error`: "warn" (default) emits a TraceWarning, "ignore" stays
silent, "raise" raises it. When the return value is not a (response, context) pair, the caller
gets it back exactly as the function returned it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from veralith.sdk.log import log

__all__ = ["TraceExtractionError", "TraceReturn", "TraceWarning", "trace"]

F = TypeVar("F", bound=Callable[..., Any])
OnError = Literal["warn", "raise", "ignore"]
_ON_ERROR = ("warn", "raise", "ignore")


class TraceWarning(UserWarning):
    """@trace could not log a call; the wrapped function's result was still returned."""


@dataclass(frozen=True)
class TraceReturn:
    """What a traced function may return instead of a bare (response, context) tuple."""

    response: str
    context: Any


class TraceExtractionError(TypeError):
    """The return value is neither a (response, context) pair nor a TraceReturn."""


@overload
def trace(fn: F, /) -> F: ...
@overload
def trace(*, query_arg: str | None = None, sync: bool | None = None, on_error: OnError = "warn",
          knowledge_base: str = "default") -> Callable[[F], F]: ...


def trace(fn: Callable[..., Any] | None = None, /, *, query_arg: str | None = None, sync: bool | None = None,
          on_error: OnError = "warn", knowledge_base: str = "default") -> Any:
    """Decorate a sync or async RAG function, bare (`@trace`) or configured (`@trace(...)`).

    The query is the `query_arg` argument, else the first argument (after self/cls).
    """
    if on_error not in _ON_ERROR:
        raise ValueError(f"on_error must be one of {list(_ON_ERROR)}, got {on_error!r}")
    if query_arg is not None and not isinstance(query_arg, str):
        raise TypeError(f"query_arg must be a str or None, got {type(query_arg).__name__}")

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(func):
            raise TypeError(f"@trace decorates a function, got {type(func).__name__}")
        signature = inspect.signature(func)
        if query_arg is not None and query_arg not in signature.parameters:
            raise ValueError(f"query_arg {query_arg!r} is not a parameter of {func.__qualname__}")
        options: dict[str, Any] = dict(sync=sync, knowledge_base=knowledge_base)

        def record(args: tuple, kwargs: dict, value: Any) -> tuple[Any, Any]:
            """(what the caller gets, what to log or None)."""
            try:
                response, context = _extract(value)
            except TraceExtractionError as exc:
                _handle(on_error, exc, func)
                return value, None
            try:
                query = _query(signature, query_arg, args, kwargs)
            except TypeError as exc:
                _handle(on_error, exc, func)
                return response, None
            return response, (query, context, response)

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                value = await func(*args, **kwargs)
                out, item = record(args, kwargs, value)
                if item is not None:
                    try:  # off the event loop: a write may wait on the lock, sync mode evaluates
                        await asyncio.to_thread(log, *item, **options)
                    except Exception as exc:
                        _handle(on_error, exc, func)
                return out
            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            value = func(*args, **kwargs)
            out, item = record(args, kwargs, value)
            if item is not None:
                try:
                    log(*item, **options)
                except Exception as exc:
                    _handle(on_error, exc, func, stacklevel=3)
            return out
        return wrapper

    return decorate if fn is None else decorate(fn)


def _extract(value: Any) -> tuple[Any, Any]:
    if isinstance(value, TraceReturn):
        return value.response, value.context
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return value[0], value[1]
    raise TraceExtractionError(f"expected (response, context) or TraceReturn(response=..., context=...), "
                               f"got {type(value).__name__}; the value was passed through untouched")


def _query(signature: inspect.Signature, query_arg: str | None, args: tuple, kwargs: dict) -> Any:
    bound = signature.bind_partial(*args, **kwargs)
    if query_arg is not None:
        if query_arg not in bound.arguments:
            raise TypeError(f"query argument {query_arg!r} was not passed")
        return bound.arguments[query_arg]
    first = next((n for n in signature.parameters if n not in ("self", "cls")), None)
    if first is not None and first in bound.arguments:
        return bound.arguments[first]
    raise TypeError("no query: pass it as the first argument or name it with @trace(query_arg=...)")


def _handle(on_error: str, exc: BaseException, func: Callable[..., Any], stacklevel: int = 4) -> None:
    # stacklevel points the warning at the caller of the wrapped function.
    if on_error == "raise":
        raise exc
    if on_error == "warn":
        warnings.warn(f"veralith @trace on {func.__qualname__}: not logged ({type(exc).__name__}: {exc})",
                      TraceWarning, stacklevel=stacklevel)
