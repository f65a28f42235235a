"""The dead-letter place: records a store refused, kept apart with their reason (table `dead_letters`).

The work layer decides what goes here (veralith.work.deadletter: a spooled trace the store refuses
or that breaks the rule every stored text follows, a trace `migrate` cannot copy); this module only
stores, lists, counts and removes the rows. A record is set aside once: its `uid` (a spooled trace's
own) is unique, so two processes shipping the same dead process's spool write one row.

The payload is kept as JSON text with every non-ASCII character escaped, so a record holding text no
store can hold (a NUL, a lone surrogate) is still kept exactly, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from veralith.store.rows import now_iso
from veralith.store.sql import Db

__all__ = ["SOURCES", "Letter", "count", "drop", "listing", "retried", "set_aside", "taken"]

SOURCES = ("shipper", "import", "migrate", "worker")   # who set a record aside (the table's CHECK)
_REASON_CHARS = 500


@dataclass(frozen=True)
class Letter:
    """One refused record: `payload` as the way in had it (a spooled trace: its spool line)."""

    uid: str
    source: str
    payload: dict[str, Any]
    reason: str
    trace_id: int | None = None
    knowledge_base: str | None = None


def _line(text: str) -> str:
    """A reason as one storable line: control characters and lone surrogates shown escaped."""
    text = " ".join(str(text).split())
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return text[:_REASON_CHARS]


def _text(value: Any) -> str | None:
    return None if value is None else _line(str(value))


def set_aside(db: Db, letters: list[Letter]) -> int:
    """Keep `letters` (one transaction); a uid already kept is kept once. How many are new."""
    if not letters:
        return 0
    now = now_iso()
    added = 0
    with db.write():
        for letter in letters:
            if letter.source not in SOURCES:
                raise ValueError(f"unknown dead-letter source {letter.source!r}")
            cursor = db.execute(
                "INSERT INTO dead_letters (uid, source, trace_id, knowledge_base, payload, reason, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uid) DO NOTHING",
                [_line(letter.uid), letter.source, letter.trace_id, _text(letter.knowledge_base),
                 json.dumps(letter.payload, ensure_ascii=True, default=str), _line(letter.reason), now])
            added += max(0, cursor.rowcount)
    return added


def count(db: Db, *, kb: str | None = None) -> int:
    """How many records are set aside (of knowledge base `kb`, if given)."""
    if kb is None:
        return int(db.execute("SELECT COUNT(*) FROM dead_letters").fetchone()[0])
    return int(db.execute("SELECT COUNT(*) FROM dead_letters WHERE knowledge_base = ?", [kb]).fetchone()[0])


def listing(db: Db, *, limit: int | None = None) -> list[dict[str, Any]]:
    """The records set aside, oldest first, without their payload."""
    sql = ("SELECT id, source, trace_id, knowledge_base, reason, created_at, retried_at, attempts FROM dead_letters"
           " ORDER BY id")
    return list(db.query(sql + (f" LIMIT {int(limit)}" if limit is not None else "")))


def taken(db: Db, ids: list[int] | None = None) -> list[dict[str, Any]]:
    """Rows with their payload decoded (`ids`, or every one), oldest first: what a retry stores again."""
    sql = "SELECT id, uid, source, trace_id, knowledge_base, payload, reason FROM dead_letters"
    params: list[Any] = []
    if ids is not None:
        if not ids:
            return []
        sql += f" WHERE id IN ({', '.join('?' for _ in ids)})"
        params = list(ids)
    rows = list(db.query(sql + " ORDER BY id", params))
    for row in rows:
        row["payload"] = json.loads(row["payload"])
    return rows


def retried(db: Db, letter_id: int, reason: str) -> None:
    """A retry could not store it either: when, how many times, and the latest reason."""
    with db.write():
        db.execute("UPDATE dead_letters SET retried_at = ?, attempts = attempts + 1, reason = ? WHERE id = ?",
                   [now_iso(), _line(reason), letter_id])


def drop(db: Db, ids: list[int]) -> list[int]:
    """Remove these rows (stored again, or given up); the ids that were there."""
    if not ids:
        return []
    marks = ", ".join("?" for _ in ids)
    with db.write():
        found = [int(r[0]) for r in db.execute(f"SELECT id FROM dead_letters WHERE id IN ({marks})", ids).fetchall()]
        if found:
            db.execute(f"DELETE FROM dead_letters WHERE id IN ({', '.join('?' for _ in found)})", found)
    return found
