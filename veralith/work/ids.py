"""Trace ids handed out without waiting on the store: a counter in a small file beside the spool.

`log()` must return a trace's final id at once, even while another process holds SQLite's write
lock or PostgreSQL cannot be reached. So ids do not come from the database at insert time; they
come from an `IdFile`: a few bytes holding the next free id, the end of the range this host may
use and a check of both, advanced under an exclusive lock (held for microseconds, never by the
database) on a lock file beside it (`next-id.lock`), so that deleting or replacing the counter never
lets two processes count at once.

- SQLite (one host by nature): the file *is* the allocator. Every trace the store creates takes
  its id here (in batches, see below), so ids are consecutive as long as one process logs at a
  time; a process that dies, or exits after another process took ids, leaves the ids it held
  unused (a gap). A file that is missing, cut short, damaged or older than what this process took
  from it starts again above the highest id in the database, its spool and what any live process
  of the host holds (veralith.work.holdings).
- PostgreSQL (many hosts): the file holds a block this host reserved from the database's sequence
  (`refill`), shared by every process of the host; a background refill keeps it ahead of use. A
  file started again holds no block: the next one from the sequence is above every id handed out.
  A host with no block (its first traces, or the database down since it started) never waits: the
  trace takes a random id from a range the sequence never reaches (`RANDOM_BASE` and above), final
  with overwhelming probability and checked when the trace is shipped.

`veralith migrate` takes the ids a copy keeps from the same allocators (`reserve`, `reserve_blocks`):
veralith.work.migrate.

Each process takes a few ids at a time from the file into memory (`prefetch`, run ahead on a
background thread: veralith.work.spooler), so that `take()` on the caller's thread is a counter
in memory: no file lock and no system call, which would let go of the GIL (see
veralith.work.spool). Only when the process's ids have run out (its first trace, or a burst
faster than the background refills) does `take()` lock the file itself. What a process holds
and never uses is given back at shutdown if nobody took ids after it (`give_back`), else it is
a gap; so with several processes logging at once ids are unique but no longer in time order
across processes, as a PostgreSQL host's block already was.

The lock is fcntl.flock on POSIX and msvcrt.locking on Windows.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

from veralith.store.idblocks import BLOCK, RANDOM_BASE  # constants only: no database library
from veralith.work.holdings import Holding, held_above, same_file

__all__ = ["RANDOM_BASE", "REMOTE_BLOCK", "IdFile", "Span"]

logger = logging.getLogger("veralith.store")

Span = tuple[int, int]     # ids first..last, both included
# Ids a process takes from the file at a time, ahead of its traces: PREFETCH at first, doubled (up
# to PREFETCH_MAX) each time the caller ran out before the background took more. A thread that
# never releases the GIL keeps others waiting a switch interval (5 ms) before they run, so a
# process logging in a tight loop can use a few hundred ids before the background gets its turn.
PREFETCH = 64
PREFETCH_MAX = 4096
REMOTE_BLOCK = BLOCK       # ids per block a PostgreSQL store hands a host (its sequence's increment)
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
        self._fd: int | None = None        # the counter file (reopened when the path names another file)
        self._lock_fd: int | None = None   # the lock file beside it: what every process locks
        self._pid = 0
        self._holding = Holding(self.path)  # the highest id this process took, on disk (veralith.work.holdings)
        self._refill_failed = False         # the last refill attempt failed: nobody waits for the next
        self._refilling = threading.Event()
        self._filled = threading.Event()   # set after each refill attempt, successful or not
        # This process's ids taken ahead from the file, (next, last) ranges in order, and the pid
        # they belong to (a forked child takes its own); under _mem, never held across a system call.
        self._mem = threading.Lock()
        self._held: list[tuple[int, int]] = []
        self._held_pid = 0
        self._batch = PREFETCH
        self._prefetched = False   # a batch was taken ahead since the batch size last grew
        self.low: Callable[[], object] | None = None   # called (on the caller's thread) when they run low
        self._seen_end = 0   # the end of the host's range when the file was last read (a block's last id)
        self._owner: str | None = None

    @property
    def owner(self) -> str:
        """Who holds this file's blocks in the store's record of them (veralith.store.idblocks): every
        process that counts in this file, whichever host it runs on (a spool folder on a shared volume
        is one counter, so one owner). Named by a token file beside the counter (`next-id.owner`),
        created once (O_EXCL) by the first process to look, holding its host and folder (what the owner
        was before the file existed, so a host's recorded blocks stay its own); read again each time,
        so a folder emptied and started again is followed."""
        try:
            with self._lock, self._locked():
                self._owner = self._read_owner()
        except OSError as exc:   # a folder that cannot be written: this host alone, as before the file
            logger.debug("veralith: cannot read or create %s: %s", self._owner_path, exc)
        return self._owner or f"{socket.gethostname()}:{self.path.parent}"

    @property
    def _owner_path(self) -> Path:
        return self.path.with_name(self.path.name + ".owner")

    def _read_owner(self) -> str:
        """Under the counter's lock: the folder's owner token, the file created first if missing (or
        written again if empty: its creator died between creating and writing it)."""
        path = self._owner_path
        try:
            token = path.read_text(encoding="utf-8").strip()
            if token:
                return token
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        except FileNotFoundError:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:   # created meanwhile by a process not taking the lock (an earlier copy)
                return path.read_text(encoding="utf-8").strip() or self._read_owner()
        token = f"{socket.gethostname()}:{self.path.parent}"
        try:
            os.write(fd, (token + "\n").encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        return token

    def attach(self, refill: Callable[[int], range]) -> None:
        """The database's block reservation (a remote file): used from now on, in the background."""
        self._refill = refill

    def take(self, *, ahead: bool = False) -> int:
        """The next id, at once. From the ids this process took ahead it is a counter in memory. When
        it holds none, with `ahead` (log()'s path) it takes the next batch itself (one file lock, as a
        single id would need); else one id. A remote file with no ids left in this host's block (its
        first block not reserved yet, the database unreachable) asks for a refill in the background
        and returns a random id (see the module docstring): nothing here waits on the database."""
        found = self._held_next()
        if found is not None:
            return found
        if ahead:
            with self._mem:
                if self._prefetched:  # ran out before the background took more: take more at a time
                    self._batch, self._prefetched = min(2 * self._batch, PREFETCH_MAX), False
            self.prefetch()
            found = self._held_next()
            if found is not None:
                return found
        found, left = self._next()
        if self.remote and left < self.block // 2:
            self._refill_soon()
        return RANDOM_BASE + secrets.randbits(61) if found is None else found

    def _held_next(self) -> int | None:
        """The next of the ids this process took ahead (in memory, no system call), or None."""
        with self._mem:
            if not self._held or self._held_pid != os.getpid():
                return None
            nxt, last = self._held[0]
            if nxt == last:
                self._held.pop(0)
                if self.low is not None:
                    self.low()  # one batch left (or none): time to take the next ahead
            else:
                self._held[0] = (nxt + 1, last)
            return nxt

    def _next(self) -> tuple[int | None, int]:
        """(the next id or None, ids left after it)."""
        with self._lock, self._locked() as fd:
            nxt, end = self._read(fd)
            if nxt > end:
                return None, -1
            self._holding.note(nxt)   # on disk before the counter moves past it
            self._write(fd, nxt + 1, end)
            return nxt, end - nxt

    def prefetch(self) -> None:
        """Hold two batches of ids from the file for this process (the one in use and the next),
        taking what is missing (background threads only: this locks the file)."""
        left = self.block
        with self._lock, self._locked() as fd:
            with self._mem:
                if self._held_pid != os.getpid():
                    self._held, self._held_pid, self._batch = [], os.getpid(), PREFETCH
                missing = 2 - len(self._held)
            if missing <= 0:
                return
            first, end = self._read(fd)
            batch = self._batch
            count = min(missing * batch, end - first + 1)
            if count > 0:
                self._holding.note(first + count - 1)   # on disk before the counter moves past them
                self._write(fd, first + count, end)
                with self._mem:
                    self._held += [(start, min(start + batch, first + count) - 1)
                                   for start in range(first, first + count, batch)]
                    self._prefetched = True
            left = end - first - max(count, 0) + 1
        if self.remote and left < self.block // 2:
            self._refill_soon()

    def give_back(self) -> None:
        """Return the ids this process took ahead and did not use to the file, as far as nobody
        took ids after them (at shutdown); the rest stay unused (gaps)."""
        with self._lock:
            with self._mem:
                held, self._held = (self._held if self._held_pid == os.getpid() else []), []
            if not held:
                self._holding.drop()
                return
            with self._locked() as fd:
                first, end = self._read(fd)
                for nxt, last in reversed(held):
                    if first != last + 1:
                        break
                    first = nxt
                self._write(fd, first, end)
                self._holding.drop()   # what it took is used (in its spool) or given back

    def take_now(self) -> int:
        """The next id, refilling from the database first when the block is used up (callers that
        may wait: `eval`, the worker, `evaluate(persist=True)`)."""
        if self.remote:
            with self._lock, self._locked() as fd:
                nxt, end = self._read(fd)
            if nxt > end:
                self.fill()
        return self.take()

    def reserve(self, *, through: int = 0, count: int = 0) -> range:
        """Ids for the caller alone (a copy's, veralith.work.migrate), taken from a file that is the
        only source (SQLite): every id not handed out yet up to `through`, or else `count` of them."""
        with self._lock, self._locked() as fd:
            nxt, end = self._read(fd)
            stop = through + 1 if through else nxt + count
            if stop <= nxt:
                return range(nxt, nxt)
            self._write(fd, stop, end)
            return range(nxt, stop)

    def bump(self, above: int) -> None:
        """Make every later id greater than `above` (a clash found when shipping: the file fell behind)."""
        with self._lock, self._locked() as fd:
            with self._mem:  # what this process took ahead at or below `above` is behind too
                self._held = [(max(nxt, above + 1), last) for nxt, last in self._held if last > above]
            nxt, end = self._read(fd)
            if nxt <= above and (not self.remote or above < end):
                self._write(fd, above + 1, end)

    # -- after a restore (veralith.store.idblocks; the shipper asks on its rounds) ---------------------
    def high_water(self) -> int:
        """The highest id this host may hand out or has handed out, as far as this process knows: what
        the store's sequence must never fall back below (the end of the host's block, what this process
        took). In memory: no file lock."""
        return max(self._seen_end, self._holding.high)

    def unused(self) -> tuple[int, Span | None, list[Span]]:
        """(high_water, the host's current block (lo, hi) or None, the ranges not handed out yet that
        this process and its host may still hand out: this process's ids taken ahead, and the file's
        rest (a SQLite counter's: every id from its next one on))."""
        with self._lock, self._locked() as fd:
            nxt, end = self._read(fd)
            with self._mem:
                spans = list(self._held) if self._held_pid == os.getpid() else []
        # The block this host hands out from (a used-up one needs no record: the high-water mark keeps the
        # sequence above it; and a file started again holds none, its `end` names no block).
        block = (end - self.block + 1, end) if self.remote and nxt <= end and end >= self.block else None
        if nxt <= end:
            spans.append((nxt, min(end, RANDOM_BASE - 1)))
        return self.high_water(), block, spans

    def drop(self, taken: dict[Span, int]) -> list[Span]:
        """Stop handing out the ranges of `unused()` found taken in the store (`taken`: each range with
        the first id taken in it): a restore handed them to another host too, or its counter fell
        behind what is stored. What this process took ahead there is forgotten (gaps); the file moves
        on: a remote file gives up its block (the next take reserves a new one), a SQLite counter starts
        again above everything stored, spooled and held.

        The store answers a moment after `unused()` was read: a trace this process or its host stored
        meanwhile (log(sync=True), eval: veralith.work.intake) is in a range that was unused then. So a
        range is dropped only when its first taken id is one the host has not handed out yet (checked
        here, under the lock); one whose first taken id it has handed out since is returned instead,
        from where the host is now, to be checked again (the caller asks the store once more). Returns
        those ranges."""
        found: dict[Span, int] = {}
        again: list[Span] = []
        moved: list[int] = []
        with self._lock, self._locked() as fd:
            nxt, end = self._read(fd)
            rest = min(end, RANDOM_BASE - 1)   # the last id of the file's own range (unused()'s last span)
            with self._mem:
                held = {last: at for at, last in self._held} if self._held_pid == os.getpid() else {}
                for (lo, hi), first in taken.items():
                    # Where the host is now in the range: the next id it would hand out from it.
                    at = held[hi] if hi in held else nxt if hi == rest else hi + 1   # (not held: used up)
                    if first >= at:
                        found[(lo, hi)] = first
                    elif at <= hi:
                        again.append((at, hi))
                lasts = {last for _first, last in found}
                self._held = [span for span in self._held if span[1] not in lasts]
            moved = [first for (_lo, hi), first in found.items() if hi == rest]
            if moved:
                if self.remote:
                    self._write(fd, end + 1, end)
                else:
                    self._write(fd, max(self._start(), held_above(self.path) + 1, self._holding.high + 1), end)
        if found:
            spans = ", ".join(f"{lo}-{hi}" for lo, hi in sorted(found))
            logger.warning("veralith: trace ids %s of %s were found taken in the store (restored from a backup, or "
                           "its counter put back?); they are not handed out, new ids are taken above", spans,
                           self.path)
        if self.remote and moved:
            self._refill_soon()
        return again

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
        """(next id, end of the range) from the file; a file that is new, cut short, damaged or older
        than what this process took from it is started again (`_restart`)."""
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 64)
        try:
            parts = [int(x) for x in raw.split()]
            nxt, end = parts[0], parts[1]
            if len(parts) == 3 and parts[2] != _check(nxt, end) or len(parts) not in (2, 3):
                raise ValueError("damaged")   # (two numbers: written by an earlier version, no check)
        except (ValueError, IndexError):
            return self._restart(fd)
        if nxt <= self._holding.high:
            return self._restart(fd)   # gone back (a copy restored over it): it would hand out ids again
        if not self._holding.high and not self.remote and nxt <= held_above(self.path):
            # This process's first look (it holds nothing yet) at a counter that went back below what a
            # live process took from it (a restore of the folder, a copy put back): once per process,
            # as a live process's record is never above the counter otherwise.
            return self._restart(fd)
        self._seen_end = max(self._seen_end, end) if self.remote else 0
        return nxt, end

    def _restart(self, fd: int) -> tuple[int, int]:
        """Start the counter again above everything stored, spooled and held by a live process of this
        host (veralith.work.holdings). A remote file starts with no block: the next one reserved from
        the database's sequence is above every id handed out before."""
        # This process's own high-water mark too: its record on disk may have been replaced with the rest.
        first = max(self._start(), held_above(self.path) + 1, self._holding.high + 1)
        end = first - 1 if self.remote else _NO_LIMIT
        if self._holding.high:
            logger.warning("veralith: the trace id counter %s was lost or damaged; it starts again at %d, above "
                           "every id stored, spooled or held by a live process", self.path, first)
        self._write(fd, first, end)
        return first, end

    def _write(self, fd: int, nxt: int, end: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{nxt:0{_WIDTH}d}\n{end:0{_WIDTH}d}\n{_check(nxt, end):010d}\n".encode("ascii"))

    def _locked(self) -> _FileLock:
        """The counter file's lock, held on a lock file beside it: deleting or replacing the counter
        does not let two processes in at once. Under the lock the counter is opened again when its
        path names another file than the one open (deleted, replaced), so every process counts in
        the same file."""
        if self._lock_fd is None or self._pid != os.getpid() or not same_file(self._lock_fd, self._lock_path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._close()
            self._lock_fd, self._pid = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600), os.getpid()
        return _FileLock(self._lock_fd, self._counter)

    @property
    def _lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def _counter(self) -> int:
        """Under the lock: the counter file's descriptor, opened again if its path moved on."""
        if self._fd is None or not same_file(self._fd, self.path):
            if self._fd is not None:
                os.close(self._fd)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd

    def _close(self) -> None:
        for fd in (self._fd, self._lock_fd):
            if fd is not None and self._pid == os.getpid():
                os.close(fd)
        self._fd = self._lock_fd = None


def _check(nxt: int, end: int) -> int:
    return zlib.crc32(f"{nxt} {end}".encode("ascii"))


class _FileLock:
    def __init__(self, lock_fd: int, counter: Callable[[], int]) -> None:
        self.lock_fd, self.counter = lock_fd, counter

    def __enter__(self) -> int:
        _lock(self.lock_fd)
        try:
            return self.counter()
        except BaseException:
            _unlock(self.lock_fd)
            raise

    def __exit__(self, *exc: object) -> None:
        _unlock(self.lock_fd)


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

