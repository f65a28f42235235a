"""`veralith` commands in-process (typer's CliRunner), offline with the local backend. Tests marked
`both` run once on the SQLite file and once with VERALITH_DB_URL naming a PostgreSQL database."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from work_support import create_trace

from veralith.cli import app
from veralith.config import settings
from veralith.models import EvaluationResult
from veralith.store import ops

both = pytest.mark.usefixtures("store_url")

GOOD = [
    {"id": "pe", "query": "What is a P/E ratio?",
     "context": ["The price-to-earnings (P/E) ratio is a company's share price divided by its earnings per share."],
     "response": "A P/E ratio divides a company's share price by its earnings per share."},
    {"id": "fr", "query": "What is the capital of France?", "context": ["Paris is the capital of France."],
     "response": "The capital of France is Paris."},
    {"id": "ww2", "query": "When did World War II end?", "context": ["World War II ended in 1945."],
     "response": "World War II ended in 1945.", "knowledge_base": "history"},
    {"id": "ev", "query": "How tall is Mount Everest?",
     "context": [{"id": "k1", "text": "Mount Everest is 8,849 metres tall."}],
     "response": "Mount Everest is 8,849 metres tall.", "metadata": {"user": "u1"}},
    {"id": "h2o", "query": "What is H2O?", "context": ["H2O is the chemical formula of water."],
     "response": "H2O is water. It boils at 50 degrees."},
]


def _write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def _db_path() -> Path:
    return Path(settings.db_path)


def _stored() -> list[dict]:
    from veralith.store import open_store

    return open_store().read(ops.list_traces, limit=1000)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "200"})


@both
def test_mixed_file_reports_each_bad_line_and_stores_the_good(runner, tmp_path):
    lines = [GOOD[0], GOOD[1], "{not json", {"query": "q", "context": []}, "", GOOD[2],
             {"query": "q", "context": 42, "response": "r"}, GOOD[3], GOOD[4]]
    path = _write(tmp_path / "mixed.jsonl", lines)
    result = runner.invoke(app, ["eval", str(path), "--concurrency", "3"])
    assert result.exit_code == 2, result.output
    err = result.stderr
    assert f"{path}:3: not valid JSON" in err
    assert f'{path}:4: missing required field "response"' in err
    assert f"{path}:5: blank line" in err
    assert f"{path}:7: context must be a list" in err
    rows = _stored()
    assert len(rows) == 5 and {r["status"] for r in rows} == {"done"}
    assert "evaluated" in result.stdout and "bad lines 3" in result.stdout


@both
def test_clean_file_exits_zero_and_writes_results_in_input_order(runner, tmp_path):
    many = [{**g, "id": f"{g['id']}{n}"} for n in range(4) for g in GOOD]  # ids are unique per knowledge base
    path = _write(tmp_path / "good.jsonl", many)
    out = tmp_path / "results.jsonl"
    result = runner.invoke(app, ["eval", str(path), "-c", "4", "--output", str(out), "--kb", "fin"])
    assert result.exit_code == 0, result.output
    results = [EvaluationResult.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [r.metadata["id"] for r in results] == [g["id"] for g in many]
    assert [r.knowledge_base for r in results[:3]] == ["fin", "fin", "history"]
    assert all(r.trace_id is not None for r in results) and "nan" not in out.read_text().lower()
    assert "complete_grounded" in result.stdout and "wall time" in result.stdout


@pytest.mark.parametrize("content", [None, "", "\n\n  \n"])
def test_missing_or_empty_input_exits_one(runner, tmp_path, content):
    path = tmp_path / "in.jsonl"
    if content is not None:
        path.write_text(content)
    result = runner.invoke(app, ["eval", str(path)])
    assert result.exit_code == 1
    assert ("no such file" if content is None else "is empty") in result.stderr
    assert not _db_path().exists()


def test_no_persist_leaves_no_database(runner, tmp_path):
    path = _write(tmp_path / "good.jsonl", GOOD)
    out = tmp_path / "r.jsonl"
    result = runner.invoke(app, ["eval", str(path), "--no-persist", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert not _db_path().exists()
    assert [json.loads(line)["trace_id"] for line in out.read_text().splitlines()] == [None] * len(GOOD)


@both
def test_inspect_prints_user_markup_literally_and_json_round_trips(runner, tmp_path):
    from veralith.store import load_result

    hostile = {"query": "What does [bold]this[/bold] do?", "context": ["It does [red]nothing[/red] at all."],
               "response": "It does [red]nothing[/red]. See [link=file:///etc/passwd]this[/link] \x1b[2J."}
    runner.invoke(app, ["eval", str(_write(tmp_path / "h.jsonl", [hostile]))])
    trace_id = _stored()[0]["id"]
    shown = runner.invoke(app, ["inspect", str(trace_id)], color=True)
    assert shown.exit_code == 0, shown.output
    assert "[red]nothing[/red]" in shown.stdout and "[link=file:///etc/passwd]this[/link]" in shown.stdout
    assert "[bold]this[/bold]" in shown.stdout and "\x1b]8;" not in shown.stdout and "\x1b[2J" not in shown.stdout
    as_json = runner.invoke(app, ["inspect", str(trace_id), "--json"])
    assert EvaluationResult.model_validate_json(as_json.stdout) == load_result(trace_id)


@both
def test_inspect_unknown_id_exits_one(runner, tmp_path):
    assert runner.invoke(app, ["inspect", "5"]).exit_code == 1            # no database at all
    runner.invoke(app, ["eval", str(_write(tmp_path / "g.jsonl", GOOD[:1]))])
    result = runner.invoke(app, ["inspect", "999"])
    assert result.exit_code == 1 and "999" in result.stderr


@both
def test_list_stats_export(runner, tmp_path):
    runner.invoke(app, ["eval", str(_write(tmp_path / "g.jsonl", GOOD))])
    listed = runner.invoke(app, ["list", "--limit", "3"])
    assert listed.exit_code == 0 and listed.stdout.count("done") == 3
    assert runner.invoke(app, ["list", "--kb", "history"]).stdout.count("done") == 1
    assert runner.invoke(app, ["list", "--cell", "nonsense"]).exit_code == 2
    stats = runner.invoke(app, ["stats"])
    assert stats.exit_code == 0 and "Sufficiency threshold" in stats.stdout and "history" in stats.stdout
    exported = runner.invoke(app, ["export"])
    from veralith.cli.export import without_trace_fields  # an export line is a result plus the trace's own fields
    assert [EvaluationResult.model_validate(without_trace_fields(json.loads(x))).metadata["id"]
            for x in exported.stdout.splitlines()] == [g["id"] for g in GOOD]
    out = tmp_path / "all.csv"
    assert runner.invoke(app, ["export", "--format", "csv", "--output", str(out)]).exit_code == 0
    assert len(list(csv.DictReader(io.StringIO(out.read_text())))) == len(GOOD)
    assert runner.invoke(app, ["export", "--since", "2999-01-01"]).stdout == ""
    assert runner.invoke(app, ["export", "--since", "yesterday"]).exit_code == 2


def test_read_only_commands_never_create_a_database(runner):
    for args in (["list"], ["stats"], ["export"], ["resume"], ["inspect", "1"]):
        runner.invoke(app, args)
    assert not _db_path().exists()


@both
def test_resume_finishes_pending_traces(runner):
    from veralith.pipeline.inputs import normalize_context
    from veralith.store import TraceInput, open_store

    store = open_store()
    for g in GOOD:
        create_trace(store, TraceInput(query=g["query"], context=normalize_context(g["context"]), response=g["response"]))
    assert {r["status"] for r in _stored()} == {"pending"}
    result = runner.invoke(app, ["resume", "-c", "2"])
    assert result.exit_code == 0, result.output
    assert {r["status"] for r in _stored()} == {"done"} and "veralith resume" in result.stdout
    assert "nothing to resume" in runner.invoke(app, ["resume"]).stdout


def test_over_budget_records_are_reported_and_not_stored(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("VERALITH_PER_TRACE_BUDGET_USD", "0.0000001")
    monkeypatch.setenv("VERALITH_PRICING", json.dumps({"gpt-4o": {"input": 2.5, "output": 10}}))
    monkeypatch.setenv("VERALITH_BASE_URL", "http://127.0.0.1:9/v1")   # never reached: refused before any call
    monkeypatch.setenv("VERALITH_API_KEY", "test")
    settings.reload()
    path = _write(tmp_path / "g.jsonl", GOOD[:2])
    result = runner.invoke(app, ["eval", str(path), "--backend", "openai"])
    assert result.exit_code == 2, result.output
    assert f"{path}:1: estimated judge cost" in result.stderr and f"{path}:2: estimated" in result.stderr
    assert _stored() == []


def test_output_must_not_be_the_input_and_must_be_writable(runner, tmp_path):
    path = _write(tmp_path / "g.jsonl", GOOD[:1])
    same = runner.invoke(app, ["eval", str(path), "-o", str(path)])
    assert same.exit_code == 2 and "is the input file" in same.stderr and path.read_text().strip()
    unwritable = runner.invoke(app, ["eval", str(path), "-o", str(tmp_path / "no" / "such" / "dir.jsonl")])
    assert unwritable.exit_code == 2 and "cannot write" in unwritable.stderr


@pytest.mark.filterwarnings("ignore:no price known")
def test_a_budget_that_cannot_be_enforced_stops_the_run_with_a_message(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("VERALITH_PER_TRACE_BUDGET_USD", "1")
    monkeypatch.setenv("VERALITH_BASE_URL", "http://127.0.0.1:9/v1")   # never reached
    monkeypatch.setenv("VERALITH_API_KEY", "test")
    settings.reload()
    result = runner.invoke(app, ["eval", str(_write(tmp_path / "g.jsonl", GOOD)), "--backend", "openai",
                                 "--model", "unpriced-model"])
    assert result.exit_code == 2 and "VERALITH_PRICING" in result.stderr and _stored() == []  # a config error
