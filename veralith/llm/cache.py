"""The judge-reply cache: an in-process LRU in front of the SQLite `llm_cache` table.

Keys are the client's `request_key` (a hash of backend, model, prompt version, messages, response
schema and sampling parameters), so a changed prompt or model can never be served an old reply.
Values are parsed replies as JSON objects; the client stores only replies that parsed and passed
the task's checks. The SQLite layer is shared by every process using the same database, so a
rerun in a new process is served from disk; the LRU saves the disk round trip inside a process.

`settings.cache` is read on every call, so `settings.override(cache=False)` turns both layers off
for existing clients too. A row that cannot be decoded is treated as a miss and overwritten by
the next `put`. All methods are thread-safe. The disk layer is the trace store's reply table
(`Store.replies()`; SQLite: veralith.store.replies), so another
store implementation brings its own and this module does not change.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from veralith.config import settings
from veralith.errors import StoreError

if TYPE_CHECKING:  # the store (sqlite-utils) loads on the first lookup, not when a client is built
    from veralith.store.protocol import Store

__all__ = ["CacheStats", "LLMCache", "SettingsCache", "cache_for", "get_cache"]

log = logging.getLogger("veralith.cache")


@dataclass
class CacheStats:
    memory_hits: int = 0
    db_hits: int = 0
    misses: int = 0
    puts: int = 0
    corrupt: int = 0


class LLMCache:
    """`get(key) -> dict | None` and `put(key, value)`; see the module docstring for the contract."""

    def __init__(self, db_path: str, size: int) -> None:
        self.db_path = db_path
        self.size = size
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._lru: OrderedDict[str, str] = OrderedDict()  # key -> JSON text (callers get fresh copies)
        self._unsaved_hits: dict[str, int] = {}
        self._store_lock = threading.Lock()
        self._store: Store | None = None  # the store at db_path, opened on first use

    # ------------------------------------------------------------ public seam
    def get(self, key: str) -> dict[str, Any] | None:
        if not settings.cache:
            return None
        with self._lock:
            text = self._lru.get(key)
            if text is not None:
                self._lru.move_to_end(key)
                self.stats.memory_hits += 1
                return json.loads(text)
        try:
            stored = self._disk().replies().get(key)
        except (sqlite3.Error, StoreError) as exc:  # an unreadable cache is a miss, never a failed judge call
            log.warning("LLM cache unreadable (%s); calling the model instead", exc)
            stored = None
        value = _decode(stored) if stored is not None else None
        with self._lock:
            if value is None or stored is None:
                self.stats.misses += 1
                self.stats.corrupt += stored is not None
                return None
            self.stats.db_hits += 1
            self._remember(key, stored)
            self._unsaved_hits[key] = self._unsaved_hits.get(key, 0) + 1
            flush = sum(self._unsaved_hits.values()) >= _HITS_PER_WRITE
        if flush:
            self.flush_hits()
        return value

    def flush_hits(self) -> None:
        """Add the disk hits counted since the last flush to the rows' `hits` column.

        `hits` counts replies served from disk (reuse across runs and processes). Writing it on
        every hit made concurrent judge threads queue for SQLite's write lock on a rerun, so hits
        are written in batches, on the next `put`, and at exit; LRU hits are never written.
        """
        with self._lock:
            pending, self._unsaved_hits = self._unsaved_hits, {}
        if not pending:
            return
        try:
            self._disk().replies().count_hits(pending)
        except (sqlite3.Error, StoreError) as exc:
            log.warning("LLM cache hit counters not updated: %s", exc)

    def put(self, key: str, value: dict[str, Any], *, task: str | None = None, model: str | None = None,
            prompt_version: str | None = None) -> None:
        if not isinstance(value, dict):
            raise TypeError(f"only parsed replies (dicts) are cached, got {type(value).__name__}")
        if not settings.cache:
            return
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
        try:
            self._disk().replies().put(key, text, task=task or "", model=model or "",
                                       prompt_version=prompt_version or "")
        except (sqlite3.Error, StoreError) as exc:  # the reply is still good; only its reuse by other processes is lost
            log.warning("LLM cache write failed (%s); kept in memory only", exc)
        with self._lock:
            self.stats.puts += 1
            self._remember(key, text)
        self.flush_hits()

    def close(self) -> None:
        """Write pending hit counters and close the connection; the next call reopens it."""
        self.flush_hits()
        with self._store_lock:
            # Dropped, not store.close(): that would also close the calling thread's own connection to
            # the file, which its other users still hold. The last reference gone closes the reply
            # table's connection (CPython frees it at once).
            self._store = None

    def clear_memory(self) -> None:
        """Forget the LRU layer only (tests and benchmarks use it to measure the SQLite layer)."""
        with self._lock:
            self._lru.clear()

    # ------------------------------------------------------------ internals
    def _remember(self, key: str, text: str) -> None:
        if self.size <= 0:
            return
        self._lru[key] = text
        self._lru.move_to_end(key)
        while len(self._lru) > self.size:
            self._lru.popitem(last=False)

    def _disk(self) -> Store:
        """The trace store at db_path: the disk layer's reads and writes."""
        with self._store_lock:
            if self._store is None:
                from veralith.store import open_store

                self._store = open_store(self.db_path)
            return self._store


def _decode(text: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


_HITS_PER_WRITE = 64
_MAX_OPEN = 8   # databases a process keeps a cache (and a connection) for; test suites switch often
_caches: dict[tuple[str, int], LLMCache] = {}
_caches_lock = threading.Lock()


@atexit.register
def _close_all() -> None:
    with _caches_lock:
        caches = list(_caches.values())
    for cache in caches:
        cache.close()


def _store_url() -> str:
    from veralith.store import store_url

    return store_url()


def cache_for(db_path: str, size: int) -> LLMCache:
    """The process's one LLMCache for this database file and LRU size."""
    key = (db_path if db_path == ":memory:" or "://" in db_path else os.path.abspath(db_path), size)
    with _caches_lock:
        cache = _caches.get(key)
        if cache is None:
            while len(_caches) >= _MAX_OPEN:  # the longest-held goes; it would reopen if used again
                _caches.pop(next(iter(_caches))).close()
            cache = _caches[key] = LLMCache(key[0], key[1])
        return cache


class SettingsCache:
    """The cache of whatever `settings` say now (file, size, on/off), looked up on every call.

    Judge clients live longer than a settings override (get_client reuses them), so they hold
    this instead of one LLMCache: a later `settings.override(db_path=...)` or a new VERALITH_DB_PATH
    is honoured without rebuilding clients.
    """

    def get(self, key: str) -> dict[str, Any] | None:
        return cache_for(_store_url(), settings.cache_size).get(key) if settings.cache else None

    def put(self, key: str, value: dict[str, Any], **meta: str | None) -> None:
        if settings.cache:
            cache_for(_store_url(), settings.cache_size).put(key, value, **meta)

    @property
    def current(self) -> LLMCache:
        return cache_for(_store_url(), settings.cache_size)


_SETTINGS_CACHE = SettingsCache()


def get_cache() -> SettingsCache:
    """The process cache for the current settings (database file, LRU size, on/off), as clients use it."""
    return _SETTINGS_CACHE
