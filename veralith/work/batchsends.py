"""The batches a Batch-API job sends, and its requests' way through them (SQL as functions of a Db).

A send is one batch: one model, within the service's limits. Its life, each step written before the
next is taken, so that a process may die between any two:

1. `record_send`: a row under a new idempotency key (also put in the batch's metadata), its requests
   moved from new to `sending` under that key;
2. `send_file`: the uploaded input file's id;
3. `mark_sent`: the batch's id, once created or found on the service; its requests `sent`, one try
   more each;
4. once the batch is finished and read: its requests `done` (a reply), `refused` (a 4xx the service
   answered for it: kept, the judge client decides), `failed` (given up) or new again (to be re-sent),
   then `finish_send`.

A send left `recorded` (step 3 never written) is looked for on the service by its key before
anything is sent again (veralith.sdk.batchsend).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from veralith.store.sql import Db

__all__ = ["drop_new", "finish_send", "give_up", "mark_sent", "note_status", "open_sends", "record_send", "refuse",
           "retry_requests", "send_file", "send_requests", "send_rows", "store_replies", "unanswered", "unsent"]


def record_send(db: Db, job: str, key: str, model: str, custom_ids: Sequence[str], size: int) -> None:
    """A new send of these requests (new ones of `job`), recorded before anything goes to the service."""
    with db.write():
        db.execute("INSERT INTO batch_sends (key, job, model, requests, bytes, recorded_at, state) VALUES"
                   f" (?, ?, ?, ?, ?, {db.dialect.epoch}, 'recorded')", [key, job, model, len(custom_ids), size])
        db.executemany("UPDATE batch_requests SET state = 'sending', send_key = ? WHERE job = ? AND custom_id = ?"
                       " AND state = 'new'", [(key, job, c) for c in custom_ids])


def send_file(db: Db, key: str, file_id: str) -> None:
    with db.write():
        db.execute("UPDATE batch_sends SET file_id = ? WHERE key = ?", [file_id, key])


def mark_sent(db: Db, job: str, key: str, batch_id: str, status: str) -> None:
    """The send's batch exists on the service: its requests are out (one try more each)."""
    with db.write():
        db.execute("UPDATE batch_sends SET batch_id = ?, status = ?, state = 'sent' WHERE key = ?",
                   [batch_id, status, key])
        db.execute("UPDATE batch_requests SET state = 'sent', batch_id = ?, tries = tries + 1"
                   " WHERE job = ? AND send_key = ? AND state = 'sending'", [batch_id, job, key])


def unsent(db: Db, job: str) -> list[dict[str, Any]]:
    """Sends recorded whose batch is not known to exist (a crash, or a create that got no answer)."""
    return list(db.query("SELECT key, model, file_id, recorded_at FROM batch_sends WHERE job = ?"
                         " AND state = 'recorded' ORDER BY recorded_at, key", [job]))


def send_requests(db: Db, job: str, key: str) -> list[tuple[str, str]]:
    """(custom_id, body) of the requests a recorded send holds, in the order its file lists them."""
    rows = db.execute("SELECT custom_id, body FROM batch_requests WHERE job = ? AND send_key = ?"
                      " AND state = 'sending' ORDER BY custom_id", [job, key]).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def open_sends(db: Db, job: str) -> list[dict[str, Any]]:
    """Sends whose batch is out and not yet read."""
    return list(db.query("SELECT key, batch_id, model, requests FROM batch_sends WHERE job = ? AND state = 'sent'"
                         " ORDER BY recorded_at, key", [job]))


def note_status(db: Db, key: str, status: str) -> None:
    with db.write():
        db.execute("UPDATE batch_sends SET status = ? WHERE key = ? AND state = 'sent'", [status, key])


def finish_send(db: Db, key: str, status: str, error: str | None) -> None:
    """The send's batch is read: nothing more comes of it."""
    with db.write():
        db.execute("UPDATE batch_sends SET status = ?, error = ?, state = 'read' WHERE key = ?", [status, error, key])


def store_replies(db: Db, job: str, key: str, answered: Iterable[tuple[str, str]]) -> None:
    """(custom_id, completion JSON) replies of the send's requests."""
    with db.write():
        db.executemany("UPDATE batch_requests SET state = 'done', reply = ?, error = NULL"
                       " WHERE job = ? AND custom_id = ? AND send_key = ? AND state = 'sent'",
                       [(r, job, c, key) for c, r in answered])


def refuse(db: Db, job: str, key: str, refused: Iterable[tuple[str, str, str]]) -> None:
    """(custom_id, the service's response JSON, why) of requests the service answered with a 4xx:
    kept as answered, never sent again as they are."""
    with db.write():
        db.executemany("UPDATE batch_requests SET state = 'refused', reply = ?, error = ?"
                       " WHERE job = ? AND custom_id = ? AND send_key = ? AND state = 'sent'",
                       [(r, e, job, c, key) for c, r, e in refused])


def retry_requests(db: Db, job: str, key: str, failed: Iterable[tuple[str, str]], *, max_tries: int) -> None:
    """Requests of the send that got no reply: new again (to be re-sent) while tries are left, else failed."""
    with db.write():
        db.executemany("UPDATE batch_requests SET error = ?, state = CASE WHEN tries < ? THEN 'new' ELSE 'failed' END"
                       " WHERE job = ? AND custom_id = ? AND send_key = ? AND state = 'sent'",
                       [(e, max_tries, job, c, key) for c, e in failed])


def give_up(db: Db, job: str, key: str, failed: Iterable[tuple[str, str]]) -> None:
    """Requests of the send that sending again cannot help (the batch's input was refused): failed."""
    with db.write():
        db.executemany("UPDATE batch_requests SET error = ?, state = 'failed' WHERE job = ? AND custom_id = ?"
                       " AND send_key = ? AND state = 'sent'", [(e, job, c, key) for c, e in failed])


def drop_new(db: Db, job: str, failed: Iterable[tuple[str, str]]) -> None:
    """New requests no batch can hold (custom_id, why): failed without being sent."""
    with db.write():
        db.executemany("UPDATE batch_requests SET error = ?, state = 'failed' WHERE job = ? AND custom_id = ?"
                       " AND state = 'new'", [(e, job, c) for c, e in failed])


def unanswered(db: Db, job: str, key: str) -> list[str]:
    """Requests of the send still out: after its batch was read, those it left unanswered."""
    rows = db.execute("SELECT custom_id FROM batch_requests WHERE job = ? AND send_key = ? AND state = 'sent'"
                      " ORDER BY custom_id", [job, key]).fetchall()
    return [str(r[0]) for r in rows]


def send_rows(db: Db, job: str) -> list[dict[str, Any]]:
    """Every send of the job, oldest first (for `veralith batch status`)."""
    return list(db.query("SELECT key, model, requests, bytes, state, batch_id, status, error FROM batch_sends"
                         " WHERE job = ? ORDER BY recorded_at, key", [job]))
