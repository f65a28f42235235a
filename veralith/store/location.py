"""Where a SQLite store is: the absolute path the settings (or a caller) name.

Kept apart from veralith.store.db so that `log()` can find its store without loading a database
library (veralith.work.spooler).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from veralith.config import settings

__all__ = ["resolve_path"]


def resolve_path(path: str | os.PathLike[str] | None = None) -> str:
    """The absolute database path `open_db(path)` would use (default: settings.db_path)."""
    raw = settings.db_path if path is None else os.fspath(path)
    if raw == ":memory:":
        return raw
    # Only a relative path needs the working directory: getcwd() is a system call, and log() asks
    # on every call (one that releases the GIL; see veralith.work.spool).
    return _absolute(raw, "" if os.path.isabs(raw) else os.getcwd())


@functools.lru_cache(maxsize=64)
def _absolute(raw: str, cwd: str) -> str:
    # Cached: resolving walks the file system, and log() asks on every call.
    return str((Path(cwd) / Path(raw).expanduser()).resolve())
