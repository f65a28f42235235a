"""log()'s side of a store: an id and a spool line, with no database module loaded.

`log()` must return within a few milliseconds even on the first call of a fresh process, so its
path never imports a database library or opens a connection: it takes the trace's final id from
the store's id file (veralith.work.ids) and appends the trace to this process's spool
(veralith.work.spool). The store proper (veralith.store.sqlstore) ships the spool in later, from
a background thread, and takes its own ids from the same file.

Once warm, that path makes no system call at all (ids taken ahead into memory, a line copied into
a mapped segment), so the caller's thread never releases the GIL to a busy background thread:
a thread of the spooler's own (`prepare`, woken when ids or the spare segment are used up) takes
the ids and readies the segments.

Where each store keeps them on this host:
- `sqlite:///path/file.db`: beside the file, in `file.db.spool/` (ids: `next-id` there);
- `postgresql://...`: `settings.spool_dir`, else `~/.cache/veralith/spool/<host>-<port>-<db>-<user>/`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from veralith.store.protocol import TraceInput
from veralith.store.rows import now_iso
from veralith.work.ids import IdFile
from veralith.work.spool import Spool, read_lines, spool_stopped

__all__ = ["Spooler", "new_id", "spooler_for"]

logger = logging.getLogger("veralith.store")

# How often the segment being written is touched even when nothing wakes the preparer: a spool file
# untouched for leases.LEASE_TIMEOUT_S (5 minutes) may be taken by another host sharing the folder,
# and copying into a mapping does not reliably update the file's modification time.
_TOUCH_EVERY_S = 60.0


class Spooler:
    """Ids and the spool of one store on this host. Thread-safe."""

    def __init__(self, folder: Path, ids: IdFile) -> None:
        self.folder, self.ids = folder, ids
        self.spool = Spool(folder)
        # The preparer: a thread of its own, so that ids and segments are ready even while the
        # shipper is busy (its first store opening imports the database library for a second or so).
        self._due = threading.Event()
        self._preparer: threading.Thread | None = None
        self._pid = 0
        self._closed = False               # by close(), until the next append
        self._preparing = threading.Lock()  # prepare() and close() one at a time (background only)
        self._starting = threading.Lock()
        ids.low = self.spool.spare_used = self._due.set

    @property
    def wake(self) -> Callable[[], object] | None:
        return self.spool.wake

    @wake.setter
    def wake(self, call: Callable[[], object] | None) -> None:
        """What to call (on the caller's thread, without blocking) when there is something to ship."""
        self.spool.wake = call

    def prepare(self) -> None:
        """Take ids ahead and ready a spare segment (background threads only: system calls)."""
        with self._preparing:
            if not self._closed:
                self.ids.prefetch()
                self.spool.prepare()

    def close(self) -> None:
        """At shutdown: give back unused ids, unmap the segments and delete the empty ones. The
        next append starts again."""
        with self._preparing:
            self._closed = True
            self.ids.give_back()
            self.spool.close()

    def start_preparer(self) -> None:
        """Start the preparer thread of this process (a forked child's own), once: by log()'s shipper
        thread, not on log()'s path (Thread.start waits for a turn of the scheduler). Until it runs,
        an append takes ids and makes its segment itself."""
        with self._starting:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._preparer = threading.Thread(target=self._prepare_loop, name="veralith-spool-prepare", daemon=True)
            self._preparer.start()
        self._due.set()

    def _prepare_loop(self) -> None:
        while True:
            self._due.wait(_TOUCH_EVERY_S)  # also when not woken: the segment written stays fresh
            self._due.clear()
            try:
                self.prepare()
            except Exception as exc:  # e.g. a full disk: the next append meets it itself, and raises
                logger.debug("veralith: could not prepare the spool in %s: %s", self.folder, exc)

    def append(self, trace: TraceInput, *, run: str | None, evaluate_here: bool) -> int:
        """Make `trace` durable under its final id and return the id (see veralith.work.spool)."""
        self._closed = False
        try:
            trace_id = self.ids.take(ahead=True)
        except OSError as exc:   # its counter file could not be written: a full disk, a read-only folder
            raise spool_stopped(self.folder, exc) from None
        self.spool.append({"id": trace_id, "uid": _uid(), "created_at": now_iso(), "run": run,
                           "here": evaluate_here, **trace.to_json()})
        return trace_id


_spoolers: dict[tuple[str, int], Spooler] = {}
_lock = threading.Lock()
_uids: tuple[int, str, Iterator[int]] = (0, "", itertools.count())


def _uid() -> str:
    """A trace's unique id (32 hex digits, as the store's own): 64 random bits drawn once per
    process, then a counter. Not secrets.token_hex per trace: os.urandom is a system call."""
    global _uids
    pid, prefix, counter = _uids
    if pid != os.getpid():  # the first trace of this process (or of a forked child)
        pid, prefix, counter = _uids = (os.getpid(), secrets.token_hex(8), itertools.count())
    return f"{prefix}{next(counter):016x}"


def spooler_for(url: str) -> Spooler:
    """The one Spooler of this process for the store at `url` (as veralith.store.store_url gives it)."""
    key = (url, os.getpid())
    found = _spoolers.get(key)  # without the lock once made: log() never waits on another thread here
    if found is not None:
        return found
    with _lock:
        found = _spoolers.get(key)
        if found is None:
            found = _spoolers[key] = _make(url)
        return found


def new_id(url: str) -> int:
    """An id for a trace stored now by a caller that may wait (`eval`, the worker,
    `evaluate(persist=True)`), from the same allocator as `log()`'s ids (the store at `url`)."""
    return spooler_for(url).ids.take_now()


def _make(url: str) -> Spooler:
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        folder = Path(path + ".spool")
        return Spooler(folder, IdFile(folder / "next-id", start=lambda: _sqlite_first_id(path, folder)))
    folder = _postgres_folder(url)
    from veralith.work.ids import REMOTE_BLOCK

    ids = IdFile(folder / "next-id", start=lambda: 1, remote=True, block=REMOTE_BLOCK)
    ids.attach(lambda count: _reserve(url, ids))
    return Spooler(folder, ids)


def _reserve(url: str, ids: IdFile) -> range:
    """A block from the database, above this host's high-water mark and recorded as its (on the refill
    thread: the PostgreSQL library loads there, not in log())."""
    from veralith.store import open_store, ops

    return open_store(url).write(ops.reserve_block, ids.high_water(), ids.owner)


def _postgres_folder(url: str) -> Path:
    from veralith.config import settings

    if settings.spool_dir:
        return Path(settings.spool_dir).expanduser().resolve()
    parts = urlsplit(url)
    name = "-".join(str(x) for x in (parts.hostname or "local", parts.port or 5432, parts.path.strip("/") or "db",
                                     parts.username or "user"))
    return Path("~/.cache/veralith/spool").expanduser() / re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _sqlite_first_id(path: str, folder: Path) -> int:
    """Above every id stored, reserved by an older version, or waiting in a spool file. Read with
    the standard library, read-only and without the write lock (a WAL reader never waits)."""
    highest = 0
    if os.path.exists(path):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            with contextlib.suppress(sqlite3.Error):  # a fresh file has no table yet
                highest = int(conn.execute("SELECT coalesce(max(id), 0) FROM traces").fetchone()[0])
            with contextlib.suppress(sqlite3.Error):  # the table came with migration 0004
                highest = max(highest, int(conn.execute(
                    "SELECT coalesce(max(hi), 0) FROM trace_id_blocks").fetchone()[0]))
        finally:
            conn.close()
    return max(highest, _spooled_max(folder)) + 1


def _spooled_max(folder: Path) -> int:
    """The highest id in the spool files of `folder`. A process's ids only grow, so a file's highest
    is among its last lines: those are parsed, not the whole file (a counter started again while
    apps log reads every segment, on a thread that holds the counter's lock)."""
    highest = 0
    if folder.is_dir():
        for path in folder.iterdir():
            if path.name.startswith("next-id") or path.name == "migrate.lock":   # the counter, its lock, holdings
                continue
            with contextlib.suppress(OSError):
                parsed = 0
                for raw in reversed(read_lines(path)):
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        entry: Any = json.loads(raw)
                        highest, parsed = max(highest, int(entry["id"])), parsed + 1
                    if parsed >= 8:
                        break
    return highest
