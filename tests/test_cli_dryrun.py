"""`veralith eval FILE --dry-run`: the budget guard's estimate per trace and in total; no call, no write."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veralith.cli import app
from veralith.config import settings
from veralith.observability.cost import CostWarning
from veralith.pipeline.budget import estimate_trace

RECORDS = [
    {"id": "pe", "query": "What is a P/E ratio?",
     "context": ["The price-to-earnings (P/E) ratio is a company's share price divided by its earnings per share."],
     "response": "A P/E ratio divides a company's share price by its earnings per share."},
    {"query": "When did World War II end, and where was the surrender signed?",
     "context": ["World War II ended in 1945.", "Japan signed the surrender aboard the USS Missouri."],
     "response": "It ended in 1945. Japan signed aboard the USS Missouri and Germany signed in Reims."},
]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def _file(tmp_path: Path, extra: list[str] = ()) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS) + "".join(line + "\n" for line in extra),
                    encoding="utf-8")
    return path


def _row(output: str, label: str) -> list[str]:
    line = next(line for line in output.splitlines() if label in line)
    return [cell.strip() for cell in re.split(r"[│|]", line) if cell.strip()]


def test_dry_run_prints_the_guards_estimate_per_trace_and_in_total(runner, tmp_path, openai_server):
    path = _file(tmp_path)
    args = ["eval", str(path), "--dry-run", "--backend", "openai", "--model", "gpt-4o-mini"]
    result = runner.invoke(app, args, env={"VERALITH_BASE_URL": openai_server.base_url, "COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    with settings.override(backend="openai", judge_model="gpt-4o-mini"), warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        expected = [estimate_trace(r["query"], r["context"], r["response"]) for r in RECORDS]
    for label, est in zip(["pe", "line 2"], expected, strict=True):
        assert _row(result.stdout, label)[1:] == [str(est.calls), f"{est.input_tokens:,}", f"{est.output_tokens:,}",
                                                 f"${est.usd:.6f}"]
    total = _row(result.stdout, "total (2 traces)")
    assert total[1:4] == [str(sum(e.calls for e in expected)), f"{sum(e.input_tokens for e in expected):,}",
                          f"{sum(e.output_tokens for e in expected):,}"]
    assert total[4] == f"${sum(e.usd for e in expected):.6f}"
    assert expected[0].calls == 5 and "gpt-4o-mini" in result.stdout
    assert openai_server.count == 0                       # no model called
    assert not Path(settings.db_path).exists()            # nothing written, not even an empty database


def test_dry_run_reports_bad_lines_like_eval_and_exits_2(runner, tmp_path):
    path = _file(tmp_path, ['{"query": "q"}', "not json"])
    result = runner.invoke(app, ["eval", str(path), "--dry-run", "--backend", "openai"])
    assert result.exit_code == 2, result.output
    assert f"{path}:3:" in result.stderr and f"{path}:4:" in result.stderr
    assert "total (2 traces)" in result.stdout


def test_dry_run_names_an_unknown_price_and_marks_traces_over_budget(runner, tmp_path, monkeypatch):
    path = _file(tmp_path)
    unknown = runner.invoke(app, ["eval", str(path), "--dry-run", "--backend", "openai", "--model", "my-llama"])
    assert unknown.exit_code == 0, unknown.output
    assert "unknown" in _row(unknown.stdout, "total (2 traces)")[4]
    assert "VERALITH_PRICING" in unknown.stdout
    monkeypatch.setenv("VERALITH_PER_TRACE_BUDGET_USD", "0.001")
    settings.reload()
    budget = runner.invoke(app, ["eval", str(path), "--dry-run", "--backend", "openai", "--model", "gpt-4o"],
                           env={"COLUMNS": "200"})
    assert budget.exit_code == 0, budget.output
    assert "over budget" in _row(budget.stdout, "line 2")[-1]
    assert re.search(r"\d of 2 traces over the per-trace budget \$0\.001", budget.stdout)


def test_dry_run_on_the_local_backend_costs_nothing(runner, tmp_path):
    result = runner.invoke(app, ["eval", str(_file(tmp_path)), "--dry-run"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert _row(result.stdout, "total (2 traces)")[1:] == ["0", "0", "0", "$0.000000"]
    assert "--backend openai" in result.stdout
    assert not Path(settings.db_path).exists()
