"""The `llm_cache` table: judge replies by request key, for the reply cache (veralith.llm.cache).

One connection per database file and process, shared by every thread under a lock, rather than the
store's connection per thread: judge calls run on short-lived pool threads, and opening and
schema-checking a connection for each of them costs more than the lookups it would serve. Writes
take the write lock at BEGIN (IMMEDIATE), like every other store write.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Mapping

from sqlite_utils import Database

from veralith.store.db import BUSY_TIMEOUT_MS
from veralith.store.migrate import apply_migrations

__all__ = ["ReplyTable"]


class ReplyTable:
    """get / put / count_hits on `llm_cache` in the file at `path` (already resolved). Thread-safe."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._connection().execute("SELECT value FROM llm_cache WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, value: str, *, task: str, model: str, prompt_version: str) -> None:
        # The metadata columns are for people browsing the table; the key alone decides a hit.
        self._write("INSERT OR REPLACE INTO llm_cache (key, task, model, prompt_version, value, created_at, hits) "
                    "VALUES (?, ?, ?, ?, ?, ?, 0)",
                    [(key, task, model, prompt_version, value, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))])

    def count_hits(self, hits: Mapping[str, int]) -> None:
        if hits:
            self._write("UPDATE llm_cache SET hits = hits + ? WHERE key = ?", [(n, k) for k, n in hits.items()])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _write(self, sql: str, rows: list[tuple[object, ...]]) -> None:
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(sql, rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _connection(self) -> sqlite3.Connection:
        """Opened once per process (under _lock), schema migrated; a forked child opens its own."""
        if self._conn is None or self._pid != os.getpid():
            if self.path != ":memory:":
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)  # shared by threads, serialised by _lock
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_MS)}")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            apply_migrations(Database(conn, execute_plugins=False))
            self._conn, self._pid = conn, os.getpid()
        return self._conn
