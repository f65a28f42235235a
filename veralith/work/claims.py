"""Claims: who evaluates a trace, and who may write its outcome.

A trace's life: stored pending (or reserved for the process that logged it) → claimed (running,
leased to one process) → done (its result written, in one transaction with the status change) or
error (the failure kept). A crash leaves the trace pending or running under a lease whose process is
gone; such traces are `resumable` and can be claimed again. Two processes never evaluate one trace
at once because a claim is one check-and-update in a write transaction (the row locked where the
database locks rows); while an evaluation runs its lease is renewed (`renewer`), and its outcome
is written only while this process still holds the lease (`LeaseLost` otherwise), so a slow
evaluation is never taken over and paid for twice. Lease times are the database's clock
(veralith.work.leases).

Traces whose last evaluation failed (judge errors, or status error) can be re-judged
(`failed=True`); any trace nobody is evaluating can be re-judged in place (`again=True`). The
outcome a new one replaces is kept in the trace's history (veralith.store.history).

The functions of a `Db` here are the SQL; `Claims` is one store's claims as this process sees them
(the SQL run through `store.write`, and the renewer told what this process holds).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from veralith.errors import StoreError
from veralith.models import EvaluationResult
from veralith.store import history, repository, runs
from veralith.store.errors import StoreUnavailable, WritesStopped
from veralith.store.rows import now_iso
from veralith.store.sql import Db
from veralith.usage import OutputSize
from veralith.work import leases

if TYPE_CHECKING:
    from veralith.store.protocol import Connected

__all__ = ["Claims", "LeaseLost", "abandoned", "claim", "claim_batch", "claims_for", "fail", "release", "renew",
           "renewer", "resumable", "save"]


T = TypeVar("T")


class LeaseLost(StoreError):
    """This process's lease on a trace was taken over (it looked stale); its result is not saved."""


# -- the SQL ---------------------------------------------------------------------------------------
def claim(db: Db, trace_id: int, *, failed: bool = False, again: bool = False, held_here: bool = False,
          timeout_s: float | None = None) -> bool:
    """Atomically take a trace for evaluation: pending → running under this process's lease.

    Also takes a running trace whose lease is stale, and one running under our own lease that no
    evaluation of ours holds (`held_here` False: one that ended without an outcome, e.g. the store
    went away before its result could be written). Refuses a pending trace reserved by another live
    process, and anything done or in error — unless `failed` (its last evaluation failed: status
    error, or done with judge errors) or `again` (any done or error trace: re-judging in place).
    TraceNotFound for an unknown id."""
    host, pid, token = leases.mine()
    with db.write():
        row = history.outcome_row(db, trace_id)
        state = (row.status, row.lease_host, row.lease_pid, row.lease_token, row.lease_at)
        dropped = row.status == "running" and leases.is_mine(*state[1:4]) and not held_here
        if not (leases.claimable(*state, row.now, timeout_s=timeout_s) or dropped
                or (again and row.status in ("done", "error")) or (failed and _failed(db, trace_id, row.status))):
            return False
        db.execute("UPDATE traces SET status = 'running', lease_host = ?, lease_pid = ?, lease_token = ?,"
                   f" lease_at = {db.dialect.epoch}, attempts = attempts + 1, updated_at = ? WHERE id = ?",
                   [host, pid, token, now_iso(), trace_id])
    return True


def _failed(db: Db, trace_id: int, status: str) -> bool:
    if status == "error":
        return True
    return status == "done" and db.execute("SELECT 1 FROM judge_errors WHERE trace_id = ? LIMIT 1",
                                           [trace_id]).fetchone() is not None


def claim_batch(db: Db, limit: int, *, knowledge_base: str | None = None,
                timeout_s: float | None = None) -> list[int]:
    """Claim up to `limit` traces nobody is working on, oldest first: pending and unreserved, or
    pending/running under a lease older than the timeout by the database's clock (a gone process of
    this host is found sooner by `abandoned`). Where the database locks rows, rows another worker is
    claiming at the same moment are skipped, not waited for."""
    timeout = leases.LEASE_TIMEOUT_S if timeout_s is None else timeout_s
    host, pid, token = leases.mine()
    kb_clause, params = ("", []) if knowledge_base is None else (" AND knowledge_base = ?", [knowledge_base])
    epoch = db.dialect.epoch
    with db.pipelined(), db.write():   # BEGIN goes with the SELECT, the COMMIT with the UPDATE
        rows = db.execute(
            f"SELECT id, status, lease_host, lease_pid, lease_token, lease_at, {epoch} FROM traces"
            f" WHERE status IN ('pending', 'running') AND (lease_host IS NULL OR lease_at < {epoch} - ?)"
            + kb_clause + " ORDER BY id LIMIT ?" + db.dialect.skip_locked, [timeout, *params, max(1, limit)]).fetchall()
        ids = [r[0] for r in rows if leases.claimable(*r[1:], timeout_s=timeout, own_is_fresh=True)]
        if ids:
            marks = ", ".join("?" for _ in ids)
            db.execute("UPDATE traces SET status = 'running', lease_host = ?, lease_pid = ?, lease_token = ?,"
                       f" lease_at = {epoch}, attempts = attempts + 1, updated_at = ? WHERE id IN ({marks})",
                       [host, pid, token, now_iso(), *ids])
    return [int(i) for i in ids]


