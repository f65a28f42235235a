"""Trace records in files: JSONL or CSV input read and checked record by record, and exports written out.

Input records are validated by the library's own checks (veralith.pipeline.inputs), so a record the
CLI accepts is exactly a call `evaluate()` accepts; every problem becomes a BadLine whose message
says what is wrong. Files are read as bytes, one line at a time: memory does not grow with the file,
and one bad byte spoils one record, not the rest of the run. A file whose name ends in `.csv` is CSV
(a header row naming the same fields); any other is JSONL. Both accept the field names of RAGAS and
DeepEval (ALIASES).
"""

from __future__ import annotations

import ast
import csv
import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from veralith.models import ContextChunk, EvaluationResult, Reference
from veralith.pipeline.inputs import MAX_TEXT_CHARS

__all__ = ["ALIASES", "CSV_FIELDS", "REFERENCE_ALIASES", "BadLine", "Record", "count_lines", "csv_row", "is_csv",
           "is_json_array", "parse_line", "parse_object", "read_records", "write_export"]

REQUIRED = ("query", "context", "response")
MAX_ID_CHARS = 256  # a record's own id: a key to find the trace by, not a place for text
# Each required field under the names other tools write it with, Veralith's own first: RAGAS
# (user_input, retrieved_contexts, response; before 0.2 question, contexts, answer) and DeepEval
# (input, retrieval_context, actual_output). docs/quickstart.md documents them. A record may use any
# one name per field; two names for one field must agree.
ALIASES = {
    "query": ("query", "user_input", "question", "input"),
    "context": ("context", "retrieved_contexts", "contexts", "retrieval_context"),
    "response": ("response", "answer", "actual_output"),
}
# The optional reference of a golden set, under the same tools' names: RAGAS `reference` (older
# `ground_truth`, and `ground_truths`, a list), DeepEval `expected_output`, RAGAS's example CSVs
# `expected_answer`; the chunks that should have been retrieved: RAGAS `reference_contexts`, DeepEval
# `expected_context`, `ground_truth_contexts`.
REFERENCE_ALIASES = {
    "reference": ("reference", "ground_truth", "expected_output", "expected_answer", "ground_truths"),
    "reference_contexts": ("reference_contexts", "expected_context", "ground_truth_contexts"),
}


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
    external_id: str | None = None   # the record's own `id`, as text: its trace's external id
    unchanged: bool = False          # a re-run record whose stored result (trace_id's) stands
    latency_ms: dict[str, float] = dataclasses.field(default_factory=dict)  # the app's own time, if given
    reference: Reference | None = None   # the golden set's reference answer and expected chunks, if given


@dataclass(frozen=True)
class BadLine:
    line: int
    message: str
    blank: bool = False   # a blank line is reported but is not an error (editors and `cat` leave them)


def _reject_constant(name: str) -> float:
    # json accepts NaN/Infinity by default; a NaN in metadata would surface later as a NaN in exports.
    raise ValueError(f"{name} is not valid JSON")


def parse_line(lineno: int, raw: bytes, *, default_kb: str) -> Record | BadLine:
    """Validate one JSONL line; every problem becomes a BadLine whose message says what is wrong."""
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
    return parse_object(lineno, obj, default_kb=default_kb)


def parse_object(lineno: int, obj: dict[str, Any], *, default_kb: str) -> Record | BadLine:
    """Validate one record (a JSONL object or a CSV row made into one), its fields under any of
    their ALIASES; every problem becomes a BadLine whose message says what is wrong."""
    from veralith.pipeline.inputs import (
        check_knowledge_base,
        check_latency,
        check_metadata,
        check_query,
        check_text,
        normalize_context,
    )
    from veralith.validate import check_stored_inputs, check_unicode

    fields = _required_fields(obj)
    if isinstance(fields, str):
        return BadLine(lineno, fields)
    try:
        metadata = check_metadata(obj.get("metadata"))
        ident = obj.get("id")
        if ident is not None:
            if isinstance(ident, bool) or not isinstance(ident, (str, int)):
                raise TypeError(f"id must be a str or int, got {_kind(ident)}")
            if not str(ident).strip():
                raise ValueError("id must not be empty")
            if len(str(ident)) > MAX_ID_CHARS:
                raise ValueError(f"id is {len(str(ident))} characters long; at most {MAX_ID_CHARS}")
            check_unicode("id", str(ident))
            if "id" in metadata and metadata["id"] != ident:
                raise ValueError("id differs from metadata.id; give one or make them equal")
            # Stored as the trace's external id (7 and "7" are one id); kept in metadata too, where
            # readers of earlier exports look for it.
            metadata["id"] = ident
        kb = obj.get("knowledge_base")
        record = Record(
            line=lineno,
            query=check_query(fields["query"]),
            context=normalize_context(fields["context"]),
            response=check_text("response", fields["response"]),
            knowledge_base=default_kb if kb is None else check_knowledge_base(kb),
            metadata=metadata,
            external_id=None if ident is None else str(ident),
            latency_ms=check_latency(obj.get("latency_ms")),
            reference=_reference(obj),
        )
        # What log() and evaluate() refuse: lone surrogates ("a\ud800"), 1e400 (inf), deep nesting.
        check_stored_inputs(record.query, record.context, record.response, record.metadata)
        check_unicode("knowledge_base", record.knowledge_base)
        return record
    except (TypeError, ValueError) as exc:
        return BadLine(lineno, str(exc))


