"""The spool: where `log()` makes a trace durable before the store has it.

`log()` never waits on the store. It appends the trace as one JSON line to this process's spool
under an id it already holds (veralith.work.ids), and returns. The spool is a series of
segments, `<folder>/<host>__<pid>__<token>.<n>.seg`: files of a fixed size, preallocated on disk
and mapped into memory, that the caller writes by copying the line into the mapping. That makes
no system call, so the caller's thread never lets go of the GIL: a thread that releases it while
the shipper or the evaluator runs Python code can wait up to `sys.getswitchinterval()` (5 ms) to
get it back, and an O_APPEND `write()`, a file lock or a contended lock on every call made that
the tail of `log()`'s time. Durability is what a `write()` gave: the mapping is the page cache of
the file, so a line copied in survives a crash (kill -9) of the process the moment the copy is
done; neither survives the machine losing power before the kernel writes it back (as SQLite's
synchronous=NORMAL). The blocks are allocated before a segment is used, so a full disk shows as
WritesStopped when a segment is created (never a plain OSError), never as a fault while copying.

The unwritten rest of a segment is NUL bytes: a reader takes the lines before the first NUL and
skips a line that does not parse (the last one, if a crash came in the middle of the copy). A line that does not
fit in what is left of the segment goes to the next one: the background prepares a spare segment
ahead (`prepare`, on a thread of veralith.work.spooler), so the caller only swaps two
references; only when no spare is ready (the first call of a process, a line larger than a
segment) does it create one.

A background shipper (`Spool.ship`) retires the segment being written (the spare takes its place)
and moves what it holds into the store in one transaction per batch, deleting the file only once
the store has it; the store's insert is idempotent (an id it already holds for the same trace is
skipped), so a crash between the two costs nothing but a repeat.

The spool files of a process that is gone are shipped by whoever looks next on the same host (any
process that logs, `veralith resume`, the worker): `recover`. A file of another host (a shared
folder) is taken once untouched for the lease timeout (`prepare` touches the segment being
written at least once a minute). Files of the earlier format (`.jsonl` written with `write()`, and their
`.moving-<n>` renames) are read the same way.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import mmap
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from veralith.store.errors import WritesStopped
from veralith.work import leases

__all__ = ["SEGMENT_BYTES", "Spool", "has_files", "read_lines", "recover", "spool_stopped"]

logger = logging.getLogger("veralith.store")
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_BATCH = 500  # traces per store transaction when shipping
# Bytes per segment: room for a few thousand typical traces, so that the spare the shipper prepares
# (at most every few tenths of a second) is rarely used up before the next one is ready. Two
# segments (the one written and the spare) are allocated on disk per logging process.
SEGMENT_BYTES = 4 << 20
_SUFFIXES = (".seg", ".jsonl")

Sink = Callable[[list[dict[str, Any]]], object]


def _name(host: str, pid: int, token: str) -> str:
    return f"{_UNSAFE.sub('_', host)}__{pid}__{token}"


class _Segment:
    """One preallocated, mapped segment file."""

    def __init__(self, path: Path, size: int) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _allocate(fd, size)
            self.map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        os.close(fd)  # the mapping keeps the file open
        self.path, self.size, self.used = path, size, 0

    def close(self) -> None:
        self.map.close()


def _allocate(fd: int, size: int) -> None:
    """Give the file `size` bytes of disk now, so copying into its mapping can never hit a full disk."""
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
            return
        except OSError as exc:
            # Some file systems (NFS, some FUSE mounts) refuse it: EOPNOTSUPP, or EINVAL from glibc's
            # fallback; a full disk (ENOSPC) and the like are real answers and propagate.
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
    zeros = bytes(1 << 16)  # no fallocate (macOS, Windows, the file systems above): write the blocks out
    for _ in range(0, size, len(zeros)):
        os.write(fd, zeros)
    os.ftruncate(fd, size)


class Spool:
    """This process's spool in `folder`. Thread-safe.

    Two hooks, called on the caller's thread (they must not block): `wake`, on the first append
    since the last ship (the shipper has something to do); `spare_used`, when the spare segment
    was taken or is missing (time to `prepare` another).
    """

    def __init__(self, folder: str | os.PathLike[str], segment_bytes: int = SEGMENT_BYTES) -> None:
        self.dir = Path(folder)
        self.segment_bytes = segment_bytes
        self.wake: Callable[[], object] | None = None
        self.spare_used: Callable[[], object] | None = None
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)  # next() is atomic: the caller and the preparer both create
        self._dirty = False  # appended since the last complete ship
        self._active: _Segment | None = None
        self._spare: _Segment | None = None
        self._retired: list[_Segment] = []   # written, not yet shipped (their mappings closed on shipping)
        self._unshipped: list[Path] = []     # files of ours a ship could not finish (the sink failed)
        self._owner: tuple[int, str] = (0, "")

    @property
    def stem(self) -> str:
        host, pid, token = leases.mine()
        return _name(host, pid, token)

    @property
    def file(self) -> Path:
        """The file an earlier version of this process would have appended to (still read by `recover`)."""
        return self.dir / f"{self.stem}.jsonl"

    def append(self, entry: dict[str, Any]) -> None:
        """Make `entry` durable (one line copied into the mapped segment). Raises WritesStopped when a
        segment has to be created here and cannot be (disk full, folder not writable); what was
        spooled before stays, and is shipped."""
        data = (_ENCODER.encode(entry) + "\n").encode("utf-8")
        with self._lock:
            segment = self._active
            if segment is None or segment.used + len(data) > segment.size or self._owner != _owner():
                try:
                    segment = self._next_segment(len(data))
                except OSError as exc:
                    raise spool_stopped(self.dir, exc) from None
            segment.map[segment.used:segment.used + len(data)] = data
            segment.used += len(data)
            first, self._dirty = not self._dirty, True
        if first and self.wake is not None:
            self.wake()

    def pending(self) -> bool:
        """Whether anything spooled here still waits to be shipped (no file system access)."""
        return self._dirty

    def prepare(self) -> None:
        """Ready a spare segment for the caller and keep the one being written looking alive (for
        `recover` on other hosts). Background only: this makes system calls."""
        if self._owner != _owner():
            return  # nothing written by this process yet: the first append creates its segment
        with self._lock:
            need, active = self._spare is None, self._active
        if need and active is not None:  # (none: closed, or not written yet; the append makes one)
            spare: _Segment | None = self._create(self.segment_bytes)
            with self._lock:
                if self._spare is None and self._active is not None:
                    self._spare, spare = spare, None
            if spare is not None:  # prepared meanwhile by another thread, or closed
                spare.close()
                spare.path.unlink()
        if active is not None:
            with contextlib.suppress(OSError):
                os.utime(active.path)

    def ship(self, sink: Sink) -> int:
        """Hand every spooled entry of this process to `sink` (a batch at a time; the store writes a
        batch in one transaction) and delete what it took. Returns how many were shipped. If `sink`
        raises, what it did not take stays spooled for the next round, and the error propagates."""
        with contextlib.suppress(OSError):  # without a spare, the next append creates its segment
            self.prepare()
        with self._lock:  # appends go to the spare from here on
            active = self._active
            if active is not None and active.used and self._owner == _owner():
                self._retired.append(active)
                self._active, self._spare = self._spare, None
                if self.spare_used is not None:
                    self.spare_used()
            self._dirty = False
            retired, self._retired = self._retired, []
            waiting, self._unshipped = self._unshipped, []
        for segment in retired:  # no append reaches a retired segment: its mapping can go
            segment.close()
            waiting.append(segment.path)
        shipped = 0
        try:
            while waiting:
                shipped += _ship_file(waiting[0], sink)
                waiting.pop(0)
        except BaseException:
            with self._lock:  # try again later; the files are still there
                self._unshipped[:0] = waiting
                self._dirty = True
            raise
        return shipped

    def unshipped(self) -> set[int]:
        """The ids of this process's traces still spooled, not in the store (read from its files)."""
        with self._lock:
            paths = list(self._unshipped) + [s.path for s in (*self._retired, self._active) if s is not None and s.used]
        ids: set[int] = set()
        for path in paths:
            with contextlib.suppress(OSError):   # taken meanwhile by another process: it ships them
                for raw in read_lines(path):
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        ids.add(int(json.loads(raw)["id"]))
        return ids

    def close(self) -> None:
        """Unmap the segments and delete those holding nothing (at shutdown; a later append starts
        a new segment). A segment holding lines stays for the next ship or `recover`."""
        with self._lock:
            segments = [s for s in (self._active, self._spare) if s is not None]
            self._active = self._spare = None
            self._unshipped += [s.path for s in segments if s.used]
            self._dirty = self._dirty or bool(self._unshipped)
        for segment in segments:
            segment.close()
            if not segment.used:
                with contextlib.suppress(OSError):
                    segment.path.unlink()

    # -- internals ------------------------------------------------------------------------------
    def _next_segment(self, size: int) -> _Segment:
        """Under the lock: the spare if the line fits in it, else a new segment (system calls on
        the caller's thread: the first append of a process, or the spare not ready)."""
        if self._owner != _owner():  # a forked child writes segments of its own
            self._active = self._spare = None  # the parent's: the parent ships them
            self._retired, self._unshipped = [], []
            self._owner = _owner()
        if self._active is not None:
            self._retired.append(self._active)
            self._active = None
        spare, self._spare = self._spare, None
        if spare is not None and spare.size >= size:
            self._active = spare
        else:
            if spare is not None:
                self._spare = spare
            self._active = self._create(max(size, self.segment_bytes))
        if self.spare_used is not None and self._spare is None:
            self.spare_used()
        return self._active

    def _create(self, size: int) -> _Segment:
        self.dir.mkdir(parents=True, exist_ok=True)
        return _Segment(self.dir / f"{self.stem}.{time.time_ns()}-{next(self._numbers)}.seg", size)


