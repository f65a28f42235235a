"""The review flag's cut-off fitted to reviewers' labels (veralith.store.review_cutoff): out of fold, stored with
each result with its source and label count, and said by stats, inspect and the trace page; without enough
labels nothing changes (both stores)."""

from __future__ import annotations

import json

import pytest
from conftest import REPO
from typer.testing import CliRunner

from veralith.cli import app
from veralith.policy import REVIEW_BELOW
from veralith.store import open_store, ops
from veralith.store.review_cutoff import cross_validated, fit_cutoff, flag_score

both = pytest.mark.usefixtures("store_url")
GOLDEN = REPO / "tests" / "golden" / "traces.jsonl"


def test_a_cutoff_fitted_on_one_fold_is_checked_on_another():
    # The judge is unsure (below 0.8) on most traces people disagree with (True), and sure on most others.
    first = [(0.55, True), (0.62, True), (0.75, True), (0.98, True)] + [
        (c, False) for c in (0.6, 0.7, 0.85, 0.86, 0.88, 0.9, 0.9, 0.92, 0.95, 0.96, 0.97, 1.0)]
    second = [(0.5, True), (0.66, True), (0.78, True), (0.93, True)] + [
        (c, False) for c in (0.65, 0.72, 0.84, 0.87, 0.9, 0.94, 0.99, 1.0, 0.91, 0.89, 0.97, 0.95)]
    fitted = fit_cutoff(first)
    assert fitted == 0.8                       # midway between 0.75 and 0.85
    held_out = flag_score(second, fitted)      # checked on the fold it was not fitted on
    assert (held_out.flagged, held_out.caught, held_out.disagreements) == (5, 3, 4)
    assert flag_score(second, REVIEW_BELOW).caught == 2   # the default misses the 0.78 disagreement
    oof, folds = cross_validated(first + second, folds=5)
    assert folds == 5 and oof is not None and (oof.flagged, oof.caught, oof.disagreements) == (10, 6, 8)


def test_nothing_to_catch_fits_nothing_and_f2_weighs_recall():
    assert fit_cutoff([(0.5, False), (0.9, False)]) is None           # no disagreement among the labels
    assert fit_cutoff([(1.0, True), (0.6, False)]) is None            # the flag could never reach it
    # Catching both disagreements by also flagging two agreements beats catching one alone (F2, not F1).
    assert fit_cutoff([(0.5, True), (0.6, False), (0.6, False), (0.7, True), (0.9, False)]) == 0.8


def _stored_flag(runner: CliRunner, ref: str) -> str:
    return " ".join(runner.invoke(app, ["inspect", ref]).output.split())


@both
def test_enough_labels_fit_the_cutoff_new_results_use_it_and_every_view_says_so(tmp_path, monkeypatch):
    from veralith.config import settings

    monkeypatch.setenv("VERALITH_LABELS_MIN", "40")
    settings.reload()
    runner = CliRunner(env={"COLUMNS": "200"})
    rows = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()[:36]]
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps(dict(r, knowledge_base="kb")) + "\n" for r in rows[:35]), encoding="utf-8")
    assert runner.invoke(app, ["eval", str(path)]).exit_code in (0, 1)
    store = open_store()
    # Without labels nothing changes: every result was flagged under the default, and says so.
    first = store.read(ops.load_result, store.read(ops.resolve, rows[0]["id"])).diagnosis
    assert (first.review_cutoff, first.review_cutoff_labels) == (REVIEW_BELOW, None)
    assert first.review_confidence is not None
    assert store.read(ops.review_cutoff, "kb").labels is None
    assert store.read(ops.stats, kb="kb")["thresholds"]["kb"]["review_source"] == "default"
    assert "below 70% confidence flags the trace (the default until" in _stored_flag(runner, rows[0]["id"])
    for r in rows[:35]:   # the golden traces' hand labels, as a reviewer would give them
        assert runner.invoke(app, ["label", r["id"], "--gate", r["expected"]["gate"], "--by", "ann"]).exit_code == 0
    assert store.read(ops.review_cutoff, "kb").labels is None                # 35 labelled traces: too few for 40
    monkeypatch.setenv("VERALITH_LABELS_MIN", "30")
    settings.reload()
    found = store.read(ops.review_cutoff, "kb")
    assert found.labels == 35 and found.cutoff != REVIEW_BELOW
    figures = store.read(ops.stats, kb="kb")["thresholds"]["kb"]
    assert (figures["review_source"], figures["review_labels"], figures["review_cutoff"]) == (
        "labels", 35, found.cutoff)
    assert f"{found.cutoff:.2f} labels (35)" in runner.invoke(app, ["stats", "--kb", "kb"]).output
    # A new result of the knowledge base is flagged under the fitted cut-off.
    path.write_text(json.dumps(dict(rows[35], knowledge_base="kb")) + "\n", encoding="utf-8")
    assert runner.invoke(app, ["eval", str(path)]).exit_code in (0, 1)
    new = store.read(ops.load_result, store.read(ops.resolve, rows[35]["id"])).diagnosis
    assert (new.review_cutoff, new.review_cutoff_labels) == (found.cutoff, 35)
    assert new.needs_review == (new.review_confidence is not None and new.review_confidence < found.cutoff)
    assert "fitted to reviewers' labels on 35 traces of this knowledge base" in _stored_flag(runner, rows[35]["id"])
    other = store.read(ops.review_cutoff, "other kb")
    assert (other.cutoff, other.labels) == (REVIEW_BELOW, None)             # another knowledge base: unchanged
    data = json.loads(runner.invoke(app, ["agreement", "--json"]).output)["review_flag"]["kb"]
    assert data["labelled_traces"] == 35 and data["fitted"] and data["folds"] == 5
    assert data["out_of_fold"]["flagged"] <= 35 and data["default"]["caught"] <= data["disagreements"]
