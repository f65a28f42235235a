"""Langfuse traces, as its public API returns them, read into `_traces.Span`s.

A trace is `GET /api/public/traces/{traceId}`'s object (`id`, `input`, `output`, `observations`, ...),
alone, in a list or under `data`; observations may also come alone (a list, or the `data` of
`GET /api/public/observations`), grouped by their `traceId`. Field names are read in camelCase as
the API writes them, or in snake_case as the Python SDK's models dump them.

An observation of type RETRIEVER is a retriever: its input is the query (a string, or an object
with a query field), its output the documents (a list of texts or of objects with `page_content`,
`text` or `content`, as LangChain's and LlamaIndex's integrations log them). A SPAN whose output is
such a list of documents is read as a retriever too (Langfuse's LangChain integration logged
retrievers as spans before it had the RETRIEVER type). A GENERATION is a model call: its input the
messages (or the prompt), its output the reply. The trace's own input and output are the root's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TypeGuard

from veralith.importers._traces import QUESTION_KEYS, Span, text_of
from veralith.importers.otlp import iso_nanos

__all__ = ["is_observation", "is_trace", "langfuse_spans"]

_DOC_TEXT = ("page_content", "text", "content")


def _get(obj: dict[str, Any], camel: str) -> Any:
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return obj.get(camel, obj.get(snake))


def is_trace(value: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(value, dict) and isinstance(value.get("observations"), list) and "id" in value


def is_observation(value: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(value, dict) and _get(value, "traceId") is not None and "type" in value


def langfuse_spans(traces: list[dict[str, Any]], observations: list[dict[str, Any]]) -> Iterator[Span]:
    """The spans of full traces (each trace's own input/output as its root) and of loose observations."""
    for trace in traces:
        trace_id = str(trace["id"])
        root_id = f"trace:{trace_id}"
        start, latency = iso_nanos(trace.get("timestamp")), trace.get("latency")  # latency: seconds
        end = start + int(latency * 1e9) if start is not None and isinstance(latency, (int, float)) else None
        yield Span(trace_id=trace_id, span_id=root_id, parent_id=None, name=str(trace.get("name") or "trace"),
                   kind="other", start_ns=start, end_ns=end, input=_raw(trace.get("input")),
                   output=_raw(trace.get("output")))
        for observation in trace["observations"]:
            if isinstance(observation, dict):
                yield _span(observation, trace_id, root_id)
    for observation in observations:
        yield _span(observation, str(_get(observation, "traceId")), None)


def _span(observation: dict[str, Any], trace_id: str, root_id: str | None) -> Span:
    kind = str(observation.get("type") or "").upper()
    output = observation.get("output")
    documents = _documents(output)
    span = Span(trace_id=trace_id, span_id=str(observation.get("id")),
                parent_id=_get(observation, "parentObservationId") or root_id, name=str(observation.get("name") or ""),
                kind="other", start_ns=iso_nanos(_get(observation, "startTime")),
                end_ns=iso_nanos(_get(observation, "endTime")), input=_raw(observation.get("input")),
                output=_raw(output))
    if kind == "RETRIEVER" or (kind == "SPAN" and documents):
        span.kind, span.documents = "retriever", documents
    elif kind == "GENERATION":
        span.kind = "llm"
        span.user_message = _last_user(observation.get("input"))
        span.output = _reply(output)
    return span


def _documents(output: Any) -> list[dict[str, Any]]:
    if isinstance(output, dict) and isinstance(output.get("documents"), list):
        output = output["documents"]
    if not isinstance(output, list) or not output:
        return []
    chunks = []
    for item in output:
        if isinstance(item, str):
            chunks.append({"text": item})
            continue
        if not isinstance(item, dict):
            return []
        text = next((item[k] for k in _DOC_TEXT if isinstance(item.get(k), str)), None)
        if text is None:
            return []  # not a list of documents
        chunk: dict[str, Any] = {"text": text}
        metadata = item.get("metadata")
        if isinstance(metadata, dict):
            chunk["metadata"] = metadata
            if metadata.get("source"):
                chunk["source"] = str(metadata["source"])
        if isinstance(item.get("id"), (str, int)) and not isinstance(item.get("id"), bool):
            chunk["id"] = str(item["id"])
        chunks.append(chunk)
    return chunks


def _last_user(value: Any) -> str | None:
    messages = value.get("messages") if isinstance(value, dict) else value
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") in ("user", "human"):
                content = message.get("content")
                if isinstance(content, list):
                    content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
                return content if isinstance(content, str) else None
        return None
    return text_of(value, QUESTION_KEYS)


def _reply(value: Any) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    if isinstance(value, dict) and isinstance(value.get("choices"), list) and value["choices"]:
        return _reply((value["choices"][0] or {}).get("message"))
    return _raw(value)


def _raw(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)
