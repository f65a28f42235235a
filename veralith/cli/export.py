"""`veralith export`: stored results with their bookkeeping, as JSON lines or CSV rows.

A JSONL line is the result exactly as `EvaluationResult` serialises it (so backend, judge_model,
prompt_versions, usage and each chunk's rank and score are in it) plus the trace's own fields:
`external_id`, `created_at`, `updated_at` and `evaluated_at` (ISO-8601 UTC) and `app_latency_ms`
(the app's own time, {"total", "retrieval", "generation"} as recorded, or null). Reading a line back
into the model means leaving those out: `EvaluationResult.model_validate(without_trace_fields(obj))`.

A CSV row is veralith.cli.records.csv_row plus the same trace fields (the app latency as three
columns, empty when not recorded), cached input tokens and the prompt versions (a JSON object); text
cells are made safe from spreadsheet formulas there.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Any

from veralith.cli.records import CSV_FIELDS, _cell_safe, csv_row

if TYPE_CHECKING:
    from veralith.store.protocol import StoredResult

__all__ = ["EXPORT_CSV_FIELDS", "TRACE_FIELDS", "without_trace_fields", "write_stored"]

TRACE_FIELDS = ("external_id", "created_at", "updated_at", "evaluated_at", "app_latency_ms")
_LATENCY_CSV = {"total": "app_latency_ms", "retrieval": "app_retrieval_ms", "generation": "app_generation_ms"}
EXPORT_CSV_FIELDS = ["trace_id", *TRACE_FIELDS[:-1], *_LATENCY_CSV.values(), *CSV_FIELDS[1:], "cached_input_tokens",
                     "prompt_versions"]


def without_trace_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """An exported JSON line as a plain result (for `EvaluationResult.model_validate`)."""
    return {k: v for k, v in obj.items() if k not in TRACE_FIELDS}


def _trace_fields(item: StoredResult) -> dict[str, Any]:
    info = item.info
    return {"external_id": info.external_id, "created_at": info.created_at, "updated_at": info.updated_at,
            "evaluated_at": info.evaluated_at, "app_latency_ms": info.app_latency_ms or None}


def write_stored(items: Iterable[StoredResult], sink: IO[str], fmt: str,
                 escape: Callable[[str], str] | None = None) -> int:
    """Stream stored results to `sink` as JSON lines or CSV; return how many were written.

    `escape` (render.terminal_safe when the sink is a terminal) rewrites control and bidi
    characters as visible \\u escapes, which keeps a JSON line valid JSON."""
    count = 0
    writer = csv.DictWriter(sink, fieldnames=EXPORT_CSV_FIELDS) if fmt == "csv" else None
    if writer is not None:
        writer.writeheader()
    for item in items:
        if writer is not None:
            fields = _trace_fields(item)
            latency = fields.pop("app_latency_ms") or {}
            row = {**csv_row(item.result), **{k: _cell_safe(v) for k, v in fields.items()},
                   **{column: latency.get(part) for part, column in _LATENCY_CSV.items()},
                   "cached_input_tokens": item.result.usage.cached_input_tokens,
                   "prompt_versions": json.dumps(item.result.prompt_versions, sort_keys=True)}
            writer.writerow(row if escape is None else {k: escape(v) if isinstance(v, str) else v
                                                        for k, v in row.items()})
        else:
            obj = {**item.result.model_dump(mode="json"), **_trace_fields(item)}
            line = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            sink.write((line if escape is None else escape(line)) + "\n")
        count += 1
    return count
