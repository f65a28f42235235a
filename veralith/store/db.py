"""SQLite connections: one migrated SqliteDb (veralith.store.sql) per (process, thread, file).

SQLite connections must not cross threads or survive a fork, so `open_db()` hands each thread of
each process its own connection, opened on first use and migrated once per process and file.
WAL lets readers run beside one writer; the busy timeout makes concurrent writers (several
processes logging at once) wait for the lock instead of failing; writers take the lock up front
with `BEGIN IMMEDIATE` (`SqliteDb.write`) so a read-then-write transaction can never deadlock.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from pathlib import Path

from veralith.config import ConfigError, settings
from veralith.errors import StoreError
from veralith.store.location import resolve_path
from veralith.store.migrate import apply_migrations
from veralith.store.sql import SqliteDb

__all__ = ["BUSY_TIMEOUT_MS", "close", "close_all", "connect", "database_files", "open_db", "output_conflict",
           "resolve_path"]

# Long enough to ride out a burst of writers from many processes; a lock held longer than this
# means something is stuck, and an error is better than hanging. settings.busy_timeout_s sets it.
BUSY_TIMEOUT_MS = 60_000


def busy_timeout_ms() -> int:
    """The busy timeout new connections get (settings.busy_timeout_s, VERALITH_BUSY_TIMEOUT_S)."""
    try:
        return int(settings.busy_timeout_s * 1000)
    except ConfigError:  # an invalid environment is reported elsewhere; a connection still gets a bound
        return BUSY_TIMEOUT_MS

_AUTOCHECKPOINT_PAGES = 1000  # SQLite's default

_local = threading.local()


def database_files(path: str | os.PathLike[str] | None = None) -> list[str]:
    """The database file and its companions SQLite writes beside it (symlinks resolved)."""
    target = resolve_path(path)
    return [] if target == ":memory:" else [target + suffix for suffix in ("", "-wal", "-shm", "-journal")]


def output_conflict(output: str | os.PathLike[str], path: str | os.PathLike[str] | None = None) -> str | None:
    """Why writing `output` would destroy the database (it is the file, a companion, or a link to
    one of them), or None when it is safe. Checked before the output is opened."""
    files = database_files(path)
    if not files:
        return None
    resolved = str(Path(os.fspath(output)).expanduser().resolve())
    for name in files:
        if resolved == name or (os.path.exists(name) and os.path.exists(resolved)
                                and os.path.samefile(resolved, name)):  # hard links too
            what = "the database" if name == files[0] else f"the database's {name[len(files[0]):]} file"
            return f"{output} is {what} ({files[0]}); writing it would destroy the stored traces"
    return None


def connect(path: str | os.PathLike[str], *, migrate: bool = True, check_same_thread: bool = True) -> SqliteDb:
    """A new connection to `path`, configured and (by default) migrated. Callers own it; with
    `check_same_thread=False` any thread may use it, one at a time."""
    target = resolve_path(path)
    if target != ":memory:":
        # /dev/null, a directory or a FIFO "opens" but cannot hold a database: say so plainly.
        if os.path.exists(target) and not os.path.isfile(target):
            raise StoreError(f"cannot use {target} as the database: not a regular file (VERALITH_DB_PATH)")
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    try:
        busy = busy_timeout_ms()
        conn = sqlite3.connect(target, timeout=busy / 1000, check_same_thread=check_same_thread)
        db = SqliteDb(conn, execute_plugins=False)
        db.execute(f"PRAGMA busy_timeout = {busy}")
        db.execute("PRAGMA foreign_keys = ON")
        if target != ":memory:":
            _enable_wal(db)
            # NORMAL is durable against a crash of the process (the case that matters for log());
            # only an OS crash or power loss can drop the last commits. FULL would fsync every log().
            db.execute("PRAGMA synchronous = NORMAL")
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"cannot open the database at {target}: {exc}") from exc
    if migrate:
        try:
            apply_migrations(db)
        except sqlite3.Error as exc:  # e.g. not a database, or a damaged file
            raise StoreError(f"cannot use the database at {target}: {exc}") from exc
    return db


def _enable_wal(db: SqliteDb) -> None:
    """Switch a new file to WAL. Two connections opening a fresh file at once (a process and its log
    worker, several processes) can meet in SQLite's lock upgrade, where it answers "database is
    locked" at once instead of waiting in the busy handler: try again, within the busy timeout."""
    deadline = time.monotonic() + busy_timeout_ms() / 1000
    while True:
        try:
            db.enable_wal()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def open_db(path: str | os.PathLike[str] | None = None) -> SqliteDb:
    """The calling thread's migrated connection to `path` (default: settings.db_path).

    Safe for several threads (each gets its own connection) and several processes (WAL, busy
    timeout, immediate write transactions). A database newer than this code raises StoreError.
    """
    target = resolve_path(path)
    pid = os.getpid()
    cache: dict[str, SqliteDb] = getattr(_local, "dbs", None) or {}
    if getattr(_local, "pid", None) != pid:
        # A forked child inherits the parent's thread-local; those connections are not ours.
        cache = {}
        _local.pid = pid
    _local.dbs = cache
    db = cache.get(target)
    if db is not None:
        return db
    # Every new connection re-checks the schema (a cheap read when up to date), so a file that
    # was replaced or migrated by newer code meanwhile is noticed.
    db = connect(target)
    cache[target] = db
    return db


def close(path: str | os.PathLike[str] | None = None) -> None:
    """Close this thread's cached connection to one file, if it has one."""
    if getattr(_local, "pid", None) != os.getpid():
        return
    db = (getattr(_local, "dbs", None) or {}).pop(resolve_path(path), None)
    if db is not None:
        with contextlib.suppress(sqlite3.Error):
            db.close()


def close_all() -> None:
    """Close this thread's cached connections (tests; worker threads on exit)."""
    for db in (getattr(_local, "dbs", None) or {}).values():
        with contextlib.suppress(sqlite3.Error):
            db.close()
    _local.dbs = {}
