"""The store's errors: a lookup that finds no trace or no result, and which errors end a batch (the
database stopped accepting writes: full disk, read-only file, I/O error). Any other error spoils one
record and the run goes on."""

from __future__ import annotations

from veralith.errors import StoreError

__all__ = ["AmbiguousTraceId", "TraceNotEvaluated", "TraceNotFound", "WritesStopped", "writes_stopped"]


class TraceNotFound(StoreError, KeyError):
    """No trace has this id."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "trace not found"


class TraceNotEvaluated(StoreError):
    """The trace exists but holds no result yet (pending, running, or its evaluation failed)."""

    def __init__(self, trace_id: int, status: str, error_message: str | None) -> None:
        detail = f": {error_message}" if error_message else ""
        super().__init__(f"trace {trace_id} has no stored result (status {status}{detail})")
        self.trace_id, self.status, self.error_message = trace_id, status, error_message


class AmbiguousTraceId(StoreError, KeyError):
    """A reference names several traces: an external id used in several knowledge bases
    (`knowledge_bases` lists them), or a number that is one trace's id and another's external id."""

    def __init__(self, ref: str, knowledge_bases: list[str], *, message: str | None = None) -> None:
        super().__init__(message or f"{ref!r} is the external id of traces in several knowledge bases "
                                    f"({', '.join(knowledge_bases)}); name one with --kb")
        self.ref, self.knowledge_bases = ref, knowledge_bases

    def __str__(self) -> str:
        return str(self.args[0])


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
