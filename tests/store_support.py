"""Shared by the store-level tests that run against both stores (the `store` / `store_url` fixtures).

Tests reach the store through its protocol. A few need to look at or set up what the protocol does
not expose (a lease taken by another host, a row count, a column's raw value); `sql` runs one
statement on the store's own connection, so the same test code runs on SQLite and PostgreSQL: the
statements use the SQL both share (veralith.store.sql), with `?` placeholders.
"""

from __future__ import annotations

from typing import Any

from veralith.store import Store


def sql(store: Store, statement: str, params: list[Any] | tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on `store`'s connection (committed at once); its rows, if any, as tuples."""
    with store.connection() as db:  # type: ignore[attr-defined]  # SqlStore's, not the protocol's
        if db.in_transaction:  # SQLite's connection left inside a transaction by an earlier statement
            db.execute("COMMIT")
        cursor = db.execute(statement, list(params))
        rows = [tuple(row) for row in cursor.fetchall()] if cursor.description else []
        if db.in_transaction:  # sqlite3 opens one implicitly for DML; make the change visible to others
            db.execute("COMMIT")
    return rows


def scalar(store: Store, statement: str, params: list[Any] | tuple[Any, ...] = ()) -> Any:
    """The single value `statement` selects."""
    [(value,)] = sql(store, statement, params)
    return value


def statuses(store: Store) -> dict[int, str]:
    """Every trace's status, by id."""
    return dict(sql(store, "SELECT id, status FROM traces ORDER BY id"))


def is_sqlite(store: Store) -> bool:
    return store.url.startswith("sqlite:")
