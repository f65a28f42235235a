"""The spans of each top-level LlamaIndex call, and the one trace each makes.

LlamaIndex reports every instrumented method as a span (enter, exit or drop, with its parent) and
emits events inside them (retrieval ended with these nodes, the model streamed this text). A span
whose parent this tracker never saw and whose object is a query engine (`query`, `aquery`) or chat
engine (`chat`, `achat`, `stream_chat`, `astream_chat`) starts a tree; inside a @veralith.trace
call a retriever (`retrieve`, `aretrieve`) starts one too. Every span below it joins the tree.

A tree makes one trace when its call is answered: when the top-level span exits, or, for a
streaming response, when the model that streams it ends (what was streamed, marked partial, when
the consumer stops early). A query engine's stream is generated after the call returned, by model
spans with no parent: they are matched to their call by the stream's generator, which is running
on the current thread's stack when they start.

Nothing here imports LlamaIndex: `Tracker(kinds)` is given the classes to recognise.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from veralith.adapters.llamaindex import _read
from veralith.sdk import handoff, scope

ENGINE_METHODS = {"query": ("query", "aquery"), "chat": ("chat", "achat", "stream_chat", "astream_chat"),
                  "retriever": ("retrieve", "aretrieve")}
MAX_STREAMS = 1000   # streamed answers waiting for their consumer; past this the oldest is dropped


@dataclass(slots=True)  # one per span of every followed call: slots make them cheap
class Span:
    id: str
    kind: str                          # "query", "chat", "retriever", "llm" or "other"
    started: float
    outer_llm: str | None = None       # the outermost model span this one runs under (itself included)
    in_retriever: bool = False         # runs below a retriever span
    outer_retriever: bool = False      # a retriever span with no retriever above it
    ended: float | None = None
    streamed: str = ""                 # models: the text streamed so far
    streaming: bool = False            # models: seen streaming


@dataclass
class Tree:
    root: Span
    method: str
    engine: str
    query: str | None
    history: list[dict[str, str]] | None
    tags: dict[str, Any]
    collector: Any                          # inside a @veralith.trace call: its handoff.Collector
    spans: dict[str, Span] = field(default_factory=dict)
    retrievals: list[tuple[str | None, list[Any]]] = field(default_factory=list)   # (query, nodes)
    # What the engine returned, read when its span exits (the result itself is not kept: a stream's
    # generator must be free to go when its consumer drops it): the nodes the answer was made from
    # (a retriever's own nodes), the answer text, whether the answer is a stream.
    nodes: list[Any] = field(default_factory=list)
    answer: str | None = None
    streams: bool = False
    state: str = "open"                     # "open", "streaming" (answered later), "done"
    stream_text: str | None = None          # the streamed answer, once its model ended
    reading: Span | None = None             # a query engine's stream: the model span its consumer started


class Tracker:
    """Callback logic for the span and event handlers. Thread-safe; never raises into LlamaIndex
    (its dispatcher swallows handler errors too, but a failure here is counted and warned about)."""

    def __init__(self, kinds: dict[str, tuple[type, ...]], emit: Any) -> None:
        self._kinds = kinds                 # "query"/"chat"/"retriever"/"llm" -> LlamaIndex base classes
        # emit(tree, answer, partial, skip): once per tree, when it is answered (answer None: read it from
        # the engine's result) or cannot be (skip names why).
        self._emit = emit
        # Re-entrant: a stream's weak-reference callback may run on this thread while the lock is held.
        self._lock = threading.RLock()
        self._tree_of: dict[str, Tree] = {}
        self._kind_of: dict[type, str] = {}
        self._streams: OrderedDict[int, tuple[Any, Tree, Any]] = OrderedDict()  # id(frame) -> (frame, tree, ref)
        self.enabled = False

    # --- spans ------------------------------------------------------------------------------------

    def enter(self, span_id: str, bound_args: Any, instance: Any, parent_id: str | None, tags: Any) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        kind = self._kind(instance)
        with self._lock:
            tree = self._tree_of.get(parent_id) if parent_id is not None else None
            if tree is not None:
                self._join(tree, span_id, kind, parent_id, now)
                return
        method = span_id.split("-", 1)[0].rsplit(".", 1)[-1]
        if kind in ENGINE_METHODS and method in ENGINE_METHODS[kind]:
            inside = scope.active() is not None
            if kind == "retriever" and not inside:
                return  # a retriever used on its own is no answer; inside a traced call its nodes are handed over
            tree = self._start(span_id, kind, method, bound_args, instance, tags, now, inside)
            with self._lock:
                self._tree_of[span_id] = tree
        elif kind == "llm" and parent_id is None and self._streams:
            with self._lock:
                tree = self._stream_on_stack()
                if tree is not None:
                    self._join(tree, span_id, kind, None, now)
                    tree.reading = tree.reading or tree.spans[span_id]

    def _kind(self, instance: Any) -> str:
        if instance is None:
            return "other"
        cls = type(instance)
        kind = self._kind_of.get(cls)
        if kind is None:  # once per class: isinstance against LlamaIndex's abstract bases is slow
            kind = next((k for k, classes in self._kinds.items() if isinstance(instance, classes)), "other")
            self._kind_of[cls] = kind
        return kind

    def _start(self, span_id: str, kind: str, method: str, bound_args: Any, instance: Any, tags: Any, now: float,
               inside: bool) -> Tree:
        arguments = getattr(bound_args, "arguments", {}) or {}
        if kind == "chat":
            query = arguments.get("message") if isinstance(arguments.get("message"), str) else None
            given = arguments.get("chat_history")
            past = _read.history(given if given is not None else _read.engine_history(instance))
        else:
            query, past = _read.query_text(arguments.get("str_or_query_bundle")), None
        root = Span(span_id, kind, now)
        tree = Tree(root=root, method=method, engine=type(instance).__name__, query=query, history=past,
                    tags=dict(tags or {}), collector=handoff.current() if inside else None)
        tree.spans[span_id] = root
        return tree

    def _join(self, tree: Tree, span_id: str, kind: str, parent_id: str | None, now: float) -> None:
        parent = tree.spans.get(parent_id) if parent_id is not None else None
        span = Span(span_id, kind, now)
        if parent is not None and parent.outer_llm is not None:
            span.outer_llm = parent.outer_llm
        elif kind == "llm":
            span.outer_llm = span_id
        # Retriever spans nest (retrieve -> _retrieve, fusion retrievers): only the outermost is timed.
        span.in_retriever = parent is not None and (parent.kind == "retriever" or parent.in_retriever)
        span.outer_retriever = kind == "retriever" and not span.in_retriever
        tree.spans[span_id] = span
        self._tree_of[span_id] = tree

    def _ended(self, span_id: str) -> tuple[Tree, Span] | None:
        """The tree and span of a span that just ended (its end time noted), or None (not followed)."""
        tree = self._tree_of.get(span_id)
        if tree is None:
            return None
        span = tree.spans[span_id]
        span.ended = time.perf_counter()
        self._extend_llm(tree, span, span.ended)
        return tree, span

    def exit(self, span_id: str, result: Any) -> None:
        with self._lock:
            found = self._ended(span_id)
            if found is None or found[1] is not found[0].root:
                return
            tree = found[0]
            tree.streams = _read.is_streaming(result)
            tree.nodes = list(result) if tree.root.kind == "retriever" and isinstance(result, list) else \
                _read.source_nodes(result)
            tree.answer = None if tree.streams else _read.answer_text(result)
            if tree.streams and tree.stream_text is None:
                tree.state = "streaming"
                dropped = self._await_stream(tree, _read.stream_of(result))
            else:
                dropped = None
                self._finish(tree)
        if tree.state == "done":
            self._emit(tree, tree.stream_text if tree.streams else tree.answer, False, None)
        if dropped is not None:
            self._emit(dropped, None, False, "stream_not_read")

    def drop(self, span_id: str, err: BaseException | None) -> None:
        with self._lock:
            found = self._ended(span_id)
            if found is None or found[1] is not found[0].root:
                return
            tree = found[0]
            self._finish(tree)
        self._emit(tree, None, False, "error")

    # --- events -----------------------------------------------------------------------------------

    def event(self, event: Any) -> None:
        name = type(event).__name__
        if name not in EVENTS or not self.enabled:
            return
        with self._lock:
            tree = self._tree_of.get(event.span_id) if event.span_id is not None else None
            if tree is None:
                return
            span = tree.spans[event.span_id]
            if name == "RetrievalEndEvent":
                tree.retrievals.append((_read.query_text(event.str_or_query_bundle), list(event.nodes or [])))
                return
            if name == "StreamChatErrorEvent":
                if tree.state != "streaming":
                    return
                self._finish(tree)
                answer: str | None = None
                skip: str | None = "error"
                partial = False
            else:
                found = self._model_event(tree, span, name, event)
                if found is None:
                    return
                answer, partial, skip = found
                self._finish(tree)
        self._emit(tree, answer, partial, skip)

    def _model_event(self, tree: Tree, span: Span, name: str, event: Any) -> tuple[str, bool, str | None] | None:
        """Record a model's streamed text; (answer, partial, skip) when the event ends the tree's stream."""
        outer = tree.spans.get(span.outer_llm) if span.outer_llm else None
        models = [span] if outer is None or outer is span else [span, outer]
        if name.endswith("InProgressEvent"):
            for model in models:
                model.streaming = True
                model.streamed = _read.streamed(model.streamed, event.response)
            return None
        self._extend_llm(tree, span, time.perf_counter())
        if tree.state != "streaming" or not any(model.streaming for model in models):
            if name.endswith("EndEvent") and span.streaming:
                # A chat stream that ended before its engine's span did.
                tree.stream_text = span.streamed or _read.model_text(event.response) or ""
            return None
        if name.endswith("EndEvent"):
            return span.streamed or _read.model_text(event.response) or "", False, None
        # The stream's consumer stopped early (GeneratorExit: what it read is logged), or it failed.
        stopped = isinstance(getattr(event, "exception", None), GeneratorExit)
        return span.streamed, True, None if stopped else "error"

    # --- streams ----------------------------------------------------------------------------------

    def _await_stream(self, tree: Tree, generator: Any) -> Tree | None:
        """A query engine's stream: its model spans start without a parent when the consumer first
        reads it; remember the generator's frame to recognise them (_stream_on_stack). Returns the
        oldest waiting stream when there are too many (its consumer never read it; now dropped)."""
        frame = getattr(generator, "gi_frame", None) or getattr(generator, "ag_frame", None)
        if frame is None:
            return None  # a chat stream: its model runs below the engine's span and finds the tree itself
        key = id(frame)

        def gone(_: Any, key: int = key) -> None:
            # The consumer dropped the stream: what it read is all it got (nothing, if it never started).
            with self._lock:
                entry = self._streams.get(key)
                if entry is None or entry[1].state != "streaming":
                    return
                found = entry[1]
                self._finish(found)
            reading = found.reading
            if reading is None:
                self._emit(found, None, False, "stream_not_read")
            else:
                self._emit(found, reading.streamed, True, None)

        try:
            ref = weakref.ref(generator, gone)
        except TypeError:
            ref = None
        # The frame is held, so its id cannot be reused by another frame while the entry exists.
        self._streams[key] = (frame, tree, ref)
        if len(self._streams) <= MAX_STREAMS:
            return None
        oldest = next(iter(self._streams.values()))[1]
        self._finish(oldest)
        return oldest

    def _stream_on_stack(self) -> Tree | None:
        frame: Any = sys._getframe(1)
        while frame is not None:
            entry = self._streams.get(id(frame))
            if entry is not None and entry[0] is frame and entry[1].state == "streaming":
                return entry[1]
            frame = frame.f_back
        return None

    # --- bookkeeping ------------------------------------------------------------------------------

    @staticmethod
    def _extend_llm(tree: Tree, span: Span, now: float) -> None:
        """A model call lasts until its last span or event (a stream ends long after its span exits)."""
        outer = tree.spans.get(span.outer_llm) if span.outer_llm else None
        if outer is not None:
            outer.ended = max(outer.ended or 0.0, now)

    def _finish(self, tree: Tree) -> None:
        """The tree is answered (or given up): forget its spans and its stream."""
        tree.state = "done"
        for span_id in list(tree.spans):
            self._tree_of.pop(span_id, None)
        for key in [k for k, (_, t, _) in list(self._streams.items()) if t is tree]:
            del self._streams[key]


def timings(tree: Tree) -> dict[str, float]:
    """The call's duration until it was answered (`total`), the time its outermost retriever spans
    took (`retrieval`) and the time in model calls (`generation`), in ms."""
    now = time.perf_counter()

    def ms(span: Span) -> float:
        return ((span.ended if span.ended is not None else now) - span.started) * 1000.0

    # A stream is answered when its model ends, after the engine's span: the call lasts until then.
    end = now if tree.streams or tree.root.ended is None else tree.root.ended
    out = {"total": (end - tree.root.started) * 1000.0}
    retrievers = [s for s in tree.spans.values() if s.outer_retriever or (s is tree.root and s.kind == "retriever")]
    if retrievers:
        out["retrieval"] = sum(ms(s) for s in retrievers)
    models = [s for s in tree.spans.values() if s.outer_llm == s.id]
    if models:
        out["generation"] = sum(ms(s) for s in models)
    return out


EVENTS = {"RetrievalEndEvent", "LLMChatInProgressEvent", "LLMCompletionInProgressEvent", "LLMChatEndEvent",
           "LLMCompletionEndEvent", "ExceptionEvent", "StreamChatErrorEvent"}
