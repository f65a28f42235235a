"""Runs: every `veralith eval` is one, logged traces join one by name, `veralith runs` lists them.
Tests marked `both` run on the SQLite file and on PostgreSQL (VERALITH_DB_URL)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from store_support import scalar, sql
from typer.testing import CliRunner
from work_support import create_trace, ship, spool_trace

import veralith
from veralith.cli import app
from veralith.config import settings
from veralith.store import ops

RECORDS = [
    {"id": "pe", "query": "What is a P/E ratio?",
     "context": ["The price-to-earnings (P/E) ratio is a company's share price divided by its earnings per share."],
     "response": "A P/E ratio divides a company's share price by its earnings per share."},
    {"id": "fr", "query": "What is the capital of France?", "context": ["Paris is the capital of France."],
     "response": "The capital of France is Paris."},
    {"id": "ww2", "query": "When did World War II end?", "context": ["World War II ended in 1945."],
     "response": "World War II ended in 1945.", "knowledge_base": "history"},
    {"id": "h2o", "query": "What is H2O?", "context": ["H2O is the chemical formula of water."],
     "response": "H2O is water. It boils at 50 degrees."},
]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _store():
    from veralith.store import open_store

    return open_store()


both = pytest.mark.usefixtures("store_url")


def _runs() -> list[dict]:
    result = _cli("runs", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_migration_adds_runs_and_an_indexed_run_id():
    from veralith.store.db import open_db

    db = open_db()
    assert "runs" in db.table_names() and "run_traces" in db.table_names()
    columns = {row[1] for row in db.execute("PRAGMA table_info(traces)")}
    assert "run_id" in columns
    indexed = {row[2] for name in [r[1] for r in db.execute("PRAGMA index_list(traces)")]
               for row in db.execute(f"PRAGMA index_info({name})")}
    assert "run_id" in indexed


@both
def test_an_eval_is_a_run_with_its_judge_configuration_and_totals(tmp_path):
    result = _cli("eval", str(_write(tmp_path / "a.jsonl", RECORDS)), "--run-name", "baseline")
    assert result.exit_code == 0, result.output
    assert "run #1 baseline recorded" in result.output
    [run] = _runs()
    assert run["name"] == "baseline" and run["source"] == "eval" and run["input"].endswith("a.jsonl")
    assert run["backend"] == "local" and run["model"]
    assert set(run["prompt_versions"]) >= {"sufficiency", "faithfulness", "completeness"}
    assert run["started_at"] <= run["ended_at"]
    assert run["n_traces"] == 4 and run["n_pass"] + run["n_fail"] + run["n_indeterminate"] == 4
    assert run["n_fail"] >= 1                       # h2o: "boils at 50 degrees" is not grounded
    assert run["pass_rate"] == pytest.approx(run["n_pass"] / 4)
    ids = {r[0] for r in sql(_store(), "SELECT id FROM traces WHERE run_id = 1")}
    assert len(ids) == 4


@both
def test_each_eval_is_its_own_run_and_a_name_means_the_newest(tmp_path):
    from veralith.store.runs import RunNotFound

    path = _write(tmp_path / "a.jsonl", RECORDS)
    for _ in range(2):
        assert _cli("eval", str(path), "--run-name", "main").exit_code == 0
    assert _cli("eval", str(path)).exit_code == 0          # unnamed: still a run
    runs = _runs()
    assert [r["id"] for r in runs] == [3, 2, 1] and [r["name"] for r in runs] == [None, "main", "main"]
    store = _store()
    assert store.read(ops.resolve_run, "main").id == 2
    assert store.read(ops.resolve_run, "1").id == 1 and store.read(ops.resolve_run, "#3").id == 3
    with pytest.raises(RunNotFound, match="no run with id or name 'nope'"):
        store.read(ops.resolve_run, "nope")


@both
def test_a_rerun_with_changed_answers_keeps_each_runs_own_outcome(tmp_path):
    """External ids are unique per knowledge base, so the re-run re-judges the same traces in place;
    the first run's outcome must survive in its own copy."""
    assert _cli("eval", str(_write(tmp_path / "v1.jsonl", RECORDS)), "--run-name", "v1").exit_code == 0
    changed = [dict(r) for r in RECORDS]
    changed[1]["response"] = "The capital of France is Lyon."          # a regression
    changed[3]["response"] = "H2O is the chemical formula of water."  # an improvement
    assert _cli("eval", str(_write(tmp_path / "v2.jsonl", changed)), "--run-name", "v2").exit_code == 0
    store = _store()
    assert scalar(store, "SELECT COUNT(*) FROM traces") == 4   # re-judged in place
    rows = {(run, ext): gate for run, ext, gate in sql(
        store, "SELECT run_id, external_id, quality_gate FROM run_traces")}
    assert rows[(1, "fr")] == "pass" and rows[(2, "fr")] == "fail"
    assert rows[(1, "h2o")] == "fail" and rows[(2, "h2o")] == "pass"
    # the unchanged records were not evaluated again, yet belong to the second run too
    assert rows[(2, "pe")] == rows[(1, "pe")] and len([k for k in rows if k[0] == 2]) == 4


@both
def test_logged_traces_join_a_run_by_name_created_on_first_use():
    q, c, r = "What is the capital of France?", ["Paris is the capital of France."], "The capital of France is Paris."
    veralith.log(q, c, r, sync=True, run="canary")
    veralith.log(q, c, r, sync=True, run=" canary ")            # the same run (names are stripped)
    with settings.override(run="from-settings"):
        veralith.log(q, c, r, sync=True)
    veralith.log(q, c, r, sync=True)                           # no run at all
    runs = {run.name: run for run in _store().read(ops.list_runs)}
    assert set(runs) == {"canary", "from-settings"}
    assert runs["canary"].source == "sdk" and runs["canary"].ended_at is None
    assert runs["canary"].n_traces == 2 and runs["canary"].n_pass == 2      # counted live
    assert runs["from-settings"].n_traces == 1
    assert scalar(_store(), "SELECT COUNT(*) FROM traces WHERE run_id IS NULL") == 1


