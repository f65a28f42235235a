"""Batch-API jobs: the state `veralith eval --batch` keeps so any process can finish a job.

A job's traces are *reserved* for it in `traces`: pending, leased to host RESERVED with the job id
as token and a lease time far in the future, so no resume, worker or sweep takes them (a lease is
stale only when its time runs out or its process, on this host, is gone; RESERVED is no host). A
collector takes a trace out of the reservation (`take_reserved`: one conditional UPDATE, so two
collectors can never both judge it) just before it saves its result.

The job itself is worked on by one collector at a time (`take_job`: the job row's lease, with the
same staleness rules as a trace's, veralith.work.leases). Requests are keyed by the sha256 of
their body (`custom_id`), so the same request asked twice in a job is sent and paid for once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from veralith.store.rows import now_iso
from veralith.store.sql import Db
from veralith.work import batchsends, leases

__all__ = ["RESERVED", "BatchJobs", "add_requests", "create_job", "finish_job", "job_rows", "release_job", "renew_job",
           "replies", "reserve", "reserved", "take_job", "take_reserved", "to_send"]

RESERVED = "veralith-batch"     # the lease host of a trace reserved for a batch job (never a real host)
_FOREVER = 1e15                 # the lease time of a reservation: never older than any timeout


def create_job(db: Db, job: str, settings: dict[str, Any]) -> None:
    host, pid, token = leases.mine()
    now = now_iso()
    with db.write():
        db.execute("INSERT INTO batch_jobs (id, created_at, updated_at, state, settings, lease_host, lease_pid,"
                   f" lease_token, lease_at) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, {db.dialect.epoch})",
                   [job, now, now, json.dumps(settings, sort_keys=True), host, pid, token])


def reserve(db: Db, job: str, trace_ids: Sequence[int]) -> int:
    """Move traces into the job's reservation, pending: those this process holds (queued by it, or
    claimed), and done or failed ones nobody evaluates (re-judged in place; what they held goes to
    their history when the job's result is written). How many moved. (The caller stops renewing the
    claims it moved.)"""
    host, pid, token = leases.mine()
    moved = 0
    with db.write():
        for trace_id in trace_ids:
            cursor = db.execute(
                "UPDATE traces SET lease_host = ?, lease_pid = 0, lease_token = ?, lease_at = ?, updated_at = ?"
                " , status = 'pending' WHERE id = ? AND (status IN ('done', 'error') OR (status IN"
                " ('pending', 'running') AND lease_host = ? AND lease_pid = ? AND lease_token = ?))",
                [RESERVED, job, _FOREVER, now_iso(), trace_id, host, pid, token])
            moved += cursor.rowcount
        db.execute("UPDATE batch_jobs SET traces = traces + ?, updated_at = ? WHERE id = ?", [moved, now_iso(), job])
    return moved


def reserved(db: Db, job: str) -> list[int]:
    rows = db.execute("SELECT id FROM traces WHERE status = 'pending' AND lease_host = ? AND lease_token = ?"
                      " ORDER BY id", [RESERVED, job]).fetchall()
    return [int(r[0]) for r in rows]


def take_reserved(db: Db, job: str, trace_id: int) -> bool:
    """Take one trace out of the job's reservation into this process's claim (running, our lease;
    the caller holds it in the renewer)."""
    host, pid, token = leases.mine()
    with db.write():
        cursor = db.execute(
            "UPDATE traces SET status = 'running', lease_host = ?, lease_pid = ?, lease_token = ?,"
            f" lease_at = {db.dialect.epoch}, attempts = attempts + 1, updated_at = ? WHERE id = ?"
            " AND status = 'pending' AND lease_host = ? AND lease_token = ?",
            [host, pid, token, now_iso(), trace_id, RESERVED, job])
        taken = cursor.rowcount == 1
        if taken:
            db.execute("UPDATE batch_jobs SET judged = judged + 1, updated_at = ? WHERE id = ?", [now_iso(), job])
    return taken


def take_job(db: Db, job: str) -> bool | None:
    """Become the job's collector: True when taken (or already ours), False when another live
    collector holds it, None when there is no such job."""
    with db.write():
        row = db.execute(f"SELECT lease_host, lease_pid, lease_token, lease_at, {db.dialect.epoch} FROM batch_jobs"
                         " WHERE id = ?" + db.dialect.for_update, [job]).fetchone()
        if row is None:
            return None
        if not (leases.is_mine(*row[:3]) or leases.stale(*row)):
            return False
        db.execute("UPDATE batch_jobs SET lease_host = ?, lease_pid = ?, lease_token = ?,"
                   f" lease_at = {db.dialect.epoch} WHERE id = ?", [*leases.mine(), job])
    return True


def release_job(db: Db, job: str) -> None:
    """Stop collecting (renewed or not): the job is anyone's at once, not after a lease timeout."""
    host, pid, token = leases.mine()
    with db.write():
        db.execute("UPDATE batch_jobs SET lease_host = NULL, lease_pid = NULL, lease_token = NULL, lease_at = NULL"
                   " WHERE id = ? AND lease_host = ? AND lease_pid = ? AND lease_token = ?", [job, host, pid, token])


