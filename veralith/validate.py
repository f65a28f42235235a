"""Checks of free-form values (metadata, chunk metadata) before anything is written or paid for.

Metadata is stored as JSON and shown by the CLI, so it must be JSON as SQLite and every reader
see it: string keys, finite numbers, text that is valid Unicode (no lone surrogates), bounded
nesting and size. `evaluate()`, `log()` and `veralith eval` apply the same rule
(`check_stored_inputs`, once per trace), so a value is refused before the first judge call.

Text a store cannot hold is refused here, once, for both stores: a NUL character (PostgreSQL's
text and jsonb cannot hold U+0000, so a NUL accepted on SQLite would be a trace that can never be
moved to PostgreSQL) and a lone surrogate (not valid UTF-8, so neither SQLite, PostgreSQL nor the
spool file can hold it). The policy is to refuse, not to rewrite: `log()`, `evaluate()` and an
`eval`/`import` record raise or report one line naming the field and the index, and nothing of that
trace reaches a spool. What reached a spool or a store before this rule (an older version's spool, a
SQLite history being migrated) meets the same rule, `unstorable`, where it is moved and is set aside
in the dead-letter place with its reason (veralith.work.shipper, veralith.store.copy);
`veralith dead-letters --retry --clean` replaces such characters with U+FFFD and stores it.
"""

from __future__ import annotations

import math
from typing import Any

from veralith.errors import InputError

__all__ = ["MAX_JSON_CHARS", "MAX_JSON_DEPTH", "MAX_RUN_NAME", "REPLACEMENT", "check_flag", "check_json_value",
           "check_run_name", "check_unicode", "clean_text", "unstorable"]

MAX_JSON_DEPTH = 32          # deeper metadata is a bug (or an attack on the recursive JSON code)
MAX_JSON_CHARS = 1_000_000   # roughly the serialised size; metadata is a label, not a payload
MAX_RUN_NAME = 200           # a run name is a label people type and read
REPLACEMENT = "\ufffd"        # what `clean_text` puts where a character no store can hold was


def check_json_value(name: str, value: Any) -> None:
    """Raise TypeError/InputError naming `name` (and the path inside it) unless `value` is plain,
    finite, valid-Unicode JSON within MAX_JSON_DEPTH levels and about MAX_JSON_CHARS characters."""
    budget = [MAX_JSON_CHARS]
    # Iterative walk: a 5,000-deep value must not hit Python's recursion limit on the way in.
    stack: list[tuple[str, Any, int]] = [(name, value, 0)]
    while stack:
        where, item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise InputError(f"{name} is nested more than {MAX_JSON_DEPTH} levels deep")
        budget[0] -= 8
        if item is None or isinstance(item, bool):
            pass
        elif isinstance(item, int):
            budget[0] -= 12
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InputError(f"{where} is {item}; JSON has no NaN or infinity (use null or a string)")
        elif isinstance(item, str):
            check_unicode(where, item)
            budget[0] -= len(item)
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise TypeError(f"{where} keys must be str (JSON objects have text keys), got "
                                    f"{type(key).__name__} {key!r}")
                check_unicode(f"{where} key", key)
                budget[0] -= len(key)
                stack.append((f"{where}[{key!r}]", child, depth + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{where}[{i}]", child, depth + 1) for i, child in enumerate(item))
        else:
            raise TypeError(f"{where} must be JSON-serialisable (str, number, bool, None, list, dict), "
                            f"got {type(item).__name__}")
        if budget[0] < 0:
            raise InputError(f"{name} is larger than about {MAX_JSON_CHARS:,} characters as JSON")


def unstorable(text: str) -> str | None:
    """Why no store can hold `text` (a NUL character, a lone surrogate), or None when both can: the
    one rule every way in applies (see the module docstring)."""
    at = text.find("\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        if at < 0 or exc.start < at:
            return (f"contains a lone surrogate ({text[exc.start]!a} at index {exc.start}); it is not valid "
                    "Unicode")
    if at >= 0:
        return (f"contains a NUL character (\\x00 at index {at}), which no Veralith store holds (PostgreSQL "
                "cannot): remove it or replace it")
    return None


def check_unicode(name: str, text: str) -> None:
    """Refuse text no store can hold: a NUL character or a lone surrogate such as '\\ud800'."""
    if "\x00" in text or not text.isascii():   # the common case (plain ASCII, no NUL) costs one scan
        why = unstorable(text)
        if why is not None:
            raise InputError(f"{name} {why}")


def clean_text(text: str) -> str:
    """`text` with every character no store can hold (NUL, lone surrogates) replaced by U+FFFD."""
    if unstorable(text) is None:
        return text
    return "".join(REPLACEMENT if ch == "\x00" or 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)


def check_flag(name: str, value: Any) -> bool:
    """A real bool: `persist="no"` would otherwise be truthy and store what the caller refused."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_stored_inputs(query: str, chunks: list[Any], response: str, metadata: dict[str, Any]) -> None:
    """Everything of a trace that is stored as text or JSON, checked the same way for every entry
    point (log(), evaluate() via pipeline.inputs, `veralith eval` lines). `chunks` are ContextChunks."""
    check_unicode("query", query)
    check_unicode("response", response)
    check_json_value("metadata", metadata)
    for i, chunk in enumerate(chunks):
        where = f"context[{i}]"
        if not isinstance(chunk.id, str):
            raise TypeError(f"{where} id must be a str, got {type(chunk.id).__name__}")
        check_unicode(f"{where} id", chunk.id)
        check_unicode(f"{where} text", chunk.text)
        if chunk.source is not None:
            check_unicode(f"{where} source", chunk.source)
        check_json_value(f"{where} metadata", chunk.metadata)


def check_run_name(name: object, *, what: str = "run") -> str:
    """The run name, stripped; TypeError/ValueError naming `what` when it cannot be one."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, got {type(name).__name__}")
    stripped = name.strip()
    if not stripped:
        raise ValueError(f"{what} must not be empty")
    if len(stripped) > MAX_RUN_NAME:
        raise ValueError(f"{what} is {len(stripped)} characters long; at most {MAX_RUN_NAME}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in stripped):
        raise ValueError(f"{what} must not contain control characters")
    return stripped
