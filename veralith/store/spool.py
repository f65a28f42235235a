"""The spool: where `log()` makes a trace durable before the store has it.

`log()` never waits on the store. It appends the trace as one JSON line to this process's spool
file (`<folder>/<host>__<pid>__<token>.jsonl`, one `write()` on an O_APPEND descriptor: durable
against a crash of the process, like SQLite's own synchronous=NORMAL) under an id it already
holds (veralith.store.ids), and returns. A background shipper (`Spool.ship`) moves what was
spooled into the store in one transaction per batch and deletes it only once the store has it;
the store's insert is idempotent (an id it already holds for the same trace is skipped), so a
crash between the two costs nothing but a repeat.

The spool files of a process that is gone are shipped by whoever looks next on the same host (any
process that logs, `veralith resume`, the worker): `recover`. A file of another host (a shared
folder) is taken once untouched for the lease timeout.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from veralith.store import leases

__all__ = ["Spool", "recover"]

logger = logging.getLogger("veralith.store")
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_BATCH = 500  # traces per store transaction when shipping

Sink = Callable[[list[dict[str, Any]]], object]


def _name(host: str, pid: int, token: str) -> str:
    return f"{_UNSAFE.sub('_', host)}__{pid}__{token}"


class Spool:
    """This process's spool in `folder`. Thread-safe."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.dir = Path(folder)
        self._lock = threading.Lock()
        self._moves = 0
        self._dirty = False  # appended since the last complete ship
        self._fd: int | None = None
        self._owner: tuple[int, str] = (0, "")

    @property
    def stem(self) -> str:
        host, pid, token, _ = leases.mine()
        return _name(host, pid, token)

    @property
    def file(self) -> Path:
        return self.dir / f"{self.stem}.jsonl"

    def append(self, entry: dict[str, Any]) -> None:
        """Make `entry` durable (one line, one write). Raises OSError when the folder cannot be written."""
        data = (_ENCODER.encode(entry) + "\n").encode("utf-8")
        with self._lock:
            os.write(self._descriptor(), data)
            self._dirty = True

    def pending(self) -> bool:
        """Whether anything spooled here still waits to be shipped (no file system access)."""
        return self._dirty

    def ship(self, sink: Sink) -> int:
        """Hand every spooled entry of this process to `sink` (a batch at a time; the store writes a
        batch in one transaction) and delete what it took. Returns how many were shipped. If `sink`
        raises, what it did not take stays spooled for the next round, and the error propagates."""
        with self._lock:  # appends go to a fresh file from here on
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self.file.exists():
                self._moves += 1
                self.file.rename(self.dir / f"{self.stem}.moving-{self._moves}")
            self._dirty = False
        shipped = 0
        try:
            for path in sorted(self.dir.glob(f"{self.stem}.moving-*")) if self.dir.is_dir() else []:
                shipped += _ship_file(path, sink)
        except BaseException:
            self._dirty = True  # try again later; the renamed file is still there
            raise
        return shipped

    def _descriptor(self) -> int:
        owner = (os.getpid(), leases.token())
        if self._fd is None or self._owner != owner:  # a forked child writes a file of its own
            self.dir.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._owner = owner
        return self._fd


def _ship_file(path: Path, sink: Sink) -> int:
    entries: list[dict[str, Any]] = []
    for lineno, raw in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            entries.append(json.loads(raw))
        except ValueError:  # a line cut short by a crash mid-write: nothing usable in it
            logger.warning("veralith: %s:%d: unreadable spool line skipped", path, lineno)
    for start in range(0, len(entries), _BATCH):
        sink(entries[start:start + _BATCH])
    path.unlink()  # only once the store has every line
    return len(entries)


def recover(folder: str | os.PathLike[str], sink: Sink) -> int:
    """Ship the spool files of processes that are gone (this host: pid gone or reused by us;
    another host: untouched for the lease timeout). Returns how many traces were shipped."""
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    host, pid, token, _ = leases.mine()
    own = _name(host, pid, token)
    shipped = 0
    for path in sorted(folder.iterdir()):
        stem = path.name.split(".", 1)[0]
        if stem == own or path.name.startswith(".") or "__" not in stem or not path.name.endswith(
                (".jsonl",)) and ".moving-" not in path.name:
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
                shipped += _ship_file(path, sink)
            except FileNotFoundError:  # another process recovered it first
                continue
    return shipped
