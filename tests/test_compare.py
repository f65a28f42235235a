"""veralith.compare: matching, the transition matrix, the paired test, reasons, and the outputs."""

from __future__ import annotations

import json
import math
import random

import pytest

from veralith.compare import CELLS, TraceRow, compare_rows, to_markdown, with_reasons
from veralith.compare.reasons import failure_reason
from veralith.compare.stats import mcnemar_exact_p, newcombe_interval, paired_test, wilson_interval


def row(id, query, cell, gate, *, ext=None, kb="kb", suff=1.0, faith=1.0, claims=2, extra=0, reason=None):
    return TraceRow(id, ext, kb, query, cell, gate, "done" if gate else "error", suff, faith, claims, extra, reason)


# --- matching -------------------------------------------------------------------------------------


def test_external_ids_match_before_query_text_and_only_within_a_knowledge_base():
    a = [row(1, "q old wording", "complete_grounded", "pass", ext="t1"),
         row(2, "same query", "complete_grounded", "pass", kb="kb1"),
         row(3, "only in a", "complete_grounded", "pass")]
    b = [row(11, "q new wording", "complete_ungrounded", "fail", ext="t1"),
         row(12, "same query", "complete_grounded", "pass", kb="kb2"),
         row(13, "only in b", "complete_grounded", "pass")]
    c = compare_rows(a, b)
    assert c.matched == 1 and c.matched_by_external_id == 1
    assert [(ch.old_trace_id, ch.new_trace_id) for ch in c.regressions] == [(1, 11)]
    assert sorted(o.trace_id for o in c.only_in_a) == [2, 3]   # kb1 != kb2: no match
    assert sorted(o.trace_id for o in c.only_in_b) == [12, 13]


def test_duplicate_queries_pair_up_in_order_and_a_leftover_is_reported():
    a = [row(1, "dup", "complete_grounded", "pass"), row(2, "dup", "incomplete_grounded", "fail")]
    b = [row(5, "dup", "complete_grounded", "pass"), row(6, "dup", "complete_grounded", "pass"),
         row(7, "dup", "complete_grounded", "pass")]
    c = compare_rows(a, b)
    assert c.matched == 2
    assert [(ch.old_trace_id, ch.new_trace_id) for ch in c.improvements] == [(2, 6)]
    assert [o.trace_id for o in c.only_in_b] == [7]


def test_an_external_id_in_one_run_only_falls_back_to_the_query():
    c = compare_rows([row(1, "q", "complete_grounded", "pass", ext="x")], [row(2, "q", "complete_grounded", "pass")])
    assert c.matched == 1 and c.matched_by_external_id == 0


# --- matrix, gates, shifts ------------------------------------------------------------------------


def test_matrix_counts_every_judged_pair_and_indeterminate_is_its_own_row_and_column():
    a = [row(1, "a", "complete_grounded", "pass"), row(2, "b", None, "indeterminate"),
         row(3, "c", "incomplete_grounded", "fail"), row(4, "d", "complete_grounded", "pass")]
    b = [row(5, "a", "complete_grounded", "pass"), row(6, "b", "complete_grounded", "pass"),
         row(7, "c", "incomplete_ungrounded", "fail"), row(8, "d", None, None)]   # d: no result now
    c = compare_rows(a, b)
    assert set(c.matrix) == set(CELLS) and all(set(r) == set(CELLS) for r in c.matrix.values())
    assert sum(sum(r.values()) for r in c.matrix.values()) == 3          # d has no result in B: not counted
    assert c.matrix["indeterminate"]["complete_grounded"] == 1
    assert c.matrix["incomplete_grounded"]["incomplete_ungrounded"] == 1
    # indeterminate -> pass is neither a regression nor an improvement; pass -> no result is no change
    assert c.regressions == [] and c.improvements == []
    assert [(ch.old_gate, ch.new_gate) for ch in c.indeterminate_changes] == [("indeterminate", "pass")]
    assert [(ch.old_trace_id, ch.new_gate, ch.reason) for ch in c.not_judged] == [(4, "not judged", "no result in B (error)")]
    assert c.left_out == {"not_judged": 1, "indeterminate": 1} and c.test.n == 2


