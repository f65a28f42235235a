"""Which ids the live processes of this host hold: what a lost or damaged id counter recovers above.

An id counter file (veralith.work.ids) can be deleted, cut short or replaced by an older copy while
processes log. Ids a live process took from it live on in that process's memory (taken ahead, not
yet used) and are nowhere else: not in the store, not in a spool yet. So each process keeps one small
file of its own beside the counter, `<counter>.held.<host>__<pid>__<token>`, holding the highest id it
took, written under the counter's lock *before* the counter moves past it. A counter that has to be
started again starts above every such file of a process still alive (and of any other host: its
liveness cannot be seen from here), as well as above the store and the spools. A dead process's file
is removed there: the ids it held and never used are gaps, and the ones it used are in its spool.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from veralith.work import leases

__all__ = ["Holding", "held_above", "same_file"]

_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")
_WIDTH = 20


def _stem(counter: Path) -> str:
    return f"{counter.name}.held."


class Holding:
    """This process's record of the highest id it took from the counter at `counter`."""

    def __init__(self, counter: Path) -> None:
        self.counter = counter
        self._fd: int | None = None
        self._pid = 0
        self._high = 0

    @property
    def high(self) -> int:
        """The highest id this process took from the counter (0: none yet, or given back)."""
        return self._high if self._pid == os.getpid() else 0

    def note(self, high: int) -> None:
        """Record that this process holds ids up to `high` (under the counter's lock, before the
        counter moves past them). Raises OSError when the folder cannot be written."""
        if self._pid != os.getpid():   # a forked child holds ids of its own
            self._fd, self._pid, self._high = None, os.getpid(), 0
        if high <= self._high:
            return
        path = self._path()
        if self._fd is None or not same_file(self._fd, path):   # new, or removed by a recovery meanwhile
            if self._fd is not None:
                os.close(self._fd)
            else:   # once per process: the records of processes killed before they dropped theirs go
                held_above(self.counter)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.lseek(self._fd, 0, os.SEEK_SET)
        os.write(self._fd, f"{high:0{_WIDTH}d}\n".encode("ascii"))
        self._high = high

    def drop(self) -> None:
        """Forget the record (at shutdown, once every id taken was used or given back)."""
        if self._fd is not None and self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.close(self._fd)
            with contextlib.suppress(OSError):
                self._path().unlink()
        self._fd, self._high = None, 0

    def _path(self) -> Path:
        host, pid, token = leases.mine()
        return self.counter.with_name(f"{_stem(self.counter)}{_UNSAFE.sub('_', host)}__{pid}__{token}")


def held_above(counter: Path) -> int:
    """The highest id any process still alive on this host (or on another host sharing the folder)
    recorded holding from the counter at `counter`; 0 when none. Removes the records of the dead."""
    host, _pid, _token = leases.mine()
    here = _UNSAFE.sub("_", host)
    highest = 0
    folder = counter.parent
    if not folder.is_dir():
        return 0
    for path in folder.iterdir():
        if not path.name.startswith(_stem(counter)):
            continue
        try:
            their_host, their_pid, token = path.name[len(_stem(counter)):].rsplit("__", 2)
            alive = their_host != here or (leases.process_alive(int(their_pid))
                                           and (int(their_pid) != os.getpid() or token == leases.token()))
            if not alive:
                path.unlink()
                continue
            highest = max(highest, int(path.read_bytes().split()[0]))
        except (ValueError, IndexError, OSError):   # being written, or removed meanwhile: the next look sees it
            continue
    return highest


def same_file(fd: int, path: Path) -> bool:
    """Whether `path` names the file open as `fd` (not deleted, not replaced)."""
    try:
        mine, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)
