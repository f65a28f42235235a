"""The spool: traces `log()` could not write while another process held the write lock.

`log()` never waits out the busy timeout on the caller's thread. When the lock is not free within
`settings.log_timeout_ms`, it appends the trace as one JSON line to this process's spool file
(`<db>.spool/<host>__<pid>__<token>.jsonl`, one `write()` on an O_APPEND file: durable against a
crash of the process, like the database's own synchronous=NORMAL) under an id from a block the
process reserved beforehand, and returns that id. The background worker moves spooled traces into
the database (idempotently: an id already there is skipped) and deletes what it moved.

After a crash, the spool file of a process that is gone is moved in by whoever looks next: any
worker at start and `resume()` (`recover`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from veralith.models import ContextChunk
from veralith.store import leases

__all__ = ["Spool", "recover", "spool_dir"]

logger = logging.getLogger("veralith.store")
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def spool_dir(db_path: str) -> Path:
    return Path(db_path + ".spool")


def _name(host: str, pid: int, token: str) -> str:
    return f"{_UNSAFE.sub('_', host)}__{pid}__{token}"


class Spool:
    """This process's spool for one database file. Thread-safe."""

    def __init__(self, db_path: str) -> None:
        host, pid, token, _ = leases.mine()
        self.db_path = db_path
        self.dir = spool_dir(db_path)
        self.stem = _name(host, pid, token)
        self.file = self.dir / f"{self.stem}.jsonl"
        self._lock = threading.Lock()
        self._moves = 0
        self._dirty = False  # appended since the last complete move

    def append(self, trace_id: int, created_at: str, fields: dict[str, Any]) -> None:
        entry = {"id": trace_id, "created_at": created_at, **fields,
                 "context": [c.model_dump() for c in fields["context"]]}
        data = (_ENCODER.encode(entry) + "\n").encode("utf-8")
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            self._dirty = True

    def pending(self) -> bool:
        """Whether anything spooled here still waits to be moved (no file system access)."""
        return self._dirty

    def move_into(self, db: Database) -> list[int]:
        """Write every spooled trace of this process into `db` (pending, nobody's); return their ids."""
        with self._lock:  # appends go to a fresh file from here on
            if self.file.exists():
                self._moves += 1
                self.file.rename(self.dir / f"{self.stem}.moving-{self._moves}")
            self._dirty = False
        moved: list[int] = []
        try:
            for path in sorted(self.dir.glob(f"{self.stem}.moving-*")) if self.dir.is_dir() else []:
                moved += _move_file(db, path)
        except BaseException:
            self._dirty = True  # try again later; the renamed file is still there
            raise
        return moved


def _move_file(db: Database, path: Path) -> list[int]:
    from veralith.store.repository import create_trace

    ids = []
    for lineno, raw in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            entry = json.loads(raw)
        except ValueError:  # a line cut short by a crash mid-write: nothing usable in it
            logger.warning("veralith: %s:%d: unreadable spool line skipped", path, lineno)
            continue
        ids.append(create_trace(
            db, query=entry["query"], response=entry["response"], knowledge_base=entry["knowledge_base"],
            metadata=entry["metadata"], context=[ContextChunk(**c) for c in entry["context"]],
            trace_id=entry["id"], created_at=entry["created_at"], run=entry.get("run"),
            app_latency_ms=entry.get("app_latency_ms")))
    path.unlink()  # only once every line is in the database
    return ids


def recover(db: Database, db_path: str) -> list[int]:
    """Move in the spool files of processes that are gone (same host: pid gone or reused by us;
    another host: untouched for the lease timeout). Returns the ids moved."""
    folder = spool_dir(db_path)
    if not folder.is_dir():
        return []
    host, pid, token, _ = leases.mine()
    own = _name(host, pid, token)
    moved: list[int] = []
    for path in sorted(folder.iterdir()):
        stem = path.name.split(".", 1)[0]
        if stem == own or path.name.startswith(".") or "__" not in stem:
            continue
        try:
            their_host, their_pid, _token = stem.rsplit("__", 2)
            age = time.time() - path.stat().st_mtime
        except (ValueError, OSError):
            continue
        same_host = their_host == _UNSAFE.sub("_", host)
        gone = (int(their_pid) == pid or not leases.process_alive(int(their_pid))) if same_host else False
        if gone or age > leases.LEASE_TIMEOUT_S:
            try:
                moved += _move_file(db, path)
            except FileNotFoundError:  # another process recovered it first
                continue
    return moved
