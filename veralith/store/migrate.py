"""Schema migrations: numbered SQL files applied in order, each atomically with its record.

The files live in the top-level `migrations/` folder (shipped in the wheel as
`veralith/migrations/`), named `NNNN_snake_case.sql`, each opening with a comment saying why.
sqlite-utils' `Migrations` runs each file atomically together with the row that records it, and a
second table keeps a SHA-256 per applied file: a file edited after it was applied is reported,
not silently skipped.

Several processes may open a fresh database at the same moment, so the whole check-and-apply runs
inside one `BEGIN IMMEDIATE` transaction (the write lock): the second process waits, then finds
nothing pending. Each file runs in its own savepoint of that transaction (`Migrations` uses
`db.atomic()`, which nests), and a failure rolls the whole call back: the database is left
exactly as it was, never with part of a file or a file without its record.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from veralith.errors import StoreError

__all__ = ["MIGRATIONS_DIR", "MigrationFile", "apply_migrations", "discover", "schema_version"]

MIGRATIONS_DIR = Path(__file__).resolve().parents[1] / "migrations"
MIGRATION_SET = "veralith"
CHECKSUM_TABLE = "_veralith_migration_checksums"
_NAME = re.compile(r"^(\d{4})_[a-z0-9]+(?:_[a-z0-9]+)*\.sql$")


@dataclass(frozen=True)
class MigrationFile:
    name: str        # file stem, e.g. "0001_initial_schema"; the record's name
    sql: str
    checksum: str    # sha256 of the file's bytes


def discover(folder: Path | None = None) -> list[MigrationFile]:
    """The migration files of `folder`, in order. Misnamed or duplicate-numbered files are errors,
    because applying them in a surprising order would corrupt the schema."""
    if folder is None:
        return list(_shipped())
    return _read(Path(folder))


@functools.lru_cache(maxsize=1)
def _shipped() -> tuple[MigrationFile, ...]:
    # The shipped files cannot change while the process runs; read and hash them once.
    return tuple(_read(MIGRATIONS_DIR))


def _read(folder: Path) -> list[MigrationFile]:
    if not folder.is_dir():
        raise StoreError(f"migrations folder {folder} is missing; the installation is incomplete")
    files, numbers = [], set()
    for path in sorted(folder.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise StoreError(f"migration file {path.name!r} is not named NNNN_snake_case.sql")
        if match.group(1) in numbers:
            raise StoreError(f"two migration files share the number {match.group(1)}")
        numbers.add(match.group(1))
        data = path.read_bytes()
        files.append(MigrationFile(path.stem, data.decode("utf-8"), hashlib.sha256(data).hexdigest()))
    return files


def schema_version(db: Database) -> str | None:
    """Name of the last applied migration, or None for an empty database."""
    if not db[Migrations.migrations_table].exists():
        return None
    applied = Migrations(MIGRATION_SET).applied(db)
    return applied[-1].name if applied else None


def apply_migrations(db: Database, folder: Path | None = None) -> list[str]:
    """Apply pending migrations; return the names applied. Raise StoreError when the database was
    written by newer code, when an applied file has changed, or when a migration fails (in which
    case nothing of this call is kept)."""
    files = discover(folder)
    migrations = _as_migrations(files)
    conn = db.conn
    if conn.in_transaction:
        raise StoreError("apply_migrations() must not run inside an open transaction")
    # Fast path without the write lock: an up-to-date database only needs the read-only checks.
    _check_applied(db, files)
    if not migrations.pending(db):
        return []
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        raise StoreError(f"cannot lock the database to migrate it: {exc}") from exc
    try:
        _check_applied(db, files)
        pending = [m.name for m in migrations.pending(db)]
        # Each migration runs in a savepoint of this transaction together with its record
        # (Migrations uses db.atomic(), which nests), so a failure rolls back all of this call.
        migrations.apply(db)
    except StoreError:
        _rollback(conn)
        raise
    except Exception as exc:
        _rollback(conn)
        raise StoreError(f"migration failed, database left unchanged: {exc}") from exc
    conn.execute("COMMIT")
    return pending


def _as_migrations(files: list[MigrationFile]) -> Migrations:
    migrations = Migrations(MIGRATION_SET)
    for file in files:
        migrations(name=file.name)(_runner(file))
    return migrations


def _runner(file: MigrationFile) -> Callable[[Database], None]:
    def run(db: Database) -> None:
        db.executescript(file.sql)   # inside a transaction: statement by statement, no implicit commit
        db.execute(
            f"CREATE TABLE IF NOT EXISTS {CHECKSUM_TABLE} "
            "(name TEXT PRIMARY KEY, checksum TEXT NOT NULL, applied_at TEXT NOT NULL)")
        db.execute(f"INSERT INTO {CHECKSUM_TABLE} (name, checksum, applied_at) VALUES (?, ?, ?)",
                   [file.name, file.checksum, dt.datetime.now(dt.timezone.utc).isoformat()])
    run.__name__ = file.name
    return run


def _check_applied(db: Database, files: list[MigrationFile]) -> None:
    if not db[Migrations.migrations_table].exists():
        return
    known = {f.name: f for f in files}
    applied = [m.name for m in Migrations(MIGRATION_SET).applied(db)]
    unknown = [name for name in applied if name not in known]
    if unknown:
        raise StoreError(
            f"the database at {_path(db)} was migrated by a newer Veralith (it has {unknown[-1]!r}, "
            f"this code knows up to {files[-1].name if files else 'nothing'!r}); upgrade veralith "
            "or point VERALITH_DB_PATH at another file")
    if not db[CHECKSUM_TABLE].exists():
        return
    for row in db.query(f"SELECT name, checksum FROM {CHECKSUM_TABLE}"):
        expected = known.get(row["name"])
        if expected is not None and expected.checksum != row["checksum"]:
            raise StoreError(f"migration {row['name']!r} was edited after it was applied to "
                             f"{_path(db)}; add a new migration file instead of changing an old one")


def _path(db: Database) -> str:
    row = db.execute("PRAGMA database_list").fetchone()
    return row[2] or ":memory:"


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")
