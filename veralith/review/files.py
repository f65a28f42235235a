"""Labels as files: written as JSONL or CSV, read back from those and from Langfuse and Phoenix
annotation exports (`veralith labels export` / `veralith labels import`).

Reading is pure: each line becomes a `LabelRow` (the label with the keys that find its trace) or a
`Problem` (its line number and what is wrong), and the caller looks the trace up and stores it.
A label keeps its uid through export and import, so importing a file twice adds nothing twice; a
row without one gets a uid derived from its content, for the same reason.

How a row finds its trace, first that is given: `trace_uid` (a Veralith export), else
`knowledge_base` + `external_id` (your own record id: a spreadsheet, or a Langfuse/Phoenix trace
imported by `veralith import`, whose trace id is its record id), else `trace_id`.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from veralith.store.labels import Label, LabelError, check

__all__ = ["FIELDS", "FORMATS", "LabelRow", "Problem", "read_labels", "write_labels"]

FORMATS = ("jsonl", "csv", "langfuse", "phoenix")
FIELDS = ("uid", "trace_id", "trace_uid", "knowledge_base", "external_id", "target", "item", "value", "reviewer",
          "labelled_at", "note", "judged", "result_at", "source")


@dataclass(frozen=True)
class LabelRow:
    line: int
    target: str
    item: str
    value: str
    reviewer: str
    labelled_at: float
    note: str | None
    source: str
    uid: str
    trace_uid: str | None = None
    knowledge_base: str | None = None
    external_id: str | None = None
    trace_id: int | None = None


@dataclass(frozen=True)
class Problem:
    line: int
    message: str


def write_labels(rows: Iterable[tuple[Label, tuple[str, str, str | None]]], sink: TextIO, fmt: str, *,
                 cell: Callable[[Any], Any] = lambda v: v, escape: Callable[[str], str] | None = None) -> int:
    """Write (label, (trace uid, knowledge base, external id)) rows as JSONL or CSV; returns the count.
    `cell` makes a CSV cell safe from spreadsheet formulas (the CLI's rule); `escape` rewrites
    control characters when the sink is a terminal."""
    writer = csv.DictWriter(sink, fieldnames=FIELDS) if fmt == "csv" else None
    if writer is not None:
        writer.writeheader()
    count = 0
    for label, (trace_uid, kb, external) in rows:
        data = {"uid": label.uid, "trace_id": label.trace_id, "trace_uid": trace_uid, "knowledge_base": kb,
                "external_id": external, "target": label.target, "item": label.item, "value": label.value,
                "reviewer": label.reviewer, "labelled_at": _iso(label.labelled_at), "note": label.note,
                "judged": label.judged, "result_at": label.result_at, "source": label.source}
        if writer is not None:
            writer.writerow({k: "" if v is None else cell(v) for k, v in data.items()})
        else:
            line = json.dumps(data, ensure_ascii=False)
            sink.write((escape(line) if escape else line) + "\n")
        count += 1
    return count


def read_labels(text: str, fmt: str | None, *, reviewer: str | None = None) -> Iterator[LabelRow | Problem]:
    """The rows of a labels file (`fmt` None: JSONL, or CSV when its first line is a header naming
    `target`; Langfuse and Phoenix are named explicitly). `reviewer` is used where a row names none."""
    first = text.lstrip().split("\n", 1)[0]
    fmt = fmt or ("csv" if first[:1] not in ("{", "[") and "target" in first.split(",") else "jsonl")
    if fmt not in FORMATS:
        yield Problem(0, f"unknown labels format {fmt!r}; one of: {', '.join(FORMATS)}")
        return
    for line, data in _records(text, fmt):
        if isinstance(data, Problem):
            yield data
            continue
        try:
            yield _ROW[fmt](line, data, reviewer)
        except (LabelError, ValueError, TypeError) as exc:
            yield Problem(line, str(exc))


def _records(text: str, fmt: str) -> Iterator[tuple[int, dict[str, Any] | Problem]]:
    if fmt == "csv":
        for n, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
            yield n, {k: _uncell(v) for k, v in row.items() if k is not None and v not in (None, "")}
        return
    stripped = text.lstrip()
    if stripped.startswith("["):  # a JSON array (Langfuse's and Phoenix's downloads can be one)
        try:
            items = json.loads(stripped)
        except json.JSONDecodeError as exc:
            yield 1, Problem(1, f"not valid JSON: {exc.msg} at line {exc.lineno}")
            return
        for n, item in enumerate(items, start=1):
            yield n, item if isinstance(item, dict) else Problem(n, "not a JSON object")
        return
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
        except json.JSONDecodeError as exc:
            yield n, Problem(n, f"not valid JSON: {exc.msg}")
            continue
        yield n, item if isinstance(item, dict) else Problem(n, "not a JSON object")


def _uncell(value: str) -> str:
    """A cell written safe from formulas ('=...) read back as it was."""
    return value[1:] if value[:1] == "'" and value[1:2] in ("=", "+", "-", "@", "\t", "\r") else value


def _text(data: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = data.get(key)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return None


def _when(value: Any) -> float:
    if value in (None, ""):
        return dt.datetime.now(dt.timezone.utc).timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except ValueError:
        pass
    when = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return (when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)).timestamp()


def _iso(when: float) -> str:
    return dt.datetime.fromtimestamp(when, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _derived_uid(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:32]


def _finish(line: int, *, target: str, item: str, value: str, reviewer: str | None, when: Any, note: str | None,
            source: str, uid: str | None, trace_uid: str | None = None, kb: str | None = None,
            external: str | None = None, trace_id: Any = None) -> LabelRow:
    target, item, value = check(target, item, value)
    if not reviewer:
        raise LabelError("no reviewer: the row names none (give --by NAME for the file)")
    if trace_uid is None and external is None and trace_id in (None, ""):
        raise LabelError("no trace: give trace_uid, external_id (with knowledge_base) or trace_id")
    labelled_at = _when(when)
    tid = None if trace_id in (None, "") else int(str(trace_id).lstrip("#"))
    key = (trace_uid, kb, external, tid, target, item, value, reviewer, labelled_at)
    return LabelRow(line, target, item, value, reviewer, labelled_at, note, source, uid or _derived_uid(*key),
                    trace_uid=trace_uid, knowledge_base=kb, external_id=external, trace_id=tid)


def _veralith_row(line: int, data: dict[str, Any], reviewer: str | None) -> LabelRow:
    if not _text(data, "target") or not _text(data, "value"):
        raise LabelError("a label row needs `target` and `value`")
    return _finish(line, target=str(data["target"]), item=_text(data, "item") or "", value=str(data["value"]),
                   reviewer=_text(data, "reviewer") or reviewer, when=data.get("labelled_at"),
                   note=_text(data, "note"), source=_text(data, "source") or "import", uid=_text(data, "uid"),
                   trace_uid=_text(data, "trace_uid"), kb=_text(data, "knowledge_base"),
                   external=_text(data, "external_id"), trace_id=data.get("trace_id"))


def _name(name: str) -> tuple[str, str]:
    """A score or annotation name as (target, item): `cell`, `gate`, `claim:k2`, `sufficiency:q1`,
    `coverage:q1` (an optional `veralith.` or `veralith_` prefix is dropped)."""
    for prefix in ("veralith.", "veralith_"):
        if name.lower().startswith(prefix):
            name = name[len(prefix):]
    target, _, item = name.partition(":")
    return target, item


def _value(target: str, value: Any) -> str:
    """A pass/fail score may be boolean or 1/0 in the annotation tools; anything else is its text."""
    if target == "gate" and isinstance(value, (bool, int, float)):
        return "pass" if value else "fail"
    if target == "gate" and str(value).strip().lower() in ("true", "false", "1", "0", "1.0", "0.0"):
        return "pass" if str(value).strip().lower() in ("true", "1", "1.0") else "fail"
    return str(value)


def _langfuse_row(line: int, data: dict[str, Any], reviewer: str | None) -> LabelRow:
    """One Langfuse score (Scores API / UI export): name, value or stringValue, traceId, comment,
    authorUserId, timestamp. A score whose name is not a label target is an error line."""
    name = _text(data, "name")
    if name is None:
        raise LabelError("a Langfuse score needs `name` (e.g. cell, gate, claim:k2)")
    target, item = _name(name)
    raw = data.get("stringValue") if data.get("stringValue") not in (None, "") else data.get("value")
    if raw is None:
        raise LabelError(f"score {name!r} has no value")
    return _finish(line, target=target, item=item, value=_value(target, raw),
                   reviewer=_text(data, "authorUserId", "userId") or reviewer,
                   when=data.get("timestamp") or data.get("createdAt"), note=_text(data, "comment"),
                   source="langfuse", uid=_text(data, "id"), kb=_text(data, "knowledge_base"),
                   external=_text(data, "traceId", "trace_id"))


def _phoenix_row(line: int, data: dict[str, Any], reviewer: str | None) -> LabelRow:
    """One Phoenix span or trace annotation: name, result {label, score, explanation} (or those keys
    at the top level, as a DataFrame written with to_json(orient="records") has them), trace_id."""
    name = _text(data, "name")
    if name is None:
        raise LabelError("a Phoenix annotation needs `name` (e.g. cell, gate, claim:k2)")
    target, item = _name(name)
    found = data.get("result")
    result: dict[str, Any] = found if isinstance(found, dict) else data
    raw = result.get("label") if result.get("label") not in (None, "") else result.get("score")
    if raw is None:
        raise LabelError(f"annotation {name!r} has neither a label nor a score")
    who = _text(data, "user_id", "annotator", "identifier") or reviewer
    return _finish(line, target=target, item=item, value=_value(target, raw), reviewer=who,
                   when=data.get("updated_at") or data.get("created_at"), note=_text(result, "explanation"),
                   source="phoenix", uid=_text(data, "id"), kb=_text(data, "knowledge_base"),
                   external=_text(data, "trace_id", "context.trace_id"))


_ROW = {"jsonl": _veralith_row, "csv": _veralith_row, "langfuse": _langfuse_row, "phoenix": _phoenix_row}
