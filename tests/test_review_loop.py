"""The whole loop of issue 38 on each store, end to end: judge (`eval`), review (`veralith review` driven through
a real pty), labels for the rest (`veralith label`), `agreement`, calibration from labels (the sufficiency threshold
and the review cut-off fitted to them, used by the next result), `export --labelled`, and `eval --expect` with the
`--min-agreement` gate in a fresh store of the same kind. (The web form in a real browser: test_web_review_browser.)"""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import REPO
from pty_support import Terminal
from typer.testing import CliRunner

from veralith.cli import app
from veralith.store import open_store, ops
from veralith.store.labels import current

both = pytest.mark.usefixtures("store_url")
GOLDEN = REPO / "tests" / "golden" / "traces.jsonl"
N = 32


def _review_in_a_terminal() -> None:
    """`veralith review` in a pty: agree with the first trace, correct the second's gate to pass, quit."""
    tty = Terminal([sys.executable, "-m", "veralith.cli", "review", "--by", "tty", "--kb", "loop"],
                   dict(os.environ, COLUMNS="120", TERM="dumb"))
    try:
        at = tty.until(b"q quit")
        tty.press(b"a")                         # agree: the cell and the gate as judged
        at = tty.until(b"q quit", tty.until(b"recorded gate", at))
        tty.press(b"g")
        at = tty.until(b"gate is", at)
        tty.press(b"1\r")                      # 1) pass
        at = tty.until(b"q quit", tty.until(b"recorded gate = pass", at))
        tty.press(b"q")
        tty.until(b"reviewed 1 of", at)        # the second was quit before it was done, its label kept
        assert tty.proc.wait(timeout=60) == 0
    finally:
        tty.close()


def _fresh_store(tmp_path, monkeypatch, store_url: str, request) -> None:
    """A new, empty store of the same kind as the test's, made the configured one (CI's fresh checkout)."""
    from veralith.config import settings

    if store_url.startswith("postgres"):
        monkeypatch.setenv("VERALITH_DB_URL", request.getfixturevalue("pg_server").new_database())
    else:
        monkeypatch.delenv("VERALITH_DB_URL", raising=False)
        monkeypatch.setenv("VERALITH_DB_PATH", str(tmp_path / "ci.db"))
    settings.reload()


@both
def test_judge_review_agree_calibrate_export_and_gate(store_url, tmp_path, monkeypatch, request):
    from veralith.config import settings

    monkeypatch.setenv("VERALITH_LABELS_MIN", "30")
    settings.reload()
    runner = CliRunner(env={"COLUMNS": "200"})
    rows = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()[:N + 1]]
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps(dict(r, knowledge_base="loop")) + "\n" for r in rows[:N]), encoding="utf-8")
    # 1. judge
    assert runner.invoke(app, ["eval", str(path)]).exit_code in (0, 1)
    store = open_store()
    before = store.read(ops.calibration, "loop"), store.read(ops.review_cutoff, "loop")
    assert before[0].labels is None and before[1].labels is None
    # 2. review: two traces in a real terminal, then the team's hand labels for every trace
    _review_in_a_terminal()
    by_tty = [x for x in store.read(current, kb="loop") if x.reviewer == "tty"]
    assert {(x.target, x.value) for x in by_tty} >= {("gate", "pass")} and len({x.trace_id for x in by_tty}) == 2
    for r in rows[:N]:
        sufficient = "Y" if r["oracle"]["sufficiency"][0] == "yes" else "N"
        out = runner.invoke(app, ["label", r["id"], "--gate", r["expected"]["gate"], "--sufficiency", "q1",
                                  sufficient, "--by", "golden"])
        assert out.exit_code == 0, out.output
    # 3. agreement
    data = json.loads(runner.invoke(app, ["agreement", "--json", "--kb", "loop"]).output)
    gate = data["judges"]["gate"]
    assert gate["labels"] == N and not gate["too_few"] and data["traces"] == N
    assert set(data["by_review"]["gate"]) <= {"needs_review", "not_flagged"}
    # 4. calibration from labels: both the threshold and the review cut-off, used by the next result
    threshold, cutoff = store.read(ops.calibration, "loop"), store.read(ops.review_cutoff, "loop")
    assert threshold.labels == N and cutoff.labels == N
    assert data["review_flag"]["loop"]["labelled_traces"] == N and data["calibration"]["loop"]["folds"] >= 1
    path.write_text(json.dumps(dict(rows[N], knowledge_base="loop")) + "\n", encoding="utf-8")
    assert runner.invoke(app, ["eval", str(path)]).exit_code in (0, 1)
    new = store.read(ops.load_result, store.read(ops.resolve, rows[N]["id"])).diagnosis
    assert (new.threshold_labels, new.review_cutoff_labels, new.review_cutoff) == (N, N, cutoff.cutoff)
    # 5. export the labelled traces as a regression set
    regression = tmp_path / "labelled.jsonl"
    assert runner.invoke(app, ["export", "--labelled", "--kb", "loop", "-o", str(regression)]).exit_code == 0
    records = [json.loads(line) for line in regression.read_text(encoding="utf-8").splitlines()]
    assert len(records) == N and all("gate" in r["expected"] for r in records)
    # 6. CI: a fresh store judges the file and gates the judge on its agreement with the people
    agree = sum(j["agree"] for j in data["judges"].values())
    total = sum(j["labels"] for j in data["judges"].values())
    _fresh_store(tmp_path, monkeypatch, store_url, request)
    rate = agree / total
    out = runner.invoke(app, ["eval", str(regression), "--expect", "--min-agreement", f"{rate - 0.01:.3f}"])
    assert out.exit_code == 0, out.output
    assert f"agreement with the expected verdicts: {agree}/{total} = {rate:.3f}" in out.output   # the same figure
    _fresh_store(tmp_path, monkeypatch, store_url, request)
    out = runner.invoke(app, ["eval", str(regression), "--expect", "--min-agreement", f"{min(1.0, rate + 0.01):.3f}"])
    assert out.exit_code == 3 and "judge gate failed" in out.output