def test_pairs_never_judged_are_left_out_of_the_paired_statistics_and_counted():
    """Run A's traces were logged during a judge outage and never judged; run B judged them. Each
    pair is no change, and the paired test must not read "no result" as "did not pass" (which
    reported a significant improvement over traces A never judged)."""
    a = [row(i, f"q{i}", None, None) for i in range(12)] + [row(20, "kept", "complete_grounded", "pass"),
                                                           row(21, "broke", "complete_grounded", "pass")]
    b = [row(100 + i, f"q{i}", "complete_grounded" if i < 9 else "incomplete_grounded", "pass" if i < 9 else "fail")
         for i in range(12)] + [row(120, "kept", "complete_grounded", "pass"),
                                row(121, "broke", "complete_ungrounded", "fail")]
    c = compare_rows(a, b)
    assert c.matched == 14 and c.left_out == {"not_judged": 12, "indeterminate": 0}
    assert c.indeterminate_changes == [] and len(c.improvements) == 0 and len(c.regressions) == 1
    assert len(c.not_judged) == 12 and all(ch.old_gate == "not judged" for ch in c.not_judged)
    assert (c.test.n, c.test.both_pass, c.test.pass_to_not, c.test.not_to_pass) == (2, 1, 1, 0)
    assert c.test.difference == pytest.approx(-0.5)           # the one broken pair, not the 9 "fixed" ones
    assert sum(sum(r.values()) for r in c.matrix.values()) == 2
    assert c.shifts["sufficiency_rate"]["a"] == 1.0           # over the two judged pairs only
    # Every view says how many were left out, and why.
    md = to_markdown(c)
    assert "12 never judged in A or B" in md and "Not judged in A or B" in md and "2 pairs judged pass or fail" in md
    from rich.console import Console

    from veralith.cli.compare import comparison_view

    console = Console(width=160, record=True, file=__import__("io").StringIO())
    console.print(comparison_view(c))
    text = console.export_text()
    assert "left out of the paired statistics: 12 never judged in A or B" in text
    assert c.to_dict()["left_out"] == {"not_judged": 12, "indeterminate": 0}


def test_an_indeterminate_side_stays_in_the_matrix_but_not_in_the_paired_test():
    a = [row(1, "x", "complete_grounded", "pass"), row(2, "y", "complete_grounded", "pass")]
    b = [row(3, "x", None, "indeterminate"), row(4, "y", "complete_grounded", "pass")]
    c = compare_rows(a, b)
    assert c.matrix["complete_grounded"]["indeterminate"] == 1 and c.test.n == 1
    assert c.left_out == {"not_judged": 0, "indeterminate": 1}


def test_regressions_are_listed_worst_new_cell_first():
    a = [row(i, f"q{i}", "complete_grounded", "pass") for i in range(1, 4)]
    b = [row(11, "q1", "incomplete_grounded", "fail"), row(12, "q2", "incomplete_ungrounded", "fail"),
         row(13, "q3", "complete_ungrounded", "fail")]
    c = compare_rows(a, b)
    assert [ch.new_cell for ch in c.regressions] == ["incomplete_ungrounded", "complete_ungrounded",
                                                     "incomplete_grounded"]


def test_per_judge_shifts_are_means_over_matched_pairs():
    a = [row(1, "a", "complete_grounded", "pass", suff=1.0, faith=1.0, claims=4, extra=0),
         row(2, "b", "extra_grounded", "fail", suff=0.5, faith=0.5, claims=4, extra=2)]
    b = [row(3, "a", "complete_grounded", "pass", suff=1.0, faith=0.5, claims=2, extra=1),
         row(4, "b", "complete_grounded", "pass", suff=0.5, faith=1.0, claims=2, extra=0),
         row(5, "unmatched", "complete_grounded", "pass", suff=0.0, faith=0.0, claims=10, extra=10)]
    s = compare_rows(a, b).shifts
    assert s["sufficiency_rate"] == {"a": 0.75, "b": 0.75, "delta": 0.0}
    assert s["faithfulness_fraction"] == {"a": 0.75, "b": 0.75, "delta": 0.0}
    assert s["extra_claim_rate"]["a"] == pytest.approx(2 / 8) and s["extra_claim_rate"]["b"] == pytest.approx(1 / 4)


def test_nothing_matched_gives_no_test_and_no_nan():
    c = compare_rows([row(1, "a", "complete_grounded", "pass")], [row(2, "b", "complete_grounded", "pass")])
    assert c.test.n == 0 and c.test.difference is None and c.test.ci95 is None and c.test.p_value is None
    text = json.dumps(c.to_dict())
    assert "NaN" not in text
    assert "n/a" in to_markdown(c)


