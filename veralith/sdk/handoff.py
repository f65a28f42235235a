"""Context from inside a call: what instrumented frameworks retrieved, and what the app marks.

Two things live here, each in a ContextVar, so they follow a call into the asyncio tasks it creates
and into threads started with a copy of its context, and never leak into unrelated calls:

- The collector of the outermost `@veralith.trace` call. An adapter that sees a call it would log
  (a LangChain chain, a LlamaIndex query, a wrapped OpenAI completion) inside a traced call stands
  down, because one user call makes one trace (veralith.sdk.scope), and hands over what it saw
  instead: the chunks retrieved, its answer, its timings. A traced function that returns a bare
  response is then logged with that context.
- The context the app marks, `with veralith.context(chunks):` — the retrieved context of what
  runs in the block. A wrapped OpenAI client logs a completion made there with it; inside a
  traced call the marked chunks go to the collector too.

    with handoff.collecting() as collector:     # @trace, around the outermost call
        ...                                     # adapters: handoff.current().add(Handed(...))
    collector.context(), collector.answer(), collector.timings()
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from veralith.models import ContextChunk

__all__ = ["Collector", "Handed", "Marked", "as_dicts", "collecting", "context", "current", "marked",
           "unique_ids"]


@dataclass(frozen=True)
class Handed:
    """What one instrumented call inside a traced call saw."""

    source: str                          # "langchain", "llamaindex", "openai", "context", "trace"
    context: list[Any]                   # chunks, in any form normalize_context accepts
    answer: str | None = None            # the text it answered with, when it answered
    query: str | None = None             # the question it was given, when it says
    retrieval_ms: float | None = None    # time it spent retrieving
    generation_ms: float | None = None   # time it spent in model calls
    knowledge_base: str | None = None    # what it would have logged the trace under (an adapter's install())
    run: str | None = None               # ... and the run it would have logged it in


class Collector:
    """Everything handed over during one traced call, in the order it arrived. Thread-safe."""

    def __init__(self) -> None:
        self._items: list[Handed] = []
        self._lock = threading.Lock()

    def add(self, item: Handed) -> None:
        with self._lock:
            self._items.append(item)

    @property
    def items(self) -> list[Handed]:
        with self._lock:
            return list(self._items)

    def context(self) -> list[dict[str, Any]] | None:
        """The chunks handed over, merged in arrival order as context dicts, a text seen twice (the
        same chunk marked by the app and read by an adapter, or found by two retrievers) kept once,
        as first handed over; None when nothing was handed over. Ids are kept only when they stay
        unique across the merge, else Veralith numbers the chunks. A chunk that cannot be read is
        left out (the adapters hand over only what they read themselves)."""
        items = self.items
        if not items:
            return None
        merged: list[dict[str, Any]] = []
        seen: set[str] = set()
        for item in items:
            for fields in as_dicts(item.context):
                if fields["text"] not in seen:
                    seen.add(fields["text"])
                    merged.append(fields)
        return unique_ids(merged)

    def answer(self) -> str | None:
        """The last answer handed over (the one the traced call most likely returned)."""
        return next((item.answer for item in reversed(self.items) if item.answer is not None), None)

    def options(self) -> dict[str, str]:
        """The knowledge base and run an instrumented framework would have logged the trace under (its
        adapter's install(knowledge_base=..., run=...)), the first handed over of each; empty when no
        adapter said."""
        out: dict[str, str] = {}
        for item in self.items:
            for name, value in (("knowledge_base", item.knowledge_base), ("run", item.run)):
                if value is not None:
                    out.setdefault(name, value)
        return out

    def timings(self) -> dict[str, float]:
        """Retrieval and generation time summed over what was handed over (parts nobody measured are
        left out)."""
        out: dict[str, float] = {}
        for item in self.items:
            for part, ms in (("retrieval", item.retrieval_ms), ("generation", item.generation_ms)):
                if ms is not None:
                    out[part] = out.get(part, 0.0) + ms
        return out


def as_dicts(chunks: list[Any]) -> list[dict[str, Any]]:
    """Chunks in any form normalize_context accepts, as context dicts holding only what was given
    (no id where none was given); a chunk that cannot be read is left out."""
    from veralith.pipeline.inputs import chunk_fields

    out = []
    for i, chunk in enumerate(chunks):
        try:
            fields = chunk_fields(i, chunk)
        except (TypeError, ValueError):
            continue
        out.append({k: v for k, v in fields.items() if v is not None and v != {}})
    return out


def unique_ids(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Context dicts gathered from several places keep their ids only when every chunk has one and
    no two share it; otherwise the ids are dropped (in place) and Veralith numbers the chunks."""
    ids = [chunk.get("id") for chunk in chunks]
    if None in ids or len(set(ids)) != len(ids):
        for chunk in chunks:
            chunk.pop("id", None)
    return chunks


_collector: contextvars.ContextVar[Collector | None] = contextvars.ContextVar("veralith_collector", default=None)


def current() -> Collector | None:
    """The collector of the traced call this code runs in, or None outside every traced call."""
    return _collector.get()


@contextlib.contextmanager
def collecting(collector: Collector | None = None) -> Iterator[Collector]:
    """Make `collector` (a new one by default) the current one for the block."""
    found = Collector() if collector is None else collector
    token = _collector.set(found)
    try:
        yield found
    finally:
        _collector.reset(token)


@dataclass(frozen=True)
class Marked:
    """The context the app marked for a block (`veralith.context`)."""

    chunks: list[ContextChunk]           # normalised
    query: str | None = None
    given: list[Any] = field(default_factory=list)   # as the app gave them (ids only where it gave one)


_marked: contextvars.ContextVar[Marked | None] = contextvars.ContextVar("veralith_marked_context", default=None)


def marked() -> Marked | None:
    """The context marked by the innermost `veralith.context(...)` block around this code, or None."""
    return _marked.get()


@contextlib.contextmanager
def context(chunks: Any, *, query: str | None = None) -> Iterator[list[ContextChunk]]:
    """Mark `chunks` as the retrieved context of what runs in the block, and yield them normalised.

        with veralith.context(docs, query=question):
            reply = client.chat.completions.create(...)     # a wrapped client logs it with docs

    `chunks` takes what `veralith.log` takes (texts, dicts with text/id/source/metadata/rank/score,
    ContextChunks, LangChain Documents). `query` is the question they were retrieved for (default:
    the last user message of each completion). Inside a `@veralith.trace` call the chunks are also
    handed to it, so a traced function that returns a bare response is logged with them. Bad
    chunks raise TypeError/ValueError naming the chunk, before the block runs.
    """
    from veralith.pipeline.inputs import check_query, normalize_context

    normalized = normalize_context(chunks)
    if query is not None:
        query = check_query(query)
    collector = current()
    if collector is not None:
        collector.add(Handed(source="context", context=list(chunks), query=query))
    token = _marked.set(Marked(normalized, query, list(chunks)))
    try:
        yield normalized
    finally:
        _marked.reset(token)
