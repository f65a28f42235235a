"""A record the store refuses never blocks the others: it is found, set aside with its reason, and the
rest is written (veralith.store.deadletters keeps the rows).

Two ways a record is refused, both decided here for every way in (the shipper, `migrate`, a retry):
- `screen`: it breaks the rule every stored text follows (veralith.validate: no NUL, no lone
  surrogate), or is not a trace at all (a spool line of another format). Found before the store is
  asked, so SQLite and PostgreSQL refuse the same records.
- `write_each`: the store itself refuses it (a constraint, a value out of range: an error the
  failure policy, `policy.intake`, answers with SET_ASIDE). A batch is written in one transaction;
  when it fails for a record's sake, it is halved until the records it refuses are found (a few
  transactions per bad record, never one per record). A store that is away (RETRY) or stopped
  taking writes (STOP) is raised as it is: nothing is set aside for a fault that is not the record's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from veralith.store.deadletters import Letter
from veralith.store.protocol import TraceInput
from veralith.validate import check_stored_inputs, check_unicode, clean_text
from veralith.work.policy import Action, intake

__all__ = ["clean_entry", "letter", "screen", "write_each"]

T = TypeVar("T")


def screen(entries: Sequence[dict[str, Any]], source: str) -> tuple[list[tuple[dict[str, Any], TraceInput]],
                                                                    list[Letter]]:
    """The entries (spool lines) that are storable traces, each with its TraceInput; the others as letters."""
    good: list[tuple[dict[str, Any], TraceInput]] = []
    letters: list[Letter] = []
    for entry in entries:
        try:
            trace = TraceInput.from_json(entry)
            int(entry["id"])
            check_stored_inputs(trace.query, trace.context, trace.response, trace.metadata)
            for name in ("knowledge_base", "external_id", "run"):
                value = entry.get(name)
                if value is not None:
                    check_unicode(name, str(value))
        except Exception as exc:   # (TypeError, KeyError, ValueError, InputError, pydantic's): the record's own
            letters.append(letter(entry, source, exc))
            continue
        good.append((entry, trace))
    return good, letters


def letter(entry: dict[str, Any], source: str, why: BaseException | str) -> Letter:
    """`entry` set aside by `source` because of `why` (an error, or its text)."""
    reason = why if isinstance(why, str) else _reason(why)
    uid = entry.get("uid") if isinstance(entry, dict) else None
    if not isinstance(uid, str) or not uid:   # a record without one: named by its content, so kept once
        uid = "sha256:" + hashlib.sha256(json.dumps(entry, sort_keys=True, ensure_ascii=True, default=str)
                                         .encode("ascii")).hexdigest()[:40]
    trace_id = entry.get("id") if isinstance(entry, dict) else None
    kb = entry.get("knowledge_base") if isinstance(entry, dict) else None
    return Letter(uid=uid, source=source, payload=entry if isinstance(entry, dict) else {"line": entry},
                  reason=reason, trace_id=trace_id if isinstance(trace_id, int) else None,
                  knowledge_base=kb if isinstance(kb, str) else None)


def _reason(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    # The database driver's own words, first line (psycopg adds context lines), with its class for a search.
    first = text.splitlines()[0]
    return first if type(error).__module__.startswith("veralith") else f"{type(error).__name__}: {first}"


def write_each(items: list[T], write: Callable[[list[T]], object],
               refused: Callable[[T, BaseException], Letter]) -> list[Letter]:
    """`write(items)` in one go; when the store refuses it for a record's sake, the same halved until
    the records it refuses are found. Those come back as letters (`refused`); the rest is written.
    Raises what is not a record's fault (the store away, stopped taking writes)."""
    if not items:
        return []
    try:
        write(items)
        return []
    except Exception as exc:
        if intake(exc).action is not Action.SET_ASIDE:
            raise
        if len(items) == 1:
            return [refused(items[0], exc)]
    middle = len(items) // 2
    return write_each(items[:middle], write, refused) + write_each(items[middle:], write, refused)


def clean_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """`entry` with every text no store can hold made storable (veralith.validate.clean_text): what
    `veralith dead-letters --retry --clean` stores."""
    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return clean_text(value)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {walk(k): walk(v) for k, v in value.items()}
        return value
    return {key: walk(value) for key, value in entry.items()}