# --- the paired test ------------------------------------------------------------------------------


def test_mcnemar_exact_p_equals_the_binomial_sum():
    for b, c in [(0, 0), (1, 0), (5, 0), (7, 3), (10, 10), (2, 9), (30, 12)]:
        n, k = b + c, min(b, c)
        expected = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n) if n else 1.0
        assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-9)
    assert 0 < mcnemar_exact_p(3000, 2800) < 0.02   # no underflow with thousands of discordant pairs


def test_newcombe_interval_matches_a_hand_computation():
    # a=14 both pass, b=5 pass->not, c=0 not->pass, d=22 neither (Altman et al. 2000, table 6.2).
    a, b, c, d = 14, 5, 0, 22
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n)
    l2, u2 = wilson_interval(a + c, n)
    phi = (a * d - b * c) / math.sqrt((a + b) * (c + d) * (a + c) * (b + d))
    lower = (p2 - p1) - math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    upper = (p2 - p1) + math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    assert newcombe_interval(a, b, c, d) == pytest.approx((lower, upper))
    lo, hi = newcombe_interval(a, b, c, d)
    assert lo < -5 / 41 < hi < 0          # B is worse, and the interval says so
    # the Wilson interval itself, against the closed form at p = 19/41
    z = 1.959963984540054
    centre = (19 / 41 + z * z / 82) / (1 + z * z / 41)
    assert sum(wilson_interval(19, 41)) / 2 == pytest.approx(centre)


def test_newcombe_interval_covers_the_true_difference_about_95_percent_of_the_time():
    rng = random.Random(7)
    # P(pass A)=0.7, P(pass B)=0.6, correlated: true difference -0.1.
    cells = [(0.55, "a"), (0.15, "b"), (0.05, "c"), (0.25, "d")]
    covered = 0
    trials = 400
    for _ in range(trials):
        counts = dict.fromkeys("abcd", 0)
        for _ in range(200):
            x, acc = rng.random(), 0.0
            for p, name in cells:
                acc += p
                if x < acc:
                    counts[name] += 1
                    break
            else:
                counts["d"] += 1
        lo, hi = newcombe_interval(counts["a"], counts["b"], counts["c"], counts["d"])
        covered += lo <= -0.1 <= hi
    assert 0.91 <= covered / trials <= 0.99


def test_paired_test_on_a_comparison():
    a = [row(i, f"q{i}", "complete_grounded", "pass") for i in range(20)]
    b = [row(100 + i, f"q{i}", "incomplete_grounded" if i < 8 else "complete_grounded",
             "fail" if i < 8 else "pass") for i in range(20)]
    t = compare_rows(a, b).test
    assert (t.both_pass, t.pass_to_not, t.not_to_pass, t.neither) == (12, 8, 0, 0)
    assert t.difference == pytest.approx(-0.4)
    assert t.p_value == pytest.approx(2 / 2**8)
    assert t.ci95[0] < -0.4 < t.ci95[1] < 0
    assert "McNemar" in t.method and "Newcombe" in t.method
    assert paired_test(0, 0, 0, 0).difference is None


# --- reasons --------------------------------------------------------------------------------------


def test_reason_names_the_contradicted_claim_and_its_chunk_first():
    detail = {"bad_claims": [{"id": "k2", "text": "It costs 219 euros.", "relation": "contradicted",
                              "contradicting_chunk_ids": ["price-3"]},
                             {"id": "k3", "text": "x", "relation": "unsupported", "contradicting_chunk_ids": []}],
              "uncovered": [{"id": "q1", "text": "When?", "sufficient": "N"}], "extra": [], "errors": []}
    assert failure_reason(detail) == "k2 'It costs 219 euros.' contradicted by chunk price-3 (+1 more ungrounded)"


