"""`veralith patterns` (veralith.patterns): failing traces grouped by shared cause, on both stores.

The log is tests/patterns_log.py's (a generated help-centre history with background failures spread
over every topic and document), judged in two runs: in "after" an outdated price list contradicts
the answers that retrieve it; every run has a topic retrieval misses. The planted causes must come
out first in their sections, the background noise must not.
"""

from __future__ import annotations

import json
import re

import pytest
from patterns_log import BAD_SOURCE, IDLE_SOURCE, MISSED_TERM, fill_two_runs, planted_log
from typer.testing import CliRunner
from work_support import save_result

from veralith.cli import app
from veralith.cli.exits import ExitCode
from veralith.patterns import find_patterns, to_markdown
from veralith.patterns.claims import claim_kinds
from veralith.patterns.topics import cluster
from veralith.store import ops
from veralith.store.runs import RunNotFound

N = 1000


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def filled_url(request, tmp_path_factory):
    """The two-run log, written once per store for this module (the tests only read it)."""
    from conftest import _close_stores

    from veralith.store import open_store

    if request.param == "postgres":
        server = request.getfixturevalue("pg_server")
        url = server.new_database()
    else:
        url = "sqlite:///" + str(tmp_path_factory.mktemp("patterns") / "log.db")
    fill_two_runs(open_store(url), N)
    _close_stores()
    yield url
    if request.param == "postgres":
        server.drop_database(url)


@pytest.fixture
def filled(filled_url, tmp_path, monkeypatch):
    """The log's store, made the configured one (the CLI reads it)."""
    from conftest import _close_stores

    from veralith.config import settings
    from veralith.store import open_store

    monkeypatch.setenv("VERALITH_DB_URL", filled_url)
    monkeypatch.setenv("VERALITH_SPOOL_DIR", str(tmp_path / "spool"))
    settings.reload()
    yield open_store(filled_url)
    _close_stores()


def _keys(found, kind: str) -> list[str]:
    return [g.key for g in found.section(kind).groups]


def test_the_planted_causes_rank_first_and_the_noise_does_not_outrank_them(filled):
    found = find_patterns(filled)
    assert found.traces == N and 0 < found.failing < N
    source = found.section("source").groups
    assert source[0].key == BAD_SOURCE
    assert source[0].traces > 2 * source[1].traces            # the noise is spread thin
    assert source[0].figures["grounding"] == 0 and source[0].figures["contradicting"] == source[0].traces
    topics = found.section("topic").groups
    assert MISSED_TERM in topics[0].terms
    assert all(MISSED_TERM not in g.terms for g in topics[1:])
    # A trace belongs to one topic at most, so the counts add up to at most the failing traces.
    assert sum(g.traces for g in topics) <= found.failing
    assert IDLE_SOURCE in _keys(found, "idle_source")
    assert set(_keys(found, "claim")) <= {"numbers", "dates", "names"} and found.section("claim").groups
    moves = found.section("transition").groups
    assert moves[0].key == "complete_grounded → complete_ungrounded"
    # The traces the price list broke (those that failed already in "before" did not move).
    assert source[0].traces / 2 <= moves[0].traces <= source[0].traces
    assert found.scope["against"] == "#1 before" and found.scope["compared"] == "#2 after"


def test_groups_are_ranked_by_the_traces_they_explain(filled):
    found = find_patterns(filled, limit=50)
    for section in found.sections:
        counts = [g.traces for g in section.groups]
        assert counts == sorted(counts, reverse=True), section.kind
        assert all(n >= 2 for n in counts)                     # min_traces
        assert section.total_groups >= len(section.groups)
    assert len(find_patterns(filled, limit=1).section("source").groups) == 1


def test_examples_are_failing_traces_of_the_group_with_their_own_cause(filled):
    found = find_patterns(filled, examples=2)
    bad = found.section("source").groups[0]
    assert len(bad.examples) == 2
    for e in bad.examples:
        result = filled.read(ops.load_result, e.trace_id)
        assert result.status.quality_gate.value == "fail"
        assert any(c.source == BAD_SOURCE for c in result.context)
        assert "contradicted by chunk" in e.reason
    topic = found.section("topic").groups[0]
    assert all(MISSED_TERM in e.reason.lower() for e in topic.examples)


