"""Trace ids reserved ahead, so `log()` can hand out a final id without the write lock.

A process reserves a block of ids (repository.reserve_ids, one short transaction); `log()` takes
the next one for every trace it writes, so ids stay increasing within a process, and a trace that
had to be spooled while another process held the lock still gets its final id at once. A reserver
thread refills in the background once a quarter of the block is used: the log worker may be busy
with one evaluation for seconds while the caller uses up ids in milliseconds. Ids a process leaves
unused are gaps.
"""

from __future__ import annotations

import collections
import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BLOCK", "IdBlocks"]

logger = logging.getLogger("veralith.store")

# A spooled log() costs about log_timeout_ms, so 256 ids outlast ~13 s of a fully locked database.
BLOCK = 256
_REFILL_BELOW = BLOCK * 3 // 4


class IdBlocks:
    """Reserved ids per database path. Thread-safe; `alive()` ends the reserver thread."""

    def __init__(self, alive: Callable[[], bool]) -> None:
        self._ids: dict[str, collections.deque[int]] = {}
        self._wanted = threading.Event()
        self._reserving = threading.Lock()
        self._alive = alive
        threading.Thread(target=self._refill, name="veralith-id-reserver", daemon=True).start()

    def take(self, path: str, db: Any, wait_ms: float) -> int | None:
        """The next reserved id, or None when none is reserved and the lock stays busy for `wait_ms`
        (the caller's connection `db` reserves at once when the block is empty)."""
        from veralith.store.db import lock_wait

        ids = self._ids.setdefault(path, collections.deque())
        if len(ids) < _REFILL_BELOW:
            self._wanted.set()
        if not ids and path != ":memory:":
            try:
                with lock_wait(db, wait_ms):
                    self._reserve(path, db)
            except sqlite3.OperationalError:
                return None
        try:
            return ids.popleft()
        except IndexError:
            return None

    def _reserve(self, path: str, db: Any) -> None:
        from veralith.store.repository import reserve_ids

        # Serialised, so blocks join the deque in ascending order and ids stay increasing.
        with self._reserving:
            ids = self._ids.setdefault(path, collections.deque())
            if len(ids) < _REFILL_BELOW:
                ids.extend(reserve_ids(db, BLOCK))

    def _refill(self) -> None:
        from veralith.store.db import open_db

        while self._alive():
            if not self._wanted.wait(1.0):
                continue
            self._wanted.clear()
            for path in [p for p in list(self._ids) if p != ":memory:"]:
                try:
                    self._reserve(path, open_db(path))
                except Exception:  # locked for the whole busy timeout, or unwritable: retry when asked
                    logger.warning("veralith: could not reserve trace ids in %s", path, exc_info=True)