@pytest.mark.parametrize("detail, expected", [
    ({"bad_claims": [{"id": "k1", "text": "Made up.", "relation": "unsupported", "contradicting_chunk_ids": []}]},
     "k1 'Made up.' not supported by any chunk"),
    ({"uncovered": [{"id": "q2", "text": "When did it open?", "sufficient": "N"}]},
     "q2 'When did it open?' not answered (the context does not answer it)"),
    ({"uncovered": [{"id": "q2", "text": "When?", "sufficient": "Y"}, {"id": "q3", "text": "Who?", "sufficient": None}]},
     "q2 'When?' not answered (the context does answer it) (+1 more)"),
    ({"extra": [{"id": "k4", "text": "Everest was climbed in 1953."}]},
     "k4 'Everest was climbed in 1953.' answers nothing that was asked"),
    ({"errors": [{"phase": "faithfulness", "kind": "timeout", "message": "no reply in 60 s"}]},
     "faithfulness judge failed (timeout): no reply in 60 s"),
    ({"summary": "An unnecessary refusal: the context answers q1."}, "An unnecessary refusal: the context answers q1."),
    ({}, "no stored detail explains it"),
])
def test_reason_lines(detail, expected):
    assert failure_reason(detail) == expected


def test_stored_reasons_are_used_and_the_rest_come_from_details():
    a = [row(1, "q1", "complete_grounded", "pass"), row(2, "q2", "incomplete_grounded", "fail", reason="q1 gap")]
    b = [row(3, "q1", "complete_ungrounded", "fail", reason=None), row(4, "q2", "complete_grounded", "pass")]
    c = compare_rows(a, b)
    assert c.improvements[0].reason == "fixed: q1 gap"
    assert c.reason_trace_ids() == [3]
    filled = with_reasons(c, {3: {"bad_claims": [{"id": "k1", "text": "t", "relation": "unsupported"}]}})
    assert filled.regressions[0].reason == "k1 't' not supported by any chunk"
    assert filled.improvements[0].reason == "fixed: q1 gap"


# --- outputs --------------------------------------------------------------------------------------


def test_json_and_markdown_carry_the_same_content_and_markdown_escapes_untrusted_text():
    evil = "x | y [link](http://evil) <b>@team</b> `code`"
    a = [row(1, evil, "complete_grounded", "pass", ext="t-1"), row(2, "kept", "complete_grounded", "pass")]
    b = [row(3, evil, "complete_ungrounded", "fail", ext="t-1", reason=evil), row(4, "kept", "complete_grounded", "pass"),
         row(5, "new one", "incomplete_grounded", "fail")]
    c = compare_rows(a, b, run_a={"id": 1, "name": "base"}, run_b={"id": 2, "name": "cand"})
    data = c.to_dict()
    md = to_markdown(c)
    assert data["regressions"][0]["key"] == "t-1" and data["regressions"][0]["reason"] == evil
    assert "t\\-1" not in md and "t-1" in md          # '-' is not special
    assert "[link](http://evil)" not in md and "<b>" not in md and "@team" not in md
    assert "\\[link\\]\\(http://evil\\)" in md and "\\<b\\>" in md
    for line in md.splitlines():
        if line.startswith("| t-1"):
            assert line.count(" | ") == 3            # the pipe in the reason did not add a column
    assert "Only in B: 1" in md and data["only_in_b"][0]["key"] == "new one"
    assert "Regressions (pass → fail): 1" in md and "run 1 base" in md
    json.dumps(data)  # serialisable


def test_compare_of_ten_thousand_rows_is_fast():
    import time

    rng = random.Random(1)
    cells = [c for c in CELLS if c != "indeterminate"]

    def run(offset):
        out = []
        for i in range(10_000):
            cell = rng.choice(cells)
            out.append(row(offset + i, f"query {i}", cell, "pass" if cell == "complete_grounded" else "fail",
                           ext=f"id-{i}", suff=rng.random(), faith=rng.random(), claims=3, extra=rng.randint(0, 1)))
        return out

    a, b = run(0), run(10_000)
    start = time.perf_counter()
    c = compare_rows(a, b)
    assert time.perf_counter() - start < 2.0   # the whole command's budget; typically ~0.15 s
    assert c.matched == 10_000


# --- end to end: the worked example of docs/compare.md ----------------------------------------------

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"


def _cli(*args):
    from typer.testing import CliRunner

    from veralith.cli import app

    return CliRunner().invoke(app, list(args))


@pytest.fixture
def two_runs():
    assert _cli("eval", str(EXAMPLES / "traces.jsonl"), "--run-name", "baseline").exit_code == 0
    assert _cli("eval", str(EXAMPLES / "traces_v2.jsonl"), "--run-name", "candidate").exit_code == 0


