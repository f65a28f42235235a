"""The span and event handlers registered on LlamaIndex's root dispatcher, and what a finished call logs.

The handler classes subclass LlamaIndex's BaseSpanHandler and BaseEventHandler, so they are built on
first use (`handlers()`), not at import. Both feed one `_tracker.Tracker`; `_emit` turns each tree it
finishes into one trace (veralith.adapters._common: the metadata shape, counters, log or hand-over).
"""

from __future__ import annotations

import functools
from typing import Any

from veralith.adapters import _common
from veralith.adapters.llamaindex import _read, _tracker

counters = _common.Counters("veralith.adapters.llamaindex")
options = _common.Options()    # set by install()


@functools.cache
def handlers() -> tuple[Any, Any, _tracker.Tracker]:
    """(span handler, event handler, their tracker), built once per process."""
    from llama_index.core.base.base_query_engine import BaseQueryEngine
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.base.llms.base import BaseLLM
    from llama_index.core.chat_engine.types import BaseChatEngine
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.span import BaseSpan
    from llama_index.core.instrumentation.span_handlers import BaseSpanHandler

    tracker = _tracker.Tracker({"query": (BaseQueryEngine,), "chat": (BaseChatEngine,),
                                "retriever": (BaseRetriever,), "llm": (BaseLLM,)}, emit)

    class VeralithSpanHandler(BaseSpanHandler[BaseSpan]):
        """Follows the spans of query engines, chat engines and retrievers (veralith.adapters.llamaindex)."""

        @classmethod
        def class_name(cls) -> str:
            return "VeralithSpanHandler"

        # The base class keeps every open span in a dict; the tracker keeps only the spans of the
        # calls it follows, so these take over from it.
        # Called for every span of every LlamaIndex call: the try is inline, not through counters.run.
        def span_enter(self, id_: str, bound_args: Any, instance: Any = None, parent_id: str | None = None,
                       tags: Any = None, **kwargs: Any) -> None:
            try:
                tracker.enter(id_, bound_args, instance, parent_id, tags)
            except Exception as exc:
                counters.failed("a LlamaIndex span", exc)

        def span_exit(self, id_: str, bound_args: Any, instance: Any = None, result: Any = None,
                      **kwargs: Any) -> None:
            try:
                tracker.exit(id_, result)
            except Exception as exc:
                counters.failed("a LlamaIndex span", exc)

        def span_drop(self, id_: str, bound_args: Any, instance: Any = None, err: BaseException | None = None,
                      **kwargs: Any) -> None:
            try:
                tracker.drop(id_, err)
            except Exception as exc:
                counters.failed("a LlamaIndex span", exc)

        def new_span(self, *args: Any, **kwargs: Any) -> None:
            return None

        def prepare_to_exit_span(self, *args: Any, **kwargs: Any) -> None:
            return None

        def prepare_to_drop_span(self, *args: Any, **kwargs: Any) -> None:
            return None

    class VeralithEventHandler(BaseEventHandler):
        """Reads retrieved nodes and streamed model text (veralith.adapters.llamaindex)."""

        @classmethod
        def class_name(cls) -> str:
            return "VeralithEventHandler"

        def handle(self, event: Any, **kwargs: Any) -> None:
            if type(event).__name__ not in _tracker.EVENTS:  # most events (embeddings, synthesis) say nothing new
                return
            try:
                tracker.event(event)
            except Exception as exc:
                counters.failed("a LlamaIndex event", exc)

    return VeralithSpanHandler(), VeralithEventHandler(), tracker


def emit(tree: _tracker.Tree, answer: str | None, partial: bool, skip: str | None) -> None:
    counters.run("a LlamaIndex call", lambda: _emit(tree, answer, partial, skip))


def _emit(tree: _tracker.Tree, answer: str | None, partial: bool, skip: str | None) -> None:
    """One trace for a finished tree: the nodes the answer was made from (the response's source nodes,
    else everything retrieved), the question, the answer, the metadata shape, the timings."""
    root = tree.root
    nodes = tree.nodes or [node for _, found in tree.retrievals for node in found]
    if skip == "error":
        counters.count("skipped", "error")  # the call raised: the app saw the error, no warning due
        return
    if not (tree.retrievals or nodes or root.kind == "retriever"):
        counters.count("ignored")  # nothing retrieved: not a RAG answer
        return
    if skip is not None:
        counters.count("skipped", skip)
        return
    query, extra = _question(tree)
    metadata = _common.trace_metadata(options.metadata, source="llamaindex", chain=tree.engine, run_id=root.id,
                                      run_name=tree.method, tags=[], framework_metadata=tree.tags, partial=partial,
                                      **extra)
    outcome = _common.Outcome(query=query, context=_read.chunks(nodes), answer=answer, metadata=metadata,
                              latency_ms=_tracker.timings(tree))
    counters.emit(outcome, options, tree.collector, source="LlamaIndex")


def _question(tree: _tracker.Tree) -> tuple[str | None, dict[str, Any]]:
    """The query, and the extra metadata of a follow-up: a chat engine that rewrote the message into a
    standalone question before retrieving (condense modes) is judged on that question; the message
    and the history go to metadata `input` and `chat_history`."""
    asked = next((q for q, _ in tree.retrievals if q), None)
    if tree.root.kind == "chat" and tree.history and asked and asked != tree.query:
        return asked, {"input": tree.query, "chat_history": tree.history}
    return tree.query or asked, {}