@both
def test_veralith_run_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("VERALITH_RUN", "nightly")
    settings.reload()
    assert settings.run == "nightly"
    veralith.log("What is X?", ["X is a letter."], "X is a letter.", sync=True)
    assert sql(_store(), "SELECT name, source FROM runs") == [("nightly", "sdk")]


@pytest.mark.parametrize("bad, error", [("", ValueError), ("   ", ValueError), ("a\nb", ValueError),
                                        ("x" * 201, ValueError), (5, TypeError)])
def test_a_bad_run_name_is_refused_before_anything_is_written(bad, error):
    with pytest.raises(error, match="run"):
        veralith.log("What is X?", ["X is a letter."], "X is a letter.", sync=True, run=bad)
    assert scalar(_store(), "SELECT COUNT(*) FROM traces") == 0


def test_eval_refuses_a_bad_run_name_and_a_run_without_the_database(tmp_path):
    path = _write(tmp_path / "a.jsonl", RECORDS[:1])
    result = _cli("eval", str(path), "--run-name", " ")
    assert result.exit_code == 2 and "--run-name must not be empty" in result.output
    result = _cli("eval", str(path), "--run-name", "x", "--no-persist")
    assert result.exit_code == 2 and "--no-persist" in result.output
    assert not Path(settings.db_path).exists()


@both
def test_a_spooled_trace_keeps_its_run():
    from veralith.models import ContextChunk
    from veralith.store import TraceInput

    store = _store()
    trace_id = spool_trace(store, TraceInput(query="q?", context=[ContextChunk(id="c0", text="t")], response="r"),
                                 run="spooled-run", evaluate_here=False)
    assert ship(store) == []                    # shipped; not for this process to evaluate
    assert sql(store, "SELECT runs.name, runs.source FROM traces JOIN runs ON runs.id = traces.run_id"
                      " WHERE traces.id = ?", [trace_id]) == [("spooled-run", "sdk")]
    assert store.read(ops.trace_info, trace_id).status == "pending"


@both
def test_an_eval_run_left_open_by_a_crash_counts_its_traces_live():
    from veralith.models import ContextChunk
    from veralith.store import TraceInput

    store = _store()
    run_id = store.write(ops.start_run, name="crashed", backend="local", model="m", prompt_versions={})
    trace_id = create_trace(store, TraceInput(query="q?", context=[ContextChunk(id="c0", text="t")], response="r"),
                                  run_id=run_id)
    store.write(ops.record_result, run_id, trace_id, None)
    [run] = store.read(ops.list_runs)
    assert run.ended_at is None and run.n_traces == 1 and run.n_unevaluated == 1 and run.pass_rate is None


@both
def test_runs_lists_newest_first_and_shows_names_literally(tmp_path):
    path = _write(tmp_path / "a.jsonl", RECORDS[:2])
    assert _cli("eval", str(path), "--run-name", "[red]first[/red]").exit_code == 0
    assert _cli("eval", str(path), "--run-name", "second").exit_code == 0
    result = _cli("runs")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "[red]first[/red]" in result.output
    assert next(i for i, x in enumerate(lines) if "second" in x) < next(i for i, x in enumerate(lines) if "first" in x)
    assert _cli("runs", "--limit", "1", "--json").output.count('"id"') == 1


def test_runs_without_a_database_creates_none():
    result = _cli("runs")
    assert result.exit_code == 0 and "no runs (no database yet)" in result.output
    assert not Path(settings.db_path).exists()


def test_a_broken_veralith_run_is_one_line_naming_the_variable(monkeypatch):
    from veralith.config import ConfigError

    monkeypatch.setenv("VERALITH_RUN", "two\nlines")
    with pytest.raises(ConfigError, match="^VERALITH_RUN: "):
        settings.reload()


@both
def test_a_failed_re_judging_leaves_the_trace_in_the_new_run_without_an_outcome(tmp_path):
    assert _cli("eval", str(_write(tmp_path / "a.jsonl", RECORDS[:1])), "--run-name", "v1").exit_code == 0
    store = _store()
    run_2 = store.write(ops.start_run, name="v2", backend="local", model="m", prompt_versions={})
    store.write(ops.tag_trace, run_2, 1)
    # the evaluation failed: status error, the earlier result still in the row
    sql(store, "UPDATE traces SET status = 'error', error_message = 'judge down' WHERE id = 1")
    store.write(ops.finish_run, run_2)
    rows = dict(sql(store, "SELECT run_id, quality_gate FROM run_traces WHERE trace_id = 1"))
    assert rows == {1: "pass", run_2: None}
    run = store.read(ops.get_run, run_2)
    assert (run.n_traces, run.n_unevaluated, run.pass_rate) == (1, 1, None)


def test_a_run_that_stored_nothing_is_not_recorded(tmp_path):
    """Every line bad: nothing was stored, so there is no run to list or compare (issue 26)."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q"}\nnot json\n', encoding="utf-8")
    result = CliRunner().invoke(app, ["eval", str(bad), "--run-name", "empty"])
    assert result.exit_code == 2, result.output
    assert "recorded" not in result.output
    from veralith.store.db import open_db
    from veralith.store.runs import list_runs

    assert list_runs(open_db()) == []
    good = _write(tmp_path / "good.jsonl", RECORDS[:1])
    assert CliRunner().invoke(app, ["eval", str(good), "--run-name", "real"]).exit_code == 0
    assert [r.name for r in list_runs(open_db())] == ["real"]
