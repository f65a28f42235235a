"""OpenTelemetry spans: OTLP JSON (ExportTraceServiceRequest, as the OTLP/HTTP JSON encoding and the
Collector's file exporter write it) and Phoenix's span listing, read into `_traces.Span`s.

Attributes are read by two conventions:

- OpenInference (Phoenix, OpenLLMetry's OpenInference mode, Arize): `openinference.span.kind`
  (RETRIEVER, RERANKER, LLM, CHAIN, ...), `input.value`, `output.value`,
  `retrieval.documents.{i}.document.{content,id,score,metadata}`,
  `reranker.query` and `reranker.output_documents.{i}.document.*`,
  `llm.input_messages.{i}.message.{role,content}` (or `.message.contents.{j}.message_content.text`)
  and `llm.output_messages.{i}.message.content`;
- the OpenTelemetry GenAI semantic conventions: `gen_ai.operation.name` (`chat`, `text_completion`,
  `generate_content` for model calls; `retrieval` for retrievers), `gen_ai.input.messages` and
  `gen_ai.output.messages` (JSON: messages with `role` and `parts` of type `text`),
  `gen_ai.retrieval.query.text` and `gen_ai.retrieval.documents` (JSON: objects with `id`, `score`
  and the document's text as `content` or `text`), and the flattened `gen_ai.prompt.{i}.*` /
  `gen_ai.completion.{i}.*` attributes OpenLLMetry writes.

Field names are accepted in both spellings protobuf's JSON mapping allows (`traceId`, `trace_id`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterator
from typing import Any

from veralith.importers._traces import Span

__all__ = ["any_value", "attributes", "from_attributes", "iso_nanos", "otlp_span", "otlp_spans", "phoenix_spans"]

_DOC = re.compile(r"^(retrieval\.documents|reranker\.output_documents)\.(\d+)\.document\.(content|id|score|metadata)$")
_OI_MESSAGE = re.compile(r"^llm\.(input|output)_messages\.(\d+)\.message\.(role|content|contents\.\d+\.message_content"
                         r"\.text)$")
_OLLM_MESSAGE = re.compile(r"^gen_ai\.(prompt|completion)\.(\d+)\.(role|content)$")
_MODEL_OPERATIONS = ("chat", "text_completion", "generate_content")
_RETRIEVAL_OPERATIONS = ("retrieval", "retrieve")


def _get(obj: dict[str, Any], camel: str, snake: str) -> Any:
    return obj.get(camel, obj.get(snake))


def any_value(value: Any) -> Any:
    """An OTLP AnyValue as a plain value (kvlists as dicts, arrays as lists)."""
    if not isinstance(value, dict):
        return value
    for camel, snake in (("stringValue", "string_value"), ("boolValue", "bool_value"),
                         ("doubleValue", "double_value"), ("bytesValue", "bytes_value")):
        if camel in value or snake in value:
            return _get(value, camel, snake)
    if "intValue" in value or "int_value" in value:
        raw = _get(value, "intValue", "int_value")
        try:
            return int(raw)
        except (TypeError, ValueError):
            return raw
    array = _get(value, "arrayValue", "array_value")
    if isinstance(array, dict):
        return [any_value(v) for v in array.get("values") or []]
    kvlist = _get(value, "kvlistValue", "kvlist_value")
    if isinstance(kvlist, dict):
        return attributes(kvlist.get("values") or [])
    return None


def attributes(pairs: Any) -> dict[str, Any]:
    """OTLP KeyValue pairs as a dict."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        if isinstance(pair, dict) and isinstance(pair.get("key"), str):
            out[pair["key"]] = any_value(pair.get("value"))
    return out