def spool_stopped(folder: Path, exc: OSError) -> WritesStopped:
    """The error `log()` raises when its spool cannot take a trace (one line a person can act on)."""
    why = exc.strerror or str(exc)
    hint = "free space on that disk" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else \
        "make it writable or set VERALITH_SPOOL_DIR"
    return WritesStopped(f"cannot spool the trace in {folder} ({why}): {hint}; traces logged before are kept "
                         "and shipped")


def _owner() -> tuple[int, str]:
    return os.getpid(), leases.token()


def _order(path: Path) -> tuple[int, int, str]:
    """Segments in the order they were written (creation time, then count), earlier formats first."""
    part = path.name.rsplit(".", 2)[-2] if path.name.endswith(".seg") else ""
    made, _, count = part.partition("-")
    return (int(made), int(count), path.name) if made.isdigit() and count.isdigit() else (0, 0, path.name)


def _is_spool_file(name: str) -> bool:
    return not name.startswith(".") and (name.endswith(_SUFFIXES) or ".moving-" in name)


def read_lines(path: Path) -> list[bytes]:
    """The lines of a spool file, up to the first NUL (a segment's unwritten rest). A last line
    cut short by a crash is among them; it does not parse, and its reader skips it."""
    data = path.read_bytes()
    end = data.find(b"\0")
    return [line for line in (data if end < 0 else data[:end]).splitlines() if line]