def renew_job(db: Db, job: str) -> None:
    host, pid, token = leases.mine()
    with db.write():
        db.execute(f"UPDATE batch_jobs SET lease_at = {db.dialect.epoch} WHERE id = ? AND lease_host = ?"
                   " AND lease_pid = ? AND lease_token = ?", [job, host, pid, token])


def finish_job(db: Db, job: str) -> None:
    with db.write():
        db.execute("UPDATE batch_jobs SET state = 'done', updated_at = ?, lease_host = NULL, lease_pid = NULL,"
                   " lease_token = NULL, lease_at = NULL WHERE id = ?", [now_iso(), job])


def add_requests(db: Db, job: str, requests: Iterable[tuple[str, str]]) -> None:
    """Keep (custom_id, body) requests as new; one already known (sent, answered) is left as it is."""
    with db.write():
        db.executemany("INSERT INTO batch_requests (job, custom_id, body, state) VALUES (?, ?, ?, 'new')"
                       " ON CONFLICT (job, custom_id) DO NOTHING", [(job, c, b) for c, b in requests])


def to_send(db: Db, job: str) -> list[tuple[str, str]]:
    rows = db.execute("SELECT custom_id, body FROM batch_requests WHERE job = ? AND state = 'new' ORDER BY custom_id",
                      [job]).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def replies(db: Db, job: str) -> dict[str, tuple[str, str | None]]:
    """custom_id -> (state, text) of every answered or given-up request: `done` and the completion
    JSON, `refused` and the service's response JSON ({status_code, body}), `failed` and why."""
    rows = db.execute("SELECT custom_id, state, reply, error FROM batch_requests WHERE job = ?"
                      " AND state IN ('done', 'refused', 'failed')", [job]).fetchall()
    return {str(r[0]): (str(r[1]), r[3] if r[1] == "failed" else r[2]) for r in rows}


def job_rows(db: Db, job: str | None = None) -> list[dict[str, Any]]:
    """Each job (newest first, or the one named) with its request counts by state and its sends
    (veralith.work.batchsends.send_rows)."""
    where, params = ("WHERE id = ?", [job]) if job is not None else ("", [])
    jobs = list(db.query("SELECT id, created_at, updated_at, state, traces, judged, settings, lease_host, lease_pid,"
                         f" lease_token, lease_at, {db.dialect.epoch} AS now FROM batch_jobs {where}"
                         " ORDER BY created_at DESC, id", params))
    for row in jobs:
        counts = db.execute("SELECT state, COUNT(*) FROM batch_requests WHERE job = ? GROUP BY state",
                            [row["id"]]).fetchall()
        row["requests"] = {str(s): int(n) for s, n in counts}
        row["sends"] = batchsends.send_rows(db, row["id"])
        lease = (row["lease_host"], row["lease_pid"], row["lease_token"], row["lease_at"])
        row["collector"] = f"{lease[0]}/{lease[1]}" if lease[0] and not leases.stale(*lease, row.pop("now")) else None
        row["settings"] = json.loads(row["settings"] or "{}")
    return jobs


class BatchJobs:
    """The functions above, and veralith.work.batchsends', run through a store (`store.read` /
    `store.write`): `jobs.reserve(job, ids)` runs `reserve(db, job, ids)`."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def taker(self, job: str) -> Callable[[int], bool]:
        """What the runner calls to take a trace out of the job's reservation once it is judged
        (veralith.work.runner.Runner.run's `take`)."""
        return lambda trace_id: bool(self._store.write(take_reserved, job, trace_id))

    def __getattr__(self, name: str) -> Any:
        if name in batchsends.__all__:
            function = getattr(batchsends, name)
        elif name in __all__ and name not in ("RESERVED", "BatchJobs"):
            function = globals()[name]
        else:
            raise AttributeError(name)
        run = self._store.read if name in _READS else self._store.write

        def call(*args: Any, **kwargs: Any) -> Any:
            return run(function, *args, **kwargs)
        return call


_READS = frozenset({"reserved", "to_send", "replies", "job_rows", "unanswered", "unsent", "send_requests",
                    "open_sends", "send_rows"})
