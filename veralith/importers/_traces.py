"""Spans of any format, read into one shape, and grouped into the (query, context, response) of each trace.

Each reader (otlp, langfuse) turns its records into `Span`s that say what the span *is* (a
retriever, a reranker, a model call, anything else) and what it carried (its input and output
text, the documents it returned, the last user message it was sent). `assemble` then makes one
record per trace id:

- the context: the documents of the last reranker, when there is one (what the model was given);
  else every retriever's documents in the order the retrievers started; each chunk ranked within
  its span's list;
- the query: the input of the trace's root span (its question, when the input is a JSON object),
  else the first retriever's query, else the last user message sent to a model;
- the response: the output of the root span (its answer, when the output is a JSON object), else
  the output of the model call that ended last;
- the timings: the root span's duration (or the whole trace's, without a single root), the time in
  the outermost retriever spans, and the time in the outermost model calls.

A trace that lacks one of the three is a `Problem` naming what is missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Problem", "Span", "assemble", "text_of"]

QUESTION_KEYS = ("question", "query", "input", "user_input", "message", "prompt")
ANSWER_KEYS = ("answer", "output", "result", "response", "content", "text")


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str                                   # "retriever", "reranker", "llm" or "other"
    start_ns: int | None = None
    end_ns: int | None = None
    input: str | None = None                    # text (or JSON text) the span was given
    output: str | None = None                   # text (or JSON text) it returned
    documents: list[dict[str, Any]] = field(default_factory=list)   # retrievers, rerankers: chunk dicts
    textless: int = 0                           # documents listed without their text (left out)
    user_message: str | None = None             # model calls: the last user message they were sent
    service: str | None = None


@dataclass(frozen=True)
class Problem:
    """A trace that cannot be judged, and why (one line, naming what is missing). `not_rag`: it
    retrieved nothing, so it is no RAG answer (skipped, not an error)."""

    trace_id: str
    message: str
    not_rag: bool = False


def text_of(value: Any, keys: tuple[str, ...]) -> str | None:
    """A text from an input or output: the string itself, or, for a JSON object (given or as text),
    the string under the first of `keys`, or its only string."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("{"):
            try:
                parsed = json.loads(stripped)
            except ValueError:
                return value
            found = text_of(parsed, keys)
            return found if found is not None else value
        return value
    if isinstance(value, dict):
        for key in keys:
            if isinstance(value.get(key), str) and value[key].strip():
                return str(value[key])
        strings = [v for v in value.values() if isinstance(v, str) and v.strip()]
        if len(strings) == 1:
            return strings[0]
    return None


def assemble(trace_id: str, spans: list[Span], source: str) -> dict[str, Any] | Problem:
    """The eval record (query, context, response, id, metadata, latency_ms) of one trace's spans."""
    by_id = {s.span_id: s for s in spans}
    roots = [s for s in spans if s.parent_id is None or s.parent_id not in by_id]
    root = min(roots, key=_start) if len(roots) == 1 else None
    ordered = sorted(spans, key=_start)
    rerankers = [s for s in ordered if s.kind == "reranker" and s.documents]
    retrievers = [s for s in ordered if s.kind == "retriever"]
    models = sorted((s for s in spans if s.kind == "llm"), key=lambda s: s.end_ns or 0)
    if not retrievers and not rerankers:
        return Problem(trace_id, "not a RAG answer, skipped: no retriever span (OpenInference RETRIEVER, GenAI "
                                 "retrieval, or a Langfuse retriever observation)", not_rag=True)
    chunks = [dict(d, rank=d.get("rank", i)) for s in (rerankers[-1:] or retrievers)
              for i, d in enumerate(s.documents, start=1)]
    if not chunks and any(s.textless for s in retrievers + rerankers):
        return Problem(trace_id, "the retrieved documents carry no text (OpenInference document.content, or "
                                 "`content` in gen_ai.retrieval.documents): only ids and scores were recorded")
    question = next((q for q in (
        text_of(root.input, QUESTION_KEYS) if root is not None and root.kind == "other" else None,
        *(text_of(s.input, QUESTION_KEYS) for s in retrievers),
        *(s.user_message for s in reversed(models))) if q and q.strip()), None)
    if question is None:
        return Problem(trace_id, "no question: the root span has no input.value and neither the retriever "
                                 "(its query) nor a model call (a user message) says one")
    answer = text_of(root.output, ANSWER_KEYS) if root is not None and root.kind == "other" else None
    if answer is None:
        answer = next((text_of(s.output, ANSWER_KEYS) for s in reversed(models) if s.output is not None), None)
    if answer is None:
        return Problem(trace_id, "no answer: neither the root span's output.value nor a model call's output "
                                 "message is there")
    metadata: dict[str, Any] = {"source": source, "trace_id": trace_id}
    if root is not None:
        metadata["root_span"] = root.name
    service = next((s.service for s in spans if s.service), None)
    if service:
        metadata["service"] = service
    return {"id": trace_id, "query": question, "context": chunks, "response": answer, "metadata": metadata,
            "latency_ms": _timings(root, spans, by_id)}


def _start(span: Span) -> tuple[int, str]:
    return (span.start_ns if span.start_ns is not None else 0, span.span_id)


def _timings(root: Span | None, spans: list[Span], by_id: dict[str, Span]) -> dict[str, float]:
    def ms(span: Span) -> float | None:
        if span.start_ns is None or span.end_ns is None or span.end_ns < span.start_ns:
            return None
        return (span.end_ns - span.start_ns) / 1e6

    def outermost(kinds: tuple[str, ...]) -> list[Span]:
        found = []
        for span in spans:
            if span.kind not in kinds:
                continue
            parent = by_id.get(span.parent_id) if span.parent_id else None
            while parent is not None and parent.kind not in kinds:
                parent = by_id.get(parent.parent_id) if parent.parent_id else None
            if parent is None:
                found.append(span)
        return found

    out: dict[str, float] = {}
    starts = [s.start_ns for s in spans if s.start_ns is not None]
    ends = [s.end_ns for s in spans if s.end_ns is not None]
    total = ms(root) if root is not None else ((max(ends) - min(starts)) / 1e6 if starts and ends else None)
    if total is not None and total >= 0:
        out["total"] = total
    for part, kinds in (("retrieval", ("retriever",)), ("generation", ("llm",))):
        times = [t for t in (ms(s) for s in outermost(kinds)) if t is not None]
        if times:
            out[part] = sum(times)
    return out