# Set up before `two_runs`: the SQLite file, then PostgreSQL as VERALITH_DB_URL.
@pytest.mark.usefixtures("store_url")
def test_the_worked_example_finds_the_planted_regressions_and_fixes(two_runs):
    result = _cli("compare", "baseline", "candidate", "--json")
    assert result.exit_code == 3                       # regressions > --max-regressions 0: a check failed
    data = json.loads(result.output)
    regressions = {r["key"]: r for r in data["regressions"]}
    assert set(regressions) == {"support-001", "support-002"}
    assert "contradicted by chunk policy-3" in regressions["support-002"]["reason"]
    assert "contradicted by chunk kb-12" in regressions["support-001"]["reason"]
    assert {r["key"] for r in data["improvements"]} >= {"support-003", "support-004", "science-001", "hist-002"}
    assert all(r["reason"].startswith("fixed: ") for r in data["improvements"])
    assert [o["key"] for o in data["only_in_a"]] == ["geo-001"] and [o["key"] for o in data["only_in_b"]] == ["support-005"]
    assert data["matched"] == data["matched_by_external_id"] == 11
    t = data["paired_test"]
    assert t["n"] == 11 and t["ci95"][0] < t["difference"] < t["ci95"][1]


def test_max_regressions_sets_the_exit_code(two_runs):
    assert _cli("compare", "1", "2", "--max-regressions", "2").exit_code == 0
    assert _cli("compare", "1", "2", "--max-regressions", "1").exit_code == 3
    itself = _cli("compare", "2", "2")
    assert itself.exit_code == 0 and "same run" in itself.output  # a run against itself: nothing moved, and said


def test_text_json_and_markdown_say_the_same(two_runs):
    data = json.loads(_cli("compare", "baseline", "candidate", "--format", "json").output)
    md = _cli("compare", "baseline", "candidate", "--format", "markdown").output
    text = _cli("compare", "baseline", "candidate").output
    for change in data["regressions"] + data["improvements"]:
        assert change["key"] in md and change["key"] in text
    assert f"Regressions (pass → fail): {len(data['regressions'])}" in md
    assert f"{len(data['regressions'])} regression(s)" in text
    diff = data["paired_test"]["difference"] * 100
    assert f"{diff:+.1f} pts" in md and f"{diff:+.1f} pts" in text


def test_an_unknown_run_or_no_database_is_a_clear_error(two_runs, tmp_path, monkeypatch):
    result = _cli("compare", "baseline", "nope")
    assert result.exit_code == 1 and "no run with id or name 'nope'" in result.output


def test_compare_without_a_database_creates_none():
    from pathlib import Path

    from veralith.config import settings

    result = _cli("compare", "a", "b")
    assert result.exit_code == 1 and "no database yet" in result.output
    assert not Path(settings.db_path).exists()


@pytest.mark.usefixtures("store_url")
def test_an_sdk_run_compares_with_reasons_read_from_the_store():
    import veralith

    c = ["Paris is the capital of France."]
    veralith.log("What is the capital of France?", c, "The capital of France is Paris.", sync=True, run="old")
    veralith.log("What is the capital of France?", c, "The capital of France is Lyon.", sync=True, run="new")
    data = json.loads(_cli("compare", "old", "new", "--json").output)
    [reg] = data["regressions"]
    assert reg["key"] == "What is the capital of France?" and "Lyon" in reg["reason"]


def test_limit_caps_the_lists_of_text_and_markdown_but_never_the_counts_or_json():
    a = [row(i, f"q{i}", "complete_grounded", "pass") for i in range(30)]
    b = [row(100 + i, f"q{i}", "complete_ungrounded", "fail", reason=f"why {i}") for i in range(30)]
    c = compare_rows(a, b)
    md = to_markdown(c, limit=5)
    assert "Regressions (pass → fail): 30" in md and "… and 25 more" in md
    assert md.count("| q") == 5 and to_markdown(c).count("| q") == 30
    assert len(c.to_dict()["regressions"]) == 30
    from rich.console import Console

    from veralith.cli.compare import comparison_view

    console = Console(width=120, record=True, file=__import__("io").StringIO())
    console.print(comparison_view(c, limit=5))
    text = console.export_text()
    assert "30 regression(s)" in text and "… and 25 more" in text and "why 5" not in text