def test_the_scope_narrows_to_a_run_a_knowledge_base_and_a_time_window(filled):
    before = find_patterns(filled, run="before")
    assert before.traces == N
    # In "before" the price list still agreed: no failing trace it contradicts in that run's results
    # is counted from "before" itself, but its traces now hold the later result (said in a note).
    assert any("judged again by a later run" in note for note in before.notes)
    assert before.section("transition").note and "no run before" in before.section("transition").note
    assert find_patterns(filled, kb="nope").traces == 0
    assert find_patterns(filled, kb="shop").traces == N
    assert find_patterns(filled, since="2999-01-01T00:00:00+00:00").traces == 0
    assert find_patterns(filled, until="2000-01-01T00:00:00+00:00").traces == 0
    assert find_patterns(filled, since="2000-01-01T00:00:00+00:00", until="2999-01-01T00:00:00+00:00").traces == N
    against = find_patterns(filled, run="after", against="before")
    assert _keys(against, "transition")[0] == "complete_grounded → complete_ungrounded"
    with pytest.raises(RunNotFound):
        find_patterns(filled, run="nope")


def test_an_empty_history_has_no_groups(store):
    found = find_patterns(store)
    assert (found.traces, found.failing) == (0, 0)
    assert all(not s.groups for s in found.sections)
    assert "needs two runs" in found.section("transition").note


def test_json_and_markdown_carry_the_same_groups(filled):
    found = find_patterns(filled)
    data = json.loads(json.dumps(found.to_dict()))
    assert [s["kind"] for s in data["sections"]] == ["source", "topic", "claim", "idle_source", "transition",
                                                     "missed_chunk", "missed_fact"]
    # This log has no reference: the reference sections say so (tests/test_patterns_reference.py has them).
    assert data["sections"][-1]["empty"].startswith("no judged trace here has a reference")
    assert data["sections"][0]["groups"][0]["key"] == BAD_SOURCE
    md = to_markdown(found)
    assert "### Documents that contradict answers" in md
    assert "help/billing/price-list-2019.md" in md
    assert md.count("| 1 |") == sum(1 for s in found.sections if s.groups)


# --- untrusted text: a document name and claims written to attack each output ----------------

EVIL = "[bold red]x[/bold red]|<img src=x onerror=alert(1)>](http://evil)\x1b[2J"


def _with_evil_source(store) -> None:
    """Four failing traces whose contradicting document is named EVIL."""
    for result in planted_log(4, start=5000, bad_rate=1.0, stale_prices=True):
        chunks = [c.model_copy(update={"source": EVIL}) if c.source == BAD_SOURCE else c for c in result.context]
        assert chunks != result.context and result.status.quality_gate.value == "fail"
        save_result(store, result.model_copy(update={"context": chunks}))


def test_untrusted_text_is_escaped_in_markdown(store):
    _with_evil_source(store)
    found = find_patterns(store)
    assert _keys(found, "source") == [EVIL]
    md = to_markdown(found)
    assert "\x1b" not in md
    unescaped = re.sub(r"\\.", "", md)   # what Markdown reads as syntax: no tag, link or markup left
    assert "<" not in unescaped and "](" not in unescaped and "[bold" not in unescaped
    table_rows = [line for line in unescaped.splitlines() if line.startswith("| 1 |")]
    assert table_rows and all(line.count("|") == 6 for line in table_rows)   # no column injected


def test_untrusted_text_is_shown_literally_in_the_terminal(tmp_path):
    from veralith.store import open_store

    _with_evil_source(open_store())
    result = CliRunner().invoke(app, ["patterns", "--limit", "1"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert "[bold red]x[/bold red]" in result.output        # shown, not styled
    assert "\x1b[2J" not in result.output                   # no terminal control reaches the screen
    as_json = CliRunner().invoke(app, ["patterns", "--json"])
    assert "\x1b" not in as_json.stdout
    assert json.loads(as_json.stdout)["sections"][0]["groups"][0]["key"] == EVIL


# --- the command --------------------------------------------------------------------------------


def _cli(*args: str):
    return CliRunner().invoke(app, ["patterns", *args])


def test_the_command_on_both_stores(filled):
    shown = _cli("--json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["sections"][0]["groups"][0]["key"] == BAD_SOURCE
    text = _cli("--limit", "1")
    assert text.exit_code == 0 and BAD_SOURCE in text.output and "fix:" in text.output
    md = _cli("--markdown", "--run", "after")
    assert md.exit_code == 0 and md.output.startswith("## Veralith: failure patterns")
    assert _cli("--kb", "shop", "--since", "7d").exit_code == 0


def test_the_command_with_no_history_says_so_with_exit_1(tmp_path):
    result = _cli()
    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.stderr.strip() == "error: no database yet: run `veralith eval FILE` first"


def test_the_command_with_no_judged_trace_in_scope_says_so_with_exit_1(filled):
    result = _cli("--since", "2999-01-01")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert "no judged traces (created since 2999-01-01" in result.stderr and "nothing to group" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--until", "soon"], "--until 'soon' is neither an ISO date/time nor a duration"),
    (["--since", "1d", "--until", "2d"], "is not before --until"),
    (["--kb", "nope"], "--kb 'nope': the knowledge base 'nope' has no traces"),
])
def test_bad_options_are_one_line_with_exit_2(filled, args, message):
    result = _cli(*args)
    assert result.exit_code == ExitCode.ERROR
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


# --- the parts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, kinds", [
    ("The Pro plan costs $12 per month.", {"number", "name"}),
    ("It changed on 12 March 2024.", {"date"}),
    ("It changed in 2024.", {"date"}),
    ("You may do it twice.", {"number"}),
    ("Use the Harbor app.", {"name"}),
    ("Order the X200 model.", {"name"}),
    ("It is done in the settings.", set()),
])
def test_claim_kinds(text, kinds):
    assert claim_kinds(text) == frozenset(kinds)