def release(db: Db, trace_id: int) -> None:
    """Give back this process's hold on a trace: its reservation of a pending trace, or its claim of
    a running one: the trace is pending and anyone's. A trace this process does not hold is left
    as it is."""
    host, pid, token = leases.mine()
    with db.write():
        db.execute("UPDATE traces SET status = 'pending', lease_host = NULL, lease_pid = NULL, lease_token = NULL,"
                   " lease_at = NULL, updated_at = ? WHERE id = ? AND status IN ('pending', 'running')"
                   f" AND lease_host = ? AND lease_pid = ? AND lease_token {db.dialect.same} ?",
                   [now_iso(), trace_id, host, pid, token])


def resumable(db: Db, *, failed: bool = False, timeout_s: float | None = None) -> list[int]:
    """Traces nobody is working on: pending and unreserved (or reserved by a gone process), or
    running under a stale lease. Never another live process's fresh work. Oldest first.

    With `failed`, instead the traces whose last evaluation failed: status error, or done with
    judge errors (a judge outage leaves them `indeterminate`)."""
    if failed:
        return [r[0] for r in db.execute(
            "SELECT id FROM traces WHERE status = 'error' OR (status = 'done' AND EXISTS"
            " (SELECT 1 FROM judge_errors WHERE judge_errors.trace_id = traces.id)) ORDER BY id").fetchall()]
    rows = db.execute(f"SELECT id, status, lease_host, lease_pid, lease_token, lease_at, {db.dialect.epoch}"
                      " FROM traces WHERE status IN ('pending', 'running') ORDER BY id").fetchall()
    return [row[0] for row in rows if leases.claimable(*row[1:], timeout_s=timeout_s, own_is_fresh=True)]


def abandoned(db: Db) -> list[int]:
    """Traces reserved or claimed by a process of this host that is gone (pending or running under
    its lease): claimable now, long before their lease times out. Reads this host's leases only."""
    host = leases.mine()[0]
    rows = db.execute(f"SELECT id, status, lease_host, lease_pid, lease_token, lease_at, {db.dialect.epoch}"
                      " FROM traces WHERE status IN ('pending', 'running') AND lease_host = ? ORDER BY id",
                      [host]).fetchall()
    return [row[0] for row in rows if leases.claimable(*row[1:], own_is_fresh=True)]


def renew(db: Db, trace_ids: Iterable[int]) -> None:
    """Bump the lease time of this process's running traces among `trace_ids` (those still ours)."""
    host, pid, token = leases.mine()
    with db.write():
        # In id order, so two transactions never take row locks in opposite orders.
        db.executemany(f"UPDATE traces SET lease_at = {db.dialect.epoch} WHERE id = ? AND status = 'running'"
                       " AND lease_host = ? AND lease_pid = ? AND lease_token = ?",
                       [(i, host, pid, token) for i in sorted(trace_ids)])


def _may_write(row: history.OutcomeRow, trace_id: int, held: bool) -> None:
    """LeaseLost unless this process may write the trace's outcome. Held (we claimed it): it must
    still be running under our lease. Not held (re-judging a stored trace without a claim,
    `evaluate(trace_id=...)`): it must not be running under another process's live lease."""
    ours = leases.is_mine(row.lease_host, row.lease_pid, row.lease_token)
    if held and not (row.status == "running" and ours):
        raise LeaseLost(f"trace {trace_id} was taken over by another process (its lease looked stale); "
                        "this evaluation's result is not saved")
    if not held and row.status == "running" and not ours and not leases.stale(
            row.lease_host, row.lease_pid, row.lease_token, row.lease_at, row.now):
        raise LeaseLost(f"trace {trace_id} is being evaluated by another process; not overwritten")


def save(db: Db, result: EvaluationResult, *, held: bool, new_id: int | None = None,
         sizes: Sequence[OutputSize] = ()) -> int:
    """Write `result` and mark its trace done, all in one transaction; the trace id. A result without
    a trace id is a new trace, stored under `new_id` (from the work layer's allocator). LeaseLost
    when this process may not write the outcome (see `_may_write`). The runs the trace belongs to
    that hold no outcome of it yet (a run whose evaluation stopped in an outage) get this one.
    `sizes`: what the result's calls wrote, for the dry run (veralith.usage.OutputSize)."""
    if result.trace_id is None and new_id is None:
        raise StoreError("saving a result of a new trace needs the id the work layer handed out for it")
    now = now_iso()
    # Pipelined: after the owner check (whose row is read), the deletes, the update, the inserts and
    # the commit go to PostgreSQL in one round trip instead of one each (about 25 per result).
    with db.pipelined(), db.write():
        if result.trace_id is None:
            trace_id = int(new_id or 0)
            repository.write_result(db, result, trace_id, new=True, now=now, sizes=sizes)
        else:
            trace_id = result.trace_id
            row = history.outcome_row(db, trace_id)
            _may_write(row, trace_id, held)
            history.keep_history(db, trace_id, row, now)
            repository.write_result(db, result, trace_id, new=False, now=now, sizes=sizes)
            runs.fill_unjudged(db, trace_id)
    return trace_id


