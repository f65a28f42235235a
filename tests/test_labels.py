"""Labels in the store (both stores): `veralith label`, corrections, `labels export` / `labels import`
(JSONL, CSV, Langfuse scores, Phoenix annotations) and `veralith migrate` copying them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veralith.cli import app
from veralith.review.files import Problem, read_labels
from veralith.store import open_store, ops
from veralith.store.labels import LabelError, check, current, labels_of

both = pytest.mark.usefixtures("store_url")

TRACES = [
    {"id": "fr", "query": "What is the capital of France and when was the Eiffel Tower built?",
     "context": ["Paris is the capital of France.", "The Eiffel Tower was completed in 1889."],
     "response": "The capital of France is Paris. The Eiffel Tower was built in 1920."},
    {"id": "ww2", "query": "When did World War II end?", "context": ["World War II ended in 1945."],
     "response": "World War II ended in 1945."},
]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "200"})


def _judged(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TRACES), encoding="utf-8")
    done = runner.invoke(app, ["eval", str(path)])
    assert done.exit_code in (0, 1), done.output


@both
def test_a_label_records_who_what_and_what_the_judge_said(runner, tmp_path):
    _judged(runner, tmp_path)
    out = runner.invoke(app, ["label", "fr", "--claim", "k2", "contradicted", "--by", "alice", "--note", "1889"])
    assert out.exit_code == 0, out.output
    assert "claim k2 labelled contradicted by alice (agrees)" in out.output
    store = open_store()
    trace_id = store.read(ops.resolve, "fr")
    [label] = store.read(labels_of, trace_id)
    assert (label.target, label.item, label.value, label.reviewer, label.note, label.judged) == \
        ("claim", "k2", "contradicted", "alice", "1889", "contradicted")
    assert label.result_at == store.read(ops.trace_info, trace_id).evaluated_at


@both
def test_a_later_label_corrects_an_earlier_one_and_both_are_kept(runner, tmp_path):
    _judged(runner, tmp_path)
    for value in ("pass", "fail"):
        assert runner.invoke(app, ["label", "ww2", "--gate", value, "--by", "bob"]).exit_code == 0
    store = open_store()
    trace_id = store.read(ops.resolve, "ww2")
    assert [x.value for x in store.read(labels_of, trace_id)] == ["pass", "fail"]
    assert [x.value for x in store.read(current)] == ["fail"]


@both
@pytest.mark.parametrize(("args", "says"), [
    (["--claim", "k9", "supported"], "has no 'k9' among its claims: k1, k2"),
    (["--claim", "k1", "true"], "claim label 'true' is not one of: supported"),
    (["--cell", "good"], "cell label 'good' is not one of"),
    ([], "say what the label is"),
])
def test_a_bad_label_is_one_line_and_nothing_stored(runner, tmp_path, args, says):
    _judged(runner, tmp_path)
    out = runner.invoke(app, ["label", "fr", *args, "--by", "a"])
    assert out.exit_code == 2 and says in out.output
    assert open_store().read(current) == []


def test_the_vocabulary_is_the_results():
    assert check("Sufficiency", "q1", "y") == ("sufficiency", "q1", "Y")
    with pytest.raises(LabelError, match="takes no item"):
        check("gate", "q1", "pass")
    with pytest.raises(LabelError, match="unknown label target"):
        check("vibes", "", "good")


@both
def test_export_then_import_into_a_fresh_store_round_trips_and_twice_adds_nothing(runner, tmp_path, monkeypatch):
    _judged(runner, tmp_path)
    runner.invoke(app, ["label", "fr", "--cell", "complete_ungrounded", "--by", "alice", "--note", "=HYPERLINK(x)"])
    runner.invoke(app, ["label", "fr", "--sufficiency", "q1", "Y", "--by", "alice"])
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"labels.{fmt}"
        assert runner.invoke(app, ["labels", "export", "--format", fmt, "-o", str(out)]).exit_code == 0
    rows = list(csv.DictReader(io.StringIO((tmp_path / "labels.csv").read_text(encoding="utf-8"))))
    assert {r["note"] for r in rows} == {"'=HYPERLINK(x)", ""}   # never a formula in a spreadsheet
    # Into another SQLite store holding the same traces (matched by their uid): via migrate, then labels import.
    fresh = tmp_path / "other.db"
    monkeypatch.setenv("VERALITH_DB_PATH", str(fresh))
    monkeypatch.delenv("VERALITH_DB_URL", raising=False)
    from veralith.config import settings

    settings.reload()
    _judged(runner, tmp_path)   # the same records, judged here: other uids, so found by external id
    for fmt in ("jsonl", "csv", "jsonl"):
        out = runner.invoke(app, ["labels", "import", str(tmp_path / f"labels.{fmt}")])
        assert out.exit_code == 0, out.output
    assert "imported 0 labels (2 already there, 0 skipped)" in out.output
    labels = open_store().read(current)
    assert sorted((x.target, x.value, x.note or "") for x in labels) == [
        ("cell", "complete_ungrounded", "=HYPERLINK(x)"), ("sufficiency", "Y", "")]


def test_langfuse_scores_and_phoenix_annotations_are_read():
    scores = [{"id": "s1", "traceId": "fr", "name": "claim:k2", "value": 0, "stringValue": "contradicted",
               "dataType": "CATEGORICAL", "comment": "wrong year", "authorUserId": "u7",
               "timestamp": "2026-11-30T10:00:00Z", "source": "ANNOTATION"},
              {"id": "s2", "traceId": "fr", "name": "veralith.gate", "value": 1, "dataType": "BOOLEAN"},
              {"id": "s3", "traceId": "fr", "name": "helpfulness", "value": 0.5}]
    rows = list(read_labels(json.dumps(scores), "langfuse", reviewer="team"))
    assert [(r.target, r.item, r.value, r.reviewer, r.external_id) for r in rows[:2]] == [
        ("claim", "k2", "contradicted", "u7", "fr"), ("gate", "", "pass", "team", "fr")]
    assert isinstance(rows[2], Problem) and "unknown label target 'helpfulness'" in rows[2].message
    phoenix = ('{"trace_id": "fr", "name": "cell", "annotator_kind": "HUMAN", "result": {"label": '
               '"incomplete_ungrounded", "explanation": "q2 wrong"}, "user_id": "ann"}\n{"name": "gate"}\n')
    first, second = read_labels(phoenix, "phoenix")
    assert (first.target, first.value, first.note, first.reviewer) == ("cell", "incomplete_ungrounded", "q2 wrong",
                                                                       "ann")
    assert isinstance(second, Problem) and second.line == 2


@both
def test_import_says_which_line_names_no_stored_trace(runner, tmp_path):
    _judged(runner, tmp_path)
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"external_id": "nope", "target": "gate", "value": "pass", "reviewer": "a"}) + "\n"
                    + json.dumps({"external_id": "ww2", "target": "gate", "value": "pass", "reviewer": "a"}) + "\n"
                    + "{bad\n", encoding="utf-8")
    out = runner.invoke(app, ["labels", "import", str(path)])
    assert out.exit_code == 2
    assert "in.jsonl:1: no stored trace 'nope'" in out.output and "in.jsonl:3: not valid JSON" in out.output
    assert "imported 1 labels" in out.output


def test_migrate_copies_labels_once_into_postgres(runner, tmp_path, pg_server, monkeypatch):
    from veralith.config import settings
    from veralith.work.migrate import copy

    monkeypatch.delenv("VERALITH_DB_URL", raising=False)
    settings.reload()
    _judged(runner, tmp_path)
    runner.invoke(app, ["label", "fr", "--claim", "k2", "contradicted", "--by", "alice"])
    runner.invoke(app, ["label", "ww2", "--gate", "pass", "--by", "bob"])
    source = open_store()
    target = open_store(pg_server.new_database())
    report = copy(source, target)
    assert report.counts["labels"] == (2, 2) and not report.mismatches
    again = copy(source, target)
    assert again.counts["labels"] == (2, 2)
    assert sorted(x.value for x in target.read(current)) == ["contradicted", "pass"]
