"""Synthetic OTLP JSON with known groupings, for the import tests and benchmarks/import_scale.py.

Trace i has five spans: a CHAIN root (its question and answer name depot i), a RETRIEVER with three
documents about depot i, an EMBEDDING under the retriever, an LLM call and a TOOL call. The spans of
all traces are shuffled (seeded) across several resourceSpans blocks, as a collector batching several
services' exports writes them, so grouping must go by trace id. Every text is invented.
"""

from __future__ import annotations

import json
import random
from typing import Any

SPANS_PER_TRACE = 5
START_NS = 1_717_000_000_000_000_000


def question(i: int) -> str:
    return f"How many widgets does depot {i} hold?"


def answer(i: int) -> str:
    return f"Depot {i} holds {i * 7 % 997} widgets."


def documents(i: int) -> list[str]:
    return [f"Depot {i} holds {i * 7 % 997} widgets.", f"Depot {i} opens at {6 + i % 5} am.",
            f"Depot {i} is in zone {i % 12}."]


def trace_id(i: int) -> str:
    return f"{i + 1:032x}"


def _kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value}}


def spans_of(i: int) -> list[dict[str, Any]]:
    """The five spans of trace i; times: root 0-900 ms, retriever 10-130, embedding 20-40, model 150-850."""
    t, base = trace_id(i), START_NS + i * 2_000_000_000
    ids = [f"{i * 8 + k + 1:016x}" for k in range(SPANS_PER_TRACE)]

    def span(k: int, parent: int | None, name: str, start_ms: int, end_ms: int, attrs: list) -> dict[str, Any]:
        out = {"traceId": t, "spanId": ids[k], "name": name, "kind": 1, "attributes": attrs,
               "startTimeUnixNano": str(base + start_ms * 1_000_000), "endTimeUnixNano": str(base + end_ms * 1_000_000)}
        if parent is not None:
            out["parentSpanId"] = ids[parent]
        return out

    docs = [a for n, text in enumerate(documents(i)) for a in (
        _kv(f"retrieval.documents.{n}.document.content", text), _kv(f"retrieval.documents.{n}.document.id", f"d{i}-{n}"),
        _kv(f"retrieval.documents.{n}.document.score", round(0.9 - n / 10, 2)))]
    return [
        span(0, None, "rag", 0, 900, [_kv("openinference.span.kind", "CHAIN"),
                                      _kv("input.value", json.dumps({"question": question(i)})),
                                      _kv("output.value", answer(i))]),
        span(1, 0, "retrieve", 10, 130, [_kv("openinference.span.kind", "RETRIEVER"),
                                         _kv("input.value", question(i)), *docs]),
        span(2, 1, "embed", 20, 40, [_kv("openinference.span.kind", "EMBEDDING")]),
        span(3, 0, "generate", 150, 850, [_kv("openinference.span.kind", "LLM"),
                                          _kv("llm.input_messages.0.message.role", "user"),
                                          _kv("llm.input_messages.0.message.content", question(i)),
                                          _kv("llm.output_messages.0.message.content", answer(i))]),
        span(4, 0, "lookup", 860, 880, [_kv("openinference.span.kind", "TOOL")]),
    ]


def export(traces: int, *, blocks: int = 4, seed: int = 0) -> dict[str, Any]:
    """One ExportTraceServiceRequest holding `traces` traces' spans, shuffled over `blocks` blocks."""
    spans = [s for i in range(traces) for s in spans_of(i)]
    random.Random(seed).shuffle(spans)
    size = -(-len(spans) // blocks)
    return {"resourceSpans": [
        {"resource": {"attributes": [_kv("service.name", f"svc-{b}")]},
         "scopeSpans": [{"scope": {"name": "synthetic"}, "spans": spans[b * size:(b + 1) * size]}]}
        for b in range(blocks)]}
