"""Cancelling judge calls in flight (veralith.llm.cancel): the calls end at once with a cancellation the
caller can tell apart, their requests closed; `veralith eval` stopped by Ctrl-C or SIGTERM against a
server that takes 30 s to answer exits within 2 s and leaves no trace `running`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from fake_openai_server import Reply

from veralith.config import settings
from veralith.errors import JudgeCallCancelled, JudgeServerDown
from veralith.llm.cancel import allow_calls, cancel_calls
from veralith.llm.client import OpenAIClient
from veralith.llm.tasks import FAITHFULNESS, ChunkIn, ClaimIn, FaithfulnessInput

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "tests" / "fake_openai_server.py"


def _payload() -> FaithfulnessInput:
    return FaithfulnessInput(query="q", claims=[ClaimIn(id="c1", text="a claim")],
                             chunks=[ChunkIn(id="k1", text="a chunk", source=None)])


def _wait_for(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def _judge_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "veralith-judge-call" and t.is_alive()]


@pytest.mark.parametrize("path", ["sync", "async"])
def test_a_call_waiting_on_the_server_is_cancelled_at_once_and_its_request_closed(openai_server, path):
    openai_server.enqueue(Reply.hang(30))
    with settings.override(backend="openai", base_url=openai_server.base_url, api_key="test", cache=False):
        client = OpenAIClient()
        outcome: dict[str, BaseException | None] = {}

        def call() -> None:
            try:
                if path == "sync":
                    client.run(FAITHFULNESS, _payload())
                else:
                    asyncio.run(client.arun(FAITHFULNESS, _payload()))
                outcome["error"] = None
            except BaseException as exc:   # noqa: BLE001 - handed to the test's thread
                outcome["error"] = exc

        caller = threading.Thread(target=call)
        caller.start()
        _wait_for(lambda: openai_server.count == 1)   # sent (after the probes), the server sits on it
        started = time.monotonic()
        cancel_calls()
        caller.join(5)
        took = time.monotonic() - started
    assert not caller.is_alive() and took < 1.0, took
    error = outcome["error"]
    assert isinstance(error, JudgeCallCancelled) and isinstance(error, JudgeServerDown), error
    assert error.kind == "cancelled"
    # The thread that read the reply ended too: its connection was shut, not left to the server's 30 s.
    _wait_for(lambda: not _judge_threads(), 2.0)
    # Later calls are refused at once, until calls are allowed again.
    with settings.override(backend="openai", base_url=openai_server.base_url, api_key="test", cache=False):
        with pytest.raises(JudgeCallCancelled):
            OpenAIClient().run(FAITHFULNESS, _payload())
        assert openai_server.count == 1
        allow_calls()
        assert OpenAIClient().run(FAITHFULNESS, _payload()).usage.calls == 1


def _statuses(db_path: Path) -> dict[str, int]:
    if not db_path.exists():
        return {}
    with sqlite3.connect(db_path) as db:
        try:
            return dict(db.execute("SELECT status, count(*) FROM traces GROUP BY status").fetchall())
        except sqlite3.OperationalError:   # not migrated yet
            return {}


def _stats(base_url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{base_url}/_stats", timeout=5) as resp:
        found: dict[str, int] = json.load(resp)
    return found


@pytest.mark.parametrize(("stop", "async_calls"), [(signal.SIGINT, "0"), (signal.SIGTERM, "1")])
def test_eval_stopped_against_a_server_that_answers_after_30_s_exits_within_2_s_nothing_running(tmp_path, stop,
                                                                                               async_calls):
    server = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", "--auto", "--latency", "30"],
                              stdout=subprocess.PIPE, text=True)
    try:
        ready = (server.stdout.readline() if server.stdout else "").split()
        assert ready and ready[0] == "READY", ready
        base_url = ready[1]
        db_path = tmp_path / "v.db"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
        env.update(VERALITH_DB_PATH=str(db_path), VERALITH_BACKEND="openai", VERALITH_BASE_URL=base_url,
                   VERALITH_API_KEY="test", VERALITH_ASYNC_CALLS=async_calls, PYTHONPATH=str(REPO),
                   VERALITH_SERVER_NOTES=str(tmp_path / "servers.json"))
        proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "eval", str(REPO / "examples" / "traces.jsonl")],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # Stopped once judge requests are in flight, their traces `running`.
            _wait_for(lambda: _stats(base_url)["count"] >= 1 and _statuses(db_path).get("running", 0) >= 1, 60)
            started = time.monotonic()
            proc.send_signal(stop)
            stdout, stderr = proc.communicate(timeout=30)
            took = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, stderr
        assert took < 2.0, (took, stderr)
        counts = _statuses(db_path)
        assert counts.get("running", 0) == 0 and counts.get("pending", 0) >= 1, counts
        assert "interrupted" in " ".join(stdout.split()), stdout
    finally:
        server.terminate()
        server.wait(timeout=10)
