"""@trace: wrap a RAG function; log its (query, context, response); hand the caller the response.

    @veralith.trace
    def answer(question): ...; return response, chunks          # or TraceReturn(response=, context=)

    @veralith.trace(query_arg="q", sync=False, on_error="warn", knowledge_base="docs")
    async def answer(user, q): ...

    @veralith.trace                                              # a streamed answer
    def answer(question): ...; yield TraceContext(chunks); yield from tokens

    @veralith.trace(context_arg="docs")                          # generate(question, docs)-shaped code
    def generate(question, docs): ...; return response

    @veralith.trace                                              # context from inside the call
    def answer(question): return chain.invoke(question)          # the LangChain/LlamaIndex adapter saw it

Telemetry is best-effort. The wrapped function's own exceptions propagate untouched, but a
failure of Veralith's (a return value it cannot read, invalid context, an exceeded budget, a
store error) is handled per `on_error`: "warn" (default) emits a TraceWarning, "ignore" stays
silent, "raise" raises it. When the return value is not a (response, context) pair, the caller
gets it back exactly as the function returned it.

One call, one trace: a traced function called inside another traced function, a LangChain chain
or LlamaIndex query the adapters would log, or a completion of a wrapped OpenAI client, runs inside
the outermost one's scope (veralith.sdk.scope) and logs nothing itself; only the outermost logger
logs. What those inner loggers saw (chunks retrieved, their answer, their timings) is handed to it
(veralith.sdk.handoff), so a function that returns a bare response is logged with the context its
call retrieved. Every trace records the call's own duration (`latency_ms`: the whole call, and
the retrieval and generation time the inner loggers measured).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal, TypeVar, overload

from veralith.errors import VeralithWarning
from veralith.sdk.log import log
from veralith.sdk.traced import Call, Finder, Stream, TraceContext, TraceExtractionError, TraceReturn, extract

__all__ = ["TraceContext", "TraceExtractionError", "TraceReturn", "TraceWarning", "trace"]

F = TypeVar("F", bound=Callable[..., Any])
OnError = Literal["warn", "raise", "ignore"]
_ON_ERROR = ("warn", "raise", "ignore")


class TraceWarning(VeralithWarning):
    """@trace could not log a call; the wrapped function's result was still returned."""


@overload
def trace(fn: F, /) -> F: ...
@overload
def trace(*, query_arg: str | None = None, context_arg: str | None = None, sync: bool | None = None,
          on_error: OnError = "warn", knowledge_base: str | None = None,
          run: str | None = None, reference_arg: str | None = None,
          reference_contexts_arg: str | None = None) -> Callable[[F], F]: ...


