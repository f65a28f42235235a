"""PostgresStore: the Store on PostgreSQL, for a team's shared history (the `postgres` extra).

The same SQL as the SQLite store (veralith.store.sqlstore) on connections from a psycopg 3 pool
(`PgDb`, veralith.store.postgres.db). What is PostgreSQL's own:

- Its migrations (migrations/postgres/, veralith.store.postgres.migrate) are applied by the first
  connection a writing process makes, under an advisory lock.
- Trace ids come in blocks of 1,000 from the sequence `veralith_trace_ids`, handed out by the work
  layer (veralith.work.ids) from this host's block in its spool folder.
- Work is claimed with `FOR UPDATE SKIP LOCKED` plus the lease, so many workers on many hosts each
  take different traces without waiting for one another.
- The running totals behind `stats` (and its counts by value: calibration, app latency) are
  append-only deltas; a writer folds them into base rows every few seconds (`compact`), one
  process at a time.
- The server's errors become StoreUnavailable (cannot connect, connection lost, pool exhausted) or
  WritesStopped (disk full, read-only server); messages never show the password.
- The pool's own log lines ("error connecting in 'veralith': …", every few seconds while the server
  is down) are not the host app's business: `_PoolNoise` takes the records of Veralith's pool off
  the `psycopg.pool` and `psycopg` loggers and logs them, masked, at DEBUG on `veralith.store`.

Opened `read_only` (reading commands, `veralith serve`), its connections run with
`default_transaction_read_only`, and it never migrates: a schema older than this code is refused
with the command that updates it.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
import time
from collections.abc import Iterator
from typing import Any

from veralith.config import settings
from veralith.errors import StoreError
from veralith.redact import redact, redact_url
from veralith.store.errors import StoreUnavailable, WritesStopped
from veralith.store.sqlstore import SqlStore

__all__ = ["PostgresStore"]

_COMPACT_EVERY_S = 5.0
_CONNECT_TIMEOUT_S = 10
# Both folds (migrations/postgres 0001 and 0010); each takes its own advisory lock and returns how
# many delta rows it folded.
_COMPACT = "SELECT veralith_compact_rollups() + veralith_compact_value_rollups()"


_POOL_NAME = "veralith"


class _PoolNoise(logging.Filter):
    """Takes the records of Veralith's own pool off psycopg's loggers, so a host app's handlers (or
    Python's last-resort stderr handler, when the host configured none) never print them; they go
    to `veralith.store` at DEBUG instead, with passwords masked there (veralith.config).

    A filter on the library's loggers, rather than `propagate = False` or a level on them: the host's
    own psycopg pools and connections keep logging exactly as the host set them up. Ours are told
    apart by the pool's name (its threads are `veralith-worker-N`, `veralith-scheduler`; a record
    logged from a caller's thread names the pool in its first argument) or by a Veralith thread
    (the log shipper and evaluator: `veralith-…`).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        ours = record.threadName is not None and record.threadName.startswith(_POOL_NAME + "-")
        if not ours and isinstance(record.args, tuple) and record.args:
            ours = record.args[0] == _POOL_NAME
        if not ours:
            return True
        quiet = logging.getLogger("veralith.store")
        if quiet.isEnabledFor(logging.DEBUG):
            quiet.debug("%s: %s", record.name, record.getMessage())
        return False


_NOISE = _PoolNoise()


def _quiet_pool_logs() -> None:
    """Install `_NOISE` once on psycopg's loggers (adding the same filter twice is a no-op)."""
    for name in ("psycopg", "psycopg.pool"):
        logging.getLogger(name).addFilter(_NOISE)


