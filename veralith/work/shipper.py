"""The shipper: spooled traces moved into the store.

`ship(store)` moves this process's spool (veralith.work.spool) into the store, a batch per
transaction, and returns the ids this process is to evaluate itself (spooled with `here`, now
reserved for it in the store). `recover(store)` ships the spools that processes gone from this host
left behind (and another host's, once untouched for the lease timeout). A spooled trace keeps the id
`log()` returned; an id the store already holds for another trace (only after a random id met an
existing one: veralith.work.ids) gets a new one, logged with both numbers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from veralith.errors import StoreError
from veralith.store import repository
from veralith.store.protocol import TraceInput
from veralith.work import leases, spool
from veralith.work.spooler import spooler_for

if TYPE_CHECKING:
    from veralith.store.protocol import Connected

__all__ = ["recover", "ship", "spooled_here"]

logger = logging.getLogger("veralith.work")
_CLASH_RETRIES = 5


def ship(store: Connected) -> list[int]:
    """Move this process's spooled traces into `store`; the ids reserved for this process's own
    evaluation. StoreUnavailable when the store cannot take them now (they stay spooled)."""
    spooled = spooler_for(store.spool_url).spool
    if not spooled.pending():
        return []
    here: list[int] = []
    spooled.ship(lambda entries: here.extend(_ingest(store, entries, queued=True)))
    return here


def recover(store: Connected) -> int:
    """Ship the spools of processes that are gone (this host); how many traces."""
    return spool.recover(spooler_for(store.spool_url).folder, lambda entries: _ingest(store, entries, queued=False))


def spooled_here(url: str) -> bool:
    """Whether this host's spool of the store at `url` holds traces not moved in yet (no store opened:
    the store may not exist yet, when every process that logged died before its first ship)."""
    return spool.has_files(spooler_for(url).folder)


def _ingest(store: Connected, entries: list[dict[str, Any]], *, queued: bool) -> list[int]:
    """Write spooled entries (one transaction per attempt); give clashing ids new ones. Returns
    the ids of those to be evaluated here (spooled with `here`, when `queued`)."""
    mine = leases.mine()
    rows: list[repository.Entry] = [
        (int(e["id"]), e.get("uid"), e.get("created_at"), TraceInput.from_json(e), e.get("run"),
         mine if queued and bool(e.get("here", True)) else None) for e in entries]
    here: list[int] = []
    for _ in range(_CLASH_RETRIES):
        _written, clashed = store.write(repository.create_traces, rows)
        lost = set(clashed)
        here += [row[0] for row in rows if row[5] is not None and row[0] not in lost]
        if not clashed:
            return here
        rows = _renumber(store, rows, clashed)
    raise StoreError(f"could not find free trace ids in {store.url} for {len(rows)} spooled trace(s)")


def _renumber(store: Connected, rows: list[repository.Entry], clashed: list[int]) -> list[repository.Entry]:
    from veralith.work.ids import RANDOM_BASE

    ids = spooler_for(store.spool_url).ids
    counted = [i for i in clashed if i < RANDOM_BASE]
    ids.bump(max(counted) if counted else 0)
    fresh = {old: ids.take_now() for old in clashed}
    for old, new in fresh.items():
        logger.warning("veralith: trace id %d was already taken in %s; the trace logged under it is stored "
                       "as trace %d", old, store.url, new)
    return [(fresh[r[0]], *r[1:]) for r in rows if r[0] in fresh]
