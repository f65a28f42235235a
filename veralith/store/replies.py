"""The `llm_cache` table: judge replies by request key, for the reply cache (veralith.llm.cache).

The SQL (`get_reply`, `put_replies`, `count_hits`) runs on any store's connection. `ReplyTable` is
SQLite's way to reach it: one connection per database file and process, shared by every thread
under a lock, rather than the store's connection per thread: judge calls run on short-lived pool
threads, and opening and schema-checking a connection for each of them costs more than the
lookups it would serve.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping

from veralith.store.sql import Db, SqliteDb

__all__ = ["ReplyTable", "count_hits", "get_reply", "put_replies"]


def get_reply(db: Db, key: str) -> str | None:
    row = db.execute("SELECT value FROM llm_cache WHERE key = ?", [key]).fetchone()
    return None if row is None else str(row[0])


def put_replies(db: Db, rows: list[tuple[str, str, str, str, str]]) -> None:
    """Keep (key, task, model, prompt_version, value) rows; a key already there is replaced."""
    # The metadata columns are for people browsing the table; the key alone decides a hit.
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with db.write():
        db.executemany("INSERT INTO llm_cache (key, task, model, prompt_version, value, created_at, hits)"
                       " VALUES (?, ?, ?, ?, ?, ?, 0) ON CONFLICT (key) DO UPDATE SET task = excluded.task,"
                       " model = excluded.model, prompt_version = excluded.prompt_version, value = excluded.value,"
                       " created_at = excluded.created_at, hits = 0", [(*row, now) for row in rows])


def count_hits(db: Db, hits: Mapping[str, int]) -> None:
    if hits:
        with db.write():
            # In key order, so two writers never take row locks in opposite orders.
            db.executemany("UPDATE llm_cache SET hits = hits + ? WHERE key = ?",
                           [(n, k) for k, n in sorted(hits.items())])


class ReplyTable:
    """get / put / count_hits on `llm_cache` in the SQLite file at `path` (already resolved). Thread-safe."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: SqliteDb | None = None
        self._pid = 0

    def get(self, key: str) -> str | None:
        with self._lock:
            return get_reply(self._connection(), key)

    def put(self, key: str, value: str, *, task: str, model: str, prompt_version: str) -> None:
        with self._lock:
            put_replies(self._connection(), [(key, task, model, prompt_version, value)])

    def count_hits(self, hits: Mapping[str, int]) -> None:
        with self._lock:
            count_hits(self._connection(), hits)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _connection(self) -> SqliteDb:
        """Opened once per process (under _lock), schema migrated; a forked child opens its own."""
        if self._db is None or self._pid != os.getpid():
            from veralith.store.db import connect

            # Shared by the threads of this process, one at a time (_lock).
            self._db, self._pid = connect(self.path, check_same_thread=False), os.getpid()
        return self._db
