"""One chat completion request, and the tool-calling loops that span several of them.

A request is a RAG answer when it carries retrieved context: the context the app marked around it
(`veralith.context(...)`), or results of the retrieval tools the app named to `wrap()`. A reply
that calls a retrieval tool is a step of a loop (tool call → tool result → … → final answer): it is
not logged; the final reply, whose request carries the tool results, is, once, with the loop's
timings: the model's time over every step (`generation`), the app's time running the tools between
them (`retrieval`), and the whole loop (`total`). A request with neither marked context nor
retrieval tools is not a RAG answer and is left alone.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from veralith.adapters import _common
from veralith.adapters.openai import _read
from veralith.sdk import handoff, scope

counters = _common.Counters("veralith.adapters.openai")
MAX_LOOPS = 10_000   # tool calls waiting for their results; past this the oldest are forgotten


@dataclass(frozen=True)
class Config:
    """What `wrap()` was given."""

    options: _common.Options
    tools: dict[str, _read.Parser | None]     # retrieval tool name -> its result parser (None: the default)


@dataclass(frozen=True)
class Step:
    """A reply that called retrieval tools: where its loop stands."""

    loop_started: float     # when the loop's first request was sent
    model_ms: float         # model time so far, this reply included
    tool_ms: float          # the app's time running tools before this reply
    returned_at: float      # when this reply came back (the tools run from here)


class _Loops:
    """Steps by tool call id, until the request carrying the tools' results arrives. Thread-safe."""

    def __init__(self) -> None:
        self._steps: OrderedDict[str, Step] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, call_ids: list[str], step: Step) -> None:
        with self._lock:
            for call_id in call_ids:
                self._steps[call_id] = step
            while len(self._steps) > MAX_LOOPS:
                self._steps.popitem(last=False)

    def latest(self, call_ids: list[str], *, take: bool) -> Step | None:
        """The latest step among these tool calls (the loop's state when they were made)."""
        with self._lock:
            steps = [self._steps.pop(i, None) if take else self._steps.get(i) for i in call_ids]
        found = [s for s in steps if s is not None]
        return max(found, key=lambda s: s.returned_at) if found else None


loops = _Loops()


class Request:
    """One create() or parse() call through a wrapped client: what it carries and, when its reply
    is in, the one trace it makes (or the loop step it is)."""

    def __init__(self, config: Config, kwargs: dict[str, Any], name: str) -> None:
        self.config, self.name = config, name
        self.started = time.perf_counter()
        messages = list(kwargs.get("messages") or [])
        marked = handoff.marked()
        self.context: list[Any] | None = handoff.as_dicts(marked.given) if marked is not None else None
        self.query = marked.query if marked is not None else None
        self.call_ids: list[str] = []
        self.tools_used: list[str] = []
        self.asks_tools = False
        if config.tools:
            chunks, self.call_ids, self.tools_used = _read.tool_results(messages, config.tools)
            if self.call_ids:
                self.context = (self.context or []) + chunks
            self.asks_tools = _read.asks_for(kwargs.get("tools"), config.tools)
        if self.query is None:
            self.query = _read.last_user(messages)[1]
        self.model = kwargs.get("model")
        self.request_metadata = kwargs.get("metadata") if isinstance(kwargs.get("metadata"), dict) else {}
        # One user call, one trace: inside a @veralith.trace call, hand the trace to it.
        self.collector = handoff.current() if scope.active() is not None else None

    @property
    def relevant(self) -> bool:
        """Whether the reply can make a trace or a loop step (else the call is passed through as is)."""
        return self.context is not None or self.asks_tools

    def finished(self, answer: str | None, tool_calls: list[tuple[str, str]], *, completion_id: str | None,
                 model: str | None, partial: bool) -> None:
        """The reply is in (or its stream ended): log the trace, or remember the loop step."""
        now = time.perf_counter()
        model_ms = (now - self.started) * 1000.0
        before = loops.latest(self.call_ids, take=False) if self.call_ids else None
        retrieval_calls = [call_id for call_id, name in tool_calls if name in self.config.tools]
        if retrieval_calls and not partial:
            tool_ms = before.tool_ms + (self.started - before.returned_at) * 1000.0 if before else 0.0
            loops.remember(retrieval_calls, Step(loop_started=before.loop_started if before else self.started,
                                                 model_ms=model_ms + (before.model_ms if before else 0.0),
                                                 tool_ms=tool_ms, returned_at=now))
            return
        if self.context is None or tool_calls:
            counters.count("ignored")  # no retrieved context, or a call of some other tool: no answer yet
            return
        step = loops.latest(self.call_ids, take=True) if self.call_ids else None
        latency = {"generation": model_ms}
        if step is not None:
            latency = {"total": (now - step.loop_started) * 1000.0,
                       "retrieval": step.tool_ms + (self.started - step.returned_at) * 1000.0,
                       "generation": step.model_ms + model_ms}
        extra = {"retrieval_tools": self.tools_used} if self.tools_used else {}
        metadata = _common.trace_metadata(self.config.options.metadata, source="openai", chain=model or self.model,
                                          run_id=completion_id or "", run_name=self.name, tags=[],
                                          framework_metadata=self.request_metadata, partial=partial, **extra)
        outcome = _common.Outcome(query=self.query, context=self.context, answer=answer, metadata=metadata,
                                  latency_ms=latency)
        counters.emit(outcome, self.config.options, self.collector, source="OpenAI")


class Streamed:
    """What a streamed reply has said so far (its first choice)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.calls: dict[int, list[str]] = {}   # tool call index -> [id, name]
        self.completion_id: str | None = None
        self.model: str | None = None
        self.finished = False                   # a finish reason arrived

    def add(self, chunk: Any) -> None:
        self.completion_id = self.completion_id or _read.get(chunk, "id")
        self.model = self.model or _read.get(chunk, "model")
        for choice in _read.get(chunk, "choices") or []:
            if _read.get(choice, "index") not in (0, None):
                continue
            delta = _read.get(choice, "delta")
            content = _read.get(delta, "content")
            if isinstance(content, str):
                self.parts.append(content)
            for call in _read.get(delta, "tool_calls") or []:
                entry = self.calls.setdefault(_read.get(call, "index") or 0, ["", ""])
                entry[0] = _read.get(call, "id") or entry[0]
                entry[1] = _read.get(_read.get(call, "function"), "name") or entry[1]
            if _read.get(choice, "finish_reason"):
                self.finished = True

    def tool_calls(self) -> list[tuple[str, str]]:
        return [(call_id, name) for call_id, name in self.calls.values()]