def fail(db: Db, trace_id: int, message: str, *, held: bool) -> bool:
    """Record that evaluating the trace failed; False (nothing written) when this process had
    claimed it but lost the lease: the process that took it over decides the outcome."""
    now = now_iso()
    with db.write():
        row = history.outcome_row(db, trace_id)
        try:
            _may_write(row, trace_id, held)
        except LeaseLost:
            return False
        history.keep_history(db, trace_id, row, now)
        repository.write_error(db, trace_id, message, now=now)
    return True


# -- one store's claims, as this process holds them ---------------------------------------------
class Claims:
    """The claims of this process in one store: each call runs the SQL above through
    `store.write`, and keeps the renewer's list of held traces in step (a claim holds, a written
    outcome, a failure or a release lets go). Thread-safe."""

    def __init__(self, store: Connected) -> None:
        self.store = store
        self.key = f"{getattr(store, 'url', '')}#{id(store)}"
        with _registry_lock:
            _registry[self.key] = self

    def holds(self, trace_id: int) -> bool:
        return (self.key, trace_id) in renewer.held()

    def claim(self, trace_id: int, *, failed: bool = False, again: bool = False) -> bool:
        taken = self.store.write(claim, trace_id, failed=failed, again=again, held_here=self.holds(trace_id))
        if taken:
            renewer.hold((self.key, trace_id))
        return taken

    def claim_batch(self, limit: int, *, knowledge_base: str | None = None) -> list[int]:
        ids = self.store.write(claim_batch, limit, knowledge_base=knowledge_base)
        for trace_id in ids:
            renewer.hold((self.key, trace_id))
        return ids

    def adopt(self, trace_id: int) -> None:
        """Hold (and renew) a claim this process took by other SQL (a batch job's reservation taken)."""
        renewer.hold((self.key, trace_id))

    def held(self) -> list[int]:
        """The traces this process has claimed in this store and not finished."""
        return sorted(trace_id for key, trace_id in renewer.held() if key == self.key)

    def drop(self, trace_id: int) -> None:
        """Stop renewing the lease of an evaluation that ended without an outcome (no SQL)."""
        renewer.drop((self.key, trace_id))

    def release(self, trace_id: int) -> bool:
        """Give the trace back (pending, anyone's); False when the store cannot be reached (the
        claim then ends with the process, or times out)."""
        try:
            self.store.write(release, trace_id)
        except (StoreUnavailable, WritesStopped):
            return False
        self.drop(trace_id)
        return True

    def save(self, result: EvaluationResult, sizes: Sequence[OutputSize] = ()) -> int:
        """Write the result of a trace this process claimed (LeaseLost when it was taken over)."""
        trace_id = result.trace_id
        assert trace_id is not None
        return self._ending(trace_id, lambda: self.store.write(save, result, held=self.holds(trace_id), sizes=sizes))

    def fail(self, trace_id: int, message: str) -> bool:
        """Record a failed evaluation of a trace this process claimed; False when its lease was lost."""
        return self._ending(trace_id, lambda: self.store.write(fail, trace_id, message, held=self.holds(trace_id)))

    def _ending(self, trace_id: int, write: Callable[[], T]) -> T:
        """Write an outcome, then stop holding the claim, whatever happened, except when the store
        went away (StoreUnavailable): the claim stays held, its lease renewed, so the outcome can
        be written once the store is back."""
        try:
            written = write()
        except StoreUnavailable:
            raise
        except BaseException:
            self.drop(trace_id)
            raise
        self.drop(trace_id)
        return written

    def resumable(self, *, failed: bool = False) -> list[int]:
        return self.store.read(resumable, failed=failed)

    def abandoned(self) -> list[int]:
        return self.store.read(abandoned)


_registry: dict[str, Claims] = {}
_registry_lock = threading.Lock()
_claims: dict[tuple[int, int], Claims] = {}


def claims_for(store: Connected) -> Claims:
    """This process's one `Claims` of `store`."""
    key = (id(store), os.getpid())
    with _registry_lock:
        found = _claims.get(key)
    if found is None:
        made = Claims(store)
        with _registry_lock:
            found = _claims.setdefault(key, made)
    return found


def _renew_all(keys: Collection[tuple[str, int]]) -> None:
    """The renewer's round: each store's held traces renewed on this thread's own connection."""
    by_key: dict[str, list[int]] = {}
    for key, trace_id in keys:
        by_key.setdefault(key, []).append(trace_id)
    for key, ids in by_key.items():
        with _registry_lock:
            owner = _registry.get(key)
        if owner is not None:
            owner.store.write(renew, ids)


renewer = leases.Renewer(lambda keys: _renew_all(keys))
