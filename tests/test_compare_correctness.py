"""`veralith compare` and the correctness layer (issue 42): its transitions, the gate's paired test with
correct read as pass, the pairs left out, each run's own layer of a trace judged again in place (both
stores), and untrusted text escaped in every view."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from veralith.cli import app
from veralith.cli.compare import comparison_view
from veralith.compare import TraceRow, compare_rows, to_markdown
from veralith.compare.correctness import LAYERS, correctness_note
from veralith.compare.stats import paired_test

CHUNKS = ["Acme was founded in 1947 by Ruth Calder in Ohio.", "Acme makes anvils and rockets."]
REPO = Path(__file__).resolve().parents[1]


def row(id, query, correctness, *, gate="pass", kb="kb", ext=None):
    return TraceRow(id, ext, kb, query, "complete_grounded", gate, "done" if gate else "error", 1.0, 1.0, 1, 0,
                    None, "full" if gate else None, correctness)


def _text(comparison) -> str:
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(comparison_view(comparison))
    return console.export_text()


# --- the comparison, as a pure function --------------------------------------------------------------


def test_transitions_and_the_paired_test_over_pairs_assessed_in_both():
    moves = [("correct", "correct")] * 5 + [("correct", "incorrect")] * 3 + [("correct", "partly_correct")] * 2 \
        + [("incorrect", "correct")] * 1 + [("partly_correct", "partly_correct")] * 4 \
        + [("not_assessed", "correct")] * 2 + [("correct", None)] * 1 + [(None, None)] * 6
    a = [row(i, f"q{i}", old) for i, (old, _) in enumerate(moves)]
    b = [row(100 + i, f"q{i}", new) for i, (_, new) in enumerate(moves)]
    k = compare_rows(a, b).correctness
    assert k is not None and k.pairs == len(moves) - 6          # pairs with no reference on either side: not counted
    assert set(k.matrix) == set(LAYERS) and all(set(r) == set(LAYERS) for r in k.matrix.values())
    assert k.matrix["correct"]["incorrect"] == 3 and k.matrix["not_assessed"]["correct"] == 2
    assert k.matrix["correct"]["not_assessed"] == 1             # a side without a reference reads as not assessed
    assert k.left_out == {"not_assessed": 2, "no_reference": 1, "not_recorded": 0}
    # The gate's own test (one implementation), with correct as pass: 5 both, 5 correct -> not, 1 not -> correct.
    assert k.test == paired_test(5, 5, 1, 4)
    assert k.test.n == 15 and k.test.rate_a == 10 / 15 and k.test.rate_b == 6 / 15
    assert len(k.changes) == 6 and k.changes[0].new == "incorrect" and k.changes[-1].new == "correct"


def test_a_run_copy_taken_before_runs_kept_the_layer_is_not_read_as_no_reference():
    """A run copy taken before migration 0026 whose layer it could not fill (the trace judged again
    since) holds no layer: not known, which is not "no reference". Such a pair is left out and counted
    apart from the pairs with a reference in one run only."""
    unknown = row(1, "q1", None)._replace(correctness_known=False)
    a = [unknown, row(2, "q2", None), row(3, "q3", "correct")]
    b = [row(11, "q1", "correct"), row(12, "q2", "incorrect"), row(13, "q3", "correct")]
    k = compare_rows(a, b).correctness
    assert k is not None and k.pairs == 3 and k.test.n == 1
    assert k.left_out == {"not_assessed": 0, "no_reference": 1, "not_recorded": 1}
    note = correctness_note(k)
    assert note is not None and "1 with a reference in one run only" in note and "1 from a run recorded before" in note


def test_without_a_reference_nothing_is_said_about_correctness():
    a, b = [row(1, "q", None)], [row(2, "q", None)]
    c = compare_rows(a, b)
    assert c.correctness is None and c.to_dict()["correctness"] is None
    assert "orrectness" not in to_markdown(c) and "orrectness" not in _text(c)


def test_pairs_never_judged_stay_out_of_the_correctness_layer_too():
    c = compare_rows([row(1, "q", "correct"), row(2, "r", "correct")],
                     [row(11, "q", None, gate=None), row(12, "r", "incorrect")])
    assert c.correctness is not None and c.correctness.pairs == 1 and c.correctness.test.n == 1


def test_every_view_says_the_same_and_escapes_untrusted_text():
    hostile = "<img src=x onerror=alert(1)> [red]@team #12[/red]\x1b[31m"
    a = [row(1, hostile, "correct"), row(2, "q2", "not_assessed")]
    b = [row(11, hostile, "incorrect"), row(12, "q2", "correct")]
    c = compare_rows(a, b)
    data = json.loads(json.dumps(c.to_dict()))["correctness"]
    assert data["changes"][0]["key"] == hostile and data["left_out_total"] == 1
    assert data["paired_test"]["pass_to_not"] == 1 and "correct read as pass" in data["paired_test"]["method"]
    md = to_markdown(c)
    assert "### Correctness against the reference (2 pair(s)" in md
    assert "1 pair\\(s\\) without a reference judgement on both sides, left out" in md
    assert "| correct | 0 | 0 | 1 | 0 |" in md and "| <img" not in md and "\\<img" in md and "@\u200bteam" in md
    assert "\x1b" not in md and "\\x1b" in md
    text = _text(c)
    assert "1 pair(s) without a reference judgement on both sides, left out" in text
    assert "correct → incorrect" in text and "[red]@team" in text and "\x1b" not in text
    assert "-100.0 pts" in md and "-100.0 pts" in text


# --- end to end, both stores: a trace judged again in place keeps each run's own layer --------------


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _golden(path: Path, year: int, hostile: str) -> Path:
    lines = [{"id": "founded", "query": "When was Acme founded?", "contexts": CHUNKS,
              "response": f"Acme was founded in {year}.", "reference": "Acme was founded in 1947."},
             {"id": "makes", "query": "What does Acme make?", "contexts": CHUNKS,
              "response": "Acme makes anvils and rockets.", "reference": "Acme makes anvils and rockets."},
             {"id": hostile, "query": "Who founded Acme?", "contexts": CHUNKS, "response": "Ruth Calder founded Acme."}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.usefixtures("store_url")
def test_a_trace_judged_again_in_place_compares_as_each_run_saw_it(tmp_path):
    hostile = "<b>who</b>"
    assert _cli("eval", str(_golden(tmp_path / "a.jsonl", 1947, hostile)), "--run-name", "before").exit_code in (0, 1)
    assert _cli("eval", str(_golden(tmp_path / "b.jsonl", 1952, hostile)), "--run-name", "after").exit_code in (0, 1)
    data = json.loads(_cli("compare", "before", "after", "--json").output)
    k = data["correctness"]
    assert data["matched"] == 3 and k["pairs"] == 2                     # the third has no reference
    [change] = k["changes"]
    # The same trace, judged again in place by "after": "before" still reads as it was then.
    assert change["key"] == "founded" and change["old_trace_id"] == change["new_trace_id"]
    assert (change["old"], change["new"]) == ("correct", "incorrect")
    assert k["matrix"]["correct"] == {"correct": 1, "partly_correct": 0, "incorrect": 1, "not_assessed": 0}
    assert k["paired_test"]["n"] == 2 and k["paired_test"]["pass_to_not"] == 1 and k["left_out_total"] == 0
    # The reverse order reads the same two copies the other way round.
    back = json.loads(_cli("compare", "after", "before", "--json").output)["correctness"]
    assert [(c["old"], c["new"]) for c in back["changes"]] == [("incorrect", "correct")]
    text = _cli("compare", "before", "after").output
    assert "correct → incorrect" in text and "Correctness against the reference" in text


@pytest.mark.usefixtures("store_url")
def test_sdk_runs_read_the_layer_from_the_stored_result():
    import veralith

    q = "When was Acme founded?"
    veralith.log(q, CHUNKS, "Acme was founded in 1947.", sync=True, run="old", reference="Acme was founded in 1947.")
    veralith.log(q, CHUNKS, "Acme was founded in 1952.", sync=True, run="new", reference="Acme was founded in 1947.")
    veralith.log("Who?", CHUNKS, "Ruth Calder.", sync=True, run="old", reference="Ruth Calder founded Acme.",
                 reference_contexts=[])
    veralith.log("Who?", CHUNKS, "Ruth Calder.", sync=True, run="new")
    k = json.loads(_cli("compare", "old", "new", "--json").output)["correctness"]
    assert [(c["old"], c["new"]) for c in k["changes"]] == [("correct", "incorrect")]
    assert k["left_out"]["no_reference"] == 1 and k["paired_test"]["n"] == 1


def test_the_migration_fills_a_run_s_layer_only_where_the_stored_result_is_its_own(store, tmp_path):
    """The backfill of SQLite 0026 / PostgreSQL 0018, run again over copies taken without the column."""
    from veralith.store.sqlstore import SqlStore

    assert _cli("eval", str(_golden(tmp_path / "a.jsonl", 1947, "x")), "--run-name", "before").exit_code in (0, 1)
    assert _cli("eval", str(_golden(tmp_path / "b.jsonl", 1952, "x")), "--run-name", "after").exit_code in (0, 1)
    assert isinstance(store, SqlStore)
    with store.connection() as db:
        postgres = db.dialect.name == "postgres"
    name = "postgres/0018_run_correctness.sql" if postgres else "0026_run_correctness.sql"
    sql = (REPO / "migrations" / name).read_text()
    backfill = sql[sql.index("UPDATE run_traces"):]
    with store.connection() as db, db.write():
        db.execute("UPDATE run_traces SET correctness = NULL")
        db.execute(backfill)
    with store.connection() as db:
        got = {(r, t): c for r, t, c in db.execute("SELECT run_id, trace_id, correctness FROM run_traces")}
    # "after" (run 2) judged every trace last: its copies are filled; "before" keeps NULL (not known).
    assert got[(2, 1)] == "incorrect" and got[(2, 2)] == "correct" and got[(2, 3)] is None
    assert {c for (r, _), c in got.items() if r == 1} == {None}


def test_copies_the_backfill_could_not_fill_are_marked_not_known_and_compare_says_so(store, tmp_path):
    """SQLite 0027 / PostgreSQL 0020 over copies taken before 0026 / 0018: those the backfill left NULL
    (the trace judged again since) are marked not known, and compare counts them apart from the pairs
    with a reference in one run only; a copy taken again later records its layer."""
    from veralith.store.sqlstore import SqlStore

    assert _cli("eval", str(_golden(tmp_path / "a.jsonl", 1947, "x")), "--run-name", "before").exit_code in (0, 1)
    assert _cli("eval", str(_golden(tmp_path / "b.jsonl", 1952, "x")), "--run-name", "after").exit_code in (0, 1)
    assert isinstance(store, SqlStore)
    with store.connection() as db:
        postgres = db.dialect.name == "postgres"
    old, new = ("postgres/0018_run_correctness.sql", "postgres/0020_run_correctness_known.sql") if postgres else (
        "0026_run_correctness.sql", "0027_run_correctness_known.sql")
    table = "veralith_migrations" if postgres else "_veralith_migration_checksums"
    fill, mark = ((REPO / "migrations" / name).read_text() for name in (old, new))
    with store.connection() as db, db.write():   # as if both runs were recorded before 0026 / 0018
        db.execute("UPDATE run_traces SET correctness = NULL, correctness_known = 1")
        db.execute(f"UPDATE {table} SET applied_at = '9000-01-01' WHERE name = ?", [old.split("/")[-1][:-4]])
        db.execute(fill[fill.index("UPDATE run_traces"):])
        db.execute(mark[mark.index("UPDATE run_traces"):])
    with store.connection() as db:
        got = {(r, t): (c, k) for r, t, c, k in db.execute(
            "SELECT run_id, trace_id, correctness, correctness_known FROM run_traces")}
    assert got[(2, 1)] == ("incorrect", 1) and got[(2, 3)] == (None, 1)    # "after": its own, filled
    assert {k for (r, _), (_c, k) in got.items() if r == 1} == {0}         # "before": not known
    k = json.loads(_cli("compare", "before", "after", "--json").output)["correctness"]
    assert k["left_out"] == {"not_assessed": 0, "no_reference": 0, "not_recorded": 2}
    text = " ".join(_cli("compare", "before", "after").output.split())
    assert "2 from a run recorded before runs kept the layer (not known)" in text


def test_the_web_compare_page_shows_the_layer_escaped(tmp_path, monkeypatch):
    pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'veralith[web]')")
    from starlette.testclient import TestClient

    from veralith.config import settings
    from veralith.web import create_app

    hostile = "<script>alert(1)</script>"
    golden = _golden(tmp_path / "a.jsonl", 1947, hostile)
    rows = [json.loads(line) for line in golden.read_text().splitlines()]
    rows[0]["id"] = hostile + "-founded"
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _cli("eval", str(golden), "--run-name", "before").exit_code in (0, 1)
    rows[0]["response"] = "Acme was founded in 1952."
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _cli("eval", str(golden), "--run-name", "after").exit_code in (0, 1)
    page = TestClient(create_app(settings.db_path), base_url="http://127.0.0.1:8765").get("/compare?a=before&b=after")
    assert page.status_code == 200
    html = page.text
    assert "Correctness against the reference (2 pair(s)" in html and "correct → incorrect" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;-founded" in html and "<script>alert(1)" not in html
    assert "A&#39;s layer is the one run A recorded" in html or "A's layer is the one run A recorded" in html


def test_a_copied_history_keeps_each_run_s_layer(store, tmp_path):
    """`veralith migrate --to` copies run_traces.correctness: the copy compares as the source does."""
    from veralith.compare import compare_runs
    from veralith.store import open_store
    from veralith.work.migrate import copy as copy_history

    assert _cli("eval", str(_golden(tmp_path / "a.jsonl", 1947, "x")), "--run-name", "before").exit_code in (0, 1)
    assert _cli("eval", str(_golden(tmp_path / "b.jsonl", 1952, "x")), "--run-name", "after").exit_code in (0, 1)
    target = open_store(f"sqlite:///{tmp_path / 'copy.db'}")
    report = copy_history(store, target)
    assert report.traces == 3 and not report.mismatches
    source, copied = compare_runs(store, "before", "after"), compare_runs(target, "before", "after")
    assert copied.correctness is not None and copied.correctness == source.correctness
    assert [(c.old, c.new) for c in copied.correctness.changes] == [("correct", "incorrect")]
