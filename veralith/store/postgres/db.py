"""PgDb: a psycopg 3 connection with the store's `Db` interface (veralith.store.sql).

The store's queries are written with `?` placeholders; psycopg takes `%s`, so each statement is
translated once (a literal `%` doubled) and cached. Connections run in autocommit mode, and
`write()` / `read()` open the transactions the store asks for: a read is REPEATABLE READ and READ
ONLY, so its several statements see one snapshot and it can never fail on a conflict. Sums of
integer columns come back from PostgreSQL as `numeric`; they are loaded as int (or float when not
whole), as SQLite returns them.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg.adapt import Loader
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from veralith.errors import StoreError
from veralith.store.sql import Dialect

__all__ = ["POSTGRES", "PgDb", "configure"]

POSTGRES = Dialect("postgres", for_update=" FOR UPDATE", skip_locked=" FOR UPDATE SKIP LOCKED", ilike="ILIKE",
                   same="IS NOT DISTINCT FROM", integrity_error=psycopg.IntegrityError,
                   epoch="CAST(extract(epoch FROM clock_timestamp()) AS double precision)")


@functools.lru_cache(maxsize=1024)
def _translate(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


class _NumericLoader(Loader):
    def load(self, data: Any) -> int | float:
        text = bytes(data)
        if b"." in text or b"e" in text.lower() or b"n" in text.lower():
            return float(text)
        return int(text)


def configure(conn: psycopg.Connection[Any]) -> None:
    """Set up a new pooled connection: autocommit, numeric sums as int/float."""
    conn.autocommit = True
    conn.adapters.register_loader("numeric", _NumericLoader)


class PgDb:
    """One borrowed connection, for one thread at a time."""

    dialect = POSTGRES

    def __init__(self, conn: psycopg.Connection[Any], key: str) -> None:
        self.conn, self._key = conn, key

    @property
    def key(self) -> str:
        return self._key

    @property
    def in_transaction(self) -> bool:
        return self.conn.info.transaction_status != TransactionStatus.IDLE

    def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> Any:
        return self.conn.execute(_translate(sql), list(parameters or ()))

    def query(self, sql: str, params: Sequence[Any] | None = None) -> Iterator[dict[str, Any]]:
        with self.conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(_translate(sql), list(params or ()))
            rows = cursor.fetchall()
        return iter(rows)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        batch = [list(row) for row in rows]
        if batch:
            with self.conn.cursor() as cursor:
                cursor.executemany(_translate(sql), batch)

    def insert_id(self, sql: str, params: Sequence[Any]) -> int:
        return int(self.execute(sql + " RETURNING id", params).fetchone()[0])

    def columns(self, table: str) -> list[str]:
        return [row[0] for row in self.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = ? ORDER BY ordinal_position", [table]).fetchall()]

    @contextlib.contextmanager
    def write(self) -> Iterator[PgDb]:
        if self.in_transaction:
            raise StoreError("nested write transaction; the store's functions each own one transaction")
        with self.conn.transaction():
            yield self

    @contextlib.contextmanager
    def pipelined(self) -> Iterator[PgDb]:
        # psycopg's pipeline mode: queued statements go out together and are synced when a result is
        # fetched or the block ends (a transaction opened inside commits in that same round trip).
        with self.conn.pipeline():
            yield self

    @contextlib.contextmanager
    def read(self) -> Iterator[PgDb]:
        if self.in_transaction:  # inside a write or another read: its snapshot serves
            yield self
            return
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            yield self
        finally:
            self.conn.execute("COMMIT" if self.conn.info.transaction_status == TransactionStatus.INTRANS
                              else "ROLLBACK")