def test_a_word_every_question_uses_is_no_topic_however_often_it_is_missed():
    # "order" is in every sub-question and missed at the overall rate; "export" is missed every time.
    judged = [(i % 4 != 0, "how do I change my order") for i in range(200)]
    judged += [(False, "how do I export my order") for _ in range(10)]
    missed = [(t, "q1", "how do I change my order") for t in range(30)]
    missed += [(100 + t, "q1", "how do I export my order") for t in range(6)]
    topics = cluster(missed, judged, min_traces=2)
    assert [t.words[0] for t in topics] == ["export"]
    assert topics[0].trace_ids == tuple(range(105, 99, -1)) and topics[0].miss_rate == 1.0


def test_a_word_in_every_question_of_a_small_sample_is_no_topic_nor_part_of_one():
    # Too few uses to measure a miss rate ("too rare to tell") must not make a word that every
    # sub-question uses look rare: "case" is in all four, so it is neither a topic nor a label word.
    questions = ["In this case, how do I reset the router?", "In this case, can the router be reset remotely?",
                 "What case numbers does billing use?", "Is my case open?"]
    judged = [(False, questions[0]), (False, questions[1]), (True, questions[2]), (False, questions[3])]
    missed = [(1, "q1", questions[0]), (2, "q1", questions[1]), (3, "q1", questions[3])]
    topics = cluster(missed, judged, min_traces=2)
    assert [sorted(t.words) for t in topics] == [["reset", "router"]]
    assert all("case" not in t.words for t in topics)


def test_an_empty_section_says_the_minimum_and_what_fell_short_of_it():
    """The documented compare example (docs/compare.md): two regressions into different cells and two
    documents contradicting one claim each. No group reaches two traces, and every view says why a
    section is empty instead of a bare "none"."""
    from io import StringIO
    from pathlib import Path

    from rich.console import Console

    from veralith.cli.patterns import patterns_view
    from veralith.store import open_store

    examples = Path(__file__).resolve().parents[1] / "examples"
    runner = CliRunner()
    for name, path in (("baseline", "traces.jsonl"), ("candidate", "traces_v2.jsonl")):
        assert runner.invoke(app, ["eval", str(examples / path), "--run-name", name]).exit_code == 0
    found = find_patterns(open_store())
    source, moves = found.section("source"), found.section("transition")
    assert source.groups == [] and moves.groups == []
    assert {s.min_traces for s in found.sections} == {2}
    assert source.none_found.startswith("none found: a group needs at least 2 failing traces; 2 document(s) "
                                        "contradict claims in fewer: ")
    assert moves.none_found == ("none found: a group needs at least 2 failing traces; 2 move(s) into failing cells "
                                "have fewer: complete_grounded → complete_ungrounded (1), complete_grounded → "
                                "incomplete_ungrounded (1)")
    assert "None found: a group needs at least 2 failing traces; 2 document\\(s\\) contradict claims" in to_markdown(found)
    console = Console(file=StringIO(), width=300, color_system=None)
    console.print(patterns_view(found))
    assert moves.none_found in console.file.getvalue() and "\nnone found\n" not in console.file.getvalue()
    assert json.loads(json.dumps(found.to_dict()))["sections"][0]["below"] == source.below
