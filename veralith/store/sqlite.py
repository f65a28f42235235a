"""SQLiteStore: the Store over one SQLite file (veralith.store.protocol has the contract).

One store object serves every thread of a process: each call runs on the calling thread's own
connection (veralith.store.db), unless the store was built `over()` one connection, which then
belongs to the thread that made it. The SQL is the shared one (veralith.store.sqlstore); this
class adds what is SQLite's own:

- Trace ids are handed out by the work layer from a counter file beside the database
  (`<db>.spool/next-id`, veralith.work.ids), so `log()` gets a final id without the write lock.
- Opened `read_only` (what reading commands do), it never writes: SQLite's `mode=ro` and
  `query_only`, no migration, a pool of connections any thread may borrow. A file or folder
  without write permission, or a read-only mount, can still be read.
- A database that stops accepting writes raises WritesStopped; one locked for longer than the busy
  timeout, or gone, StoreUnavailable.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import quote

from veralith.errors import StoreError
from veralith.store import db as dbmod
from veralith.store.errors import sqlite_error
from veralith.store.migrate import discover, schema_version
from veralith.store.protocol import Replies
from veralith.store.replies import ReplyTable
from veralith.store.sql import SqliteDb
from veralith.store.sqlstore import SqlStore

__all__ = ["SQLiteStore", "connect_readonly"]

_POOL = 8  # read-only connections kept for reuse (the web view's worker threads come and go)


class SQLiteStore(SqlStore):
    """The store in the SQLite file at `path` (default: settings.db_path)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> None:
        self.path = dbmod.resolve_path(path)
        self.url = self.spool_url = "sqlite:///" + self.path
        self.key = self.path
        self.read_only = read_only
        self._conn: SqliteDb | None = None
        self._lock = threading.Lock()
        self._reply_table: ReplyTable | None = None
        self._pool: queue.SimpleQueue[SqliteDb] = queue.SimpleQueue()
        if read_only:
            self._pool.put(connect_readonly(self.path))  # fails here, with the reason, if it cannot be read

    @classmethod
    def over(cls, db: SqliteDb) -> SQLiteStore:
        """A store that uses this one connection (a caller that already holds one)."""
        store = cls(db.key or ":memory:")
        store._conn = db
        return store

    @property
    def db(self) -> SqliteDb:
        """The calling thread's connection to the file (tests and tools that want SQL)."""
        return self._conn if self._conn is not None else dbmod.open_db(self.path)

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @contextlib.contextmanager
    def connection(self) -> Iterator[SqliteDb]:
        if self._conn is not None:
            yield self._conn
        elif not self.read_only:
            yield dbmod.open_db(self.path)
        else:
            try:
                db = self._pool.get_nowait()
            except queue.Empty:
                db = connect_readonly(self.path)
            try:
                yield db
            finally:
                if db.in_transaction:  # a caller that failed inside a read transaction
                    db.conn.rollback()
                if self._pool.qsize() < _POOL:
                    self._pool.put(db)
                else:
                    db.close()

    def _classify(self, exc: BaseException) -> StoreError | None:
        return sqlite_error(exc, self.path)

    def close(self) -> None:
        if self._conn is None:
            dbmod.close(self.path)
        while not self._pool.empty():
            with contextlib.suppress(queue.Empty, sqlite3.Error):
                self._pool.get_nowait().close()
        if self._reply_table is not None:
            self._reply_table.close()

    # -- the judge-reply cache on its own shared connection (veralith.store.replies) -------------
    def _replies(self) -> ReplyTable:
        with self._lock:
            if self._reply_table is None:
                self._reply_table = ReplyTable(self.path)
            return self._reply_table

    def replies(self) -> Replies:
        if self.read_only:
            return super().replies()
        return _GuardedReplies(self, self._replies())



def connect_readonly(path: str | os.PathLike[str], *, check_schema: bool = True) -> SqliteDb:
    """A read-only connection to an existing database that any thread may use (one at a time).

    It never writes (`mode=ro`, `query_only`) and never migrates. A file in a folder without write
    permission, or on a read-only mount, is opened `immutable` when no write-ahead log is pending
    beside it (then the file alone holds every committed write). With `check_schema`, a database
    whose schema is not this code's raises StoreError saying what to do.
    """
    target = Path(path).expanduser().resolve()
    if not target.is_file():
        raise StoreError(f"no database at {target} (run `veralith eval FILE.jsonl` first, or set VERALITH_DB_PATH)")
    try:
        db = _open_ro(target, immutable=False)
    except sqlite3.OperationalError as exc:
        wal = Path(str(target) + "-wal")
        if "unable to open" not in str(exc) or (wal.exists() and wal.stat().st_size > 0):
            raise StoreError(f"cannot read the database at {target}: {exc}") from exc
        db = _open_ro(target, immutable=True)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the database at {target}: {exc}") from exc
    if check_schema:
        _check_schema(db, target)
    return db


def _open_ro(target: Path, *, immutable: bool) -> SqliteDb:
    uri = f"file:{quote(str(target))}?mode=ro" + ("&immutable=1" if immutable else "")
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA busy_timeout = 5000")  # a writer checkpointing the WAL holds a lock briefly
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file for real
    except sqlite3.Error:
        conn.close()
        raise
    return SqliteDb(conn, execute_plugins=False)


def _check_schema(db: SqliteDb, target: Path) -> None:
    try:
        have = schema_version(db)
    except sqlite3.Error as exc:
        db.close()
        raise StoreError(f"cannot read the database at {target}: {exc}") from exc
    names = [f.name for f in discover()]
    if have == names[-1]:
        return
    db.close()
    if have in names or have is None:
        raise StoreError(f"the database at {target} has schema {have or 'none'}, this Veralith expects "
                         f"{names[-1]}; any writing command (e.g. `veralith resume`) brings it up to date")
    raise StoreError(f"the database at {target} was written by a newer Veralith (schema {have}); upgrade veralith")


class _GuardedReplies:
    """The shared reply connection, its errors turned into the store's (WritesStopped, StoreUnavailable)."""

    def __init__(self, store: SQLiteStore, table: ReplyTable) -> None:
        self.store, self.table = store, table

    def get(self, key: str) -> str | None:
        try:
            return self.table.get(key)
        except sqlite3.Error as exc:
            raise self.store._classify(exc) or exc from exc

    def put(self, key: str, value: str, *, task: str, model: str, prompt_version: str) -> None:
        try:
            self.table.put(key, value, task=task, model=model, prompt_version=prompt_version)
        except sqlite3.Error as exc:
            raise self.store._classify(exc) or exc from exc

    def count_hits(self, hits: Mapping[str, int]) -> None:
        try:
            self.table.count_hits(hits)
        except sqlite3.Error as exc:
            raise self.store._classify(exc) or exc from exc
