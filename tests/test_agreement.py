"""`veralith agreement`: Wilson intervals, Cohen's kappa, the splits, and "too few to conclude"."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from veralith.cli import app
from veralith.review.agreement import cohen_kappa, wilson

both = pytest.mark.usefixtures("store_url")


def test_wilson_interval_matches_the_textbook_values():
    low, high = wilson(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    assert wilson(0, 0) is None
    assert wilson(5, 5)[1] == 1.0 and wilson(0, 5)[0] == 0.0


def test_kappa_is_agreement_beyond_chance():
    assert cohen_kappa({("Y", "Y"): 20, ("Y", "N"): 5, ("N", "Y"): 10, ("N", "N"): 15}) == pytest.approx(0.4)
    assert cohen_kappa({("Y", "Y"): 4}) is None          # one class on both sides: chance agreement is 1
    assert cohen_kappa({}) is None


@both
def test_agreement_per_judge_with_splits_and_too_few(tmp_path):
    runner = CliRunner(env={"COLUMNS": "200"})
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "query": "When did World War II end?",
                                        "context": ["World War II ended in 1945."],
                                        "response": f"World War II ended in {1945 if i % 2 else 1950}."}) + "\n"
                            for i in range(6)), encoding="utf-8")
    assert runner.invoke(app, ["eval", str(path)]).exit_code in (0, 1)
    for i in range(6):  # the reviewer marks every answer pass: right for 1945, wrong for 1950
        assert runner.invoke(app, ["label", f"r{i}", "--gate", "pass", "--claim", "k1", "supported",
                                   "--by", "ann"]).exit_code == 0
    data = json.loads(runner.invoke(app, ["agreement", "--json", "--min-labels", "5"]).output)
    gate = data["judges"]["gate"]
    assert (gate["labels"], gate["agree"], gate["too_few"]) == (6, 3, False)
    assert {(c["label"], c["judge"], c["n"]) for c in gate["confusion"]} == {("pass", "pass", 3), ("pass", "fail", 3)}
    assert data["judges"]["faithfulness"]["agree"] == 3
    assert sum(t["labels"] for t in data["by_review"]["gate"].values()) == 6
    shown = runner.invoke(app, ["agreement", "--markdown"]).output
    assert "| gate | 6 | 50.0 % |" in shown and "too few to conclude" in shown   # default minimum 30
    assert "too few" not in runner.invoke(app, ["agreement", "--min-labels", "6"]).output.split("gate")[1].split("\n")[0]


def test_no_labels_says_how_to_give_some(tmp_path):
    out = CliRunner().invoke(app, ["agreement"])
    assert out.exit_code == 0 and "no labels yet" in out.output
