"""History: the trace store (schema from numbered migrations, results in and out, leases).

Callers run the shared SQL (veralith.store.ops) on a `Store` (veralith.store.protocol):
`open_store().read(ops.stats)`. `open_store()` returns the store
`VERALITH_DB_URL` names: `SQLiteStore` for `sqlite:///path` (the default, the file
`VERALITH_DB_PATH`), `PostgresStore` for `postgresql://…` (the `postgres` extra). `load_result` is
here because it is what most users of the library want.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from veralith.store.errors import AmbiguousTraceId, DuplicateExternalId, TraceNotEvaluated, TraceNotFound
from veralith.store.protocol import Store, StoredResult, TraceInfo, TraceInput

if TYPE_CHECKING:
    from veralith.models import EvaluationResult

__all__ = ["AmbiguousTraceId", "DuplicateExternalId", "Store", "StoredResult", "TraceInfo", "TraceInput",
           "TraceNotEvaluated", "TraceNotFound", "load_result", "open_store", "store_url"]

_stores: dict[tuple[str, bool, int], Store] = {}
_stores_lock = threading.Lock()


def store_url(where: str | os.PathLike[str] | None = None) -> str:
    """The URL of the store `where` names: a store URL as is, a file path as `sqlite:///` + its
    absolute path; None: VERALITH_DB_URL, else the file VERALITH_DB_PATH."""
    from veralith.config import settings
    from veralith.store.location import resolve_path

    if where is None:
        if settings.db_url is not None:
            where = settings.db_url
        else:
            return "sqlite:///" + resolve_path(None)
    text = os.fspath(where)
    if text.lower().startswith(("postgresql://", "postgres://")):
        return text
    if text.lower().startswith("sqlite://"):
        text = text[len("sqlite://"):]
        text = text[1:] if text.startswith("/") else text  # sqlite:////abs/file.db, sqlite:///rel/file.db
        return "sqlite:///" + resolve_path(text)
    return "sqlite:///" + resolve_path(text)


def open_store(where: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> Store:
    """The store at `where` (a store URL or a SQLite file path; default: the configured one). Its
    first write creates or migrates it. `read_only` (reading commands): nothing is ever written, and
    a file that cannot be written can still be read. One store object per URL and process."""
    url = store_url(where)
    key = (url, read_only, os.getpid())
    with _stores_lock:
        found = _stores.get(key)
    if found is not None:
        return found
    if url.startswith("sqlite:///"):
        from veralith.store.sqlite import SQLiteStore

        store: Store = SQLiteStore(url[len("sqlite:///"):], read_only=read_only)
    else:
        from veralith.store.postgres import PostgresStore

        store = PostgresStore(url, read_only=read_only)
    with _stores_lock:
        return _stores.setdefault(key, store)


def load_result(trace_id: int) -> EvaluationResult:
    """The stored result of a trace in the configured store (TraceNotFound, TraceNotEvaluated)."""
    from veralith.store import ops

    return open_store(read_only=False).read(ops.load_result, trace_id)
