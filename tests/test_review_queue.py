"""`veralith review`: the queue's order (needs-review, failing, a sample of the rest), resuming, one key
per decision (in-process and through a real pty)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from pty_support import Terminal
from typer.testing import CliRunner

from veralith.cli import app
from veralith.store import open_store, ops
from veralith.store.labels import current, queue

both = pytest.mark.usefixtures("store_url")


def _judged(tmp_path, n: int = 6) -> list[int]:
    runner = CliRunner()
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "query": "When did World War II end?",
                                        "context": ["World War II ended in 1945."],
                                        "response": f"World War II ended in {1945 if i % 2 else 1950}."}) + "\n"
                            for i in range(n)), encoding="utf-8")
    assert runner.invoke(app, ["eval", str(path)]).exit_code in (0, 1)
    store = open_store()
    return [store.read(ops.resolve, f"r{i}") for i in range(n)]


@both
def test_the_queue_puts_flagged_then_failing_then_a_sample_and_resumes(tmp_path):
    ids = _judged(tmp_path)
    store = open_store()
    flagged = ids[1]   # a passing trace, flagged for review

    def flag(db):
        with db.write():
            db.execute("UPDATE traces SET needs_review = 1 WHERE id = ?", [flagged])

    store.write(flag)
    order = store.read(queue, reviewer="ann", limit=10)
    failing = [ids[i] for i in (0, 2, 4)]
    assert order[0] == flagged and order[1:4] == failing and sorted(order[4:]) == [ids[3], ids[5]]
    assert store.read(queue, reviewer="ann", limit=5)[-1] in (ids[3], ids[5])   # the sample is never crowded out
    CliRunner().invoke(app, ["label", "r0", "--gate", "fail", "--by", "ann"])
    assert ids[0] not in store.read(queue, reviewer="ann", limit=10)
    assert ids[0] in store.read(queue, reviewer="bob", limit=10)


@both
def test_keys_agree_correct_note_skip_and_quit(tmp_path):
    ids = _judged(tmp_path, 3)
    # trace r0 (failing): a note, then the claim k1 corrected to supported, then agree (cell and gate as judged);
    # r2 (failing): skipped; r1: quit.
    keys = "nthe year is right\nk1\n1\na" + "x" + "q"
    out = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["review", "--by", "ann"], input=keys)
    assert out.exit_code == 0, out.output
    assert "recorded claim k1 = supported (the judge said contradicted)" in out.output
    assert "reviewed 2 of 3" in out.output
    labels = {(x.trace_id, x.target, x.item): x for x in open_store().read(current)}
    assert set(labels) == {(ids[0], "claim", "k1"), (ids[0], "cell", ""), (ids[0], "gate", "")}
    assert labels[(ids[0], "claim", "k1")].note == "the year is right"
    assert labels[(ids[0], "gate", "")].value == "fail"   # agree: as judged
    again = CliRunner().invoke(app, ["review", "--by", "ann"], input="q")
    assert "2 traces to review" in again.output       # resumes: r0 is done


def test_review_through_a_real_terminal(tmp_path):
    _judged(tmp_path, 1)
    tty = Terminal([sys.executable, "-m", "veralith.cli", "review", "--by", "tty"],
                   dict(os.environ, COLUMNS="120", TERM="dumb"))
    try:
        tty.until(b"q quit", timeout=60)
        tty.press(b"g")                 # one key, no Enter: correct the gate
        tty.until(b"gate is", timeout=60)
        tty.press(b"1\r")              # 1) pass
        tty.until(b"recorded gate = pass", timeout=60)
        tty.press(b"q")
        tty.until(b"reviewed 0 of 1", timeout=60)
        assert tty.proc.wait(timeout=60) == 0
    finally:
        tty.close()
    [label] = open_store().read(current)
    assert (label.target, label.value, label.reviewer, label.judged) == ("gate", "pass", "tty", "fail")
