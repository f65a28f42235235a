"""Trace records in files: JSONL input read and checked line by line, and exports written out.

Input lines are validated by the library's own checks (veralith.pipeline.inputs), so a line the
CLI accepts is exactly a call `evaluate()` accepts; every problem becomes a BadLine whose message
says what is wrong. Files are read as bytes, one line at a time: memory does not grow with the file,
and one bad byte spoils one line, not the rest of the run.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from veralith.models import ContextChunk, EvaluationResult

__all__ = ["CSV_FIELDS", "BadLine", "Record", "count_lines", "csv_row", "parse_line", "read_records",
           "write_export"]

REQUIRED = ("query", "context", "response")


@dataclass(frozen=True)
class Record:
    """One valid input line, already normalised by the library's own input checks."""

    line: int
    query: str
    context: list[ContextChunk]
    response: str
    knowledge_base: str
    metadata: dict[str, Any]
    trace_id: int | None = None


@dataclass(frozen=True)
class BadLine:
    line: int
    message: str
    blank: bool = False   # a blank line is reported but is not an error (editors and `cat` leave them)


def _reject_constant(name: str) -> float:
    # json accepts NaN/Infinity by default; a NaN in metadata would surface later as a NaN in exports.
    raise ValueError(f"{name} is not valid JSON")


def parse_line(lineno: int, raw: bytes, *, default_kb: str) -> Record | BadLine:
    """Validate one line; every problem becomes a BadLine whose message says what is wrong."""
    from veralith.pipeline.inputs import (
        check_knowledge_base,
        check_metadata,
        check_query,
        check_text,
        normalize_context,
    )
    from veralith.validate import check_stored_inputs, check_unicode

    try:
        text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        return BadLine(lineno, f"not valid UTF-8 (byte {exc.start})")
    if not text.strip():
        return BadLine(lineno, "blank line, skipped", blank=True)
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        return BadLine(lineno, f"not valid JSON ({exc.msg} at column {exc.colno})")
    except (ValueError, RecursionError) as exc:
        return BadLine(lineno, f"not usable JSON ({exc})")
    if not isinstance(obj, dict):
        return BadLine(lineno, f"expected a JSON object with {', '.join(REQUIRED)}; got a JSON {_kind(obj)}")
    missing = [key for key in REQUIRED if key not in obj]
    if missing:
        return BadLine(lineno, f"missing required field{'s' if len(missing) > 1 else ''} "
                       + ", ".join(f'"{k}"' for k in missing))
    try:
        metadata = check_metadata(obj.get("metadata"))
        ident = obj.get("id")
        if ident is not None:
            if isinstance(ident, bool) or not isinstance(ident, (str, int)):
                raise TypeError(f"id must be a str or int, got {_kind(ident)}")
            if "id" in metadata and metadata["id"] != ident:
                raise ValueError("id differs from metadata.id; give one or make them equal")
            # The record's own id travels in metadata so results and exports can be joined back to it.
            metadata["id"] = ident
        kb = obj.get("knowledge_base")
        record = Record(
            line=lineno,
            query=check_query(obj["query"]),
            context=normalize_context(obj["context"]),
            response=check_text("response", obj["response"]),
            knowledge_base=default_kb if kb is None else check_knowledge_base(kb),
            metadata=metadata,
        )
        # What log() and evaluate() refuse: lone surrogates ("a\ud800"), 1e400 (inf), deep nesting.
        check_stored_inputs(record.query, record.context, record.response, record.metadata)
        check_unicode("knowledge_base", record.knowledge_base)
        return record
    except (TypeError, ValueError) as exc:
        return BadLine(lineno, str(exc))


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def read_records(path: Path, *, default_kb: str = "default") -> Iterator[Record | BadLine]:
    """Yield one Record or BadLine per line, reading lazily (binary, so one bad byte spoils one line)."""
    with path.open("rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            yield parse_line(lineno, raw, default_kb=default_kb)


def count_lines(path: Path) -> int:
    """Non-blank lines, for the progress bar's total; one cheap pass that holds nothing."""
    with path.open("rb") as handle:
        return sum(1 for raw in handle if raw.strip())


CSV_FIELDS = ["trace_id", "knowledge_base", "failure_cell", "quality_gate", "execution", "availability",
              "sufficiency_level", "sufficiency_fraction", "faithfulness_fraction", "threshold", "threshold_source",
              "n_sub_questions", "n_claims", "n_uncovered_sub_questions", "n_extra_claims", "refusal", "errors",
              "calls", "cache_hits", "input_tokens", "output_tokens", "usd", "backend", "judge_model",
              "suggestion", "query", "response", "metadata"]


def csv_row(result: EvaluationResult) -> dict[str, Any]:
    """One flat row per result; None stays empty (never 0 or NaN), so unknown cost stays unknown."""
    d, u = result.diagnosis, result.usage
    row: dict[str, Any] = {
        "trace_id": result.trace_id, "knowledge_base": result.knowledge_base,
        "failure_cell": result.failure_cell.value if result.failure_cell else None,
        "quality_gate": result.status.quality_gate.value, "execution": result.status.execution.value,
        "availability": result.status.availability.value,
        "sufficiency_level": d.sufficiency_level.value if d else None,
        "sufficiency_fraction": d.sufficiency_fraction if d else None,
        "faithfulness_fraction": d.faithfulness_fraction if d else None,
        "threshold": d.threshold if d else None, "threshold_source": d.threshold_source.value if d else None,
        "n_sub_questions": len(result.sub_questions), "n_claims": len(result.claims),
        "n_uncovered_sub_questions": d.n_uncovered_sub_questions if d else None,
        "n_extra_claims": d.n_extra_claims if d else None, "refusal": result.refusal,
        "errors": "; ".join(f"{e.phase.value}:{e.kind}" for e in result.errors),
        "calls": u.calls, "cache_hits": u.cache_hits, "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens, "usd": u.usd, "backend": result.backend,
        "judge_model": result.judge_model, "suggestion": result.suggestion.title if result.suggestion else None,
        "query": result.query, "response": result.response,
        "metadata": json.dumps(result.metadata, ensure_ascii=False, sort_keys=True) if result.metadata else None,
    }
    return {k: _cell_safe(v) for k, v in row.items()}


def _cell_safe(value: Any) -> Any:
    # A text cell starting with = + - @ is run as a formula by spreadsheet programs (CSV injection);
    # a leading apostrophe makes them show it as text. Numbers are left alone.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def write_export(results: Iterable[EvaluationResult], sink: IO[str], fmt: str,
                 escape: Callable[[str], str] | None = None) -> int:
    """Stream results to `sink` as JSON lines or CSV; return how many were written.

    `escape` (render.terminal_safe when the sink is a terminal) rewrites control and bidi
    characters as visible \\u escapes (four hex digits), which keeps a JSON line valid JSON."""
    count = 0
    writer = csv.DictWriter(sink, fieldnames=CSV_FIELDS) if fmt == "csv" else None
    if writer is not None:
        writer.writeheader()
    for result in results:
        if writer is not None:
            row = csv_row(result)
            writer.writerow(row if escape is None else {k: escape(v) if isinstance(v, str) else v
                                                        for k, v in row.items()})
        else:
            line = result.model_dump_json()
            sink.write((line if escape is None else escape(line)) + "\n")
        count += 1
    return count
