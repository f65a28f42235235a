"""A record's own id: stored as its trace's external id, accepted by inspect/export/resume, and the
key that makes re-running a file idempotent (issue 12, items 6-8). In-process, offline (local backend)."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from store_support import sql
from typer.testing import CliRunner
from work_support import create_trace

from veralith.cli import app
from veralith.cli.export import EXPORT_CSV_FIELDS, without_trace_fields
from veralith.models import EvaluationResult
from veralith.store import TraceInput, open_store, ops
from veralith.store.db import connect

ROWS = [
    {"id": "pe", "query": "What is a P/E ratio?",
     "context": ["The price-to-earnings (P/E) ratio is a company's share price divided by its earnings per share."],
     "response": "A P/E ratio divides a company's share price by its earnings per share."},
    {"id": 7, "query": "What is the capital of France?", "context": ["Paris is the capital of France."],
     "response": "The capital of France is Paris."},
    {"id": "ww2", "query": "When did World War II end?", "context": ["World War II ended in 1945."],
     "response": "World War II ended in 1945.", "knowledge_base": "history"},
]


@pytest.fixture
def runner():
    return CliRunner()


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _traces() -> list[tuple]:
    return sql(open_store(), "SELECT id, knowledge_base, external_id, status, response FROM traces ORDER BY id")


def history(trace_id: int) -> list[dict]:
    return open_store().read(ops.history, trace_id)


# The SQLite file, then PostgreSQL as VERALITH_DB_URL.
both = pytest.mark.usefixtures("store_url")


def _eval(runner, path: Path, *args: str):
    result = runner.invoke(app, ["eval", str(path), *args])
    assert result.exit_code == 0, result.output
    return result


# -- 6. the record's id is the trace's external id ------------------------------------------------

@both
def test_ids_are_stored_as_external_ids_and_kept_in_metadata(runner, tmp_path):
    _eval(runner, _write(tmp_path / "in.jsonl", ROWS))
    assert [(kb, ext) for _, kb, ext, _, _ in _traces()] == [("default", "pe"), ("default", "7"), ("history", "ww2")]
    trace_id = _traces()[0][0]
    assert open_store().read(ops.load_result, trace_id).metadata == {"id": "pe"}     # old readers still find it


@both
def test_inspect_takes_an_external_id_a_numeric_id_first_and_kb_to_choose(runner, tmp_path):
    _eval(runner, _write(tmp_path / "in.jsonl", ROWS))
    by_ext = {ext: tid for tid, _, ext, _, _ in _traces()}
    shown = runner.invoke(app, ["inspect", "ww2", "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["trace_id"] == by_ext["ww2"]
    # "1" is a trace id and is not anyone's external id; "7" is an external id and no trace has id 7.
    assert json.loads(runner.invoke(app, ["inspect", "1", "--json"]).stdout)["trace_id"] == 1
    assert json.loads(runner.invoke(app, ["inspect", "7", "--json"]).stdout)["trace_id"] == by_ext["7"]
    # The same id in another knowledge base: ambiguous without --kb, which then chooses.
    _eval(runner, _write(tmp_path / "other.jsonl", [{**ROWS[2], "knowledge_base": "other"}]))
    ambiguous = runner.invoke(app, ["inspect", "ww2"])
    assert ambiguous.exit_code == 1 and "history, other" in ambiguous.stderr and "--kb" in ambiguous.stderr
    chosen = runner.invoke(app, ["inspect", "ww2", "--kb", "other", "--json"])
    assert json.loads(chosen.stdout)["knowledge_base"] == "other"
    missing = runner.invoke(app, ["inspect", "nosuch"])
    assert missing.exit_code == 1 and "'nosuch'" in missing.stderr
    huge = runner.invoke(app, ["inspect", str(10**30)])   # no integer overflow: simply not found
    assert huge.exit_code == 1 and "no trace" in huge.stderr and "Traceback" not in huge.output


@both
def test_a_number_that_is_one_traces_id_and_anothers_external_id_is_never_guessed(runner, tmp_path):
    # Files often number their records 1, 2, ...: "2" is then trace 2 and the record whose id is 2.
    rows = [{**ROWS[1], "id": n, "query": f"What is the capital of France? ({n})"} for n in (3, 2, 1)]
    _eval(runner, _write(tmp_path / "numbered.jsonl", rows))
    by_ext = {ext: tid for tid, _, ext, _, _ in _traces()}
    assert by_ext["2"] == 2 and by_ext["1"] == 3       # "2" is unambiguous: the same trace either way
    assert json.loads(runner.invoke(app, ["inspect", "2", "--json"]).stdout)["trace_id"] == 2
    clash = runner.invoke(app, ["inspect", "1"])
    assert clash.exit_code == 1 and "#1" in clash.stderr and "#3" in clash.stderr
    assert json.loads(runner.invoke(app, ["inspect", "#1", "--json"]).stdout)["trace_id"] == 1
    assert json.loads(runner.invoke(app, ["inspect", "#3", "--json"]).stdout)["trace_id"] == 3
    gone = runner.invoke(app, ["inspect", "#99"])
    assert gone.exit_code == 1 and "no trace with id 99" in gone.stderr


def test_an_id_used_twice_in_one_file_is_a_bad_line(runner, tmp_path):
    result = runner.invoke(app, ["eval", str(_write(tmp_path / "in.jsonl", [ROWS[0], ROWS[1], ROWS[0]]))])
    assert result.exit_code == 2
    assert f"{tmp_path / 'in.jsonl'}:3: id 'pe' was already used on line 1" in result.stderr
    assert len(_traces()) == 2


@pytest.mark.parametrize("ident, word", [("", "empty"), ("x" * 300, "at most 256"), ([1], "str or int")])
def test_unusable_ids_are_refused_by_line(runner, tmp_path, ident, word):
    result = runner.invoke(app, ["eval", str(_write(tmp_path / "in.jsonl", [{**ROWS[0], "id": ident}]))])
    assert result.exit_code == 2 and word in result.stderr and not _traces()


# -- 7. re-running a file is idempotent by external id --------------------------------------------

@both
def test_rerunning_the_same_file_skips_every_record_and_says_so(runner, tmp_path):
    path = _write(tmp_path / "in.jsonl", ROWS)
    _eval(runner, path)
    before = _traces()
    again = _eval(runner, path)
    assert "skipped" in again.stdout and "3 already evaluated" in again.stdout
    assert _traces() == before                          # nothing new, nothing re-judged
    assert all(history(t[0]) == [] for t in before)


def test_a_rerun_writes_every_result_to_output_unchanged_ones_included(runner, tmp_path):
    # --output promises one result per record in input order; an empty file on a re-run would
    # overwrite the results of the first run with nothing.
    path, out = _write(tmp_path / "in.jsonl", ROWS), tmp_path / "out.jsonl"
    _eval(runner, path, "--output", str(out))
    first = out.read_text().splitlines()
    changed = [ROWS[0], {**ROWS[1], "response": "The capital of France is Lyon."}, ROWS[2]]
    again = _eval(runner, _write(path, changed), "--output", str(out))
    assert "2 already evaluated" in again.stdout
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["metadata"]["id"] for r in lines] == ["pe", 7, "ww2"]
    assert [lines[0], lines[2]] == [json.loads(first[0]), json.loads(first[2])]
    assert lines[1]["response"] == "The capital of France is Lyon."


def test_records_without_an_id_are_said_to_be_stored_anew(runner, tmp_path):
    # Without an id a re-run cannot find a record's trace: it is stored (and judged) again.
    bare = [{k: v for k, v in row.items() if k != "id"} for row in ROWS]
    shown = _eval(runner, _write(tmp_path / "bare.jsonl", [*bare[:2], ROWS[2]]))
    assert "no id" in shown.stdout and "2 stored as new traces; give each record an `id`" in shown.stdout
    assert "no id" not in _eval(runner, _write(tmp_path / "ids.jsonl", ROWS)).stdout
    assert "no id" not in _eval(runner, _write(tmp_path / "bare.jsonl", bare), "--no-persist").stdout


@both
def test_a_changed_record_is_re_evaluated_in_place_with_history(runner, tmp_path):
    _eval(runner, _write(tmp_path / "in.jsonl", ROWS))
    before = {ext: tid for tid, _, ext, _, _ in _traces()}
    first = open_store().read(ops.load_result, before["7"])
    changed = [ROWS[0], {**ROWS[1], "response": "The capital of France is Lyon."}, ROWS[2]]
    result = _eval(runner, _write(tmp_path / "in.jsonl", changed))
    assert "2 already evaluated" in result.stdout
    after = _traces()
    assert [t[0] for t in after] == sorted(before.values())          # same traces, no duplicate
    now = open_store().read(ops.load_result, before["7"])
    assert now.response == "The capital of France is Lyon." and now.trace_id == before["7"]
    past = history(before["7"])
    assert len(past) == 1 and past[0]["status"] == "done"
    assert past[0]["failure_cell"] == first.failure_cell.value and past[0]["backend"] == "local"
    assert past[0]["prompt_versions"] == first.prompt_versions
    assert history(before["pe"]) == []


def test_changed_metadata_is_re_evaluated_in_place_and_stored(runner, tmp_path):
    # The judges read metadata["as_of"], and a record found unchanged keeps what was stored.
    _eval(runner, _write(tmp_path / "in.jsonl", ROWS))
    before = {ext: tid for tid, _, ext, _, _ in _traces()}
    dated = {**ROWS[1], "metadata": {"as_of": "2020-01-31", "user": "u2"}}
    result = _eval(runner, _write(tmp_path / "in.jsonl", [ROWS[0], dated, ROWS[2]]))
    assert "2 already evaluated" in result.stdout
    now = open_store().read(ops.load_result, before["7"])
    assert now.metadata == {"as_of": "2020-01-31", "user": "u2", "id": 7} and now.as_of == "2020-01-31"
    assert len(history(before["7"])) == 1


@both
def test_a_changed_judge_configuration_re_evaluates(runner, tmp_path):
    path = _write(tmp_path / "in.jsonl", ROWS)
    _eval(runner, path)
    trace_id = _traces()[0][0]
    # As if the stored result had come from an earlier version of one prompt.
    store = open_store()
    versions = store.read(ops.load_result, trace_id).prompt_versions
    sql(store, "UPDATE traces SET prompt_versions = ? WHERE id = ?",
        [json.dumps({**versions, "claims": "claims-old"}), trace_id])
    result = _eval(runner, path)
    assert "2 already evaluated" in result.stdout
    assert open_store().read(ops.load_result, trace_id).prompt_versions["claims"] != "claims-old"
    assert [h["prompt_versions"]["claims"] for h in history(trace_id)] == ["claims-old"]


def test_rejudge_re_evaluates_everything_in_place(runner, tmp_path):
    path = _write(tmp_path / "in.jsonl", ROWS)
    _eval(runner, path)
    before = _traces()
    result = _eval(runner, path, "--rejudge")
    assert "already evaluated" not in result.stdout and re.search(r"^evaluated\s+3 ", result.stdout, re.M)
    assert [t[0] for t in _traces()] == [t[0] for t in before]
    assert all(len(history(t[0])) == 1 for t in before)


@both
def test_a_record_left_pending_by_a_crash_is_evaluated_on_the_rerun(runner, tmp_path):
    store = open_store()
    # A trace stored by an earlier run that died before evaluating it (pending, nobody's lease).
    trace_id = create_trace(store, TraceInput(query=ROWS[0]["query"], context=[], response="old answer",
                                             external_id="pe"))
    _eval(runner, _write(tmp_path / "in.jsonl", ROWS[:1]))
    assert [t[0] for t in _traces()] == [trace_id]
    assert store.read(ops.load_result, trace_id).response == ROWS[0]["response"]


# -- resume and export take ids too -----------------------------------------------------------------

@both
def test_resume_takes_external_ids(runner, tmp_path):
    store = open_store()
    pending = create_trace(store, TraceInput(query="What is H2O?", context=[], response="Water.", external_id="h2o"))
    other = create_trace(store, TraceInput(query="What is CO2?", context=[], response="A gas.", external_id="co2"))
    result = runner.invoke(app, ["resume", "h2o"])
    assert result.exit_code == 0, result.output
    assert store.read(ops.trace_info, pending).status == "done" and store.read(ops.trace_info, other).status == "pending"
    again = runner.invoke(app, ["resume", "h2o"])
    assert again.exit_code == 0 and f"trace {pending}: nothing to resume" in again.stdout
    assert runner.invoke(app, ["resume", "nosuch"]).exit_code == 1


@both
def test_export_has_times_judge_configuration_usage_and_takes_ids(runner, tmp_path):
    _eval(runner, _write(tmp_path / "in.jsonl", ROWS))
    lines = [json.loads(x) for x in runner.invoke(app, ["export"]).stdout.splitlines()]
    assert [x["external_id"] for x in lines] == ["pe", "7", "ww2"]
    for x in lines:
        assert x["created_at"] <= x["updated_at"] and x["evaluated_at"] and x["backend"] == "local"
        assert x["judge_model"] and x["prompt_versions"] and set(x["usage"]) >= {"calls", "input_tokens", "usd"}
        EvaluationResult.model_validate(without_trace_fields(x))           # the rest is a result, as before
    only = runner.invoke(app, ["export", "ww2", "7"]).stdout.splitlines()
    assert [json.loads(x)["external_id"] for x in only] == ["7", "ww2"]   # oldest first, whatever the order given
    out = tmp_path / "all.csv"
    assert runner.invoke(app, ["export", "--format", "csv", "-o", str(out)]).exit_code == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert list(rows[0]) == EXPORT_CSV_FIELDS and rows[1]["external_id"] == "7"
    assert rows[0]["created_at"] and rows[0]["updated_at"] and json.loads(rows[0]["prompt_versions"])
    assert rows[0]["backend"] == "local" and rows[0]["cached_input_tokens"] == "0"
    assert runner.invoke(app, ["export", "nosuch"]).exit_code == 1


def test_a_formula_like_external_id_is_inert_in_csv(runner, tmp_path):
    _eval(runner, _write(tmp_path / "in.jsonl", [{**ROWS[0], "id": "=HYPERLINK(\"http://x\")"}]))
    out = tmp_path / "all.csv"
    runner.invoke(app, ["export", "--format", "csv", "-o", str(out)])
    assert next(csv.DictReader(io.StringIO(out.read_text())))["external_id"].startswith("'=")


# -- migration 0006 ---------------------------------------------------------------------------------

def test_migration_takes_external_ids_from_metadata_newest_wins(tmp_path):
    from veralith.store import migrate

    old = tmp_path / "old_migrations"
    old.mkdir()
    for file in sorted(migrate.MIGRATIONS_DIR.glob("*.sql")):
        if file.name < "0006":
            shutil.copy(file, old / file.name)
    path = tmp_path / "v5.db"
    db = connect(path, migrate=False)
    migrate.apply_migrations(db, old)
    with db.conn:
        for trace_id, kb, meta in [(1, "a", {"id": "x"}), (2, "a", {"id": "x"}), (3, "b", {"id": "x"}),
                                   (4, "a", {"id": 5}), (5, "a", {}), (6, "a", {"id": ["not", "an", "id"]})]:
            db.execute("INSERT INTO traces (id, created_at, updated_at, status, knowledge_base, metadata, query,"
                       " response) VALUES (?, 't', 't', 'pending', ?, ?, 'q', 'r')", [trace_id, kb, json.dumps(meta)])
    db.conn.close()
    db = connect(path)
    rows = db.execute("SELECT id, external_id FROM traces ORDER BY id").fetchall()
    assert rows == [(1, None), (2, "x"), (3, "x"), (4, "5"), (5, None), (6, None)]
    with pytest.raises(Exception, match="UNIQUE"):
        db.execute("UPDATE traces SET external_id = 'x' WHERE id = 1")


# -- the id log() returned names the trace, whatever its size -------------------------------------

@pytest.mark.usefixtures("store_url")
def test_commands_take_the_id_log_returned(runner):
    # On PostgreSQL a host's first traces, logged before it holds a block of ids, get random ids from
    # 2**62 up (19 digits): they must be found like any other.
    from veralith.sdk.log import log, shutdown

    first = log("What is H2O?", ["H2O is water."], "H2O is water.")
    shutdown(wait=True)
    for ref in (str(first), f"#{first}"):
        shown = runner.invoke(app, ["inspect", ref, "--json"])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["trace_id"] == first
    exported = runner.invoke(app, ["export", str(first)])
    assert [json.loads(x)["trace_id"] for x in exported.stdout.splitlines()] == [first]
    assert f"trace {first}: nothing to resume" in runner.invoke(app, ["resume", str(first)]).stdout
    assert runner.invoke(app, ["inspect", str(2**63)]).exit_code == 1    # past any store's ids: not found