def otlp_spans(request: dict[str, Any]) -> Iterator[Span]:
    """The spans of one ExportTraceServiceRequest (`{"resourceSpans": [...]}`)."""
    for resource_spans in _get(request, "resourceSpans", "resource_spans") or []:
        resource = attributes(((resource_spans or {}).get("resource") or {}).get("attributes"))
        service = resource.get("service.name")
        scopes = _get(resource_spans, "scopeSpans", "scope_spans") or \
            _get(resource_spans, "instrumentationLibrarySpans", "instrumentation_library_spans") or []
        for scope in scopes:
            for span in (scope or {}).get("spans") or []:
                yield otlp_span(span, service if isinstance(service, str) else None)


def otlp_span(span: dict[str, Any], service: str | None = None) -> Span:
    """One OTLP span (camelCase or snake_case fields)."""
    return from_attributes(
        trace_id=str(_get(span, "traceId", "trace_id") or ""), span_id=str(_get(span, "spanId", "span_id") or ""),
        parent_id=_get(span, "parentSpanId", "parent_span_id") or None, name=str(span.get("name") or ""),
        start_ns=_nanos(_get(span, "startTimeUnixNano", "start_time_unix_nano")),
        end_ns=_nanos(_get(span, "endTimeUnixNano", "end_time_unix_nano")),
        attrs=attributes(span.get("attributes")), service=service)


def phoenix_spans(items: list[Any]) -> Iterator[Span]:
    """Spans as Phoenix lists them (`GET /v1/projects/{project}/spans`: `context`, `span_kind`,
    ISO `start_time`/`end_time`, attributes as a flat dict); its OTLP-shaped listing (`/spans/otlpv1`)
    is read as OTLP spans."""
    for item in items:
        if not isinstance(item, dict):
            continue
        if "context" not in item:
            yield otlp_span(item)
            continue
        context = item.get("context") or {}
        attrs = dict(item.get("attributes") or {})
        if item.get("span_kind") and "openinference.span.kind" not in attrs:
            attrs["openinference.span.kind"] = item["span_kind"]
        yield from_attributes(trace_id=str(context.get("trace_id") or ""), span_id=str(context.get("span_id") or ""),
                              parent_id=item.get("parent_id") or None, name=str(item.get("name") or ""),
                              start_ns=iso_nanos(item.get("start_time")), end_ns=iso_nanos(item.get("end_time")),
                              attrs=attrs)


def from_attributes(*, trace_id: str, span_id: str, parent_id: Any, name: str, start_ns: int | None,
                    end_ns: int | None, attrs: dict[str, Any], service: str | None = None) -> Span:
    """A span read from its attributes (OpenInference or GenAI conventions, see the module docstring)."""
    kind = _kind(attrs)
    span = Span(trace_id=trace_id, span_id=span_id, parent_id=str(parent_id) if parent_id else None, name=name,
                kind=kind, start_ns=start_ns, end_ns=end_ns, service=service,
                input=_text(attrs.get("input.value")), output=_text(attrs.get("output.value")))
    if kind in ("retriever", "reranker"):
        listed = _listed(attrs, "reranker.output_documents" if kind == "reranker" else "retrieval.documents")
        span.documents = [chunk for chunk in (_chunk(d) for d in listed) if chunk is not None]
        span.textless = len(listed) - len(span.documents)
        span.input = span.input or _text(attrs.get("gen_ai.retrieval.query.text")) or _text(attrs.get("reranker.query"))
    elif kind == "llm":
        span.user_message, reply = _messages(attrs)
        span.output = reply or span.output
    return span


def _kind(attrs: dict[str, Any]) -> str:
    oi = str(attrs.get("openinference.span.kind") or "").upper()
    operation = str(attrs.get("gen_ai.operation.name") or "").lower()
    if oi == "RETRIEVER" or operation in _RETRIEVAL_OPERATIONS:
        return "retriever"
    if oi == "RERANKER":
        return "reranker"
    if oi == "LLM" or operation in _MODEL_OPERATIONS:
        return "llm"
    if not oi and not operation and ("gen_ai.input.messages" in attrs or "gen_ai.prompt.0.content" in attrs):
        return "llm"
    return "other"


