"""Trace ids handed out without waiting on the store: a counter in a small file beside the spool.

`log()` must return a trace's final id at once, even while another process holds SQLite's write
lock or PostgreSQL cannot be reached. So ids do not come from the database at insert time; they
come from an `IdFile`: a few bytes holding the next free id and the end of the range this host
may use, advanced under an exclusive file lock (held for microseconds, never by the database).

- SQLite (one host by nature): the file *is* the allocator. Every trace the store creates takes
  its id here, so ids are consecutive (no gaps unless a process dies between taking an id and
  writing its trace). A missing file starts above the highest id in the database and its spool.
- PostgreSQL (many hosts): the file holds a block this host reserved from the database's counter
  (`refill`), shared by every process of the host; a background refill keeps it ahead of use.
  Only a host's very first trace finds no block: `take(wait_s=...)` then waits that long for the
  first reservation (one round trip). If the database does not answer in time, the trace takes a
  random id from a range the counter never reaches (`RANDOM_BASE` and above): unique with
  overwhelming probability, and checked when the trace is shipped (a clash gets a new id, logged).

The lock is fcntl.flock on POSIX and msvcrt.locking on Windows.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["RANDOM_BASE", "REMOTE_BLOCK", "IdFile"]

logger = logging.getLogger("veralith.store")

RANDOM_BASE = 1 << 62      # ids at or above this were taken at random (see the module docstring)
REMOTE_BLOCK = 1000        # ids per block a PostgreSQL store hands a host (its sequence's increment)
_NO_LIMIT = (1 << 62) - 1  # the end of a SQLite file's range: it has no other source to wait for
_WIDTH = 20                # digits per number in the file: fixed width, so one write replaces both


class IdFile:
    """The id counter in `path`. Thread-safe and safe across processes.

    `start()` gives the first id when the file is new (above everything already stored). A
    `remote` file (PostgreSQL) only hands out blocks the database reserved: `attach(refill)` gives
    it the function that reserves n ids and returns them as a range. Otherwise (SQLite) the file
    is the only source and never runs out.
    """

    def __init__(self, path: str | os.PathLike[str], *, start: Callable[[], int], remote: bool = False,
                 block: int = 100) -> None:
        self.path = Path(path)
        self._start, self.remote, self.block = start, remote, block
        self._refill: Callable[[int], range] | None = None
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = 0
        self._refilling = threading.Event()
        self._filled = threading.Event()   # set after each refill attempt, successful or not

    def attach(self, refill: Callable[[int], range]) -> None:
        """The database's block reservation (a remote file): used from now on, in the background."""
        self._refill = refill

    def take(self, *, wait_s: float = 0.0) -> int:
        """The next id. With ids left in this host's block it never waits; with none (a remote file
        whose block is used up, or was never reserved) it asks for a refill and waits for it at most
        `wait_s` seconds, then takes a random id (see the module docstring)."""
        found, left, never = self._next()
        if self.remote and left < self.block // 2:
            self._refill_soon()
        if found is None and never and wait_s > 0:  # only a host's very first block is waited for
            self._filled.wait(wait_s)
            found, _, _ = self._next()
        return RANDOM_BASE + secrets.randbits(61) if found is None else found

    def _next(self) -> tuple[int | None, int, bool]:
        """(the next id or None, ids left after it, whether this file never held a block)."""
        with self._lock, self._locked() as fd:
            nxt, end = self._read(fd)
            if nxt > end:
                return None, -1, self.remote and end == 0
            self._write(fd, nxt + 1, end)
            return nxt, end - nxt, False

    def take_now(self) -> int:
        """The next id, refilling from the database first when the block is used up (callers that
        may wait: `eval`, the worker, `evaluate(persist=True)`)."""
        if self.remote:
            with self._lock, self._locked() as fd:
                nxt, end = self._read(fd)
            if nxt > end:
                self.fill()
        return self.take()

    def bump(self, above: int) -> None:
        """Make every later id greater than `above` (a clash found when shipping: the file fell behind)."""
        with self._lock, self._locked() as fd:
            nxt, end = self._read(fd)
            if nxt <= above and (not self.remote or above < end):
                self._write(fd, above + 1, end)

    def fill(self) -> None:
        """Reserve a new block from the database now (a remote file whose refill is attached); the
        unused rest of the current block, if half of it or more, is kept instead."""
        refill = self._refill
        if refill is None:
            return
        ids = refill(self.block)
        with self._lock, self._locked() as fd:
            nxt, end = self._read(fd)
            if nxt > end or end - nxt < self.block // 2:
                # A new block replaces a (nearly) used-up one; ids left in the old one are gaps.
                self._write(fd, ids.start, ids.stop - 1)

    # -- internals ------------------------------------------------------------------------------
    def _refill_soon(self) -> None:
        if self._refill is None or self._refilling.is_set():
            return
        self._refilling.set()
        self._filled.clear()

        def run() -> None:
            try:
                self.fill()
            except Exception as exc:  # unreachable database: the next take() asks again
                logger.debug("veralith: could not reserve trace ids: %s", exc)
            finally:
                self._refilling.clear()
                self._filled.set()

        threading.Thread(target=run, name="veralith-id-refill", daemon=True).start()

    def _read(self, fd: int) -> tuple[int, int]:
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 2 * _WIDTH + 2)
        try:
            nxt, end = (int(x) for x in raw.split())
            return nxt, end
        except ValueError:  # a new (empty) file, or one cut short: start above what is stored
            first = self._start()
            end = first - 1 if self.remote else _NO_LIMIT  # a remote file has no block yet
            self._write(fd, first, end)
            return first, end

    def _write(self, fd: int, nxt: int, end: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{nxt:0{_WIDTH}d}\n{end:0{_WIDTH}d}\n".encode("ascii"))

    def _locked(self) -> _FileLock:
        if self._fd is None or self._pid != os.getpid():  # a forked child opens its own descriptor
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd, self._pid = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600), os.getpid()
        return _FileLock(self._fd)


class _FileLock:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> int:
        _lock(self.fd)
        return self.fd

    def __exit__(self, *exc: object) -> None:
        _unlock(self.fd)


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    # Byte 64 (beyond the two numbers) is the lock, so locking it never blocks reading them.
    def _lock(fd: int) -> None:
        os.lseek(fd, 64, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_LOCK, 1)

    def _unlock(fd: int) -> None:
        os.lseek(fd, 64, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
else:
    import fcntl

    def _lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
