"""`veralith list` and `stats`: creation times, --since, columns that fit the terminal, --wide, filter checks."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from rich.console import Console
from typer.testing import CliRunner
from work_support import save_result

from veralith.cli import app, filters, listing, render
from veralith.models import (
    Availability,
    ContextChunk,
    Diagnosis,
    EvaluationResult,
    Execution,
    FailureCell,
    Gate,
    Status,
    SufficiencyLevel,
    ThresholdSource,
)

LONG_QUERY = ("Which of the three enterprise support plans includes a named technical account manager, and how "
              "many hours a month of that manager's time does it cover?")
NOW = dt.datetime.now(dt.timezone.utc)
SEEDED_AT = NOW     # reset by the `traces` fixture


def _result(kb: str, cell: FailureCell, query: str) -> EvaluationResult:
    gate = Gate.pass_ if cell is FailureCell.complete_grounded else Gate.fail
    return EvaluationResult(
        knowledge_base=kb, query=query, response="r", context=[ContextChunk(id="c0", text="t")],
        diagnosis=Diagnosis(failure_cell=cell, sufficiency_level=SufficiencyLevel.high, sufficiency_fraction=1.0,
                            faithfulness_fraction=0.5, threshold=0.5, threshold_source=ThresholdSource.fallback,
                            n_sub_questions=1, n_claims=2),
        status=Status(execution=Execution.success, availability=Availability.assessed, quality_gate=gate,
                      reason="r", summary="s"),
        backend="local", judge_model="local-heuristics")


@pytest.fixture
def traces() -> dict[str, int]:
    """Four stored traces created 5 minutes, 3 hours, 2 days and 40 days ago; name -> trace id."""
    from store_support import sql

    from veralith.store import open_store

    global SEEDED_AT
    # Ages are relative to the moment the fixture runs, not to import time: in a long suite the
    # module is imported minutes before this test, and "5m ago" would read "8m ago".
    SEEDED_AT = dt.datetime.now(dt.timezone.utc)
    store = open_store()   # the configured one: a test marked `both` runs on each store
    seeds = {"fresh": (dt.timedelta(minutes=5), "engineering", FailureCell.incomplete_ungrounded, LONG_QUERY),
             "today": (dt.timedelta(hours=3), "support", FailureCell.complete_grounded, "How do I reset it?"),
             "week": (dt.timedelta(days=2), "support", FailureCell.extra_ungrounded, "What is the SLA?"),
             "old": (dt.timedelta(days=40), "finance", FailureCell.complete_ungrounded, "What is a P/E ratio?")}
    ids = {}
    for name, (age, kb, cell, query) in seeds.items():
        ids[name] = save_result(store, _result(kb, cell, query))
        sql(store, "UPDATE traces SET created_at = ? WHERE id = ?",
            [(SEEDED_AT - age).isoformat(timespec="microseconds"), ids[name]])
    return ids


# The SQLite file, then a PostgreSQL database as VERALITH_DB_URL (set up before `traces` fills it).
both = pytest.mark.usefixtures("store_url")


def _list(*args: str, columns: int = 120):
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(app, ["list", *args])


def _row(out: str, trace_id: int) -> str:
    return next(line for line in out.splitlines() if line.split()[:1] == [str(trace_id)])


@both
def test_list_shows_when_each_trace_was_created(traces):
    shown = _list()
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[0].split()[:2] == ["id", "created"]
    assert "5m ago" in _row(shown.stdout, traces["fresh"]) and "3h ago" in _row(shown.stdout, traces["today"])
    assert "2d ago" in _row(shown.stdout, traces["week"])
    assert (SEEDED_AT - dt.timedelta(days=40)).strftime("%Y-%m-%d") in _row(shown.stdout, traces["old"])



@both
@pytest.mark.parametrize("since, expected", [
    ("1h", {"fresh"}), ("24h", {"fresh", "today"}), ("1w", {"fresh", "today", "week"}), ("1d12h", {"fresh", "today"}),
    ((NOW - dt.timedelta(days=10)).strftime("%Y-%m-%d"), {"fresh", "today", "week"}),
    ((NOW - dt.timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M") + "Z", {"fresh", "today"}),
    ("2999-01-01", set()),
])
def test_list_since_takes_a_date_or_a_duration(traces, since, expected):
    shown = _list("--since", since)
    assert shown.exit_code == 0, shown.output
    listed = {name for name, trace_id in traces.items()
              if any(line.split()[:1] == [str(trace_id)] for line in shown.stdout.splitlines())}
    assert listed == expected and (shown.stdout.strip() == f"no traces match --since {since}") == (not expected)


@pytest.mark.parametrize("bad", ["yesterday", "7 days", "-3d", "2026-13-01", ""])
def test_list_since_refuses_what_it_cannot_read(traces, bad):
    shown = _list("--since", bad)
    assert shown.exit_code == 2
    assert f"error: --since {bad!r} is neither an ISO date/time nor a duration; use e.g. 2026-01-31" in shown.stderr


def test_since_reads_zones_and_durations():
    now = dt.datetime(2026, 3, 10, 12, 0, tzinfo=dt.timezone.utc)
    assert filters.since("2026-03-01", now=now) == "2026-03-01T00:00:00.000000+00:00"
    assert filters.since("2026-03-01T14:30+02:00", now=now) == "2026-03-01T12:30:00.000000+00:00"
    assert filters.since("2026-03-01T14:30:00Z", now=now) == "2026-03-01T14:30:00.000000+00:00"
    assert filters.since("90m", now=now) == "2026-03-10T10:30:00.000000+00:00"
    assert filters.since("2w", now=now) == "2026-02-24T12:00:00.000000+00:00"
    assert filters.since(None) is None
    with pytest.raises(filters.BadOption):
        filters.since("99999999999d", now=now)   # before year 1: refused, not a traceback


def test_ages_are_compact_and_the_same_in_every_zone():
    now = dt.datetime(2026, 3, 10, 12, 0, tzinfo=dt.timezone.utc)
    ago = {s: render.fmt_time((now - dt.timedelta(seconds=s)).isoformat(), now=now)
           for s in (5, 61, 7200, 86400 * 6, 86400 * 8)}
    assert ago == {5: "just now", 61: "1m ago", 7200: "2h ago", 86400 * 6: "6d ago", 86400 * 8: "2026-03-02"}
    assert render.fmt_time("2026-03-10T14:00:00+02:00", now=now, absolute=True) == "2026-03-10 12:00 UTC"
    assert render.fmt_time("2026-03-11T00:00:00+00:00", now=now) == "2026-03-11"   # clock skew: a date
    assert render.fmt_time(None, now=now) == "—"


def test_at_80_columns_the_query_keeps_a_readable_width(traces):
    shown = _list(columns=80)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    row = _row(shown.stdout, traces["fresh"])
    assert "incomplete_ungrounded" in row and "5m ago" in row            # cell whole, time kept
    query = row[row.index("Which"):].rstrip()
    assert len(query) >= 32 and query.endswith("…") and LONG_QUERY.startswith(query[:-1])
    assert lines[0].split() == ["id", "created", "cell", "gate", "query"]   # numbers, status and kb gave way


def test_at_120_columns_more_columns_come_back(traces):
    shown = _list(columns=120)
    lines = shown.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 120
    assert lines[0].split() == ["id", "created", "status", "kb", "cell", "gate", "suff", "faith", "cost", "query"]
    row = _row(shown.stdout, traces["fresh"])
    assert "engineering" in row and len(row[row.index("Which"):].rstrip()) >= 20


def test_wide_shows_every_column_and_the_whole_query(traces):
    shown = _list("--wide", columns=80)
    assert shown.exit_code == 0, shown.output
    row = _row(shown.stdout, traces["fresh"])
    assert LONG_QUERY in row and "engineering" in row and "$0.0000" in row
    assert (SEEDED_AT - dt.timedelta(minutes=5)).strftime("%Y-%m-%d %H:%M UTC") in row


def test_a_narrow_terminal_folds_status_into_the_gate_column():
    row = {"id": 1, "created_at": NOW.isoformat(), "status": "pending", "knowledge_base": "kb", "failure_cell": None,
           "quality_gate": None, "sufficiency_fraction": None, "faithfulness_fraction": None, "usd": None,
           "query_preview": LONG_QUERY, "error_message": None}
    done = {**row, "id": 2, "status": "done", "failure_cell": "complete_grounded", "quality_gate": "pass"}
    console = Console(file=StringIO(), width=80, color_system=None)
    console.print(listing.traces_table([row, done], width=80))
    lines = console.file.getvalue().splitlines()
    assert "status" not in lines[0] and "pending" in lines[1] and "pass" in lines[2]


@pytest.mark.parametrize("args, message", [
    (["--status", "finished"], "error: --status 'finished' is not a status; use one of pending, running, done, error"),
    (["--cell", "grounded"], "error: --cell 'grounded' is not a failure cell; use one of complete_grounded, "),
    (["--kb", "nosuch"], "error: --kb 'nosuch': the knowledge base 'nosuch' has no traces; knowledge bases with "
                         "traces: engineering, finance, support"),
])
def test_list_refuses_unknown_filter_values_listing_the_valid_ones(traces, args, message):
    shown = CliRunner(env={"COLUMNS": "300"}).invoke(app, ["list", *args])
    assert shown.exit_code == 2 and message in shown.stderr and shown.stdout == ""


@both
def test_list_filters_that_exist_still_filter(traces):
    assert {_row(_list("--kb", "support").stdout, traces[n]) != "" for n in ("today", "week")} == {True}
    assert str(traces["fresh"]) not in _list("--kb", "support").stdout.split()
    cell = _list("--cell", "extra_ungrounded").stdout
    assert [line.split()[0] for line in cell.splitlines()[1:]] == [str(traces["week"])]


@both
def test_stats_for_an_unknown_knowledge_base_says_it_has_no_traces(traces):
    shown = CliRunner(env={"COLUMNS": "300"}).invoke(app, ["stats", "--kb", "nosuch"])
    assert shown.exit_code == 2
    assert "the knowledge base 'nosuch' has no traces; knowledge bases with traces: engineering, finance, support" \
        in shown.stderr
    assert "threshold" not in shown.stdout.lower()
    known = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["stats", "--kb", "support"])
    assert known.exit_code == 0 and "2 evaluated of 2 traces" in known.stdout


def test_bare_veralith_prints_help_and_how_to_start():
    shown = CliRunner(env={"COLUMNS": "100"}).invoke(app, [])
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "Usage: veralith [OPTIONS] COMMAND" in out and "inspect" in out and "export" in out
    start = out[out.index("Getting started:"):].splitlines()
    assert [line.split()[:2] for line in start[1:4]] == [["veralith", "eval"], ["veralith", "list"],
                                                         ["veralith", "inspect"]]


def test_your_own_ids_get_a_column_when_traces_have_them():
    base = {"created_at": NOW.isoformat(), "status": "done", "knowledge_base": "support",
            "failure_cell": "complete_grounded", "quality_gate": "pass", "sufficiency_fraction": 1.0,
            "faithfulness_fraction": 1.0, "usd": 0.0, "query_preview": LONG_QUERY, "error_message": None}
    rows = [{**base, "id": 2, "external_id": "support-[red]002[/red]"}, {**base, "id": 1, "external_id": None}]

    def header(width: int) -> list[str]:
        console = Console(file=StringIO(), width=width, color_system=None)
        console.print(listing.traces_table(rows, width=width))
        return console.file.getvalue().splitlines()

    wide = header(140)
    assert wide[0].split()[:4] == ["id", "ext", "id", "created"] and "support-[red]002[/red]" in wide[1]
    assert wide[2].split()[1] == "—"
    assert "ext" not in header(80)[0]   # given up before the creation time when space is short



@both
@pytest.mark.parametrize("command", [["inspect", "1"], ["export", "1"]])
def test_every_kb_option_is_checked_the_same_way(traces, command):
    shown = CliRunner(env={"COLUMNS": "300"}).invoke(app, [*command, "--kb", "nosuch"])
    assert shown.exit_code == 2
    assert "error: --kb 'nosuch': the knowledge base 'nosuch' has no traces; knowledge bases with traces: " \
        "engineering, finance, support" in shown.stderr


@pytest.mark.parametrize("width", [40, 60])
def test_below_every_narrowing_the_query_gives_way_not_the_id(width):
    base = {"created_at": NOW.isoformat(), "status": "done", "knowledge_base": "support", "external_id": None,
            "failure_cell": "incomplete_ungrounded", "quality_gate": "fail", "sufficiency_fraction": 1.0,
            "faithfulness_fraction": 1.0, "usd": 0.0, "query_preview": LONG_QUERY, "error_message": None}
    console = Console(file=StringIO(), width=width, color_system=None)
    console.print(listing.traces_table([{**base, "id": 123456}], width=width))
    header, row = console.file.getvalue().splitlines()
    assert header.split()[:3] == ["id", "cell", "gate"]
    assert row.split()[0] == "123456" and row.split()[1].startswith("incomplete_") and len(row) <= width


@pytest.mark.parametrize("command", [["export"], ["resume"], ["resume", "--failed"]])
def test_kb_without_ids_is_a_bad_option_not_every_knowledge_base(traces, command):
    # Ignoring it would export (or re-judge, at a cost) the traces of every knowledge base.
    shown = CliRunner(env={"COLUMNS": "300"}).invoke(app, [*command, "--kb", "support"])
    assert shown.exit_code == 2, shown.output
    assert "error: --kb 'support' names the knowledge base of the ids given, and no id was given" in shown.stderr
    assert shown.stdout == ""


@pytest.mark.parametrize("width", [60, 80])
def test_a_folded_status_is_measured_so_no_header_or_id_is_cut(width):
    # Traces still pending show their status in the gate column once it folds: that column is wider
    # than its gates alone, and rich used to take the difference out of the id and the cell header.
    base = {"created_at": NOW.isoformat(), "knowledge_base": "support", "sufficiency_fraction": None,
            "faithfulness_fraction": None, "usd": None, "query_preview": LONG_QUERY, "error_message": None}
    pending = {**base, "status": "pending", "failure_cell": None, "quality_gate": None}
    rows = [{**pending, "id": 12, "external_id": "support-012"}, {**pending, "id": 11, "external_id": "support-011"},
            {**base, "id": 10, "external_id": "support-010", "status": "done", "failure_cell": "complete_grounded",
             "quality_gate": "pass", "sufficiency_fraction": 1.0, "faithfulness_fraction": 1.0, "usd": 0.0}]
    for shown in (rows[:2], rows):
        console = Console(file=StringIO(), width=width, color_system=None)
        console.print(listing.traces_table(shown, width=width))
        lines = console.file.getvalue().splitlines()
        header = lines[0].split()
        assert "…" not in lines[0] and {"id", "cell", "gate"} <= set(header), lines[0]
        assert all(len(line) <= width for line in lines)
        assert [line.split()[0] for line in lines[1:]] == [str(r["id"]) for r in shown]
        assert all("support-0…" not in line for line in lines)
        assert "pending" in lines[1]
