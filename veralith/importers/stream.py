"""A trace export read in bounded memory: the file is parsed as a stream of JSON events (ijson), each
span (or Langfuse/Phoenix item) built on its own, read into a `Span` and spilled into a temporary
SQLite file; the traces are then assembled one at a time, grouped by trace id from that file. What
the process holds at once is one span while reading and one trace while assembling (plus the
small skeleton of the file around the spans), whatever the file's size.

The shape is checked as it streams, before anything is judged or stored: nesting deeper than
`MAX_DEPTH` levels, or an OTLP container of the wrong type (`{"resourceSpans": "not a list"}`),
raises `BadShape` naming where; the caller reports it as one line.

Why ijson: the standard library's json reads a whole document into memory (a 200 MB export became
~1 GB of objects) and recurses (a deeply nested file ends in RecursionError). ijson parses
incrementally without recursion, reads JSON lines too (`multiple_values`), and ships a C backend
(yajl2_c) with a pure-Python fallback. Its events without prefixes (`basic_parse`) are used: its
prefixed events cost memory quadratic in the nesting depth, the very thing a hostile file raises.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from veralith.importers._traces import Problem, Span, assemble

__all__ = ["MAX_DEPTH", "BadShape", "Spill", "units"]

MAX_DEPTH = 64   # an OTLP span with nested kvlist attributes is ~15 levels deep

_RESOURCE_SPANS = ("resourceSpans", "resource_spans")
_SCOPE_SPANS = ("scopeSpans", "scope_spans", "instrumentationLibrarySpans", "instrumentation_library_spans")


class BadShape(ValueError):
    """The file is JSON, but not a shape the importer reads safely (too deep, a container of the
    wrong type); the message says where."""


def _role(path: tuple[str, ...]) -> str | None:
    """What a value at `path` (keys, and "item" for a list's element) is to the reader."""
    n = len(path)
    if n >= 1 and path[0] in _RESOURCE_SPANS:
        if n == 1:
            return "resourceSpans"
        if n == 2:
            return "resource"          # one ResourceSpans: its resource, and its scopes
        if n == 3 and path[2] in _SCOPE_SPANS:
            return "scopeSpans"
        if n == 4 and path[2] in _SCOPE_SPANS:
            return "scope"
        if n == 5 and path[2] in _SCOPE_SPANS and path[4] == "spans":
            return "spans"
        if n == 6 and path[2] in _SCOPE_SPANS and path[4] == "spans":
            return "span"
    if path == ("data", "item") or path == ("item",):
        return "item"
    return None


_EXPECTED = {"resourceSpans": "list", "resource": "map", "scopeSpans": "list", "scope": "map", "spans": "list",
             "span": "map"}
_KIND = {"start_map": "map", "start_array": "list", "string": "string", "number": "number", "boolean": "boolean",
         "null": "null"}
_WORDS = {"map": "an object", "list": "a list", "string": "a string", "number": "a number", "boolean": "a boolean",
          "null": "null"}


def units(stream: IO[bytes]) -> Iterator[tuple[str, Any, int]]:
    """The units of a JSON file (one value, or one per line): ("span", an OTLP span object, its
    ResourceSpans' number), ("resource", {"service": name or None}, its number) once a
    ResourceSpans ends, ("item", a list element or a `data` element), and ("value", a top-level value
    with the units taken out of it). Raises BadShape, or ijson's error for text that is not JSON."""
    import ijson

    stack: list[list[Any]] = []    # [container, key under which the next value goes, path, role]
    resource_no = -1
    events = ijson.basic_parse(stream, multiple_values=True, use_float=True)
    for event, value in events:
        if event == "map_key":
            stack[-1][1] = value
            continue
        if event == "end_map" or event == "end_array":
            container, _, path, role = stack.pop()
            done = _ended(container, role, resource_no) if role is not None else None
            if done is not None:
                yield done
            elif not stack:
                yield ("value", container, resource_no)
            elif role != "resource" and role != "scope":   # not kept: their spans were emitted
                _attach(stack[-1], container)
            continue
        depth = len(stack)
        # Roles sit at most 6 levels down: deeper values need no path (the hot loop, inside spans).
        if depth <= 6:
            parent = stack[-1] if stack else None
            path = () if parent is None else (*parent[2], "item" if isinstance(parent[0], list) else str(parent[1]))
            role = _role(path)
            if role in _EXPECTED and _EXPECTED[role] != _KIND[event]:
                raise BadShape(f"{_where(path)} is {_WORDS[_KIND[event]]}, not {_WORDS[_EXPECTED[role]]}")
        else:
            path, role = (), None
        if (role == "span" or role == "item") and event == "start_map":   # a unit: built by the tight loop
            yield (role, _build(events, depth + 1), resource_no)
            continue
        if event == "start_map" or event == "start_array":
            if depth >= MAX_DEPTH:
                raise BadShape(f"nested deeper than {MAX_DEPTH} levels; a trace export is never this deep")
            resource_no += role == "resource"
            stack.append([{} if event == "start_map" else [], None, path, role])
        elif not stack:
            yield ("value", value, resource_no)
        elif depth > 1 or not isinstance(stack[0][0], list) or len(stack[0][0]) < 20:
            _attach(stack[-1], value)   # (a top-level list keeps 20 scalars: enough to say what it holds)


def _build(events: Iterator[tuple[str, Any]], depth: int) -> dict[str, Any]:
    """The object whose start_map was just read from `events` (at nesting `depth`), built from the
    events up to its end: the loop most of a file's events go through, so it is kept to the bare
    steps (no path, no roles), the depth limit still checked."""
    root: dict[str, Any] = {}
    stack: list[Any] = [root]
    keys: list[Any] = [None]
    for event, value in events:
        if event == "map_key":
            keys[-1] = value
            continue
        if event == "end_map" or event == "end_array":
            stack.pop()
            keys.pop()
            if not stack:
                return root
            continue
        top = stack[-1]
        if event == "start_map" or event == "start_array":
            value = {} if event == "start_map" else []
            if len(stack) + depth >= MAX_DEPTH:
                raise BadShape(f"nested deeper than {MAX_DEPTH} levels; a trace export is never this deep")
            if top.__class__ is list:
                top.append(value)
            else:
                top[keys[-1]] = value
            stack.append(value)
            keys.append(None)
        elif top.__class__ is list:
            top.append(value)
        else:
            top[keys[-1]] = value
    raise BadShape("the file ends inside an object")


def _ended(container: Any, role: str, resource_no: int) -> tuple[str, Any, int] | None:
    if role == "span":
        return ("span", container, resource_no)
    if role == "item":
        return ("item", container, resource_no)
    if role == "resource":
        from veralith.importers.otlp import attributes

        resource = container.get("resource")
        service = attributes(resource.get("attributes")).get("service.name") if isinstance(resource, dict) else None
        return ("resource", {"service": service if isinstance(service, str) else None}, resource_no)
    return None


def _attach(frame: list[Any], value: Any) -> None:
    container = frame[0]
    if isinstance(container, list):
        container.append(value)
    else:
        container[frame[1]] = value


def _where(path: tuple[str, ...]) -> str:
    shown = ".".join(path[:8]) + (" ..." if len(path) > 8 else "")
    return f'"{shown}"' if shown else "the top level"


class Spill:
    """Spans kept in a temporary SQLite file until every span of the file is read, then handed out
    one trace at a time (`traces`). Delete it with `close` (or a `with` block)."""

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="veralith-import-")
        self.db = sqlite3.connect(Path(self._folder.name) / "spans.db", check_same_thread=False)
        self.db.execute("PRAGMA journal_mode = OFF")
        self.db.execute("PRAGMA synchronous = OFF")
        self.db.execute("CREATE TABLE spans (trace_id TEXT NOT NULL, start_ns INTEGER, rag INTEGER NOT NULL,"
                        " resource INTEGER NOT NULL, span TEXT NOT NULL)")
        self.db.execute("CREATE TABLE services (resource INTEGER PRIMARY KEY, name TEXT)")
        self._batch: list[tuple[Any, ...]] = []
        self.spans = 0

    def add(self, spans: Iterable[Span], resource: int = -1) -> None:
        for span in spans:
            # What makes a trace RAG for assemble: a retriever, or a reranker that listed documents.
            rag = span.kind == "retriever" or (span.kind == "reranker" and bool(span.documents))
            self._batch.append((span.trace_id, span.start_ns, rag, resource,
                                json.dumps(vars(span), separators=(",", ":"))))   # plain JSON values
            self.spans += 1
        if len(self._batch) >= 2000:
            self.flush()

    def service(self, resource: int, name: str | None) -> None:
        self.db.execute("INSERT OR REPLACE INTO services VALUES (?, ?)", [resource, name])

    def flush(self) -> None:
        if self._batch:
            self.db.executemany("INSERT INTO spans VALUES (?, ?, ?, ?, ?)", self._batch)
            self._batch.clear()

    def finish(self) -> tuple[int, int]:
        """Index what was spilled; (how many traces, how many of them the eval runner will judge: those
        with a retriever or reranker span, and the group of spans without a trace id, a Problem)."""
        self.flush()
        self.db.execute("CREATE INDEX spans_by_trace ON spans (trace_id)")
        traces, judgeable = self.db.execute(
            "SELECT COUNT(*), COALESCE(SUM(rag OR trace_id = ''), 0) FROM (SELECT trace_id, MAX(rag) AS rag"
            " FROM spans GROUP BY trace_id)").fetchone()
        return int(traces), int(judgeable)

    def traces(self, source: str) -> Iterator[dict[str, Any] | Problem]:
        """One record (or Problem) per trace id, ordered by when each trace started (then by id)."""
        services = dict(self.db.execute("SELECT resource, name FROM services").fetchall())
        order = self.db.execute("SELECT trace_id FROM spans GROUP BY trace_id"
                                " ORDER BY COALESCE(MIN(start_ns), 0), trace_id")
        for (trace_id,) in order:
            members = []
            for resource, text in self.db.execute("SELECT resource, span FROM spans WHERE trace_id = ? ORDER BY rowid",
                                                  [trace_id]):
                span = Span(**json.loads(text))
                span.service = span.service or services.get(resource)
                members.append(span)
            yield assemble(trace_id, members, source) if trace_id else Problem(
                "", f"{len(members)} span(s) without a trace id")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.db.close()
        self._folder.cleanup()

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
