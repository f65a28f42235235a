"""`Store.read(fn)` / `Store.write(fn)`: the one way to run code on a store's connection, on both stores."""

from __future__ import annotations

import pytest

from veralith.errors import StoreError
from veralith.store import open_store
from veralith.store.sql import Db


def _count(db: Db, table: str) -> int:
    return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _add_run(db: Db, name: str) -> int:
    with db.write():
        return db.insert_id("INSERT INTO runs (name, source, started_at) VALUES (?, 'eval', '2026-01-01')", [name])


def test_read_and_write_run_a_function_on_a_connection(store):
    before = store.read(_count, "runs")
    run_id = store.write(_add_run, "a run")
    assert run_id > 0
    assert store.read(_count, "runs") == before + 1
    assert store.read(lambda db, rid: db.execute("SELECT name FROM runs WHERE id = ?", [rid]).fetchone()[0],
                      run_id) == "a run"


def test_write_is_refused_on_a_store_opened_read_only(store_url):
    open_store(store_url).write(_add_run, "first")   # the store exists, migrated
    reader = open_store(store_url, read_only=True)
    with pytest.raises(StoreError, match="read-only"):
        reader.write(_add_run, "refused")
    assert reader.read(_count, "runs") == 1