def trace(fn: Callable[..., Any] | None = None, /, *, query_arg: str | None = None, context_arg: str | None = None,
          sync: bool | None = None, on_error: OnError = "warn", knowledge_base: str | None = None,
          run: str | None = None, reference_arg: str | None = None,
          reference_contexts_arg: str | None = None) -> Any:
    """Decorate a sync or async RAG function or generator, bare (`@trace`) or configured (`@trace(...)`).

    The query is the `query_arg` argument, else the first argument (after self/cls). A function
    returns (response, context) or a TraceReturn, or a bare response: then the context is the
    `context_arg` argument, else what its call retrieved through an instrumented framework or
    marked with `veralith.context(...)` (veralith.sdk.handoff); a bare response that is not text
    (a LlamaIndex Response, a LangChain message) is logged as the answer the framework gave. A
    generator yields its response as `str` chunks and a `TraceContext(context)` once (or takes its
    context the same way as a bare response), and is logged once, when the consumer is done with
    it: the joined chunks when it is exhausted, or what was streamed with
    `metadata={"partial": True}` when the consumer stops early. `knowledge_base` and `run` say
    where the traces go (passed on to log()); left unset, each trace takes those of the adapter
    whose call it hands over (its install() or wrap() options), else log()'s defaults ("default",
    VERALITH_RUN). The call's duration goes to log() as `latency_ms`. `reference_arg` and
    `reference_contexts_arg` name arguments that carry the team's reference answer and expected chunks
    (an evaluation harness passing a golden set's `expected_output`): they go to log() as `reference`
    and `reference_contexts` when passed (None or absent: no reference).
    """
    if on_error not in _ON_ERROR:
        raise ValueError(f"on_error must be one of {list(_ON_ERROR)}, got {on_error!r}")
    arg_names = (("query_arg", query_arg), ("context_arg", context_arg), ("reference_arg", reference_arg),
                 ("reference_contexts_arg", reference_contexts_arg))
    for name, value in (*arg_names, ("knowledge_base", knowledge_base), ("run", run)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(func):
            raise TypeError(f"@trace decorates a function, got {type(func).__name__}")
        signature = inspect.signature(func)
        for name, value in arg_names:
            if value is not None and value not in signature.parameters:
                raise ValueError(f"{name} {value!r} is not a parameter of {func.__qualname__}")
        options: dict[str, Any] = dict(sync=sync)
        # Only when given: otherwise an adapter's options (what its call handed over) or log()'s defaults apply.
        options.update({name: value for name, value in (("knowledge_base", knowledge_base), ("run", run))
                        if value is not None})
        owner = f"trace:{func.__qualname__}"
        find = Finder(signature, query_arg, context_arg, reference_arg, reference_contexts_arg)

        def record(call: Call, value: Any) -> tuple[Any, dict[str, Any] | None]:
            """(what the caller gets, log() keywords or None). A call that is not the outermost
            hands what it would log to the outermost one instead."""
            try:
                response, context = extract(value)
                out = response
            except TraceExtractionError as exc:
                out = value
                try:
                    response, context = find.inside(call, value, exc)
                except TraceExtractionError as missing:
                    if call.outermost:
                        _handle(on_error, missing, func)
                    return out, None
            try:
                query = find.query(call.args, call.kwargs)
            except TypeError as exc:
                _handle(on_error, exc, func)
                return out, None
            # A str subclass (LangChain's TextAccessor) is logged as the plain text it holds.
            item = call.finish(query, context, str.__str__(response))
            return out, None if item is None else {**item, **find.reference(call.args, call.kwargs)}

        def stream_item(call: Call, stream: Stream) -> dict[str, Any] | None:
            """What to log for a finished or abandoned stream, or None (after handling why not)."""
            problem: str | None
            if stream.bad_chunk is not None:
                problem = f"yielded a {stream.bad_chunk}, not text; only str chunks can be joined into a response"
            elif not stream.has_context:
                with contextlib.suppress(TraceExtractionError):
                    stream.context, stream.has_context = find.inside(call, None, None)[1], True
                problem = None if stream.has_context else (
                    "yielded no TraceContext(context)" if stream.finished else
                    f"was stopped by its consumer after {len(stream.chunks)} chunk(s), before it "
                    "yielded its TraceContext(context)")
            else:
                problem = None
            if problem is not None:
                if call.outermost:
                    _handle(on_error, TraceExtractionError(f"the stream {problem}; not logged"), func, stacklevel=5)
                return None
            try:
                query = find.query(call.args, call.kwargs)
            except TypeError as exc:
                _handle(on_error, exc, func, stacklevel=5)
                return None
            item = call.finish(query, stream.context, "".join(stream.chunks))
            if item is not None:
                item.update(find.reference(call.args, call.kwargs))
            if item is not None and not stream.finished:
                item["metadata"] = {"partial": True}
            return item

        if inspect.isasyncgenfunction(func):
            @functools.wraps(func)
            async def async_gen_wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                source, stream, call = func(*args, **kwargs), Stream(), Call(args, kwargs, options)
                try:
                    while True:
                        # The scope is open only while the generator's own code runs, not while
                        # the consumer holds a chunk: the consumer's other calls are not ours.
                        with call.opened(owner):
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
                    item = None if stream.raised or call.outermost is None else stream_item(call, stream)
                    if item is not None:
                        try:
                            await asyncio.to_thread(functools.partial(log, **item))
                        except Exception as exc:
                            _handle(on_error, exc, func)
            return async_gen_wrapper

        if inspect.isgeneratorfunction(func):
            @functools.wraps(func)
            def gen_wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
                source, stream, call = func(*args, **kwargs), Stream(), Call(args, kwargs, options)
                try:
                    while True:
                        with call.opened(owner):  # see async_gen_wrapper
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
                    item = None if stream.raised or call.outermost is None else stream_item(call, stream)
                    if item is not None:
                        try:
                            log(**item)
                        except Exception as exc:
                            _handle(on_error, exc, func)
            return gen_wrapper

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                call = Call(args, kwargs, options)
                with call.opened(owner):
                    value = await func(*args, **kwargs)
                out, item = record(call, value)
                if item is not None:
                    try:  # off the event loop: a write may wait on the lock, sync mode evaluates
                        await asyncio.to_thread(functools.partial(log, **item))
                    except Exception as exc:
                        _handle(on_error, exc, func)
                return out
            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            call = Call(args, kwargs, options)
            with call.opened(owner):
                value = func(*args, **kwargs)
            out, item = record(call, value)
            if item is not None:
                try:
                    log(**item)
                except Exception as exc:
                    _handle(on_error, exc, func, stacklevel=3)
            return out
        return wrapper

    return decorate if fn is None else decorate(fn)


def _handle(on_error: str, exc: BaseException, func: Callable[..., Any], stacklevel: int = 4) -> None:
    # stacklevel points the warning at the caller of the wrapped function.
    if on_error == "raise":
        raise exc
    if on_error == "warn":
        warnings.warn(f"veralith @trace on {func.__qualname__}: not logged ({type(exc).__name__}: {exc})",
                      TraceWarning, stacklevel=stacklevel)
