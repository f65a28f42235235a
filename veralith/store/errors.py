"""The store's errors: a lookup that finds no trace or no result, and which errors end a batch: the
database stopped accepting writes (full disk, read-only file, I/O error: WritesStopped) or cannot be
reached (locked by another process for longer than the busy timeout, a server that does not
answer, a file that vanished: StoreUnavailable). Any other error spoils one record and the run
goes on. Each message is one line a person can act on, and names the database (never a password)."""

from __future__ import annotations

from veralith.errors import StoreError

__all__ = ["AmbiguousTraceId", "DuplicateExternalId", "StoreUnavailable", "TraceNotEvaluated", "TraceNotFound",
           "WritesStopped", "sqlite_error"]


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


class DuplicateExternalId(StoreError):
    """The knowledge base already has a trace with this external id."""


class WritesStopped(StoreError):
    """The database stopped accepting writes (full disk, read-only file): the run must stop.

    Everything committed before stays; records not yet written are simply not stored."""


class StoreUnavailable(StoreError):
    """The store cannot be used right now: locked by another process for longer than the busy
    timeout, a server that does not answer, a file that vanished. Nothing half-written is left;
    trying again later is safe."""


_FATAL = ("disk is full", "readonly database", "read-only", "disk i/o error")
_AWAY = ("unable to open database", "no such table")


def sqlite_error(exc: BaseException, where: str) -> StoreError | None:
    """The StoreError a SQLite (or file-system) error means for the database at `where`, or None
    when it spoils only the one statement (a per-record error)."""
    import sqlite3

    if isinstance(exc, StoreError):
        return exc
    text = str(exc).lower()
    if isinstance(exc, sqlite3.Error) and any(word in text for word in _FATAL):
        return WritesStopped(f"the database at {where} stopped accepting writes ({exc}); what was stored before "
                             "is kept: free space or fix permissions, then re-run")
    if isinstance(exc, OSError) and getattr(exc, "errno", None) in (28, 30):  # ENOSPC, EROFS
        return WritesStopped(f"cannot write next to the database at {where} ({exc.strerror}); what was stored "
                             "before is kept")
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return StoreUnavailable(f"the database at {where} stayed locked by another process for the whole busy "
                                "timeout; nothing was written by this step: try again once that process is done")
    if isinstance(exc, sqlite3.OperationalError) and any(word in text for word in _AWAY):
        return StoreUnavailable(f"the database at {where} cannot be used ({exc}); was it moved or deleted?")
    return None
