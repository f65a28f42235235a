"""History: the trace store (schema from numbered migrations, results in and out, leases).

Callers use the `TraceStore` protocol (veralith.store.protocol); `open_store()` returns the
configured implementation, today `SQLiteStore` (veralith.store.sqlite). `load_result` is
re-exported because it is what most callers of the library want.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from veralith.store.protocol import StoredResult, TraceInfo, TraceInput, TraceStore
from veralith.store.repository import (
    AmbiguousTraceId,
    DuplicateExternalId,
    TraceNotEvaluated,
    TraceNotFound,
    load_result,
)
from veralith.store.sqlite import SQLiteStore

__all__ = ["AmbiguousTraceId", "DuplicateExternalId", "SQLiteStore", "StoredResult", "TraceInfo", "TraceInput",
           "TraceNotEvaluated", "TraceNotFound", "TraceStore", "load_result", "open_store"]


def open_store(path: str | os.PathLike[str] | None = None, *, alive: Callable[[], bool] | None = None) -> TraceStore:
    """The trace store at `path` (default: settings.db_path); its first use creates or migrates it.
    `alive` bounds the store's background helpers (default: the process's life)."""
    return SQLiteStore(path, alive=alive)
