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
from veralith.store import ops

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


def test_after_a_real_run_the_dry_run_expects_what_it_learnt_and_the_guard_keeps_its_allowance(
        runner, tmp_path, openai_server, store_url, monkeypatch):
    """Either store: no history, the allowance (said in one line); after `veralith eval`, the output
    tokens and requests per call its calls had, per task and model (said with how many past calls);
    another judge model, still the allowance; and the budget guard on the allowance throughout."""
    from veralith.llm.estimate import LearntOutput
    from veralith.llm.prompts import PROMPT_VERSIONS
    from veralith.pipeline.budget import BudgetExceeded, enforce_budget
    from veralith.store import open_store

    path = _file(tmp_path)
    for name, value in (("VERALITH_BACKEND", "openai"), ("VERALITH_BASE_URL", openai_server.base_url),
                        ("VERALITH_API_KEY", "test"), ("VERALITH_JUDGE_MODEL", "gpt-4o")):
        monkeypatch.setenv(name, value)
    settings.reload()
    env = {"COLUMNS": "200"}
    dry = ["eval", str(path), "--dry-run", "--rejudge", "--backend", "openai", "--model", "gpt-4o"]
    with settings.override(backend="openai", judge_model="gpt-4o"), warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        allowance = [estimate_trace(r["query"], r["context"], r["response"]) for r in RECORDS]
    before = runner.invoke(app, dry, env=env)
    assert before.exit_code == 0, before.output
    assert "No past runs of gpt-4o to learn output sizes from" in before.stdout
    assert _row(before.stdout, "total (2 traces)")[3] == f"{sum(e.output_tokens for e in allowance):,}"

    openai_server.usage = {"prompt_tokens": None, "completion_tokens": 7, "cached_tokens": 0}   # terse replies
    real = runner.invoke(app, ["eval", str(path), "--backend", "openai", "--model", "gpt-4o"], env=env)
    assert real.exit_code == 0, real.output
    sizes = open_store(store_url).read(ops.output_sizes)
    requests = openai_server.count
    assert {s.model for s in sizes} == {"gpt-4o"} and sum(s.calls for s in sizes) == requests
    assert sum(s.output_tokens for s in sizes) == 7 * requests

    after = runner.invoke(app, dry, env=env)
    assert after.exit_code == 0, after.output
    assert f"learnt from {requests} past calls" in after.stdout.replace("\n", " ")
    with settings.override(backend="openai", judge_model="gpt-4o"), warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        learnt = LearntOutput(tuple(sizes), dict(PROMPT_VERSIONS))
        expected = [estimate_trace(r["query"], r["context"], r["response"], learnt=learnt) for r in RECORDS]
        assert [e.learnt_calls for e in expected] == [e.calls for e in expected]
        total_output = sum(e.output_tokens for e in expected)
        assert _row(after.stdout, "total (2 traces)")[3] == f"{total_output:,}"
        assert abs(total_output - 7 * requests) <= len(RECORDS)   # what the calls wrote (each trace rounded)
        # The guard still counts the allowance: a budget between the two refuses the trace.
        between = (expected[1].usd + allowance[1].usd) / 2
        with pytest.raises(BudgetExceeded):
            enforce_budget(RECORDS[1]["query"], RECORDS[1]["context"], RECORDS[1]["response"], budget_usd=between)
    monkeypatch.setenv("VERALITH_PER_TRACE_BUDGET_USD", str(between))
    settings.reload()
    marked = runner.invoke(app, dry, env=env)
    assert "over budget" in _row(marked.stdout, "line 2")[-1]                 # by the guard's allowance
    assert _row(marked.stdout, "line 2")[-1].startswith(f"${expected[1].usd:.6f}")   # the expected cost shown

    other = runner.invoke(app, [*dry[:-1], "gpt-4o-mini"], env=env)
    assert "No past runs of gpt-4o-mini to learn output sizes from" in other.stdout
