"""@trace: wrap a RAG function; log its (query, context, response); hand the caller the response.

    @veralith.trace
    def answer(question): ...; return response, chunks          # or TraceReturn(response=, context=)

    @veralith.trace(query_arg="q", sync=False, on_error="warn", knowledge_base="docs")
    async def answer(user, q): ...

    @veralith.trace                                              # a streamed answer
    def answer(question): ...; yield TraceContext(chunks); yield from tokens

Telemetry is best-effort. The wrapped function's own exceptions propagate untouched, but a
failure of Veralith's (a return value it cannot read, invalid context, an exceeded budget, a
store error) is handled per `on_error`: "warn" (default) emits a TraceWarning, "ignore" stays
silent, "raise" raises it. When the return value is not a (response, context) pair, the caller
gets it back exactly as the function returned it.

One call, one trace: a traced function called inside another traced function, or a LangChain
chain the adapter would log, runs inside the outermost one's scope (veralith.sdk.scope) and logs
nothing itself; only the outermost logger logs.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from veralith.sdk import scope
from veralith.sdk.log import log

__all__ = ["TraceContext", "TraceExtractionError", "TraceReturn", "TraceWarning", "trace"]

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


@dataclass(frozen=True)
class TraceContext:
    """Yielded once by a traced generator, anywhere in its stream, to name the answer's context.

    The wrapper takes it out of the stream: the consumer sees only the text chunks.
    """

    context: Any


class TraceExtractionError(TypeError):
    """The return value is neither a (response, context) pair nor a TraceReturn."""


@overload
def trace(fn: F, /) -> F: ...
@overload
def trace(*, query_arg: str | None = None, sync: bool | None = None, on_error: OnError = "warn",
          knowledge_base: str = "default", run: str | None = None) -> Callable[[F], F]: ...


def trace(fn: Callable[..., Any] | None = None, /, *, query_arg: str | None = None, sync: bool | None = None,
          on_error: OnError = "warn", knowledge_base: str = "default", run: str | None = None) -> Any:
    """Decorate a sync or async RAG function or generator, bare (`@trace`) or configured (`@trace(...)`).

    The query is the `query_arg` argument, else the first argument (after self/cls). A function
    returns (response, context) or a TraceReturn; a generator yields its response as `str` chunks
    and a `TraceContext(context)` once, and is logged once, when the consumer is done with it: the
    joined chunks when it is exhausted, or what was streamed with `metadata={"partial": True}` when
    the consumer stops early. `run` names the run the traces belong to (passed on to log()).
    """
    if on_error not in _ON_ERROR:
        raise ValueError(f"on_error must be one of {list(_ON_ERROR)}, got {on_error!r}")
    if query_arg is not None and not isinstance(query_arg, str):
        raise TypeError(f"query_arg must be a str or None, got {type(query_arg).__name__}")
    if run is not None and not isinstance(run, str):
        raise TypeError(f"run must be a str or None, got {type(run).__name__}")

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(func):
            raise TypeError(f"@trace decorates a function, got {type(func).__name__}")
        signature = inspect.signature(func)
        if query_arg is not None and query_arg not in signature.parameters:
            raise ValueError(f"query_arg {query_arg!r} is not a parameter of {func.__qualname__}")
        options: dict[str, Any] = dict(sync=sync, knowledge_base=knowledge_base)
        if run is not None:  # only when given, so log()'s own default applies otherwise
            options["run"] = run
        owner = f"trace:{func.__qualname__}"

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
            # A str subclass (LangChain's TextAccessor) is logged as the plain text it holds.
            return response, (query, context, str.__str__(response))

        def stream_item(args: tuple, kwargs: dict, stream: _Stream) -> tuple[Any, dict[str, Any]] | None:
            """What to log for a finished or abandoned stream, or None (after handling why not)."""
            if stream.bad_chunk is not None:
                problem = f"yielded a {stream.bad_chunk}, not text; only str chunks can be joined into a response"
            elif not stream.has_context:
                problem = ("yielded no TraceContext(context)" if stream.finished else
                           f"was stopped by its consumer after {len(stream.chunks)} chunk(s), before it "
                           "yielded its TraceContext(context)")
            else:
                problem = None
            if problem is not None:
                _handle(on_error, TraceExtractionError(f"the stream {problem}; not logged"), func, stacklevel=5)
                return None
            try:
                query = _query(signature, query_arg, args, kwargs)
            except TypeError as exc:
                _handle(on_error, exc, func, stacklevel=5)
                return None
            extra = {} if stream.finished else {"metadata": {"partial": True}}
            return (query, stream.context, "".join(stream.chunks)), extra

        if inspect.isasyncgenfunction(func):
            @functools.wraps(func)
            async def async_gen_wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                source, stream = func(*args, **kwargs), _Stream()
                outermost: bool | None = None
                try:
                    while True:
                        # The scope is open only while the generator's own code runs, not while
                        # the consumer holds a chunk: the consumer's other calls are not ours.
                        with scope.enter(owner) as opened:
                            outermost = opened if outermost is None else outermost
                            try:
                                chunk = await source.__anext__()
                            except StopAsyncIteration:
                                stream.finished = True
                                break
                        if stream.take(chunk):
                            yield chunk
                except GeneratorExit:  # the consumer stopped early: close(), aclose() or garbage collection
                    raise
                except BaseException:  # the generator failed (or something thrown into it): nothing to log
                    stream.raised = True
                    raise
                finally:
                    await source.aclose()
                    if outermost and not stream.raised:
                        item = stream_item(args, kwargs, stream)
                        if item is not None:
                            try:
                                await asyncio.to_thread(functools.partial(log, *item[0], **{**options, **item[1]}))
                            except Exception as exc:
                                _handle(on_error, exc, func)
            return async_gen_wrapper

        if inspect.isgeneratorfunction(func):
            @functools.wraps(func)
            def gen_wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
                source, stream = func(*args, **kwargs), _Stream()
                outermost: bool | None = None
                try:
                    while True:
                        with scope.enter(owner) as opened:  # see async_gen_wrapper
                            outermost = opened if outermost is None else outermost
                            try:
                                chunk = next(source)
                            except StopIteration:
                                stream.finished = True
                                break
                        if stream.take(chunk):
                            yield chunk
                except GeneratorExit:  # the consumer stopped early: close(), aclose() or garbage collection
                    raise
                except BaseException:  # the generator failed (or something thrown into it): nothing to log
                    stream.raised = True
                    raise
                finally:
                    source.close()
                    if outermost and not stream.raised:
                        item = stream_item(args, kwargs, stream)
                        if item is not None:
                            try:
                                log(*item[0], **{**options, **item[1]})
                            except Exception as exc:
                                _handle(on_error, exc, func)
            return gen_wrapper

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with scope.enter(owner) as outermost:
                    value = await func(*args, **kwargs)
                out, item = record(args, kwargs, value)
                if item is not None and outermost:
                    try:  # off the event loop: a write may wait on the lock, sync mode evaluates
                        await asyncio.to_thread(log, *item, **options)
                    except Exception as exc:
                        _handle(on_error, exc, func)
                return out
            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with scope.enter(owner) as outermost:
                value = func(*args, **kwargs)
            out, item = record(args, kwargs, value)
            if item is not None and outermost:
                try:
                    log(*item, **options)
                except Exception as exc:
                    _handle(on_error, exc, func, stacklevel=3)
            return out
        return wrapper

    return decorate if fn is None else decorate(fn)


class _Stream:
    """What a traced generator has produced so far."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.context: Any = None
        self.has_context = False
        self.bad_chunk: str | None = None   # the type of the first chunk that is not text
        self.finished = False               # the generator was exhausted
        self.raised = False                 # the generator itself raised: nothing to log

    def take(self, chunk: Any) -> bool:
        """Record a chunk; False for the TraceContext marker, which the consumer does not see."""
        if isinstance(chunk, TraceContext):
            self.context, self.has_context = chunk.context, True
            return False
        if isinstance(chunk, str):
            self.chunks.append(str.__str__(chunk))
        elif self.bad_chunk is None:
            self.bad_chunk = type(chunk).__name__
        return True


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
