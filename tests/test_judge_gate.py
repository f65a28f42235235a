"""A regression set from labels: `export --labelled`, then `eval FILE --expect --min-agreement X` in a fresh
store, the CI gate on the judge itself (both stores)."""

from __future__ import annotations

import json

import pytest
from test_labels import TRACES
from typer.testing import CliRunner

from veralith.cli import app

both = pytest.mark.usefixtures("store_url")

# the labelled traces of test_labels, and one that states a wrong year
RECORDS = [*TRACES, {"id": "bad", "query": "When did World War II end?", "context": ["World War II ended in 1945."],
                     "response": "World War II ended in 1950."}]


def _fresh_sqlite(tmp_path, monkeypatch, name: str) -> None:
    from veralith.config import settings

    monkeypatch.delenv("VERALITH_DB_URL", raising=False)
    monkeypatch.setenv("VERALITH_DB_PATH", str(tmp_path / name))
    settings.reload()


@both
def test_labelled_traces_become_a_gate_on_the_judge(tmp_path, monkeypatch):
    runner = CliRunner(env={"COLUMNS": "200"})
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    assert runner.invoke(app, ["eval", str(path)]).exit_code in (0, 1)
    for args in (["fr", "--claim", "k2", "contradicted", "--gate", "fail"], ["ww2", "--gate", "pass"],
                 ["bad", "--gate", "pass"]):   # a reviewer who disagrees with the judge on `bad`
        assert runner.invoke(app, ["label", *args, "--by", "ann"]).exit_code == 0
    regression = tmp_path / "labelled.jsonl"
    assert runner.invoke(app, ["export", "--labelled", "-o", str(regression)]).exit_code == 0
    lines = [json.loads(x) for x in regression.read_text(encoding="utf-8").splitlines()]
    assert [x["id"] for x in lines] == ["fr", "ww2", "bad"]
    assert lines[0]["expected"] == {"claims": {"k2": {"relation": "contradicted",
                                                      "text": "The Eiffel Tower was built in 1920."}}, "gate": "fail"}
    # CI: a fresh store judges the file and checks the judge against the people.
    _fresh_sqlite(tmp_path, monkeypatch, "ci.db")
    out = runner.invoke(app, ["eval", str(regression), "--expect", "--min-agreement", "0.9"])
    assert out.exit_code == 3, out.output
    assert "agreement with the expected verdicts: 3/4 = 0.750" in out.output
    assert "judge gate failed: agreement 0.750 is below 0.9" in out.output
    _fresh_sqlite(tmp_path, monkeypatch, "ci2.db")
    out = runner.invoke(app, ["eval", str(regression), "--min-agreement", "0.7"])
    assert out.exit_code == 0 and "judge gate passed" in out.output
    _fresh_sqlite(tmp_path, monkeypatch, "ci3.db")
    assert runner.invoke(app, ["eval", str(regression), "--expect"]).exit_code == 0   # a report, no gate


def test_a_claim_the_judge_now_splits_differently_is_not_scored(tmp_path):
    runner = CliRunner(env={"COLUMNS": "200"})
    record = dict(RECORDS[1], expected={"claims": {"k1": {"relation": "supported", "text": "Something else."}},
                                        "gate": "pass"})
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    out = runner.invoke(app, ["eval", str(path), "--min-agreement", "1"])
    assert out.exit_code == 0, out.output
    assert "1 expected claim or sub-question verdicts not compared" in out.output
    assert "1/1 = 1.000" in out.output


def test_expect_needs_the_store_and_a_bad_expectation_is_named(tmp_path):
    runner = CliRunner()
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(dict(RECORDS[1], expected={"gate": "maybe"})) + "\n", encoding="utf-8")
    assert "cannot run with --no-persist" in runner.invoke(app, ["eval", str(path), "--expect", "--no-persist"]).output
    out = runner.invoke(app, ["eval", str(path), "--min-agreement", "0.5"])
    assert out.exit_code == 3 and "r.jsonl:1: gate label 'maybe' is not one of" in out.output
