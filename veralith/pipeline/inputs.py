"""Input validation: every argument is checked, and named in the error, before anything is written
or any model is called."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from typing import Any

from veralith.errors import InputError
from veralith.models import ContextChunk
from veralith.validate import check_unicode

__all__ = ["LATENCY_PARTS", "MAX_CHUNKS", "MAX_TEXT_CHARS", "as_of", "check_knowledge_base", "check_latency",
           "check_metadata", "check_query", "check_text", "chunk_fields", "normalize_context"]

# Far beyond any judge's context window; past this the caller almost certainly passed the wrong
# thing (a whole corpus, a file's bytes), and failing fast beats a huge bill or a hung call.
MAX_TEXT_CHARS = 2_000_000
MAX_CHUNKS = 10_000
_TEXT_KEYS = ("text", "page_content", "content")


def check_text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if len(value) > MAX_TEXT_CHARS:
        raise InputError(f"{name} is {len(value):,} characters; the limit is {MAX_TEXT_CHARS:,}")
    return value


def check_query(value: Any) -> str:
    """A query with no words asks nothing: judging an answer to it would assess nothing."""
    value = check_text("query", value)
    if not value.strip():
        raise InputError("query must not be empty or whitespace: there is no question to judge the response against")
    return value


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def as_of(metadata: Mapping[str, Any], default: str | None = None) -> str:
    """The date the judges take as today: metadata["as_of"] (an ISO date or datetime) if given,
    else `default` (the trace's creation date), else today in UTC."""
    given = metadata.get("as_of")
    if given is not None:
        text = given.isoformat() if isinstance(given, (dt.date, dt.datetime)) else given
        if not isinstance(text, str) or not _DATE.match(text):
            raise InputError(f"metadata['as_of'] must be an ISO date such as 2026-03-31, got {given!r}")
        try:
            dt.date.fromisoformat(text[:10])
        except ValueError:
            raise InputError(f"metadata['as_of'] is not a real date: {given!r}") from None
        return text[:10]
    if default:
        return default[:10]
    return dt.datetime.now(dt.timezone.utc).date().isoformat()


def check_knowledge_base(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"knowledge_base must be a str, got {type(value).__name__}")
    if not value.strip():
        raise InputError("knowledge_base must not be empty")
    check_unicode("knowledge_base", value)   # the rule of every stored text (veralith.validate)
    return value


def check_metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"metadata must be a dict or None, got {type(value).__name__}")
    if "as_of" in value:
        as_of(value)   # a bad date fails now, before the trace is written
    return dict(value)


# The parts of the app's own time a trace may carry: the whole call, and within it the time spent
# retrieving and generating, where the app or its framework tells them apart.
LATENCY_PARTS = ("total", "retrieval", "generation")


def check_latency(value: Any) -> dict[str, float]:
    """The app's own latency as {part: milliseconds}: a number is the whole call ("total"); a mapping
    may give any of LATENCY_PARTS. None (or an empty mapping) records none. Each value is a finite
    number >= 0; anything else raises TypeError/InputError naming `latency_ms`."""
    if value is None:
        return {}
    parts = {"total": value} if not isinstance(value, Mapping) else dict(value)
    unknown = sorted(str(k) for k in parts if k not in LATENCY_PARTS)
    if unknown:
        raise InputError(f"latency_ms takes the keys {list(LATENCY_PARTS)}; got {unknown}")
    checked: dict[str, float] = {}
    for part in LATENCY_PARTS:
        ms = parts.get(part)
        if ms is None:
            continue
        name = "latency_ms" if not isinstance(value, Mapping) else f"latency_ms[{part!r}]"
        if isinstance(ms, bool) or not isinstance(ms, (int, float)):
            raise TypeError(f"{name} must be a number of milliseconds, got {type(ms).__name__}")
        if not math.isfinite(ms) or ms < 0:
            raise InputError(f"{name} must be a finite number of milliseconds >= 0, got {ms!r}")
        checked[part] = float(ms)
    return checked


def normalize_context(context: Any) -> list[ContextChunk]:
    """Accept list[str] | list[dict] | list[ContextChunk] (or Document-like objects with
    `page_content`) and return chunks with stable, unique ids (`c0`, `c1`, ... unless given).
    A dict may give the retriever's `rank` (an int >= 1) and `score` (a finite number)."""
    if isinstance(context, (str, bytes)) or not isinstance(context, (list, tuple)):
        hint = "; wrap a single text as [text]" if isinstance(context, str) else ""
        raise TypeError(f"context must be a list of chunks (str, dict or ContextChunk), "
                        f"got {type(context).__name__}{hint}")
    if len(context) > MAX_CHUNKS:
        raise InputError(f"context has {len(context):,} chunks; the limit is {MAX_CHUNKS:,}")
    parsed = [chunk_fields(i, item) for i, item in enumerate(context)]
    given = [fields["id"] for fields in parsed if fields.get("id") is not None]
    dupes = sorted({i for i in given if given.count(i) > 1})
    if dupes:
        raise InputError(f"context chunk ids must be unique; repeated: {dupes}")
    taken = set(given)
    chunks, total = [], 0
    for i, fields in enumerate(parsed):
        if fields.get("id") is None:
            candidate, n = f"c{i}", i
            while candidate in taken:  # a caller-given id may already use the positional name
                n += len(parsed)
                candidate = f"c{n}"
            fields["id"] = candidate
            taken.add(candidate)
        total += len(fields["text"])
        chunks.append(ContextChunk(**fields))
    if total > MAX_TEXT_CHARS:
        raise InputError(f"context holds {total:,} characters in all; the limit is {MAX_TEXT_CHARS:,}")
    return chunks


def chunk_fields(i: int, item: Any) -> dict[str, Any]:
    """One chunk (`context[i]`) as ContextChunk fields, its id None when none was given; raises
    TypeError/InputError naming `context[i]` for a bad one."""
    where = f"context[{i}]"
    if isinstance(item, ContextChunk):
        return item.model_dump()
    if isinstance(item, str):
        return {"id": None, "text": item}
    if isinstance(item, Mapping):
        key = next((k for k in _TEXT_KEYS if k in item), None)
        if key is None:
            raise InputError(f"{where} is a dict without any of the keys {list(_TEXT_KEYS)}")
        text, meta = item[key], item.get("metadata") or {}
        ident, source = item.get("id"), item.get("source")
        rank, score = item.get("rank"), item.get("score")
    elif hasattr(item, "page_content"):  # LangChain Document and look-alikes, without importing them
        text, meta = item.page_content, dict(getattr(item, "metadata", None) or {})
        ident, source = getattr(item, "id", None), meta.get("source")
        rank = score = None
    else:
        raise TypeError(f"{where} must be a str, dict or ContextChunk, got {type(item).__name__}")
    if not isinstance(text, str):
        raise TypeError(f"{where} text must be a str, got {type(text).__name__}")
    if not isinstance(meta, Mapping):
        raise TypeError(f"{where} metadata must be a dict, got {type(meta).__name__}")
    if ident is not None and not isinstance(ident, (str, int)):
        raise TypeError(f"{where} id must be a str or int, got {type(ident).__name__}")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
        raise InputError(f"{where} rank must be an int >= 1 (1 = the retriever's first result), got {rank!r}")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                              or not math.isfinite(score)):
        raise InputError(f"{where} score must be a finite number, got {score!r}")
    return {"id": None if ident is None else str(ident), "text": text,
            "source": None if source is None else str(source), "metadata": dict(meta), "rank": rank,
            "score": None if score is None else float(score)}
