"""`veralith runs` at narrow widths: one line per run, a cut cell ends in "…", the run id is never cut."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from rich.console import Console
from typer.testing import CliRunner

from veralith.cli import app
from veralith.cli.runs import runs_table
from veralith.store.runs import Run

LONG_NAME = "nightly-regression-suite-for-the-support-bot-with-a-very-long-name"
LONG_MODEL = "gpt-4o-mini-2024-07-18-finetuned-support"


def _run(id: int, name: str | None, *, backend: str = "local", model: str | None = "local-heuristics",
         source: str = "eval", open: bool = False, usd_unknown: int = 0) -> Run:
    return Run(id=id, name=name, source=source, started_at="2026-11-30T17:42:05.123456+00:00",
               ended_at=None if open else "2026-11-30T17:43:00.000000+00:00", backend=backend, model=model,
               prompt_versions=None, input=None, n_traces=1200, n_pass=1000, n_fail=150, n_indeterminate=50,
               n_unevaluated=0, usd=12.3456, usd_unknown=usd_unknown)


RUNS = [_run(123456, LONG_NAME, backend="openai", model=LONG_MODEL, usd_unknown=3),
        _run(99, "baseline"), _run(7, "sdk-run", source="sdk", open=True)]


def _lines(runs: list[Run], width: int) -> list[str]:
    console = Console(file=StringIO(), width=width, color_system=None)
    console.print(runs_table(runs, width=width))
    return console.file.getvalue().splitlines()


@pytest.mark.parametrize("width", [40, 60, 80])
def test_each_run_is_one_line_within_the_width_with_its_whole_id(width):
    lines = _lines(RUNS, width)
    assert len(lines) == 2 + len(RUNS)                  # header, rule, one line per run: nothing wrapped
    assert all(len(line) <= width for line in lines)
    header, rows = lines[0].split(), lines[2:]
    assert header[:2] == ["id", "name"] and {"pass", "fail", "rate"} <= set(header)
    assert [row.split()[0] for row in rows] == ["123456", "99", "7"]
    long = rows[0]
    assert LONG_NAME not in long and "…" in long and "nightly-regr" in long   # cut, and visibly so
    assert long.split()[-1] == "%" and "83.3" in long.split()[-2]             # the rate is whole


@pytest.mark.parametrize("width", [60, 80, 100])
def test_only_text_is_cut_and_every_cut_ends_in_an_ellipsis(width):
    long = _lines(RUNS, width)[2]
    judge = f"openai {LONG_MODEL}"
    for cell in long.split():
        if cell.endswith("…"):  # a cut name or judge: what is shown is the start of the whole text
            assert LONG_NAME.startswith(cell[:-1]) or judge.split()[-1].startswith(cell[:-1]), cell
    assert {"123456", "1000", "150", "83.3"} <= set(long.split())


def test_at_80_columns_short_runs_show_every_column_uncut():
    lines = _lines(RUNS[1:], 80)
    assert lines[0].split() == ["id", "name", "started", "judge", "traces", "pass", "fail", "ind.", "rate", "cost"]
    assert "…" not in "\n".join(lines)
    assert "sdk-run (sdk, open)" in lines[3] and "$12.3456" in lines[2]


def test_wide_terminals_show_the_whole_name_and_judge():
    text = "\n".join(_lines(RUNS, 250))
    assert LONG_NAME in text and f"openai {LONG_MODEL}" in text and "$12.3456 +3?" in text and "…" not in text


@pytest.mark.parametrize("width", [40, 60, 80])
def test_veralith_runs_fits_the_terminal(tmp_path, width):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"id": "fr", "query": "What is the capital of France?",
                                "context": ["Paris is the capital of France."],
                                "response": "The capital of France is Paris."}) + "\n", encoding="utf-8")
    assert CliRunner().invoke(app, ["eval", str(path), "--run-name", LONG_NAME]).exit_code == 0
    shown = CliRunner(env={"COLUMNS": str(width)}).invoke(app, ["runs"])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert len(lines) == 3 and all(len(line) <= width for line in lines)
    assert lines[2].split()[0] == "1" and "…" in lines[2] and "100.0 %" in lines[2]
