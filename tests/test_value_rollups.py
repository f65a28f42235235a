"""Counts by value (migrations 0018 / PostgreSQL 0010): the calibration counts behind the threshold
and the app-latency histogram behind p50/p95 equal what a full pass over the traces gives, on both
stores, after any mix of writes: inserts, re-evaluation, errors, deletes, latency and knowledge-base
changes, concurrent writers, PostgreSQL's fold of the deltas, and a copy into another store."""

from __future__ import annotations

import math
import random
import threading

import pytest
from store_support import is_sqlite, sql
from test_store import make_result, trace
from work_support import create_trace, mark_error, save_result

from veralith.models import FailureCell
from veralith.store import open_store, ops
from veralith.store.calibration import linear_percentile, rank_of
from veralith.store.histogram import RELATIVE_ERROR, app_latency_percentiles
from veralith.store.protocol import TraceInput

# Sufficiency fractions are ratios of small integers: a handful of distinct values, many repeats.
FRACTIONS = [0.0, 0.25, 1 / 3, 0.5, 2 / 3, 0.75, 1.0]
_CALIBRATION = ("SELECT knowledge_base, sufficiency_fraction, COUNT(*) FROM traces WHERE status = 'done'"
                " AND failure_cell = 'complete_grounded' AND sufficiency_fraction IS NOT NULL GROUP BY 1, 2")
_BUCKETS = ("SELECT knowledge_base, (SELECT bucket FROM latency_buckets WHERE lo <= app_latency_ms"
            " ORDER BY lo DESC LIMIT 1), COUNT(*) FROM traces WHERE app_latency_ms IS NOT NULL GROUP BY 1, 2")


# Without reviewers' labels every knowledge base flags for review at the default cut-off.
NO_REVIEW_LABELS = {"review_cutoff": 0.7, "review_labels": None, "review_source": "default"}


def _latency(rng: random.Random) -> float | None:
    return rng.choice([None, round(rng.lognormvariate(5, 1.5), 3), rng.choice([0.0, 0.0004, 12.0, 2e9])])


def _timed(kb: str, ms: float | None) -> TraceInput:
    return trace(knowledge_base=kb, app_latency_ms={} if ms is None else {"total": ms})


def _assert_counts_exact(store) -> None:
    """The counts tables equal a full GROUP BY, and every figure read from them matches the exact one."""
    direct = {(kb, value): n for kb, value, n in sql(store, _CALIBRATION)}
    rolled = {(kb, value): n for kb, value, n in sql(store, "SELECT knowledge_base, value, n FROM calibration_counts")}
    assert rolled == direct
    buckets = {(kb, bucket): n for kb, bucket, n in sql(store, _BUCKETS)}
    histogram = {(kb, b): n for kb, b, n in sql(store, "SELECT knowledge_base, bucket, n FROM latency_histogram")}
    assert histogram == buckets
    figures = store.read(ops.stats)
    for kb in {row[0] for row in sql(store, "SELECT DISTINCT knowledge_base FROM traces")}:
        values = sorted(v for (name, value), n in direct.items() if name == kb for v in [value] * n)
        assert store.read(ops.calibration_count, kb) == len(values)
        for offset in range(len(values) + 1):      # every rank the walk can be asked for
            assert store.read(ops.calibration_values, kb, offset, 2) == values[offset:offset + 2]
        found = store.read(ops.calibration, kb)
        if len(values) >= 20:                     # the default minimum: a calibrated threshold
            h = rank_of(len(values), 10)
            upper = values[h + 1] if h + 1 < len(values) else values[h]
            assert found.threshold == linear_percentile(values[h], upper, len(values), 10)
        assert figures["thresholds"][kb] == {"threshold": found.threshold, "source": found.source.value,
                                             "calibration_traces": len(values), **NO_REVIEW_LABELS}
        timed = sorted(row[0] for row in sql(store, "SELECT app_latency_ms FROM traces WHERE knowledge_base = ?"
                                             " AND app_latency_ms IS NOT NULL", [kb]))
        with store.connection() as db:
            shown = app_latency_percentiles(db, kb)
        if not timed:
            assert shown is None and kb not in figures["app_latency"]
            continue
        assert shown is not None and shown["n"] == len(timed) and figures["app_latency"][kb] == shown
        for name, p in (("p50", 50), ("p95", 95)):
            exact = timed[max(1, math.ceil(p * len(timed) / 100)) - 1]
            if 0.001 <= exact < 9e8:               # the histogram's documented range
                assert shown[name] == pytest.approx(exact, rel=RELATIVE_ERROR), (kb, name)
            elif exact < 0.001:
                assert shown[name] == 0.0


