"""Which store errors end a batch: the database stopped accepting writes (full disk, read-only
file, I/O error). Any other error spoils one record and the run goes on."""

from __future__ import annotations

from veralith.errors import StoreError

__all__ = ["WritesStopped", "writes_stopped"]


class WritesStopped(StoreError):
    """The database stopped accepting writes (full disk, read-only file): the run must stop.

    Everything committed before stays; records not yet written are simply not stored."""


_FATAL = ("disk is full", "readonly database", "read-only", "disk i/o error", "unable to open database")


def writes_stopped(exc: BaseException) -> WritesStopped | None:
    """A WritesStopped when `exc` means no further write can succeed, else None (a per-record error)."""
    import sqlite3

    if isinstance(exc, WritesStopped):
        return exc
    text = str(exc).lower()
    if isinstance(exc, sqlite3.Error) and any(word in text for word in _FATAL):
        return WritesStopped(f"the database stopped accepting writes ({exc}); the run stopped here and "
                            "everything stored before is kept: free space or fix permissions, then re-run")
    if isinstance(exc, OSError) and getattr(exc, "errno", None) in (28, 30):  # ENOSPC, EROFS
        return WritesStopped(f"cannot write ({exc.strerror}); the run stopped here and everything stored "
                            "before is kept")
    return None