def _listed(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """The documents a retriever or reranker span lists, as dicts of content, id, score, metadata."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        match = _DOC.match(key)
        if match and match.group(1) == prefix:
            found.setdefault(int(match.group(2)), {})[match.group(3)] = value
    docs = [found[i] for i in sorted(found)]
    nested = attrs.get(prefix)  # an unflattened export: a list of documents
    if not docs and isinstance(nested, list):
        docs = [_unnest(d) for d in nested]
    genai = attrs.get("gen_ai.retrieval.documents")
    if not docs and genai is not None:
        docs = [d for d in (_json(genai) or []) if isinstance(d, dict)]
    return docs


def _unnest(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        return {}
    inner = doc.get("document")
    if isinstance(inner, dict):
        return inner
    return {k.removeprefix("document."): v for k, v in doc.items()}


def _chunk(doc: dict[str, Any]) -> dict[str, Any] | None:
    text = doc.get("content", doc.get("text"))
    if not isinstance(text, str) or not text.strip():
        return None
    chunk: dict[str, Any] = {"text": text}
    if isinstance(doc.get("id"), (str, int)) and not isinstance(doc.get("id"), bool):
        chunk["id"] = str(doc["id"])
    score = doc.get("score")
    if isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score):
        chunk["score"] = float(score)
    metadata = _json(doc.get("metadata"))
    if isinstance(metadata, dict):
        chunk["metadata"] = metadata
        source = next((metadata[k] for k in ("source", "file_path", "file_name", "url") if metadata.get(k)), None)
        if source is not None:
            chunk["source"] = str(source)
    return chunk


def _messages(attrs: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the last user message sent, the reply) of a model call, by whichever convention it uses."""
    flat: dict[tuple[str, int], dict[str, str]] = {}
    for key, value in attrs.items():
        match = _OI_MESSAGE.match(key) or _OLLM_MESSAGE.match(key)
        if match and isinstance(value, str):
            side = "input" if match.group(1) in ("input", "prompt") else "output"
            field = "role" if match.group(3) == "role" else "content"
            entry = flat.setdefault((side, int(match.group(2))), {})
            entry[field] = entry.get(field, "") + ("\n" if field == "content" and entry.get(field) else "") + value
    sent = [flat[k] for k in sorted(flat) if k[0] == "input"]
    replies = [flat[k] for k in sorted(flat) if k[0] == "output"]
    sent = sent or _genai_messages(attrs.get("gen_ai.input.messages"))
    replies = replies or _genai_messages(attrs.get("gen_ai.output.messages"))
    user = next((m.get("content") for m in reversed(sent) if m.get("role") == "user"), None)
    reply = next((m.get("content") for m in replies if m.get("content")), None)
    return user, reply


def _genai_messages(value: Any) -> list[dict[str, str]]:
    """GenAI `gen_ai.*.messages` (a JSON list of {role, parts: [{type: "text", content}]}) as role/content."""
    messages = []
    for message in _json(value) or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if not isinstance(content, str):
            parts = message.get("parts") or []
            texts = [p.get("content") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
            content = "\n".join(t for t in texts if isinstance(t, str))
        messages.append({"role": str(message.get("role") or ""), "content": content})
    return messages


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return None


def _nanos(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "", 0, "0") else None
    except (TypeError, ValueError):
        return None


def iso_nanos(value: Any) -> int | None:
    """An ISO-8601 time as Unix nanoseconds (UTC when it names no zone), or None."""
    if not isinstance(value, str) or not value:
        return None
    text = value.replace("Z", "+00:00")
    main, _, rest = text.partition(".")
    if rest:  # more than microseconds (Phoenix may write nanoseconds): keep six digits
        digits = re.match(r"\d*", rest).group()  # type: ignore[union-attr]
        text = f"{main}.{digits[:6].ljust(6, '0')}{rest[len(digits):]}"
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1e6) * 1000
