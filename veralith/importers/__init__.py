"""Traces people already have: span exports read into the (query, context, response) records `veralith eval` judges.

    imported = read_file(Path("spans.json"))     # the format is recognised from the content
    imported.format, imported.spans              # "otlp" | "phoenix" | "langfuse", how many spans
    for item in imported.traces: ...             # an eval record (dict), or a Problem naming what is missing

Formats: OTLP JSON (`{"resourceSpans": [...]}`, one object or one per line, as OTLP/HTTP and the
Collector's file exporter write it) with OpenInference or GenAI attributes (veralith.importers.otlp);
Phoenix's span listing (veralith.importers.otlp.phoenix_spans); Langfuse traces and observations
(veralith.importers.langfuse). Spans are grouped by trace id and each trace made into one record by
veralith.importers._traces.assemble: its `id` is the trace id (so importing a file twice judges
nothing twice), `latency_ms` the app's own timings. A file of another shape raises UnknownFormat
saying what it holds and what is expected.

Nothing here imports the CLI, the store or a model: reading is pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veralith.importers._traces import Problem, Span, assemble
from veralith.importers.langfuse import is_observation, is_trace, langfuse_spans
from veralith.importers.otlp import otlp_span, otlp_spans, phoenix_spans

__all__ = ["EXPECTED", "Imported", "Problem", "UnknownFormat", "read_file", "read_values"]

EXPECTED = ('OTLP JSON (an object with "resourceSpans", or one per line), Phoenix spans ({"data": [{"context": '
            '{"trace_id": ...}, "span_kind": ...}]}), or Langfuse traces (objects with "id" and "observations") '
            'or observations (objects with "traceId" and "type")')


class UnknownFormat(ValueError):
    """The file is not a trace export Veralith reads; the message says what it holds instead."""


@dataclass
class Imported:
    format: str                                  # "otlp", "phoenix" or "langfuse"
    spans: int
    traces: list[dict[str, Any] | Problem] = field(default_factory=list)   # by when each trace started


def read_file(path: Path) -> Imported:
    """Read, recognise and group a trace export. Raises UnknownFormat (or OSError) with the reason."""
    raw = path.read_bytes()
    try:
        values = [json.loads(raw)]
    except ValueError as whole:
        values = []
        for lineno, line in enumerate(raw.splitlines(), start=1):
            if line.strip():
                try:
                    values.append(json.loads(line))
                except ValueError:
                    raise UnknownFormat(f"not JSON, nor JSON lines ({whole}; line {lineno} is not JSON either)") \
                        from None
    if not values:
        raise UnknownFormat(f"empty: expected {EXPECTED}")
    return read_values(values)


def read_values(values: list[Any]) -> Imported:
    """Group the spans in these JSON values (a file's one value, or its lines)."""
    spans: list[Span] = []
    formats: list[str] = []
    traces: list[dict[str, Any]] = []
    observations: list[dict[str, Any]] = []
    for value in values:
        if isinstance(value, dict) and ("resourceSpans" in value or "resource_spans" in value):
            formats.append("otlp")
            spans += otlp_spans(value)
            continue
        items = value.get("data") if isinstance(value, dict) and isinstance(value.get("data"), list) else value
        for item in items if isinstance(items, list) else [items]:
            if is_trace(item):
                formats.append("langfuse")
                traces.append(item)
            elif is_observation(item):
                formats.append("langfuse")
                observations.append(item)
            elif isinstance(item, dict) and "context" in item and ("span_kind" in item or "attributes" in item):
                formats.append("phoenix")
                spans += phoenix_spans([item])
            elif isinstance(item, dict) and ("traceId" in item or "trace_id" in item) and \
                    ("spanId" in item or "span_id" in item):
                formats.append("otlp")
                spans.append(otlp_span(item))
    if not formats:
        raise UnknownFormat(f"found {_describe(values)}; expected {EXPECTED}")
    spans += langfuse_spans(traces, observations)
    source = max(set(formats), key=formats.count)
    return Imported(format=source, spans=len(spans), traces=group(spans, source))


def group(spans: Iterable[Span], source: str) -> list[dict[str, Any] | Problem]:
    """One record (or Problem) per trace id, ordered by when each trace started."""
    by_trace: dict[str, list[Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    out: list[tuple[int, str, dict[str, Any] | Problem]] = []
    for trace_id, members in by_trace.items():
        start = min((s.start_ns for s in members if s.start_ns is not None), default=0)
        item = assemble(trace_id, members, source) if trace_id else Problem(
            "", f"{len(members)} span(s) without a trace id")
        out.append((start, trace_id, item))
    return [item for _, _, item in sorted(out, key=lambda t: (t[0], t[1]))]


def _describe(values: list[Any]) -> str:
    value = values[0] if len(values) == 1 else values
    if isinstance(value, dict):
        keys = ", ".join(f'"{k}"' for k in list(value)[:6]) + (", ..." if len(value) > 6 else "")
        return f"a JSON object with keys {keys or '(none)'}"
    if isinstance(value, list):
        kinds = sorted({type(v).__name__ for v in value[:20]}) or ["nothing"]
        first = value[0] if value else None
        detail = f" (the first has keys {', '.join(repr(k) for k in list(first)[:6])})" if isinstance(first, dict) \
            else ""
        return f"a JSON list of {'/'.join(kinds)}{detail}"
    return f"a JSON {type(value).__name__}"
