"""Labels calibrate: a knowledge base with enough sufficiency labels gets its threshold fitted to them
(out of fold when measured), and stats, inspect and the result say so; without labels nothing changes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from veralith.cli import app
from veralith.store import open_store, ops
from veralith.store.calibration import balanced_accuracy, cross_validated, fit_threshold

both = pytest.mark.usefixtures("store_url")


def test_a_threshold_fitted_on_one_fold_is_checked_on_another():
    # Reviewers call a context sufficient from 0.6 up; the judge's fractions spread around it.
    pairs = [(f / 10, f >= 6) for f in range(11)] * 4
    first, second = pairs[::2], pairs[1::2]
    fitted = fit_threshold(first)
    assert fitted == 0.6
    assert balanced_accuracy(second, fitted) == 1.0          # held out: the fold it was not fitted on
    noisy = pairs + [(0.9, False), (0.2, True)]
    accuracy, folds = cross_validated(noisy, folds=5)
    assert folds == 5 and accuracy is not None and 0.8 < accuracy < 1.0   # out of fold: the noise costs
    assert fit_threshold([(0.5, True), (0.7, True)]) is None    # one class: nothing to fit


@both
def test_enough_labels_fit_the_threshold_and_every_view_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("VERALITH_LABELS_MIN", "4")
    from veralith.config import settings

    settings.reload()
    runner = CliRunner(env={"COLUMNS": "200"})
    path = tmp_path / "t.jsonl"
    rows = [{"id": f"r{i}", "query": "When did World War II end?", "context": ["World War II ended in 1945."],
             "response": "World War II ended in 1945.", "knowledge_base": "kb"} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert runner.invoke(app, ["eval", str(path)]).exit_code in (0, 1)
    store = open_store()
    before = store.read(ops.calibration, "kb")
    assert before.labels is None
    for i in range(3):
        assert runner.invoke(app, ["label", f"r{i}", "--sufficiency", "q1", "Y", "--by", "a"]).exit_code == 0
    assert store.read(ops.calibration, "kb").labels is None                  # 3 < 4: nothing changes yet
    assert runner.invoke(app, ["label", "r3", "--sufficiency", "q1", "N", "--by", "a"]).exit_code == 0
    found = store.read(ops.calibration, "kb")
    assert found.labels == 4 and found.threshold == 1.0           # all four judged 1.0; one labelled N
    assert store.read(ops.stats, kb="kb")["thresholds"]["kb"]["source"] == "labels"
    path.write_text(json.dumps(dict(rows[0], id="new")) + "\n", encoding="utf-8")
    assert runner.invoke(app, ["eval", str(path)]).exit_code in (0, 1)
    result = store.read(ops.load_result, store.read(ops.resolve, "new"))
    assert result.diagnosis.threshold_labels == 4
    shown = runner.invoke(app, ["inspect", "new"]).output
    assert "fitted to reviewers' labels on 4 traces" in " ".join(shown.split())
