"""One SQL surface for every store: the connection interface the store's queries are written against.

The store's SQL (repository, queries, runs, browse, calibration, ownership, replies) is written
once, in the subset SQLite and PostgreSQL share, with `?` placeholders, and runs on a `Db`: a
connection of either kind. What the two databases spell differently is asked of `db.dialect`
(row locks, case-insensitive LIKE, index hints, NULL-safe equality), never tested by name in a
query module. `SqliteDb` (here) is a sqlite-utils Database with that interface;
`veralith.store.postgres.PgDb` is its PostgreSQL twin.

Transactions: `db.write()` is one write transaction (SQLite: BEGIN IMMEDIATE, the file's write
lock; PostgreSQL: BEGIN, with `dialect.for_update` row locks where a row is read and then
written); `db.read()` is one consistent snapshot for several reads. `db.pipelined()` around a
write sends the statements whose results are not read without waiting for each one (PostgreSQL's
pipeline mode: one round trip where there were one per statement; SQLite, in-process, has no round
trips to save).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlite_utils import Database

from veralith.errors import StoreError

__all__ = ["SQLITE", "Db", "Dialect", "SqliteDb"]


@dataclass(frozen=True)
class Dialect:
    """What the two databases spell differently, as fragments a query splices in (never user text)."""

    name: str                 # "sqlite" | "postgres"
    for_update: str           # appended to a SELECT of rows the transaction will then change
    skip_locked: str          # appended to a SELECT that claims work several workers race for
    ilike: str                # case-insensitive LIKE
    same: str                 # NULL-safe equality: `a {same} ?`
    integrity_error: type[Exception]  # what a broken UNIQUE or CHECK constraint raises
    # The database server's clock as unix seconds (a float): lease times are taken and judged by it,
    # never by the clock of the process that asks (veralith.work.leases).
    epoch: str = "((julianday('now') - 2440587.5) * 86400.0)"

    def index(self, name: str) -> str:
        """An index hint after a table name (SQLite only; PostgreSQL's planner takes no hints)."""
        return f" INDEXED BY {name}" if self.name == "sqlite" else ""


SQLITE = Dialect("sqlite", for_update="", skip_locked="", ilike="LIKE", same="IS",
                 integrity_error=sqlite3.IntegrityError)


class Cursor(Protocol):
    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Db(Protocol):
    """A connection the store's queries run on (one thread at a time)."""

    dialect: Dialect

    @property
    def key(self) -> str:
        """The database's identity: a SQLite file's absolute path, a PostgreSQL URL without password."""
        ...

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> Any:
        """Run one statement; rows come back as tuples (fetchone / fetchall / iteration)."""
        ...

    def query(self, sql: str, params: Sequence[Any] | None = None) -> Iterator[dict[str, Any]]:
        """Run one statement; rows come back as dicts."""
        ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    def insert_id(self, sql: str, params: Sequence[Any]) -> int:
        """Run an INSERT into a table whose id the database assigns; return that id."""
        ...

    def columns(self, table: str) -> list[str]:
        """The table's column names, in order (`table` is one of the store's own, never user text)."""
        ...

    def write(self) -> contextlib.AbstractContextManager[Any]:
        """One write transaction (see the module docstring)."""
        ...

    def read(self) -> contextlib.AbstractContextManager[Any]:
        """One consistent snapshot for several reads (nests inside a write)."""
        ...

    def pipelined(self) -> contextlib.AbstractContextManager[Any]:
        """Statements in the block are sent without waiting for each reply, until a result is read or
        the block ends (see the module docstring). An error then surfaces at that point, not at the
        statement: only for a block whose statements' errors nobody handles one by one."""
        ...


class SqliteDb(Database):
    """A sqlite-utils Database that is also a `Db`."""

    dialect = SQLITE

    @property
    def key(self) -> str:
        found = self.__dict__.get("_key")
        if found is None:
            found = self.__dict__["_key"] = str(self.execute("PRAGMA database_list").fetchone()[2] or "")
        return found

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)

    def insert_id(self, sql: str, params: Sequence[Any]) -> int:
        return int(self.execute(sql, list(params)).lastrowid or 0)

    def columns(self, table: str) -> list[str]:
        return [row[1] for row in self.execute(f'PRAGMA table_info("{table}")').fetchall()]

    @contextlib.contextmanager
    def write(self) -> Iterator[SqliteDb]:
        """BEGIN IMMEDIATE: the write lock is taken at BEGIN, so a transaction that reads and then
        writes waits on the busy timeout instead of failing with SQLITE_BUSY when another process
        wrote in between (a deferred transaction cannot upgrade its lock then)."""
        conn = self.conn
        if conn.in_transaction:
            raise StoreError("nested write transaction; the store's functions each own one transaction")
        conn.execute("BEGIN IMMEDIATE")  # waits up to the busy timeout for the write lock
        try:
            yield self
        except BaseException:
            if self.conn.in_transaction:   # the statement that failed may have ended it already
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextlib.contextmanager
    def read(self) -> Iterator[SqliteDb]:
        with self.atomic():
            yield self

    def pipelined(self) -> contextlib.AbstractContextManager[SqliteDb]:
        return contextlib.nullcontext(self)
