"""A dead judge server stops a run early: the circuit breaker, JudgeServerDown, and `veralith eval`/`resume`."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer, Reply

from veralith.errors import JudgeCallError, JudgeServerDown
from veralith.llm.client import OpenAIClient
from veralith.llm.server import Breaker
from veralith.llm.tasks import QUESTIONS, QuestionsInput

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:   # free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_breaker_opens_after_failures_in_a_row_over_a_span_and_lets_one_probe_through(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("veralith.llm.server.time.monotonic", lambda: now[0])
    breaker = Breaker("http://***@host/v1", failures=3, span_s=2.0, cooldown_s=30.0)
    for _ in range(5):   # a burst at one instant (every thread saw the same blip) does not open it
        breaker.failure("connection failed")
    breaker.success()
    breaker.failure("HTTP 502")
    now[0] += 1.0
    breaker.failure("HTTP 502")
    now[0] += 1.5
    with pytest.raises(JudgeServerDown) as info:
        breaker.failure("HTTP 502")
    assert info.value.server == "http://***@host/v1" and "3 requests in a row failed (last: HTTP 502)" in str(info.value)
    assert info.value.retry_after_s == 30.0
    now[0] += 10
    with pytest.raises(JudgeServerDown) as info:   # open: refused at once, saying for how long
        breaker.before_request()
    assert info.value.retry_after_s == pytest.approx(20.0)
    now[0] += 25
    breaker.before_request()                        # cooled down: one probe goes through
    with pytest.raises(JudgeServerDown):
        breaker.before_request()                    # ... and only one
    breaker.success()                               # the probe answered: closed again
    breaker.before_request()
    assert not breaker.is_open


def test_a_dead_server_raises_server_down_and_then_stops_calling(monkeypatch):
    monkeypatch.setattr("veralith.llm.retry.delay", lambda exc, retries: 0.3)
    url = f"http://user:pw@127.0.0.1:{_free_port()}/v1".replace("user:pw@", "")
    client = OpenAIClient(base_url=url, api_key="test", model="m", timeout_s=2, max_retries=3)
    with pytest.raises(JudgeCallError) as first:   # 4 refused attempts over 0.9 s: not yet "down"
        client.run(QUESTIONS, QuestionsInput(query="Why?"))
    assert first.value.kind == "connection" and first.value.attempts == 4
    assert "after 4 attempts" in first.value.message
    time.sleep(1.2)
    with pytest.raises(JudgeServerDown) as down:
        client.run(QUESTIONS, QuestionsInput(query="Why?"))
    assert down.value.server == url and down.value.usage.calls == 1
    started = time.monotonic()
    with pytest.raises(JudgeServerDown) as again:   # open: no request at all
        client.run(QUESTIONS, QuestionsInput(query="How?"))
    assert time.monotonic() - started < 0.1 and again.value.usage.calls == 0


def test_server_down_passes_through_evaluate_instead_of_an_indeterminate_result(openai_server, monkeypatch):
    from veralith.config import settings
    from veralith.pipeline.evaluate import evaluate

    monkeypatch.setattr("veralith.llm.server.BREAKER_SPAN_S", 0.0)
    openai_server.enqueue(*[Reply.error(503)] * 40)
    with settings.override(backend="openai", base_url=openai_server.base_url, judge_model="m", max_retries=2,
                           pricing={"*": {"input": 0, "output": 0}}), pytest.raises(JudgeServerDown):
        evaluate("How tall is it?", ["It is 330 metres tall."], "It is 330 metres tall.", persist=False)


def _write(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "query": f"What is the boiling point of compound {i}?",
                                        "context": [f"Compound {i} boils at {100 + i} degrees Celsius."],
                                        "response": f"Compound {i} boils at {100 + i} degrees Celsius."}) + "\n"
                            for i in range(n)), encoding="utf-8")
    return path


def _statuses(db_path: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
    try:
        return dict(conn.execute("SELECT status, COUNT(*) FROM traces GROUP BY status").fetchall())
    finally:
        conn.close()


def test_eval_of_1000_records_against_a_dead_server_stops_early_and_resume_finishes_them(tmp_path):
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    db_path = tmp_path / "v.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    env.update(VERALITH_DB_PATH=str(db_path), VERALITH_BACKEND="openai", VERALITH_BASE_URL=base_url,
               VERALITH_JUDGE_MODEL="m", VERALITH_PRICING='{"*": {"input": 0, "output": 0}}', PYTHONPATH=str(REPO))
    path = _write(tmp_path / "t.jsonl", 1000)
    # Compiled modules, as an installed package has them (this machine may set PYTHONDONTWRITEBYTECODE, and
    # compiling the openai package from source takes seconds of its own): the clock is for the run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-c", "import veralith.cli, veralith.llm.client, veralith.store.sqlite"],
                   env=env, check=True, timeout=120)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "veralith.cli", "eval", str(path)], env=env, capture_output=True,
                          text=True, timeout=120)
    elapsed = time.monotonic() - started
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert elapsed < 15, elapsed
    assert len(lines) == 1 and base_url in lines[0] and "veralith resume" in lines[0], done.stderr
    assert "1000 traces left pending" in lines[0] and "Traceback" not in done.stderr
    assert _statuses(db_path) == {"pending": 1000}

    server = FakeOpenAIServer(port=port).start()
    try:
        env.update(VERALITH_SERVER_CONCURRENCY="8")
        resumed = subprocess.run([sys.executable, "-m", "veralith.cli", "resume", "-c", "8"], env=env,
                                 capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 0, resumed.stderr
        assert _statuses(db_path) == {"done": 1000}
    finally:
        server.stop()