def _required_fields(obj: dict[str, Any]) -> dict[str, Any] | str:
    """query, context and response, each read under whichever of its ALIASES the record uses; or
    the message saying which names are expected or which two names disagree."""
    found: dict[str, Any] = {}
    for field, names in ALIASES.items():
        given = [name for name in names if name in obj]
        if not given:
            continue
        first = given[0]
        clash = next((name for name in given[1:] if obj[name] != obj[first]), None)
        if clash is not None:
            return (f'"{first}" and "{clash}" both give the {field}, with different values; keep one '
                    f"(they are aliases: {_names(names)})")
        found[field] = obj[first]
    if not found:
        keys = ", ".join(f'"{k}"' for k in list(obj)[:8]) + (", …" if len(obj) > 8 else "")
        return (f"no known field names (got {keys or 'none'}); expected query, context, response, or the "
                "names of RAGAS (user_input, retrieved_contexts, response; older: question, contexts, answer) "
                "or DeepEval (input, retrieval_context, actual_output)")
    missing = [field for field in REQUIRED if field not in found]
    if missing:
        return (f"missing required field{'s' if len(missing) > 1 else ''} "
                + "; ".join(f'"{f}" (or {_names(ALIASES[f][1:], "or")})' for f in missing))
    return found


def _reference(obj: dict[str, Any]) -> Reference | None:
    """The record's reference, each part under whichever of its REFERENCE_ALIASES it uses (two names
    for one part must agree); raises ValueError/TypeError naming the field."""
    from veralith.pipeline.reference_inputs import check_reference

    found: dict[str, Any] = {}
    for field, names in REFERENCE_ALIASES.items():
        given = [name for name in names if name in obj and obj[name] not in (None, "")]
        if not given:
            continue
        clash = next((name for name in given[1:] if obj[name] != obj[given[0]]), None)
        if clash is not None:
            raise ValueError(f'"{given[0]}" and "{clash}" both give the {field}, with different values; keep one '
                             f"(they are aliases: {_names(names)})")
        found[field] = obj[given[0]]
    answer = found.get("reference")
    if isinstance(answer, list) and all(isinstance(a, str) for a in answer):   # RAGAS 0.1 `ground_truths`
        answer = "\n".join(answer)
    return check_reference(answer, found.get("reference_contexts"))


def _names(names: Iterable[str], conjunction: str = "") -> str:
    quoted = [f'"{n}"' for n in names]
    if conjunction and len(quoted) > 1:
        return ", ".join(quoted[:-1]) + f" {conjunction} " + quoted[-1]
    return ", ".join(quoted)


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def read_records(path: Path, *, default_kb: str = "default") -> Iterator[Record | BadLine]:
    """Yield one Record or BadLine per record (a JSONL line; a CSV row, numbered by the line it starts
    on), reading lazily (binary, so one bad byte spoils one record)."""
    if is_csv(path):
        yield from _read_csv(path, default_kb=default_kb)
        return
    with path.open("rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            yield parse_line(lineno, raw, default_kb=default_kb)


def count_lines(path: Path) -> int:
    """Records in the file, for the progress bar's total (non-blank JSONL lines; CSV rows but the
    header); one pass that holds nothing."""
    if is_csv(path):
        with path.open("rb") as handle:
            rows = csv.reader(_decoded_lines(handle, set()))
            return max(0, sum(1 for row in rows if any(cell.strip() for cell in row)) - 1)
    with path.open("rb") as handle:
        return sum(1 for raw in handle if raw.strip())


def is_csv(path: Path) -> bool:
    return path.suffix.lower() == ".csv"


def is_json_array(path: Path) -> bool:
    """Whether a (non-CSV) file opens a JSON array spread over several lines, as DeepEval's
    `save_as(file_type="json")` and `json.dump(..., indent=...)` write one: read as JSONL, every line
    of it would be a bad line, except an object that happens to fit on one. A one-line array is left
    to the per-line check, whose message already says so."""
    with path.open("rb") as handle:
        for raw in handle:
            first = raw.removeprefix(b"\xef\xbb\xbf").strip()  # a UTF-8 byte-order mark
            if not first:
                continue
            if not first.startswith(b"["):
                return False
            try:
                json.loads(first)
            except ValueError:
                return True
            return False
    return False


# A CSV cell holds a whole context (a JSON list of texts); the csv module's default cap (128 KiB)
# would refuse one long before the library's own limits do.
_CSV_FIELD_LIMIT = 4 * MAX_TEXT_CHARS
_CSV_OPTIONAL = ("id", "knowledge_base", "metadata")


def _decoded_lines(handle: IO[bytes], bad: set[int]) -> Iterator[str]:
    """The file's lines as text for the csv module; a line that is not UTF-8 is decoded with
    replacement characters and its number (from 1) added to `bad`, so its row can be refused."""
    for lineno, raw in enumerate(handle, start=1):
        try:
            yield raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError:
            bad.add(lineno)
            yield raw.decode("utf-8", errors="replace")


def _read_csv(path: Path, *, default_kb: str) -> Iterator[Record | BadLine]:
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)
    bad: set[int] = set()
    with path.open("rb") as handle:
        reader = csv.reader(_decoded_lines(handle, bad))
        header: list[str] | None = None
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:  # e.g. a cell past the size limit; the reader goes on after it
                yield BadLine(start, f"not valid CSV ({exc})")
                continue
            if bad & set(range(start, reader.line_num + 1)):
                yield BadLine(start, "not valid UTF-8")
                continue
            if not any(cell.strip() for cell in row):
                yield BadLine(start, "blank line, skipped", blank=True)
                continue
            if header is None:
                header = [name.strip() for name in row]
                problem = _required_fields(dict.fromkeys(header, ""))
                if isinstance(problem, str):  # every row would fail the same way: say it once, for the header
                    yield BadLine(start, f"CSV header: {problem}")
                    return
                continue
            if len(row) != len(header):  # a cell lost or a stray comma: the cells no longer match their names
                yield BadLine(start, f"{len(row)} cells but the header names {len(header)} columns")
                continue
            yield _csv_record(start, dict(zip(header, row, strict=True)), default_kb=default_kb)