def _check_lent(conn: Any) -> None:
    """The pool's test of a connection it is about to lend. A server that ends a connection (a restart,
    a failover, an administrator) first sends it a message and then closes it, so an idle connection
    with something to read is tested with a round trip (failing: the pool replaces it); one with
    nothing to read is lent as it is. Testing every connection with a round trip cost about a quarter
    of a judged trace's round trips.

    `poll`, not `select`: select() refuses a descriptor numbered 1,024 or more, which an application
    holding many files or sockets hands a new connection, and every connection would then be refused."""
    from psycopg_pool import ConnectionPool

    if conn.closed or _readable(conn.fileno()):
        ConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    """Whether `fd` has something to read now (or was closed by the peer), without waiting."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class PostgresStore(SqlStore):
    """The store in the PostgreSQL database at `url` (a libpq URL: postgresql://user@host:port/db)."""

    def __init__(self, url: str, *, read_only: bool = False) -> None:
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401
        except ImportError:
            raise StoreError("a postgresql:// store needs the `postgres` extra: pip install 'veralith-rag[postgres]'"
                             " (in a checkout: pip install '.[postgres]')") from None
        _quiet_pool_logs()
        self.url = redact_url(url) or url
        self.key = self.url
        self.spool_url = url
        self.read_only = read_only
        self._conninfo = url
        self._lock = threading.Lock()
        self._pool: Any = None
        self._pid = 0
        self._last_compact = 0.0

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"

    # -- connections ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        from veralith.store.postgres.db import PgDb

        pool = self._the_pool()
        try:
            with pool.connection(timeout=_CONNECT_TIMEOUT_S) as conn:
                yield PgDb(conn, self.key)
        finally:
            if not self.read_only:
                self._maybe_compact()

    def _the_pool(self) -> Any:
        import os

        with self._lock:
            if self._pool is None or self._pid != os.getpid():  # a forked child builds its own
                from psycopg_pool import ConnectionPool

                from veralith.store.postgres.db import configure

                options = "-c default_transaction_read_only=on" if self.read_only else None
                kwargs: dict[str, Any] = {"connect_timeout": _CONNECT_TIMEOUT_S, "application_name": "veralith"}
                if options:
                    kwargs["options"] = options
                # `check`: a connection is tested when it is lent, so one the server dropped (a restart,
                # a failover) is replaced instead of failing the caller's first statement.
                pool = ConnectionPool(self._conninfo, min_size=1, max_size=max(4, settings.concurrency + 4),
                                      kwargs=kwargs, configure=configure, open=False, name=_POOL_NAME,
                                      check=_check_lent)
                pool.open(wait=False)
                self._check_schema(pool)
                self._pool, self._pid = pool, os.getpid()
            return self._pool

    def _check_schema(self, pool: Any) -> None:
        """Migrate (a writing store) or check (a reading one) on the pool's first connection."""
        from veralith.store.postgres import migrate

        try:
            with pool.connection(timeout=_CONNECT_TIMEOUT_S) as conn:
                if self.read_only:
                    migrate.check(conn, self.url, current=True)
                else:
                    migrate.apply_migrations(conn, self.url)
        except StoreError:
            pool.close()
            raise
        except Exception as exc:
            pool.close()
            raise (self._classify(exc)
                   or StoreUnavailable(f"cannot use PostgreSQL at {self.url}: {redact(exc)}")) from exc

    def _classify(self, exc: BaseException) -> StoreError | None:
        import psycopg
        from psycopg_pool import PoolTimeout

        if isinstance(exc, StoreError):
            return exc
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        text = redact(text)  # libpq may echo the connection string it could not parse
        if isinstance(exc, (psycopg.errors.DiskFull, psycopg.errors.ReadOnlySqlTransaction,
                            psycopg.errors.InsufficientPrivilege)):
            return WritesStopped(f"PostgreSQL at {self.url} stopped accepting writes ({text}); what was stored "
                                 "before is kept")
        if isinstance(exc, (PoolTimeout, psycopg.OperationalError, psycopg.InterfaceError)):
            return StoreUnavailable(f"cannot reach PostgreSQL at {self.url} ({text}); nothing was written by this "
                                    "step: check the server and VERALITH_DB_URL, then try again")
        return None

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(Exception):
                pool.close()

    # -- what PostgreSQL does its own way ------------------------------------------------------
    def after_copy(self, db: Any) -> None:
        # The serial sequences move past the copied rows, never back; trace ids are the work
        # layer's (veralith.work.ids reserves what a copy keeps before it writes).
        for table in ("runs", "trace_history"):
            sequence = str(db.execute("SELECT pg_get_serial_sequence(?, 'id')", [table]).fetchone()[0])
            highest = int(db.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()[0])
            last, called = db.execute(f"SELECT last_value, is_called FROM {sequence}").fetchone()
            if highest > (int(last) if called else 0):
                db.execute("SELECT setval(?::regclass, ?)", [sequence, highest])
        db.execute(_COMPACT)

    def compact(self) -> int:
        """Fold the running totals' deltas into their base rows now (one process at a time; others
        return 0). Returns how many delta rows were folded."""
        with self.connection() as db:
            return int(db.execute(_COMPACT).fetchone()[0])

    def _maybe_compact(self) -> None:
        now = time.monotonic()
        if now - self._last_compact < _COMPACT_EVERY_S:
            return
        self._last_compact = now
        pool = self._pool
        if pool is None:
            return
        try:
            with pool.connection(timeout=1) as conn:
                conn.execute(_COMPACT)
        except Exception:  # best effort: the totals read correctly either way, only more slowly
            return
