"""`veralith eval` through the real OpenAI SDK against the fake server on 127.0.0.1: faults and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veralith.cli import app
from veralith.config import settings
from veralith.models import EvaluationResult

pytest.importorskip("veralith.store.repository")

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "tests" / "fake_openai_server.py"


def _traces(n: int) -> list[dict]:
    # Distinct texts, so no reply is served from the cache and every trace costs real round trips.
    return [{"id": i, "query": f"What is the boiling point of compound {i}?",
             "context": [f"Compound {i} boils at {100 + i} degrees Celsius.", f"Compound {i} is a liquid."],
             "response": f"Compound {i} boils at {100 + i} degrees Celsius. It is a liquid."} for i in range(n)]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _statuses(db_path: Path) -> dict[str, int]:
    if not db_path.exists():
        return {}
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
    try:
        return dict(conn.execute("SELECT status, COUNT(*) FROM traces GROUP BY status").fetchall())
    except sqlite3.OperationalError:   # schema not created yet
        return {}
    finally:
        conn.close()


@pytest.fixture
def openai_env(openai_server, monkeypatch):
    monkeypatch.setenv("VERALITH_BACKEND", "openai")
    monkeypatch.setenv("VERALITH_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("VERALITH_API_KEY", "test")
    monkeypatch.setenv("VERALITH_MAX_RETRIES", "1")
    monkeypatch.setenv("VERALITH_TIMEOUT_S", "10")
    settings.reload()
    return openai_server


@pytest.mark.parametrize("async_calls", ["0", "1"])   # a thread per trace, or one event loop
def test_flaky_server_every_trace_done_or_carrying_its_judge_error(openai_env, tmp_path, monkeypatch, async_calls):
    monkeypatch.setenv("VERALITH_ASYNC_CALLS", async_calls)
    settings.reload()
    openai_env.set_faults(rate_429=0.2, rate_500=0.1, rate_truncated=0.05, seed=11)
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(app, ["eval", str(_write(tmp_path / "t.jsonl", _traces(24))), "-c", "8",
                                      "-o", str(out)])
    text = out.read_text()
    results = [EvaluationResult.model_validate_json(line) for line in text.splitlines()]
    assert len(results) == 24 and "nan" not in text.lower()
    with_errors = [r for r in results if r.errors]
    assert result.exit_code == (2 if with_errors else 0), result.output
    assert with_errors, "the fault rates should have exhausted some retries"
    for r in with_errors:
        assert r.status.execution.value in ("partial", "error", "timeout")
        if r.failure_cell is None:
            assert r.status.quality_gate.value == "indeterminate"
        assert f"trace {r.trace_id}: judge errors" in result.stderr
    assert _statuses(Path(settings.db_path)) == {"done": 24}


def test_no_persist_with_the_openai_backend_creates_no_database(openai_env, tmp_path):
    result = CliRunner().invoke(app, ["eval", str(_write(tmp_path / "t.jsonl", _traces(3))), "--no-persist"])
    assert result.exit_code == 0, result.output
    assert not Path(settings.db_path).exists() and openai_env.count >= 6


def _start_server(*args: str) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", "--auto", *args],
                              stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline().strip()
    assert line.startswith("READY "), line
    return server, line.split()[1]


@pytest.mark.slow
@pytest.mark.parametrize("async_calls", ["0", "1"])   # a thread per trace, or one event loop
def test_ctrl_c_keeps_finished_traces_leaves_the_rest_pending_and_resume_finishes_them(tmp_path, monkeypatch,
                                                                                      async_calls):
    """Ctrl-C is sent on a state, not after a sleep: once a trace is done, the next is running
    (claimed) and a third is read and stored but not started (one worker, so it waits: a trace takes
    about 2 s of judge calls at 0.4 s each, and the interrupt lands long before it could start).

    A Ctrl-C sent earlier, before any record waits, is not lost either (exit 130 every time, what
    finished kept): only nothing is left pending then (docs/cli.md, CHANGELOG)."""
    server, base_url = _start_server("--latency", "0.4")
    db_path = tmp_path / "v.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    env.update(VERALITH_DB_PATH=str(db_path), VERALITH_BACKEND="openai", VERALITH_BASE_URL=base_url,
               VERALITH_API_KEY="test", PYTHONPATH=str(REPO), VERALITH_ASYNC_CALLS=async_calls)
    path = _write(tmp_path / "t.jsonl", _traces(40))
    try:
        proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "eval", str(path), "-c", "1"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        # done, running (claimed: its worker is busy) and pending (read and stored, queued behind it)
        while not all(n >= 1 for n in map(_statuses(db_path).get, ("done", "running", "pending"), (0, 0, 0))):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 130, stderr
        summary = " ".join(stdout.split())   # the table wraps at 80 columns in a pipe
        assert "interrupted" in summary and "veralith resume" in summary
        counts = _statuses(db_path)
        assert counts.get("done", 0) >= 1 and counts.get("pending", 0) >= 1, (counts, stdout, stderr)
        assert f"{counts['pending']} pending" in summary, summary  # what it says is what it left
        assert set(counts) <= {"done", "pending"}  # running ones were waited for, none left half-done
        assert sum(counts.values()) < 40          # it stopped reading too: at most 2 x concurrency ahead

        for key, value in env.items():
            if key.startswith("VERALITH_"):
                monkeypatch.setenv(key, value)
        settings.reload()
        resumed = CliRunner().invoke(app, ["resume", "-c", "4"])
        assert resumed.exit_code == 0, resumed.output
        assert _statuses(db_path) == {"done": sum(counts.values())}
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_server_that_truncates_prompts_gives_recorded_judge_errors_not_verdicts(openai_env, tmp_path):
    from fake_openai_server import Reply, auto_reply, task_of

    # An Ollama-like server at a small context: it reports only the tokens it kept of long prompts.
    openai_env.responder = lambda body: (Reply.of(auto_reply(body), usage={"prompt_tokens": 120})
                                         if task_of(body) in ("sufficiency", "faithfulness") else None)
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(app, ["eval", str(_write(tmp_path / "t.jsonl", _traces(3))), "--no-persist",
                                      "-o", str(out)])
    assert result.exit_code == 2, result.output
    results = [EvaluationResult.model_validate_json(line) for line in out.read_text().splitlines()]
    for r in results:
        assert sorted((e.phase.value, e.kind) for e in r.errors) == [("faithfulness", "context_truncated"),
                                                                     ("sufficiency", "context_truncated")]
        assert "num_ctx" in r.errors[0].message
        assert r.faithfulness == [] and r.failure_cell is None
    assert "context_truncated" in result.stderr


def test_a_model_without_a_price_is_one_warning_line_not_a_python_warning(openai_env, tmp_path):
    path = _write(tmp_path / "in.jsonl", _traces(2))
    shown = CliRunner().invoke(app, ["eval", str(path), "--no-persist", "--model", "unpriced-model-36"])
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.stderr.splitlines() if "unpriced-model-36" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: no price known for model 'unpriced-model-36'"), lines
    assert "CostWarning" not in shown.stderr and "pricing.py" not in shown.stderr and "price = " not in shown.stderr
    assert "cost                 unknown" in shown.stdout or "unknown" in shown.stdout


def test_the_one_line_warning_escapes_control_characters_and_leaves_other_warnings_alone(capsys):
    import warnings

    from veralith.cli.command import one_line_warnings
    from veralith.observability.pricing import CostWarning

    passed_on = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, *rest: passed_on.append((category, str(message)))
        with one_line_warnings():
            warnings.warn("model 'x\x1b[31m'\nhas no price", CostWarning, stacklevel=1)
            warnings.warn("something of Python's", DeprecationWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert err == "warning: model 'x\\x1b[31m' has no price\n"
    assert passed_on == [(DeprecationWarning, "something of Python's")]
