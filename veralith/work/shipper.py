"""The shipper: spooled traces moved into the store.

`ship(store)` moves this process's spool (veralith.work.spool) into the store, a batch per
transaction, and returns the ids this process is to evaluate itself (spooled with `here`, now
reserved for it in the store). `recover(store)` ships the spools that processes gone from this host
left behind (and another host's, once untouched for the lease timeout). A spooled trace keeps the id
`log()` returned; an id the store already holds for another trace (only after a random id met an
existing one: veralith.work.ids) gets a new one, logged with both numbers.

A record the store refuses, or one that breaks the rule every stored text follows (a NUL from a spool
written before that rule), is set aside in the dead-letter place with its reason
(veralith.work.deadletter) and the rest of its segment is shipped, so one bad line never holds back
the traces around it, later segments, or a dead process's spool. `retry` ships set-aside records
again, after a fix (`veralith dead-letters --retry`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from veralith.errors import StoreError
from veralith.store import deadletters, ops, repository
from veralith.store.deadletters import Letter
from veralith.work import deadletter, leases, spool
from veralith.work.spooler import spooler_for

if TYPE_CHECKING:
    from veralith.store.protocol import Connected

__all__ = ["SECURE_EVERY_S", "Refused", "recover", "retry", "secure", "ship", "spooled_here"]

logger = logging.getLogger("veralith.work")
_CLASH_RETRIES = 5
# How often a shipping process checks its ids against the store (veralith.store.idblocks), and always
# on its first round after the store was unavailable (a restore ends that way): the window after a
# restore in which another host may be handed ids this one holds (docs/sdk.md).
SECURE_EVERY_S = 2.0
_CHECKS = 3   # asks of the store per round, when ids this host hands out meanwhile land in what it checks
_secured: dict[str, float] = {}


Refused = Callable[[list[int]], object]   # told the ids of spooled traces set aside (not stored)


def ship(store: Connected, refused: Refused | None = None) -> list[int]:
    """Move this process's spooled traces into `store`; the ids reserved for this process's own
    evaluation. StoreUnavailable when the store cannot take them now (they stay spooled). Traces set
    aside instead (see the module docstring) are told to `refused`."""
    spooled = spooler_for(store.spool_url).spool
    if not spooled.pending():
        return []
    here: list[int] = []
    spooled.ship(lambda entries: here.extend(_ingest(store, entries, queued=True, refused=refused)))
    return here


def secure(store: Connected, *, now: bool = False) -> None:
    """Keep this host's ids safe across a restore of the store (veralith.store.idblocks): PostgreSQL's
    sequence moved forward to the host's high-water mark and its block recorded again; ids it holds
    and has not handed out that the store finds taken (another host's block, a stored trace) dropped.
    At most every SECURE_EVERY_S, unless `now`. StoreUnavailable passes up (the round failed)."""
    url = store.spool_url
    if not now and time.monotonic() - _secured.get(url, -SECURE_EVERY_S) < SECURE_EVERY_S:
        return
    ids = spooler_for(url).ids
    high, block, unused = ids.unused()
    for _ in range(_CHECKS):
        if ids.remote:
            taken = store.write(ops.secure_ids, ids.owner, high, block, unused)
        else:
            taken = store.read(ops.taken_ids, unused)
        # Ranges whose taken id this host handed out since unused() (a trace stored meanwhile) come back
        # to be checked again from where it is now (IdFile.drop); still moving after _CHECKS: next round.
        unused = ids.drop(taken) if taken else []
        if not unused:
            break
    _secured[url] = time.monotonic()


def recover(store: Connected) -> int:
    """Ship the spools of processes that are gone (this host); how many traces."""
    return spool.recover(spooler_for(store.spool_url).folder, lambda entries: _ingest(store, entries, queued=False))


def spooled_here(url: str) -> bool:
    """Whether this host's spool of the store at `url` holds traces not moved in yet (no store opened:
    the store may not exist yet, when every process that logged died before its first ship)."""
    return spool.has_files(spooler_for(url).folder)


def retry(store: Connected, ids: list[int] | None = None, *, clean: bool = False) -> tuple[list[int], list[int]]:
    """Ship set-aside records again (`ids`, or every one), each under the id it had when it can keep it;
    with `clean`, text no store can hold replaced by U+FFFD first. (The rows stored and dropped from
    the dead-letter place, the rows set aside still, their reason and time updated.)"""
    stored: list[int] = []
    still: list[int] = []
    for row in store.read(deadletters.taken, ids):
        entry = dict(row["payload"])
        entry.setdefault("uid", row["uid"])
        if clean:
            entry = deadletter.clean_entry(entry)
        letters = _write(store, [entry], queued=False, source=row["source"])[1]
        if letters:
            store.write(deadletters.retried, row["id"], letters[0].reason)
            still.append(row["id"])
        else:
            store.write(deadletters.drop, [row["id"]])
            stored.append(row["id"])
    return stored, still


def _ingest(store: Connected, entries: list[dict[str, Any]], *, queued: bool,
            refused: Refused | None = None) -> list[int]:
    """Write spooled entries, setting aside what is refused (kept before the spool file is deleted).
    Returns the ids of those to be evaluated here (spooled with `here`, when `queued`)."""
    here, letters = _write(store, entries, queued=queued, source="shipper")
    if letters:
        added = store.write(deadletters.set_aside, letters)
        first = letters[0]
        logger.warning("veralith: %d spooled trace(s) set aside in the dead-letter place (%d new), e.g. trace %s: "
                       "%s; `veralith dead-letters` lists them", len(letters), added, first.trace_id, first.reason)
        if refused is not None:
            refused([x.trace_id for x in letters if x.trace_id is not None])
    return here


def _write(store: Connected, entries: list[dict[str, Any]], *, queued: bool,
           source: str) -> tuple[list[int], list[Letter]]:
    """Write entries (one transaction per attempt, halved around a record the store refuses); give
    clashing ids new ones. (The ids to be evaluated here, the letters of what was refused.)"""
    mine = leases.mine()
    good, letters = deadletter.screen(entries, source)
    rows: list[repository.Entry] = [
        (int(e["id"]), e.get("uid"), e.get("created_at"), trace, e.get("run"),
         mine if queued and bool(e.get("here", True)) else None) for e, trace in good]
    here: list[int] = []
    for _ in range(_CLASH_RETRIES):
        clashed: list[int] = []

        def write(part: list[repository.Entry], clashed: list[int] = clashed) -> None:
            clashed.extend(store.write(repository.create_traces, part)[1])

        refused = deadletter.write_each(rows, write, lambda row, exc: deadletter.letter(_entry(row), source, exc))
        letters += refused
        lost = set(clashed) | {x.trace_id for x in refused}
        here += [row[0] for row in rows if row[5] is not None and row[0] not in lost]
        if not clashed:
            return here, letters
        rows = _renumber(store, rows, clashed)
    raise StoreError(f"could not find free trace ids in {store.url} for {len(rows)} spooled trace(s)")


def _entry(row: repository.Entry) -> dict[str, Any]:
    """A row back as its spool line (what the dead-letter place keeps and a retry ships)."""
    trace_id, uid, created_at, trace, run, _owner = row
    return {"id": trace_id, "uid": uid, "created_at": created_at, "run": run, **trace.to_json()}


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
