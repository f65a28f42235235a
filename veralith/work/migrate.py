"""`veralith migrate --to URL`: a history copied into another store (veralith.store.copy), with the
target's trace ids handed out by the work layer's allocator (veralith.work.ids)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from veralith.work.ids import RANDOM_BASE
from veralith.work.spooler import new_id, spooler_for

if TYPE_CHECKING:
    from veralith.store.copy import CopyReport
    from veralith.store.sql import Db
    from veralith.store.sqlstore import SqlStore

__all__ = ["copy", "ids_past"]


def copy(source: SqlStore, target: SqlStore, *, report: Callable[[str], None] | None = None) -> CopyReport:
    """Copy everything `source` holds into `target`; a copied trace whose id the target holds already
    gets one from the target's allocator, which afterwards hands out only ids above every copied one."""
    from veralith.store.copy import copy_history

    out = copy_history(source, target, new_id=lambda: new_id(target.spool_url), report=report)
    ids_past(target)
    return out


def _highest(db: Db) -> int:
    return int(db.execute("SELECT coalesce(max(id), 0) FROM traces WHERE id < ?", [RANDOM_BASE]).fetchone()[0])


def _sequence_past(db: Db, highest: int) -> None:
    last, called = db.execute("SELECT last_value, is_called FROM veralith_trace_ids").fetchone()
    if highest > (int(last) if called else 0):
        db.execute("SELECT setval('veralith_trace_ids', ?)", [highest])


def ids_past(target: SqlStore) -> None:
    """After rows were written under ids of their own (a copy, a bulk load): the target's allocator
    hands out only ids above every one of them."""
    highest = target.read(_highest)
    ids = spooler_for(target.spool_url).ids
    if ids.remote:
        target.write(_sequence_past, highest)
        ids.fill()
    elif highest:
        ids.bump(highest)
