"""The PostgreSQL store's migrations: the files in `migrations/postgres/` (shipped in the wheel as
`veralith/migrations/postgres/`), applied the way SQLite's are (veralith.store.migrate).

Each file runs in one transaction together with the row that records it (name, SHA-256, time) in
`veralith_migrations`. Several processes may start against a fresh database at once: the whole
check-and-apply holds a session advisory lock, so the second waits and then finds nothing pending.
A database migrated by newer code (a name this code does not know) is refused, and so is a file
edited after it was applied.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg

from veralith.errors import StoreError
from veralith.store.migrate import MIGRATIONS_DIR, MigrationFile, discover

__all__ = ["FOLDER", "apply_migrations", "schema_version"]

FOLDER = MIGRATIONS_DIR / "postgres"
_LOCK = "SELECT pg_advisory_lock(hashtext('veralith_migrations'))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtext('veralith_migrations'))"
_TABLE = ("CREATE TABLE IF NOT EXISTS veralith_migrations (name text PRIMARY KEY, checksum text NOT NULL,"
          " applied_at text NOT NULL)")


def _files() -> list[MigrationFile]:
    return discover(FOLDER)


def _has_table(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT to_regclass('veralith_migrations') IS NOT NULL").fetchone()
    return bool(row and row[0])


def schema_version(conn: psycopg.Connection[Any]) -> str | None:
    """Name of the last applied migration, or None for a database Veralith never migrated."""
    if not _has_table(conn):
        return None
    row = conn.execute("SELECT max(name) FROM veralith_migrations").fetchone()
    return None if row is None else row[0]


def check(conn: psycopg.Connection[Any], where: str, *, current: bool) -> None:
    """Refuse a database this code cannot use: migrated by newer code, an applied file edited, or
    (with `current`, for readers that never migrate) a schema older than this code's."""
    files = _files()
    known = {f.name: f for f in files}
    applied = _applied(conn)
    unknown = sorted(set(applied) - set(known))
    if unknown:
        raise StoreError(f"the database at {where} was migrated by a newer Veralith (it has {unknown[-1]!r}, this code "
                         f"knows up to {files[-1].name!r}); upgrade veralith or point VERALITH_DB_URL elsewhere")
    for name, checksum in applied.items():
        if known[name].checksum != checksum:
            raise StoreError(f"migration {name!r} was edited after it was applied to {where}; add a new migration "
                             "file instead of changing an old one")
    if current and (not files or files[-1].name not in applied):
        raise StoreError(f"the database at {where} has schema {max(applied) if applied else 'none'}, this Veralith "
                         f"expects {files[-1].name}; any writing command (e.g. `veralith resume`) brings it up to date")


def apply_migrations(conn: psycopg.Connection[Any], where: str) -> list[str]:
    """Apply pending migrations on `conn` (autocommit); return the names applied."""
    files = _files()
    if _has_table(conn):
        check(conn, where, current=False)   # fast path without the lock: an up-to-date database
        if files and files[-1].name in _applied(conn):
            return []
    conn.execute(_LOCK)
    try:
        conn.execute(_TABLE)
        check(conn, where, current=False)
        done = _applied(conn)
        applied = []
        for file in files:
            if file.name in done:
                continue
            try:
                with conn.transaction():
                    conn.execute(file.sql.encode("utf-8"))   # a script: several statements, no parameters
                    conn.execute("INSERT INTO veralith_migrations (name, checksum, applied_at) VALUES (%s, %s, %s)",
                                 [file.name, file.checksum, dt.datetime.now(dt.timezone.utc).isoformat()])
            except psycopg.Error as exc:
                raise StoreError(f"migration {file.name} failed on {where}, left unapplied: {exc}") from exc
            applied.append(file.name)
        return applied
    finally:
        conn.execute(_UNLOCK)


def _applied(conn: psycopg.Connection[Any]) -> dict[str, str]:
    if not _has_table(conn):
        return {}
    return {name: checksum for name, checksum in conn.execute("SELECT name, checksum FROM veralith_migrations")}
