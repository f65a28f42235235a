"""`veralith migrate --to URL`: a history copied into another store (veralith.store.copy), with the
target's trace ids handed out by the work layer's allocator (veralith.work.ids).

A copied trace keeps its id only when nobody else can have been handed that id: the copy first
reserves, from the target's own allocator, every id up to the source's highest that the allocator
has not handed out yet (PostgreSQL: blocks of its sequence, taken with nextval as a host takes them;
SQLite: the range from the counter file, under its lock). A copied id inside what this copy
reserved is kept; any other (a block a logging host holds, a SQLite process's ids taken ahead, an id
the target already stores) is renumbered from more ids reserved the same way. So the target's
allocator is past every copied id before a row is written, and an id `log()` returned anywhere
keeps naming its own trace. Ids at or above RANDOM_BASE (drawn at random by a host that had no
block) are outside every sequence and kept when free.

Only one copy into a store runs at a time (`exclusive`): PostgreSQL's advisory lock, a lock file
beside a SQLite store. The second says so in one line (MigrationBusy) and copies nothing.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from veralith.errors import StoreError
from veralith.store.idblocks import reserve_blocks, sequence_high
from veralith.work.ids import RANDOM_BASE, REMOTE_BLOCK
from veralith.work.spooler import spooler_for

if TYPE_CHECKING:
    from veralith.store.copy import CopyReport
    from veralith.store.sql import Db
    from veralith.store.sqlstore import SqlStore

__all__ = ["ON_CONFLICT", "MigrationBusy", "Reserved", "copy", "exclusive", "ids_past"]

ON_CONFLICT = ("skip", "fail")
_LOCK_KEY = 0x7665726D69677274   # PostgreSQL advisory lock of `veralith migrate` ("vermigrt")
_MAX_BLOCKS = 10_000              # ids kept through a sequence jump of at most 10 M; beyond: renumbered


class MigrationBusy(StoreError):
    """Another `veralith migrate` is copying into the same store."""


def copy(source: SqlStore, target: SqlStore, *, report: Callable[[str], None] | None = None,
         on_conflict: str = "skip") -> CopyReport:
    """Copy everything `source` holds into `target` (one copy at a time per target). A copied trace
    keeps its id where the target's allocator reserved it for this copy, else gets a new one (see
    the module docstring). `on_conflict`: what to do with a trace whose (knowledge base, external
    id) the target holds for another trace: "skip" it (reported per trace) or "fail" before
    copying anything."""
    from veralith.store.copy import copy_history

    if on_conflict not in ON_CONFLICT:
        raise StoreError(f"--on-conflict must be one of {', '.join(ON_CONFLICT)}, not {on_conflict!r}")
    with exclusive(target):
        ids = Reserved.of(target)
        ids.through(source.read(_highest))
        return copy_history(source, target, place=ids.place, report=report, on_conflict=on_conflict)


class Reserved:
    """Ids a copy reserved from the target's allocator: `through(n)` those up to n that nobody was
    handed, kept by the copied traces that have them; more (above) for the ones renumbered."""

    def __init__(self, take: Callable[[int, int], list[range]]) -> None:
        self._take = take                     # (through, count) -> ranges reserved for us
        self._kept: list[range] = []          # sorted, disjoint
        self._starts: list[int] = []
        self._spare: list[range] = []         # for renumbered traces, used from the front
        self.renumbered = 0

    @classmethod
    def of(cls, target: SqlStore) -> Reserved:
        if target.url.startswith("sqlite:"):
            counter = spooler_for(target.spool_url).ids
            return cls(lambda through, count: [counter.reserve(through=through, count=count)])
        return cls(lambda through, count: target.write(_sequence_take, through, count))

    def through(self, highest: int) -> None:
        self._kept = sorted((r for r in self._take(highest, 0) if len(r)), key=lambda r: r.start)
        self._starts = [r.start for r in self._kept]

    def place(self, ids: list[int], taken: set[int]) -> dict[int, int]:
        """Where each copied id goes in the target: itself when reserved here (or random) and free,
        else a new id."""
        out = {}
        for old in ids:
            keep = old not in taken and (old >= RANDOM_BASE or self._ours(old))
            out[old] = old if keep else self._fresh()
        self.renumbered += sum(1 for old, new in out.items() if old != new)
        return out

    def _ours(self, trace_id: int) -> bool:
        at = bisect.bisect_right(self._starts, trace_id) - 1
        return at >= 0 and trace_id in self._kept[at]

    def _fresh(self) -> int:
        while not self._spare or not len(self._spare[0]):
            if self._spare:
                self._spare.pop(0)
            if not self._spare:
                self._spare = [r for r in self._take(0, REMOTE_BLOCK) if len(r)]
        first = self._spare[0]
        self._spare[0] = first[1:]
        return first[0]


def _sequence_take(db: Db, through: int, count: int) -> list[range]:
    """Blocks of a PostgreSQL store's sequence: enough to pass `through` (those that cover ids up to
    it), or `count` ids' worth. nextval is the one way in, so other hosts' blocks never overlap."""
    if count:
        return reserve_blocks(db, math.ceil(count / REMOTE_BLOCK))
    got: list[range] = []
    for _ in range(100):   # other hosts may take blocks meanwhile: ask again for what is still missing
        missing = math.ceil((through - sequence_high(db)) / REMOTE_BLOCK)
        if missing <= 0 or missing > _MAX_BLOCKS:
            break
        got += reserve_blocks(db, missing)
    return got


def _highest(db: Db) -> int:
    return int(db.execute("SELECT coalesce(max(id), 0) FROM traces WHERE id < ?", [RANDOM_BASE]).fetchone()[0])


def ids_past(target: SqlStore) -> None:
    """After rows were written under ids of their own (a bulk load): the target's allocator hands out
    only ids above every one of them (forward only, never racing another host's reservation)."""
    Reserved.of(target).through(target.read(_highest))


@contextlib.contextmanager
def exclusive(target: SqlStore) -> Iterator[None]:
    """Hold the target's migrate lock for the block; MigrationBusy at once when another copy holds it."""
    busy = MigrationBusy(f"another `veralith migrate` is copying into {target.url}; wait for it to finish "
                         "(a copy killed half-way leaves whole traces only: run it again to finish it)")
    if not target.url.startswith("sqlite:"):
        with target.connection() as db:
            if not db.execute("SELECT pg_try_advisory_lock(?)", [_LOCK_KEY]).fetchone()[0]:
                raise busy
            try:
                yield
            finally:
                db.execute("SELECT pg_advisory_unlock(?)", [_LOCK_KEY])
        return
    path = Path(spooler_for(target.spool_url).folder) / "migrate.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if not _try_lock(fd):
            raise busy
        yield
    finally:
        os.close(fd)   # closing releases the lock


def _try_lock(fd: int) -> bool:
    try:
        if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True

