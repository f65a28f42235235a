"""Traces people already have: span exports read into the (query, context, response) records `veralith eval` judges.

    imported = read_file(Path("spans.json"))     # the format is recognised from the content
    imported.format, imported.spans              # "otlp" | "phoenix" | "langfuse", how many spans
    for item in imported.traces: ...             # an eval record (dict), or a Problem naming what is missing

Formats: OTLP JSON (`{"resourceSpans": [...]}`, one object or one per line, as OTLP/HTTP and the
Collector's file exporter write it) with OpenInference or GenAI attributes (veralith.importers.otlp);
Phoenix's span listing (veralith.importers.otlp.phoenix_spans); Langfuse traces and observations
(veralith.importers.langfuse). The file streams (veralith.importers.stream: memory bounded by one span
and one trace, shape and depth checked, BadShape); spans are grouped by trace id and each trace made
into one record by veralith.importers._traces.assemble: its `id` is the trace id (so importing a file twice judges
nothing twice), `latency_ms` the app's own timings. A file of another shape raises UnknownFormat
saying what it holds and what is expected.

Nothing here imports the CLI, the store or a model: reading is pure.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from veralith.importers._traces import Problem
from veralith.importers.langfuse import is_observation, is_trace, langfuse_spans
from veralith.importers.otlp import otlp_span, phoenix_spans
from veralith.importers.stream import BadShape, Spill, units

__all__ = ["EXPECTED", "BadShape", "Imported", "Problem", "UnknownFormat", "read_file", "read_values"]

EXPECTED = ('OTLP JSON (an object with "resourceSpans", or one per line), Phoenix spans ({"data": [{"context": '
            '{"trace_id": ...}, "span_kind": ...}]}), or Langfuse traces (objects with "id" and "observations") '
            'or observations (objects with "traceId" and "type")')


class UnknownFormat(ValueError):
    """The file is not a trace export Veralith reads; the message says what it holds instead."""


class Imported:
    """A read export: its format, how many spans and traces, and the traces themselves, assembled one at
    a time from a temporary file each time `traces` is iterated (memory: one trace). `close` deletes
    that file (it is deleted at exit otherwise)."""

    def __init__(self, format: str, spill: Spill, source: str) -> None:
        self.format, self._spill, self._source = format, spill, source
        self.spans = spill.spans
        self.count, self.judgeable = spill.finish()

    @property
    def traces(self) -> _Traces:
        return _Traces(self)

    def close(self) -> None:
        self._spill.close()


class _Traces:
    """The traces of an import, by when each started: iterable (again and again), sized, indexable."""

    def __init__(self, imported: Imported) -> None:
        self._imported = imported

    def __iter__(self) -> Iterator[dict[str, Any] | Problem]:
        return self._imported._spill.traces(self._imported._source)

    def __len__(self) -> int:
        return self._imported.count

    def __getitem__(self, index: int) -> dict[str, Any] | Problem:
        return list(self)[index]


def read_file(path: Path) -> Imported:
    """Read, recognise and group a trace export, in memory bounded by one span and one trace
    (veralith.importers.stream). Raises UnknownFormat (or BadShape, or OSError) with the reason."""
    with open(path, "rb") as stream:
        return _read(stream)


def read_values(values: list[Any]) -> Imported:
    """Group the spans in these JSON values (a file's one value, or its lines)."""
    return _read(io.BytesIO(b"\n".join(json.dumps(v).encode() for v in values)))


def _read(stream: IO[bytes]) -> Imported:
    import ijson

    if _blank(stream):
        raise UnknownFormat(f"empty: expected {EXPECTED}")
    spill = Spill()
    try:
        formats, samples = _spill_units(stream, spill)
    except ijson.JSONError as exc:
        spill.close()
        raise UnknownFormat(f"not JSON, nor JSON lines ({str(exc).splitlines()[0][:200]})") from None
    except BaseException:
        spill.close()
        raise
    if not formats:
        spill.close()
        raise UnknownFormat((f"found {_describe(samples)}; " if samples else "empty: ") + f"expected {EXPECTED}")
    source = max(set(formats), key=formats.count)
    return Imported(source, spill, source)


def _spill_units(stream: IO[bytes], spill: Spill) -> tuple[list[str], list[Any]]:
    """Read every unit of the stream into `spill`; (the format of each unit read, what to describe a
    file of another shape by: its first unknown top-level value, or a list of its unknown items)."""
    formats: list[str] = []
    whole: list[Any] = []
    listed: list[Any] = []
    for role, unit, resource in units(stream):
        if role == "span":
            formats.append("otlp")
            spill.add([_checked(otlp_span, unit)], resource)
        elif role == "resource":
            spill.service(resource, unit["service"])
        elif role == "value" and isinstance(unit, dict) and ("resourceSpans" in unit or "resource_spans" in unit):
            formats.append("otlp")   # its spans came one by one
        elif role == "value" and isinstance(unit, dict) and isinstance(unit.get("data"), list):
            continue   # its elements came one by one, as items
        elif role == "value" and isinstance(unit, list):
            listed += unit[:20 - len(listed)]   # what is left in it: its scalars (its objects came as items)
        else:
            found = _item_format(unit, spill)
            if found is None and len(whole) + len(listed) < 20:
                (listed if role == "item" else whole).append(unit)
            elif found is not None:
                formats.append(found)
    return formats, whole[:1] or ([listed] if listed else [])


def _item_format(item: Any, spill: Spill) -> str | None:
    """Spill one item (a Langfuse trace or observation, a Phoenix span, a lone OTLP span); its format."""
    if is_trace(item):
        spill.add(_checked(lambda t: list(langfuse_spans([t], [])), item))
        return "langfuse"
    if is_observation(item):
        spill.add(_checked(lambda o: list(langfuse_spans([], [o])), item))
        return "langfuse"
    if isinstance(item, dict) and "context" in item and ("span_kind" in item or "attributes" in item):
        spill.add(_checked(lambda i: list(phoenix_spans([i])), item))
        return "phoenix"
    if isinstance(item, dict) and ("traceId" in item or "trace_id" in item) and ("spanId" in item or "span_id" in item):
        spill.add([_checked(otlp_span, item)])
        return "otlp"
    return None


def _blank(stream: IO[bytes]) -> bool:
    """Whether the stream holds nothing but white space (read in chunks; then rewound)."""
    while chunk := stream.read(1 << 16):
        if chunk.strip():
            stream.seek(0)
            return False
    return True


T = TypeVar("T")


def _checked(read: Callable[[Any], T], unit: Any) -> T:
    """A reader's output for one unit; a field of the wrong type inside it is BadShape, one line."""
    try:
        return read(unit)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        ident = next((str(unit.get(k))[:80] for k in ("spanId", "span_id", "id") if isinstance(unit, dict)
                      and unit.get(k) is not None), None)
        raise BadShape(f"a span{f' ({ident})' if ident else ''} has a field of the wrong type "
                       f"({type(exc).__name__}: {str(exc)[:120]})") from None


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