def test_counts_by_value_match_a_full_pass_after_any_mix_of_writes(store):
    rng = random.Random(23)
    for step in range(200):
        op = rng.choice(["create", "create", "save", "save", "save", "save", "resave", "error", "delete", "latency",
                         "move", "pending"])
        ids = [r[0] for r in sql(store, "SELECT id FROM traces")]
        if op == "create" or not ids:
            create_trace(store, _timed(rng.choice(["a", "b"]), _latency(rng)))
        elif op == "save":
            save_result(store, make_result(rng.choice([FailureCell.complete_grounded, FailureCell.extra_grounded]),
                                          sufficiency_fraction=rng.choice([*FRACTIONS, None]),
                                          knowledge_base=rng.choice(["a", "b"])))
        elif op == "resave":   # a trace re-judged: its count moves to its new value or cell
            save_result(store, make_result(rng.choice([FailureCell.complete_grounded, FailureCell.incomplete_grounded]),
                                          trace_id=rng.choice(ids), sufficiency_fraction=rng.choice(FRACTIONS)))
        elif op == "error":
            mark_error(store, rng.choice(ids), "boom")
        elif op == "delete":   # retention removes traces
            sql(store, "DELETE FROM traces WHERE id = ?", [rng.choice(ids)])
        elif op == "latency":
            sql(store, "UPDATE traces SET app_latency_ms = ? WHERE id = ?", [_latency(rng), rng.choice(ids)])
        elif op == "move":
            sql(store, "UPDATE traces SET knowledge_base = ? WHERE id = ?", [rng.choice(["a", "b", "c"]),
                                                                               rng.choice(ids)])
        else:                  # re-queued for evaluation: out of calibration until judged again
            sql(store, "UPDATE traces SET status = 'pending' WHERE id = ?", [rng.choice(ids)])
        if step == 100 and hasattr(store, "compact"):
            assert store.compact() > 0             # PostgreSQL: half the history folded, half left as deltas
    assert sum(n for *_, n in sql(store, _CALIBRATION)) >= 20   # enough for a calibrated threshold somewhere
    _assert_counts_exact(store)
    if hasattr(store, "compact"):
        store.compact()
        _assert_counts_exact(store)


def test_a_status_change_outside_calibration_writes_no_count(store):
    """Claims, leases and errors of traces that do not count leave the counts as they were (and on
    PostgreSQL append no delta rows: the trigger skips an update that moves nothing)."""
    trace_id = create_trace(store, _timed("a", 40.0))
    before = sql(store, "SELECT knowledge_base, bucket, n FROM latency_histogram")
    deltas = "SELECT COUNT(*) FROM latency_histogram_delta"
    pending = None if is_sqlite(store) else sql(store, deltas)
    sql(store, "UPDATE traces SET status = 'running' WHERE id = ?", [trace_id])
    mark_error(store, trace_id, "boom")
    assert sql(store, "SELECT knowledge_base, bucket, n FROM latency_histogram") == before
    if pending is not None:
        assert sql(store, deltas) == pending


def test_concurrent_writers_keep_the_counts_exact(store):
    """Threads writing at once (each call its own transaction; on PostgreSQL concurrent ones, with a
    fold running meanwhile) lose no count and count none twice."""
    errors: list[BaseException] = []

    def write(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(25):
                kb = rng.choice(["a", "b"])
                trace_id = create_trace(store, _timed(kb, _latency(rng)))
                save_result(store, make_result(FailureCell.complete_grounded, trace_id=trace_id, knowledge_base=kb,
                                              sufficiency_fraction=rng.choice(FRACTIONS)))
                if hasattr(store, "compact") and rng.random() < 0.2:
                    store.compact()
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(n for *_, n in sql(store, "SELECT knowledge_base, value, n FROM calibration_counts")) == 100
    _assert_counts_exact(store)


def test_copy_into_another_store_rebuilds_the_counts(store_url, tmp_path):
    """`veralith migrate --to`: the target's triggers count the copied traces as they arrive."""
    from veralith.work.migrate import copy as copy_history

    rng = random.Random(5)
    source = open_store(f"sqlite:///{tmp_path / 'laptop.db'}")
    for _ in range(40):
        trace_id = create_trace(source, _timed(rng.choice(["a", "b"]), _latency(rng)))
        if rng.random() < 0.8:
            save_result(source, make_result(FailureCell.complete_grounded, trace_id=trace_id,
                                           sufficiency_fraction=rng.choice(FRACTIONS)))
    target = open_store(store_url)
    copy_history(source, target)  # type: ignore[arg-type]
    assert sql(target, "SELECT COUNT(*) FROM traces") == [(40,)]
    _assert_counts_exact(target)
    assert target.read(ops.stats)["thresholds"] == source.read(ops.stats)["thresholds"]
    assert target.read(ops.stats)["app_latency"] == source.read(ops.stats)["app_latency"]


def test_the_migration_counts_an_existing_history(tmp_path):
    """Migration 0018 backfills the counts from the traces already stored (SQLite; PostgreSQL's 0010
    does the same in SQL of the same shape, and the tests above run every statement of it)."""
    import shutil

    from sqlite_utils import Database

    from veralith.store import migrate

    older = tmp_path / "older"
    older.mkdir()
    for path in migrate.MIGRATIONS_DIR.glob("*.sql"):
        if path.name < "0018":
            shutil.copy(path, older / path.name)
    db = Database(tmp_path / "old.db")
    migrate.apply_migrations(db, older)
    rng = random.Random(9)
    for i in range(60):
        db.conn.execute(
            "INSERT INTO traces (id, created_at, updated_at, status, knowledge_base, failure_cell, sufficiency_fraction,"
            " query, response, app_latency_ms) VALUES (?, '2026-12-01', '2026-12-01', ?, ?, ?, ?, 'q', 'r', ?)",
            [i + 1, rng.choice(["done", "pending"]), rng.choice(["a", "b"]),
             rng.choice(["complete_grounded", "extra_grounded", None]), rng.choice([*FRACTIONS, None]), _latency(rng)])
    db.conn.commit()
    assert "0018_value_rollups" in migrate.apply_migrations(db)
    db.conn.close()
    _assert_counts_exact(open_store(f"sqlite:///{tmp_path / 'old.db'}"))