def _csv_record(lineno: int, row: dict[str, str], *, default_kb: str) -> Record | BadLine:
    """A CSV row as the record it stands for: a context cell holds a JSON list (of texts or chunk
    objects), a Python list of texts (as pandas writes one), or else one text (an empty cell: no
    context); metadata a JSON object; an empty optional cell is absent."""
    obj: dict[str, Any] = {}
    for name, value in row.items():
        if name in ALIASES["context"] or name in REFERENCE_ALIASES["reference_contexts"]:
            obj[name] = _csv_context(value)
        elif name in _CSV_OPTIONAL and not value.strip():
            continue
        elif name == "metadata":
            try:
                obj[name] = json.loads(value, parse_constant=_reject_constant)
            except (ValueError, RecursionError):
                return BadLine(lineno, "metadata must be a JSON object (the metadata cell is not valid JSON)")
        else:
            obj[name] = value
    return parse_object(lineno, obj, default_kb=default_kb)


def _csv_context(cell: str) -> Any:
    text = cell.strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            parsed = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            parsed = None  # "[1] The report says ..." is a text that happens to start with a bracket
        if isinstance(parsed, list):
            return parsed
        texts = _python_list_of_texts(text)
        if texts is not None:
            return texts
    return [cell]


def _python_list_of_texts(text: str) -> list[str] | None:
    """A cell written as a Python list of strings (`['a', 'b']`), or None. pandas writes a list
    column this way, so a RAGAS dataset saved with `to_pandas().to_csv()` has its contexts in this
    form; read as one text, every chunk would be judged as a single chunk with brackets and quotes.
    literal_eval evaluates literals only, never code."""
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
        return parsed
    return None


CSV_FIELDS = ["trace_id", "knowledge_base", "failure_cell", "quality_gate", "execution", "availability",
              "sufficiency_level", "sufficiency_fraction", "faithfulness_fraction", "threshold", "threshold_source",
              "n_sub_questions", "n_claims", "n_uncovered_sub_questions", "n_extra_claims", "refusal", "needs_review",
              "errors",
              "calls", "cache_hits", "input_tokens", "output_tokens", "usd", "backend", "judge_model",
              "suggestion", "query", "response", "metadata", "correctness", "context_recall", "answer_correctness"]


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
        "needs_review": d.needs_review if d else None,
        "errors": "; ".join(f"{e.phase.value}:{e.kind}" for e in result.errors),
        "calls": u.calls, "cache_hits": u.cache_hits, "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens, "usd": u.usd, "backend": result.backend,
        "judge_model": result.judge_model, "suggestion": result.suggestion.title if result.suggestion else None,
        "query": result.query, "response": result.response,
        "metadata": json.dumps(result.metadata, ensure_ascii=False, sort_keys=True) if result.metadata else None,
        # Empty without a reference (the layer is not_assessed only when a reference was given).
        "correctness": result.reference.correctness.value if result.reference else None,
        "context_recall": result.reference.context_recall if result.reference else None,
        "answer_correctness": result.reference.answer_correctness if result.reference else None,
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