def _ship_file(path: Path, sink: Sink) -> int:
    entries: list[dict[str, Any]] = []
    try:
        lines = read_lines(path)
    except FileNotFoundError:
        # Taken by another process's `recover` (on a shared folder, another host may take a file
        # untouched for the lease timeout): it ships those traces; this spool goes on with the rest.
        logger.info("veralith: spool file %s was taken by another process; skipped", path)
        return 0
    for lineno, raw in enumerate(lines, start=1):
        try:
            entries.append(json.loads(raw))
        except ValueError:  # a line cut short by a crash mid-copy: nothing usable in it
            logger.warning("veralith: %s:%d: unreadable spool line skipped", path, lineno)
    for start in range(0, len(entries), _BATCH):
        sink(entries[start:start + _BATCH])
    path.unlink(missing_ok=True)  # only once the store has every line (missing: another process shipped it too)
    return len(entries)


def has_files(folder: str | os.PathLike[str]) -> bool:
    """Whether `folder` holds any spool file (of any process): something a resume must move in, even
    before the store itself exists (a process killed before its first ship)."""
    folder = Path(folder)
    return folder.is_dir() and any(_is_spool_file(p.name) for p in folder.iterdir())


def recover(folder: str | os.PathLike[str], sink: Sink) -> int:
    """Ship the spool files of processes that are gone (this host: pid gone or reused by us;
    another host: untouched for the lease timeout). Returns how many traces were shipped."""
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    host, pid, token = leases.mine()
    own = _name(host, pid, token)
    shipped = 0
    for path in sorted(folder.iterdir(), key=lambda p: (p.name.split(".", 1)[0], _order(p))):
        stem = path.name.split(".", 1)[0]
        if stem == own or "__" not in stem or not _is_spool_file(path.name):
            continue
        try:
            their_host, their_pid, _token = stem.rsplit("__", 2)
            age = time.time() - path.stat().st_mtime
        except (ValueError, OSError):
            continue
        same_host = their_host == _UNSAFE.sub("_", host)
        gone = (int(their_pid) == pid or not leases.process_alive(int(their_pid))) if same_host else False
        if gone or age > leases.LEASE_TIMEOUT_S:
            shipped += _ship_file(path, sink)   # a file another process recovered first counts 0
    return shipped
