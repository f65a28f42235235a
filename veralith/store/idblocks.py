"""Trace id blocks in the store: what keeps ids from being handed out twice after a restore.

A PostgreSQL store hands each host a block of ids from its sequence `veralith_trace_ids` (increment
BLOCK); a SQLite store's ids come from a counter file beside it (veralith.work.ids). A database
restored from a backup forgets every block it handed out after the backup was taken, and puts its
sequence back, so it would hand those blocks again to other hosts while the hosts that hold them
still hand out their ids. Three things here stop that (the work layer calls them: veralith.work.ids
when a host draws a block, veralith.work.shipper on its shipping rounds):

- `reserve_block` draws a block under one advisory lock (`_LOCK`, so that moving the sequence forward
  never races a draw), after moving the sequence past the drawing host's own high-water mark, the
  highest stored trace id and the highest block recorded, and records the block with its owner in
  `trace_id_blocks` (PostgreSQL migration 0019);
- `secure` (each shipping round) moves the sequence forward to the host's high-water mark, records
  the host's block again if the restore forgot it, and reports which of the ranges the host has not
  used yet are taken: a stored trace inside one, or another owner's recorded block overlapping it.
  The host drops those ranges and takes new ids (SQLite: `taken` reports the same for its counter);
- the sequence never moves backwards: `setval` is only called to move it forward, under the lock.

A restore still leaves a window: until every host that held a block before it has had one shipping
round with the store back, a host drawing a block may be handed part of one of theirs; both find the
overlap at their next round and drop the rest, so only ids both handed out in between can meet (the
shipper then gives the later trace a new id and logs both). docs/sdk.md states it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veralith.store.sql import Db

__all__ = ["BLOCK", "RANDOM_BASE", "record_block", "reserve_block", "reserve_blocks", "secure", "sequence_high",
           "taken"]

BLOCK = 1000            # ids per block of a PostgreSQL store (its sequence's increment, migration 0001)
RANDOM_BASE = 1 << 62   # ids at or above this were drawn at random by a host with no block (never counted)
_LOCK = 0x76657269647331   # the advisory lock every draw and forward move of the sequence takes ("veridss1")
_SEQ = "veralith_trace_ids"


def sequence_high(db: Db) -> int:
    """The highest id a PostgreSQL store's sequence may have handed out (the end of its last block)."""
    last, called = db.execute(f"SELECT last_value, is_called FROM {_SEQ}").fetchone()
    return int(last) + BLOCK - 1 if called else int(last) - 1


def _stored_high(db: Db) -> int:
    """The highest counted (not random) trace id stored, and the highest block recorded."""
    stored = db.execute("SELECT coalesce(max(id), 0) FROM traces WHERE id < ?", [RANDOM_BASE]).fetchone()[0]
    recorded = db.execute("SELECT coalesce(max(hi), 0) FROM trace_id_blocks").fetchone()[0]
    return max(int(stored), int(recorded))


def _forward(db: Db, high: int) -> bool:
    """Move the sequence so that its next block starts above `high`; never backwards. Inside the
    caller's transaction, which holds _LOCK. True when it moved."""
    if sequence_high(db) >= high:
        return False
    # setval(v, true): the next nextval returns v + BLOCK. Blocks stay aligned (1, 1001, 2001, ...).
    value = 1 + BLOCK * max(0, -(-(high - BLOCK) // BLOCK))
    db.execute(f"SELECT setval('{_SEQ}', ?, true)", [value])
    return True


def reserve_block(db: Db, floor: int = 0, owner: str = "") -> range:
    """A block of ids from a PostgreSQL store's sequence, above `floor` (the drawing host's high-water
    mark), every stored trace and every recorded block; recorded under `owner`."""
    with db.write():
        db.execute("SELECT pg_advisory_xact_lock(?)", [_LOCK])
        _forward(db, max(floor, _stored_high(db)))
        start = int(db.execute(f"SELECT nextval('{_SEQ}')").fetchone()[0])
        if owner:
            record_block(db, start, start + BLOCK - 1, owner)
    return range(start, start + BLOCK)


def reserve_blocks(db: Db, count: int) -> list[range]:
    """`count` blocks of a PostgreSQL store's sequence in one statement (veralith migrate: other hosts'
    draws may interleave, so they need not be consecutive), under the same lock as every draw."""
    def draw() -> list[range]:
        db.execute("SELECT pg_advisory_xact_lock(?)", [_LOCK])
        rows = db.execute(f"SELECT nextval('{_SEQ}') FROM generate_series(1, ?)", [count]).fetchall()
        return [range(int(r[0]), int(r[0]) + BLOCK) for r in rows]

    if db.in_transaction:
        return draw()
    with db.write():
        return draw()


def record_block(db: Db, lo: int, hi: int, owner: str) -> None:
    db.execute("INSERT INTO trace_id_blocks (lo, hi, owner) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
               [lo, hi, owner])


def secure(db: Db, owner: str, high: int, block: tuple[int, int] | None,
           unused: Sequence[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """One shipping round's check of a PostgreSQL host (see the module docstring): the sequence moved
    forward to `high` (the highest id the host holds or handed out), the host's `block` (lo, hi)
    recorded again if missing; returns those of the `unused` ranges (first, last) that are taken, each
    with the first id found taken in it."""
    with db.write():
        if sequence_high(db) < high:
            db.execute("SELECT pg_advisory_xact_lock(?)", [_LOCK])
            _forward(db, high)
        if block is not None:
            record_block(db, block[0], block[1], owner)
        found = {r: _taken(db, r, owner) for r in unused}
        return {r: first for r, first in found.items() if first is not None}


def taken(db: Db, unused: Sequence[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """A SQLite store's check (its counter is a file): the `unused` ranges (first, last) holding a stored
    trace, each with the first such id."""
    with db.read():
        found = {r: _stored_in(db, r) for r in unused}
    return {r: first for r, first in found.items() if first is not None}


def _stored_in(db: Db, span: tuple[int, int]) -> int | None:
    """The lowest stored trace id in `span` (an index range), or None."""
    row = db.execute("SELECT min(id) FROM traces WHERE id BETWEEN ? AND ?", list(span)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _taken(db: Db, span: tuple[int, int], owner: str) -> int | None:
    """The first id of `span` taken: by a stored trace, or by another owner's block overlapping it (a
    block is at most BLOCK ids wide, so only blocks starting within BLOCK before it are looked at: an
    index range, not a scan)."""
    first, last = span
    other = db.execute("SELECT min(lo) FROM trace_id_blocks WHERE lo BETWEEN ? AND ? AND hi >= ? AND owner <> ?",
                       [first - BLOCK + 1, last, first, owner]).fetchone()
    found = [x for x in (_stored_in(db, span), None if other is None or other[0] is None else max(first, int(other[0])))
             if x is not None]
    return min(found) if found else None
