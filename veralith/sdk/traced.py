"""One call of a traced function: what it returned or streamed, where its query and context come
from, and what it is logged with. The decorator itself is veralith.sdk.trace.

A call is owned by the outermost Veralith scope (veralith.sdk.scope): the owner logs, an inner call
hands what it would log to the owner's collector (veralith.sdk.handoff). The owner's trace records
the call's duration and the retrieval and generation time inner loggers measured.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from veralith.sdk import handoff, scope

__all__ = ["Call", "Finder", "Stream", "TraceContext", "TraceExtractionError", "TraceReturn", "extract"]


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
    """The return value is neither a (response, context) pair nor a TraceReturn, and no context
    could be found for a bare response (`context_arg`, or what the call retrieved inside)."""


class Call:
    """One call of a traced function: its arguments, whether it owns the trace (the outermost
    Veralith scope), the collector of what is handed to the owner, and its clock."""

    def __init__(self, args: tuple, kwargs: dict, options: dict[str, Any]) -> None:
        self.args, self.kwargs, self.options = args, kwargs, options
        self.outermost: bool | None = None     # decided when the call's code first runs
        self.collector: handoff.Collector | None = None
        self.started = 0.0

    @contextlib.contextmanager
    def opened(self, owner: str) -> Iterator[None]:
        """Run the block in the call's scope; a generator opens it again around each resume."""
        with scope.enter(owner) as outermost:
            if self.outermost is None:
                self.outermost = outermost
                # The owner collects what inner loggers hand over; an inner call hands to the owner's.
                self.collector = handoff.Collector() if outermost else handoff.current()
                self.started = time.perf_counter()
            if self.outermost and self.collector is not None:
                with handoff.collecting(self.collector):
                    yield
            else:
                yield

    def finish(self, query: Any, context: Any, response: str) -> dict[str, Any] | None:
        """log() keywords for the owner; an inner call hands the trace it would log to the owner
        (its context and answer) and returns None."""
        if not self.outermost:
            if self.collector is not None and isinstance(context, (list, tuple)):
                self.collector.add(handoff.Handed(source="trace", context=list(context), answer=response,
                                                  query=query if isinstance(query, str) else None))
            return None
        latency = {"total": (time.perf_counter() - self.started) * 1000.0,
                   **(self.collector.timings() if self.collector is not None else {})}
        # The knowledge base and run the adapters inside were installed with, unless @trace names its own.
        handed = self.collector.options() if self.collector is not None else {}
        return {"query": query, "context": context, "response": response, **handed, **self.options,
                "latency_ms": latency}


class Finder:
    """Where a call's query comes from, and the context and answer of a bare response."""

    def __init__(self, signature: inspect.Signature, query_arg: str | None, context_arg: str | None,
                 reference_arg: str | None = None, reference_contexts_arg: str | None = None) -> None:
        self.signature, self.query_arg, self.context_arg = signature, query_arg, context_arg
        self.reference_args = (("reference", reference_arg), ("reference_contexts", reference_contexts_arg))

    def reference(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """log() keywords for the reference arguments that were passed (and not None)."""
        if not any(arg for _, arg in self.reference_args):
            return {}
        bound = self.signature.bind_partial(*args, **kwargs)
        return {key: bound.arguments[arg] for key, arg in self.reference_args
                if arg is not None and bound.arguments.get(arg) is not None}

    def query(self, args: tuple, kwargs: dict) -> Any:
        bound = self.signature.bind_partial(*args, **kwargs)
        if self.query_arg is not None:
            if self.query_arg not in bound.arguments:
                raise TypeError(f"query argument {self.query_arg!r} was not passed")
            return bound.arguments[self.query_arg]
        first = next((n for n in self.signature.parameters if n not in ("self", "cls")), None)
        if first is not None and first in bound.arguments:
            return bound.arguments[first]
        raise TypeError("no query: pass it as the first argument or name it with @trace(query_arg=...)")

    def inside(self, call: Call, value: Any, why: BaseException | None) -> tuple[str, Any]:
        """(response text, context) of a bare response `value` (None for a stream, whose text is its
        chunks): the context is the `context_arg` argument, else what the call retrieved inside;
        the text is `value` when it is text, else the answer an instrumented framework gave."""
        collector = call.collector
        if self.context_arg is not None:
            bound = self.signature.bind_partial(*call.args, **call.kwargs)
            if self.context_arg not in bound.arguments:
                raise TraceExtractionError(f"context argument {self.context_arg!r} was not passed")
            context = bound.arguments[self.context_arg]
        else:
            context = collector.context() if collector is not None else None
            if context is None:
                raise TraceExtractionError(
                    f"{why or 'no context'}; nothing was retrieved through an instrumented framework during the "
                    "call either (install an adapter, mark it with veralith.context(...), or name the argument "
                    "with @trace(context_arg=...))")
        if value is None or isinstance(value, str):
            return value or "", context
        answer = collector.answer() if collector is not None else None
        if answer is None:
            raise TraceExtractionError(f"got {type(value).__name__}, which is not text, and no instrumented framework "
                                       "answered during the call; return the response text or a (response, context) "
                                       "pair; the value was passed through untouched")
        return answer, context


class Stream:
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


def extract(value: Any) -> tuple[Any, Any]:
    if isinstance(value, TraceReturn):
        return value.response, value.context
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return value[0], value[1]
    raise TraceExtractionError(f"expected (response, context) or TraceReturn(response=..., context=...), "
                               f"got {type(value).__name__}; the value was passed through untouched")
