"""The store: migrations, exact round trips, leases, listing and stats.

Tests of what every store promises take the `store` fixture and run against SQLite and PostgreSQL;
those of SQLite's own machinery (its migrations, PRAGMAs, query plans, old files) use the file.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import pytest
from store_support import is_sqlite, scalar, sql
from work_support import claim, claim_batch, create_trace, drop_lease, held, mark_error, release, resumable, save_result

from veralith.errors import StoreError
from veralith.models import (
    SCHEMA_VERSION,
    Availability,
    Claim,
    CompletenessJudgment,
    CompletenessStatus,
    ContextChunk,
    Coverage,
    Diagnosis,
    EvaluationResult,
    Execution,
    FailureCell,
    FaithfulnessJudgment,
    Gap,
    Gate,
    JudgeError,
    Phase,
    Quote,
    Relation,
    ResponseKind,
    Status,
    SubQuestion,
    SufficiencyJudgment,
    SufficiencyLevel,
    Suggestion,
    ThresholdSource,
    Usage,
    Verdict,
)
from veralith.store import TraceInput, TraceNotEvaluated, TraceNotFound, migrate, ops, repository
from veralith.store.db import connect, open_db
from veralith.store.sqlite import SQLiteStore
from veralith.work import claims

CHUNKS = [ContextChunk(id="c0", text="The P/E ratio is price divided by earnings.", source="wiki",
                       metadata={"page": 3, "score": 0.8125, "tags": ["finance"]}),
          ContextChunk(id="doc-7", text="Apple's revenue grew — ünïcode ✓.")]


def make_result(cell: FailureCell | None = FailureCell.complete_grounded, *, sufficiency_fraction: float | None = 1.0,
                knowledge_base: str = "default", refusal: bool = False, errors: list[JudgeError] | None = None,
                trace_id: int | None = None, usd: float | None = 0.0123456789) -> EvaluationResult:
    """A hand-built result with every field populated (no judges run)."""
    grounded = cell is not None and cell.value.endswith("_grounded")
    claims = [] if refusal else [Claim(id="k1", text="P/E is price over earnings.", char_start=0, char_end=27),
                                 Claim(id="k2", text="Apple's P/E was 42.7.", char_start=None, char_end=None)]
    faith = [] if refusal else [
        FaithfulnessJudgment(claim_id="k1", verdict=Verdict.Y, relation=Relation.supported, reasoning="said",
                             grounding_chunk_ids=["c0", "doc-7"], contradicting_chunk_ids=[], confidence=0.8125,
                             evidence=[Quote(chunk_id="c0", quote="price over earnings"),
                                       Quote(chunk_id="doc-7", quote="ratio")]),
        FaithfulnessJudgment(claim_id="k2", verdict=Verdict.Y if grounded else Verdict.N,
                             relation=Relation.supported if grounded else Relation.conflicting, reasoning="mixed",
                             grounding_chunk_ids=["doc-7"], contradicting_chunk_ids=[] if grounded else ["c0"])]
    diagnosis = Diagnosis(
        failure_cell=cell, sufficiency_level=SufficiencyLevel.high if (sufficiency_fraction or 0) >= 0.5 else
        SufficiencyLevel.low, sufficiency_fraction=sufficiency_fraction, faithfulness_fraction=None if refusal else 0.5,
        threshold=0.7, threshold_source=ThresholdSource.calibrated, n_sub_questions=2, n_claims=len(claims),
        n_uncovered_sub_questions=1 if cell is None or "incomplete" in cell.value else 0,
        n_extra_claims=None if cell is None else 0, n_partial_sub_questions=None if cell is None else 1,
        coverage={} if cell is None else {"q1": Coverage.answered, "q2": Coverage.partial},
        needs_review=cell is not None, review_ids=["k1"] if cell is not None else [])
    gate = Gate.pass_ if cell is FailureCell.complete_grounded else Gate.indeterminate if cell is None else Gate.fail
    return EvaluationResult(
        trace_id=trace_id, knowledge_base=knowledge_base, metadata={"user": "u1", "nested": {"n": [1, 2.5, None]}},
        query="What is P/E, and what was Apple's P/E?", context=CHUNKS,
        response="I can't answer that." if refusal else "P/E is price over earnings. Apple's P/E was 42.7.",
        sub_questions=[SubQuestion(id="q1", text="What is P/E?"), SubQuestion(id="q2", text="Apple's P/E?")],
        claims=claims, refusal=refusal, as_of="2026-11-30",
        gaps=[Gap(id="g1", text="whether Apple's P/E is given", char_start=0, char_end=20)] if refusal else [],
        response_kind=ResponseKind.full_refusal if refusal else ResponseKind.answer,
        sufficiency=[SufficiencyJudgment(sub_question_id="q1", verdict=Verdict.Y, reasoning="r1", chunk_ids=["c0"],
                                         confidence=0.75),
                     SufficiencyJudgment(sub_question_id="q2", verdict=Verdict.N, reasoning="r2", chunk_ids=[])],
        faithfulness=faith,
        completeness=None if cell is None else CompletenessJudgment(
            mappings={"q1": [] if refusal else ["k1"], "q2": [] if refusal else ["k2", "k1"]},
            uncovered_sub_question_ids=["q2"] if refusal else [], extra_claim_ids=["k2"] if "extra" in cell.value
            else [], reasoning="mapped", supports={"q1": [], "q2": []},
            statuses={"q1": CompletenessStatus.answered, "q2": CompletenessStatus.partial},
            gaps={"g1": ["q2"]} if refusal else {}, confidence={"q1": 0.5, "q2": None}),
        diagnosis=diagnosis,
        suggestion=None if cell is None else Suggestion(title="T", summary="S", actions=["a1", "a2"]),
        status=Status(execution=Execution.partial if errors else Execution.success,
                      availability=Availability.not_evaluated if cell is None else Availability.assessed,
                      quality_gate=gate, reason="r", summary="s"),
        errors=errors or [], latency_ms={"decompose": 12.345, "total": 0.1 + 0.2},
        usage=Usage(calls=4, cache_hits=1, input_tokens=1000, cached_input_tokens=200, output_tokens=99, usd=usd),
        backend="openai", judge_model="gpt-4o", prompt_versions={"decompose": "d-3", "faithfulness": "f-2"})


def trace(query: str = "q", **kw) -> TraceInput:
    return TraceInput(query=query, context=kw.pop("context", []), response=kw.pop("response", "r"), **kw)


def roundtrip(store, result: EvaluationResult) -> tuple[EvaluationResult, EvaluationResult]:
    trace_id = save_result(store, result)
    return store.read(ops.load_result, trace_id), result.model_copy(update={"trace_id": trace_id})


@pytest.mark.parametrize("cell", list(FailureCell))
def test_every_cell_round_trips_exactly(store, cell):
    loaded, expected = roundtrip(store, make_result(cell))
    assert loaded == expected
    if is_sqlite(store):
        assert sql(store, "PRAGMA integrity_check") == [("ok",)]
    assert loaded.model_dump_json() == expected.model_dump_json()


@pytest.mark.parametrize("variant", ["refusal", "judge_errors", "no_diagnosis", "unknown_price"])
def test_refusals_errors_and_gaps_round_trip(store, variant):
    errors = [JudgeError(phase=Phase.completeness, kind="timeout", message="no reply in 60s", attempts=4),
              JudgeError(phase=Phase.faithfulness, kind="malformed_reply", message="bad JSON")]
    result = {
        "refusal": make_result(FailureCell.incomplete_grounded, refusal=True, sufficiency_fraction=0.0),
        "judge_errors": make_result(None, errors=errors, sufficiency_fraction=None),
        "no_diagnosis": make_result(None, errors=errors).model_copy(update={"diagnosis": None}),
        "unknown_price": make_result(usd=None),
    }[variant]
    loaded, expected = roundtrip(store, result)
    assert loaded == expected


def test_round_trip_through_evaluate(store):
    from veralith.pipeline.evaluate import evaluate
    result = evaluate("What is P/E and what was Apple's P/E in 2023?", ["The P/E ratio is price over earnings."],
                      "P/E is price over earnings. Apple's P/E in 2023 was 42.7.", metadata={"run": 1})
    assert result.trace_id is not None
    assert store.read(ops.load_result, result.trace_id) == result


def test_save_with_trace_id_replaces_in_place(store):
    trace_id = create_trace(store, TraceInput(query="q", context=CHUNKS, response="r", knowledge_base="kb",
                                             metadata={"a": 1}))
    assert store.read(ops.load_input, trace_id) == TraceInput(query="q", context=CHUNKS, response="r", knowledge_base="kb",
                                                    metadata={"a": 1})
    with pytest.raises(TraceNotEvaluated):
        store.read(ops.load_result, trace_id)
    first = make_result(FailureCell.extra_ungrounded, trace_id=trace_id)
    assert save_result(store, first) == trace_id
    second = make_result(FailureCell.complete_grounded, trace_id=trace_id, refusal=True)
    assert save_result(store, second) == trace_id
    assert store.read(ops.load_result, trace_id) == second
    assert scalar(store, "SELECT COUNT(*) FROM traces") == 1
    assert scalar(store, "SELECT COUNT(*) FROM grounding") == 0  # the refusal has no claims


def test_a_result_whose_write_fails_part_way_changes_nothing(store, monkeypatch):
    # save_result's deletes, update and inserts go out pipelined on PostgreSQL: one that fails after
    # the deletes have run must still leave the trace exactly as it was, and the connection usable.
    trace_id = create_trace(store, TraceInput(query="q", context=CHUNKS, response="r"))
    first = make_result(FailureCell.extra_ungrounded, trace_id=trace_id)
    save_result(store, first)
    real = repository.to_rows

    def twice(trace: int, result: EvaluationResult) -> dict[str, list[tuple]]:
        rows = real(trace, result)
        rows["sub_questions"] = rows["sub_questions"] * 2   # the same (trace_id, position) twice
        return rows
    monkeypatch.setattr(repository, "to_rows", twice)
    with pytest.raises(Exception, match="(?i)unique|duplicate"):
        save_result(store, make_result(FailureCell.complete_grounded, trace_id=trace_id, refusal=True))
    monkeypatch.undo()
    assert store.read(ops.load_result, trace_id) == first
    assert store.read(ops.load_input, trace_id).context == CHUNKS


def test_missing_trace_is_a_key_error_and_a_store_error(store):
    with pytest.raises(TraceNotFound) as info:
        store.read(ops.load_result, 999)
    assert isinstance(info.value, KeyError) and isinstance(info.value, StoreError)
    with pytest.raises(TraceNotFound):
        save_result(store, make_result(trace_id=999))


def test_schema_uses_wal_foreign_keys_and_busy_timeout():
    db = open_db()
    assert db.journal_mode == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] >= 10_000
    applied = db.execute("SELECT name, checksum FROM _veralith_migration_checksums").fetchall()
    assert [a[0] for a in applied] == [f.name for f in migrate.discover()]
    assert all(len(a[1]) == 64 for a in applied)


def test_calibration_and_listing_queries_use_indexes():
    """SQLite's query plans (PostgreSQL's planner takes no hints and picks plans by table size)."""
    store = SQLiteStore()
    for cell in FailureCell:
        save_result(store, make_result(cell))
    db = open_db()
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)
    store.read(ops.calibration_count, "default")
    store.read(ops.calibration_values, "default", 0, 2)
    store.read(ops.list_traces)
    store.read(ops.list_traces, cell="extra_grounded")
    store.read(ops.list_traces, kb="kb")
    store.read(ops.list_traces, status="done")
    db.conn.set_trace_callback(None)
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(reads) == 6
    for text in reads:
        plan = " ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN " + text).fetchall())
        if "calibration_counts" in text:
            # Calibration reads its counts by value (one row per distinct fraction, never the traces):
            # a window over them may sort those few rows, and must touch no trace.
            assert "traces" not in plan and "USING PRIMARY KEY" in plan, (text, plan)
            continue
        assert "TEMP B-TREE" not in plan, (text, plan)  # no sort: index (or rowid) order, stops at LIMIT
        assert " WHERE " not in text or "USING" in plan, (text, plan)


def write_migrations(folder, *extra: tuple[str, str]):
    folder.mkdir()
    for file in migrate.discover():
        (folder / f"{file.name}.sql").write_text(file.sql)
    for name, text in extra:
        (folder / name).write_text(text)
    return folder


def test_failed_migration_leaves_the_database_as_it_was(tmp_path):
    path = tmp_path / "m.db"
    db = connect(path)  # fully migrated with the shipped files
    db.execute("INSERT INTO traces (created_at, updated_at, query, response) VALUES ('t', 't', 'q', 'r')")
    before = db.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    broken = write_migrations(tmp_path / "mig", (
        "9001_add_things.sql", "-- why: test\nCREATE TABLE things (id INTEGER);\nALTER TABLE traces ADD COLUMN x;\n"),
        ("9002_broken.sql", "-- why: test\nCREATE TABLE half (id INTEGER);\nCREATE TABLE oops (;\n"))
    with pytest.raises(StoreError, match="migration failed"):
        migrate.apply_migrations(db, broken)
    assert db.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == before
    assert migrate.schema_version(db) == migrate.discover()[-1].name
    assert db.execute("SELECT COUNT(*) FROM traces").fetchone()[0] == 1
    assert not db.conn.in_transaction


def test_new_migrations_apply_in_order_and_once(tmp_path):
    db = connect(tmp_path / "m.db")
    folder = write_migrations(tmp_path / "mig", ("9001_add_note.sql", "-- why: test\nALTER TABLE traces ADD COLUMN note TEXT;\n"))
    assert migrate.apply_migrations(db, folder) == ["9001_add_note"]
    assert migrate.apply_migrations(db, folder) == []
    assert "note" in db["traces"].columns_dict


def test_database_newer_than_the_code_is_refused(tmp_path):
    path = tmp_path / "new.db"
    db = connect(path)
    migrate.apply_migrations(db, write_migrations(tmp_path / "mig", ("9001_future.sql", "-- why\nSELECT 1;\n")))
    db.close()
    with pytest.raises(StoreError, match="newer Veralith"):
        connect(path)


def test_edited_migration_is_reported(tmp_path):
    db = connect(tmp_path / "e.db")
    folder = write_migrations(tmp_path / "mig")
    first = sorted(folder.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited\n")
    with pytest.raises(StoreError, match="edited after it was applied"):
        migrate.apply_migrations(db, folder)


def test_misnamed_migration_file_is_refused(tmp_path):
    folder = write_migrations(tmp_path / "mig", ("add-stuff.sql", "SELECT 1;"))
    with pytest.raises(StoreError, match="NNNN_snake_case"):
        migrate.discover(folder)


def test_shipped_migrations_are_named_and_explained():
    files = migrate.discover()
    assert files and [f.name for f in files] == sorted(f.name for f in files)
    for file in files:
        assert file.sql.lstrip().startswith("--"), f"{file.name} must open with a comment saying why"


def test_concurrent_first_connections_migrate_once(tmp_path):
    path = tmp_path / "race.db"
    code = "import sys; from veralith.store.db import connect; connect(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path)]) for _ in range(6)]
    assert [p.wait(timeout=180) for p in procs] == [0] * 6
    db = connect(path)
    assert db.execute("SELECT COUNT(*) FROM _sqlite_migrations").fetchone()[0] == len(migrate.discover())


def test_concurrent_first_connections_migrate_a_postgres_database_once(pg_server):
    """The advisory lock: processes starting against one fresh database at once apply each migration once."""
    import psycopg

    from veralith.store.postgres import migrate as pg_migrate

    url = pg_server.new_database(migrated=False)
    code = ("import sys, psycopg; from veralith.store.postgres import migrate; "
            "migrate.apply_migrations(psycopg.connect(sys.argv[1], autocommit=True), 'test')")
    procs = [subprocess.Popen([sys.executable, "-c", code, url]) for _ in range(4)]
    assert [p.wait(timeout=180) for p in procs] == [0] * 4
    with psycopg.connect(url, autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM veralith_migrations ORDER BY name")]
        assert names == [f.name for f in pg_migrate._files()]
        pg_migrate.check(conn, "test", current=True)


def test_a_pooled_connection_the_server_ended_is_replaced_before_it_is_lent(pg_url):
    """The pool tests a lent connection with a round trip only when the server sent it something
    (it ends a connection with a message, then closes it): one it ended is replaced, no call fails."""
    import psycopg

    from veralith.store import open_store

    store = open_store(pg_url)
    trace_id = create_trace(store, trace())
    with store.connection() as db:  # type: ignore[attr-defined]
        pid = db.execute("SELECT pg_backend_pid()").fetchone()[0]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0]
        deadline = time.monotonic() + 10
        while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    for _ in range(3):   # every connection the pool holds, the ended one among them
        assert store.read(ops.load_input, trace_id).query == trace().query


def test_a_connection_numbered_past_1024_is_lent_and_used(pg_url):
    """An application holding many files hands a new connection a descriptor numbered 1,024 or more,
    which select() refuses: the pool's check of a lent connection must not (it did, and every
    connection was refused until the store gave up: "couldn't get a connection after 10 s")."""
    from veralith.store import open_store

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1200:
        pytest.skip("this process may not open 1,200 descriptors")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        store = open_store(pg_url)
        trace_id = create_trace(store, trace())
        with store.connection() as db:  # type: ignore[attr-defined]
            assert db.conn.fileno() >= 1024
        for _ in range(3):
            assert store.read(ops.load_input, trace_id).query == trace().query
    finally:
        for fd in held:
            os.close(fd)


def test_claims_are_exclusive_and_stale_leases_are_taken_over(store):
    a = create_trace(store, trace())
    assert resumable(store) == [a]
    assert claim(store, a) is True
    assert claim(store, a) is False  # running under our own live lease
    assert resumable(store) == []
    # A lease held by a process that is gone from this host is stale at once.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sql(store, "UPDATE traces SET lease_pid = ? WHERE id = ?", [dead.pid, a])
    assert resumable(store) == [a]
    assert claim(store, a) is True
    # A lease on another host is stale only once it is older than the timeout.
    sql(store, "UPDATE traces SET lease_host = 'elsewhere', lease_at = ? WHERE id = ?", [time.time() - 5, a])
    assert claim(store, a) is False
    with store.connection() as db:
        assert claims.claim(db, a, timeout_s=1) is True
    with pytest.raises(TraceNotFound):
        claim(store, 12345)


def test_pending_trace_reserved_by_a_live_process_is_not_resumable(store):
    mine = create_trace(store, trace(), queued=True)
    theirs = create_trace(store, trace(), queued=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sql(store, "UPDATE traces SET lease_pid = ? WHERE id = ?", [live.pid, theirs])
        assert resumable(store) == []          # ours is in our queue; theirs in their queue
        assert claim(store, theirs) is False
        assert claim(store, mine) is True        # our own worker may claim its own reservation
    finally:
        live.kill()
        live.wait()
    assert resumable(store) == [theirs]


def test_claim_batch_takes_only_traces_nobody_holds_oldest_first(store):
    free = [create_trace(store, trace()) for _ in range(3)]
    reserved = create_trace(store, trace(), queued=True)     # in this process's own queue
    sql(store, "UPDATE traces SET lease_host = 'elsewhere', lease_pid = 1, lease_token = 't', lease_at = ?"
               " WHERE id = ?", [time.time(), reserved])    # a live reservation of another host
    assert claim_batch(store, 2) == free[:2]
    assert held(store) == free[:2]
    assert claim_batch(store, 10) == free[2:]
    assert claim_batch(store, 10) == []
    assert release(store, free[0]) is True                   # a worker stopping gives it back
    assert store.read(ops.trace_info, free[0]).status == "pending" and claim_batch(store, 10) == [free[0]]
    for trace_id in held(store):
        drop_lease(store, trace_id)


def test_mark_error_keeps_the_message_and_list_and_stats_report_it(store):
    failed = create_trace(store, trace("why " * 40, context=CHUNKS, knowledge_base="kb"))
    claim(store, failed)
    mark_error(store, failed, "ServerError: 500")
    save_result(store, make_result(FailureCell.extra_grounded, knowledge_base="kb", usd=None))
    save_result(store, make_result(FailureCell.complete_grounded, sufficiency_fraction=0.25))
    rows = store.read(ops.list_traces)
    assert [r["status"] for r in rows] == ["done", "done", "error"]
    assert rows[2]["error_message"] == "ServerError: 500" and len(rows[2]["query_preview"]) == 80
    assert [r["failure_cell"] for r in store.read(ops.list_traces, kb="kb")] == ["extra_grounded", None]
    assert len(store.read(ops.list_traces, cell="complete_grounded", limit=1)) == 1
    assert store.read(ops.list_traces, status="pending") == []
    s = store.read(ops.stats)
    assert s["traces"] == 3 and s["results"] == 2
    assert s["by_status"] == {"pending": 0, "running": 0, "done": 2, "error": 1}
    assert s["by_cell"] == {"complete_grounded": 1, "extra_grounded": 1}
    assert s["by_gate"] == {"fail": 1, "pass": 1}
    assert s["mean_sufficiency_fraction"] == pytest.approx(0.625)
    assert s["usd"] == pytest.approx(0.0123456789) and s["usd_unknown"] == 1
    assert s["calls"] == 8 and s["input_tokens"] == 2000
    assert s["thresholds"]["kb"] == {"threshold": 1.0, "source": "fallback", "calibration_traces": 0,
                                     "review_cutoff": 0.7, "review_labels": None, "review_source": "default"}
    assert store.read(ops.stats, kb="kb")["traces"] == 2
    assert store.read(ops.knowledge_bases) == ["default", "kb"]
    empty = store.read(ops.stats, kb="nothing")
    assert empty["mean_sufficiency_fraction"] is None and empty["traces"] == 0


def test_iter_results_exports_stored_results_only(store):
    create_trace(store, trace())
    ids = [save_result(store, make_result(cell)) for cell in FailureCell]
    exported = list(store.stream(ops.iter_results))
    assert [r.result.trace_id for r in exported] == ids
    assert [r.info.trace_id for r in exported] == ids and all(r.info.has_result for r in exported)
    assert [r.result.trace_id for r in store.stream(ops.iter_results, trace_ids=ids[1:3])] == ids[1:3]
    assert list(store.stream(ops.iter_results, since="9999")) == []
    import datetime as dt
    assert len(list(store.stream(ops.iter_results, since=dt.datetime(2000, 1, 1)))) == len(ids)
    assert list(store.stream(ops.iter_results, since=dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=1))) == []


def test_metadata_must_be_json(store):
    with pytest.raises(TypeError, match="metadata"):
        create_trace(store, trace(metadata={"when": object()}))
    assert store.read(ops.list_traces) == []


def test_schema_doc_is_current():
    from veralith.store.schema_doc import DOC_PATH, render
    assert DOC_PATH.read_text() == render(), "run: python -m veralith.store.schema_doc"


def test_migrations_ship_inside_the_package():
    from veralith.store.migrate import MIGRATIONS_DIR
    assert MIGRATIONS_DIR.parent.name == "veralith"
    for folder in (MIGRATIONS_DIR, MIGRATIONS_DIR / "postgres"):
        shipped = sorted(p.name for p in folder.glob("*.sql"))
        assert shipped and shipped == sorted(
            p.name for p in (MIGRATIONS_DIR.parents[1] / "migrations" / folder.relative_to(MIGRATIONS_DIR))
            .glob("*.sql"))


# Every trace counted directly, grouped as the rollup is (SQL both databases share).
_DIRECT = ("SELECT knowledge_base AS kb, COALESCE(failure_cell, '') AS cell, COALESCE(quality_gate, '') AS gate,"
           " status, COUNT(*) AS n, SUM(COALESCE(sufficiency_fraction, 0)) AS s_sum,"
           " COUNT(sufficiency_fraction) AS s_n, SUM(COALESCE(usd, 0)) AS usd,"
           " SUM(CASE WHEN quality_gate IS NOT NULL AND usd IS NULL THEN 1 ELSE 0 END) AS usd_unknown,"
           " SUM(COALESCE(calls, 0)) AS calls FROM traces GROUP BY 1, 2, 3, 4")


# The same per UTC day of creation, for stored results (the web view's daily figures).
_DAILY_DIRECT = ("SELECT substr(created_at, 1, 10), knowledge_base, COALESCE(failure_cell, ''), quality_gate,"
                 " COUNT(*), SUM(COALESCE(usd, 0)), SUM(CASE WHEN usd IS NULL THEN 1 ELSE 0 END) FROM traces"
                 " WHERE quality_gate IS NOT NULL GROUP BY 1, 2, 3, 4")


def test_stats_rollup_matches_a_full_aggregation_after_any_mix_of_writes(store):
    """Whatever the writes, the running totals (stats' and the daily ones) equal a full count (on
    PostgreSQL also across a compaction of the deltas into the base rows, and with deltas left over)."""
    import random
    rng = random.Random(3)
    for step in range(60):
        op = rng.choice(["create", "save", "resave", "claim", "error", "delete", "redate"])
        ids = [r[0] for r in sql(store, "SELECT id FROM traces")]
        if op == "create" or not ids:
            create_trace(store, trace(knowledge_base=rng.choice(["a", "b"])))
        elif op == "save":
            save_result(store, make_result(rng.choice([*FailureCell, None]), sufficiency_fraction=rng.random(),
                                          knowledge_base=rng.choice(["a", "b"]),
                                          usd=rng.choice([None, rng.random()])))
        elif op == "resave":
            save_result(store, make_result(rng.choice(list(FailureCell)), trace_id=rng.choice(ids),
                                          sufficiency_fraction=rng.choice([None, rng.random()])))
        elif op == "claim":
            sql(store, "UPDATE traces SET status = 'pending', lease_pid = NULL WHERE id = ?", [rng.choice(ids)])
        elif op == "error":
            mark_error(store, rng.choice(ids), "boom")
        elif op == "redate":
            sql(store, "UPDATE traces SET created_at = ? WHERE id = ?",
                [f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T12:00:00.000000+00:00", rng.choice(ids)])
        else:
            sql(store, "DELETE FROM traces WHERE id = ?", [rng.choice(ids)])
        if step == 30 and hasattr(store, "compact"):
            assert store.compact() > 0
    with store.connection() as db:
        direct = {}
        for row in db.query(_DIRECT):
            direct[(row.pop("kb"), row.pop("cell"), row.pop("gate"), row.pop("status"))] = row
        rolled = {(r["knowledge_base"], r["failure_cell"], r["quality_gate"], r["status"]): r
                  for r in db.query("SELECT * FROM trace_rollup")}
    assert set(rolled) == set(direct)
    for key, row in direct.items():
        for column, value in row.items():
            assert rolled[key][column] == pytest.approx(value, abs=1e-9), (key, column)
    by_status = {s: sum(r["n"] for k, r in direct.items() if k[3] == s) for s in ("pending", "running", "done",
                                                                               "error")}
    assert store.read(ops.stats)["by_status"] == by_status
    daily = {r[:4]: r[4:] for r in sql(store, "SELECT day, knowledge_base, failure_cell, quality_gate, n, usd,"
                                              " usd_unknown FROM trace_daily")}
    recount = {r[:4]: r[4:] for r in sql(store, _DAILY_DIRECT)}
    assert set(daily) == set(recount) and len({key[0] for key in recount}) >= 2   # some were redated
    for key, (n, usd, unknown) in recount.items():
        assert (daily[key][0], daily[key][2]) == (n, unknown) and daily[key][1] == pytest.approx(usd, abs=1e-9), key
    # The web view's match counts read the same totals for knowledge base, cell and gate filters.
    from veralith.models import CELLS, NO_CELL
    from veralith.store.browse import GATES, TraceFilter

    with store.connection() as db:
        for kb in (None, "a", "b"):
            for cell in (None, *CELLS, NO_CELL):
                for gate in (None, *GATES):
                    flt = TraceFilter(cell=cell, gate=gate, kb=kb)
                    clauses, params = flt.where(db.dialect)
                    where = " WHERE " + " AND ".join(clauses) if clauses else ""
                    counted = db.execute(f"SELECT COUNT(*) FROM traces{where}", params).fetchone()[0]
                    assert store.read(ops.count_traces, flt) == counted, flt


def test_a_result_stored_under_schema_1_0_reads_back_after_the_later_migrations(tmp_path):
    """Rows written before migration 0003 (no confidence, gaps, statuses...) load with the defaults,
    and migration 0005 renumbers their claims k1, ... while chunk ids keep their names."""
    import shutil

    old = tmp_path / "old_migrations"
    old.mkdir()
    for name in ("0001_initial_schema.sql", "0002_stats_rollup.sql"):
        shutil.copy(migrate.MIGRATIONS_DIR / name, old / name)
    path = tmp_path / "v10.db"
    db = connect(path, migrate=False)
    migrate.apply_migrations(db, old)
    with db.conn:
        db.execute("INSERT INTO traces (id, created_at, updated_at, status, schema_version, failure_cell, quality_gate,"
                   " execution, availability, status_reason, status_summary, refusal, has_diagnosis,"
                   " sufficiency_level, sufficiency_fraction, faithfulness_fraction, threshold, threshold_source,"
                   " n_sub_questions, n_claims, n_uncovered_sub_questions, n_extra_claims, calls, cache_hits,"
                   " input_tokens, cached_input_tokens, output_tokens, usd, backend, judge_model, latency_ms,"
                   " prompt_versions, query, response) VALUES (1, 't', 't', 'done', '1.0', 'complete_grounded', 'pass',"
                   " 'success', 'assessed', 'complete_grounded', 'ok', 0, 1, 'high', 1.0, 1.0, 1.0, 'fallback', 1, 1,"
                   " 0, 0, 4, 0, 10, 0, 5, 0.0, 'openai', 'gpt-4o', '{}', '{\"decompose\": \"decompose-v1\"}',"
                   " 'Who?', 'Ann.')")
        db.execute("INSERT INTO sub_questions VALUES (1, 0, 'q1', 'Who?')")
        db.execute("INSERT INTO claims VALUES (1, 0, 'c1', 'Ann.', 0, 4)")
        db.execute("INSERT INTO sufficiency_judgments VALUES (1, 0, 'q1', 'Y', 'r', '[\"c0\"]', 'sufficiency-v1')")
        db.execute("INSERT INTO faithfulness_judgments VALUES (1, 0, 'c1', 'Y', 'supported', 'r', 'faithfulness-v1')")
        db.execute("INSERT INTO grounding VALUES (1, 0, 'supports', 0, 'c1', 'c1')")
        db.execute("INSERT INTO completeness VALUES (1, 'mapped', '[]', 'completeness-v1')")
        db.execute("INSERT INTO completeness_mappings VALUES (1, 0, 0, 'q1', 'c1')")
    db.conn.close()
    result = SQLiteStore(path).read(ops.load_result, 1)
    assert result.schema_version == SCHEMA_VERSION and result.failure_cell is FailureCell.complete_grounded
    assert [c.id for c in result.claims] == ["k1"] and result.faithfulness[0].claim_id == "k1"
    assert result.faithfulness[0].grounding_chunk_ids == ["c1"]      # a chunk id, untouched
    assert result.faithfulness[0].confidence is None and result.faithfulness[0].evidence == []
    assert result.gaps == [] and result.response_kind is None and not result.needs_review
    assert result.completeness.mappings == {"q1": ["k1"]} and result.completeness.statuses == {}


def test_threads_opening_a_fresh_file_at_once_all_get_a_connection(tmp_path):
    """Two first connections can meet in SQLite's switch to WAL, which then answers "database is
    locked" without waiting; connect() tries again (a process and its log worker do this)."""
    import threading

    for trial in range(10):  # the race shows within ~20 fresh files without the retry; 10 keep the test short
        path, errors = tmp_path / f"fresh{trial}.db", []

        def first_open(path=path, errors=errors):
            try:
                connect(path).close()
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(repr(exc))

        threads = [threading.Thread(target=first_open) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [], (trial, errors)
