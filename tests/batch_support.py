"""What the tests of `veralith eval --batch` share: the environment pointing Veralith at the fake
batch server (tests/fake_batch_server.py), a file of distinct traces, a CLI run as a new process
would start it, and the results stored for the file's records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_batch_server import batch_server  # noqa: F401
from typer.testing import CliRunner

from veralith.cli import app
from veralith.config import settings
from veralith.models import EvaluationResult
from veralith.store import ops

__all__ = ["N", "batch_env", "run", "stored", "traces", "traces_file"]

N = 20


def traces(n: int) -> list[dict]:
    # Distinct texts, so no two traces share a request.
    return [{"id": f"r{i}", "query": f"What is the boiling point of compound {i}?",
             "context": [f"Compound {i} boils at {100 + i} degrees Celsius.", f"Compound {i} is a liquid."],
             "response": f"Compound {i} boils at {100 + i} degrees Celsius. It is a liquid."} for i in range(n)]


def traces_file(tmp_path: Path, n: int = N) -> Path:
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in traces(n)), encoding="utf-8")
    return path


@pytest.fixture
def batch_env(batch_server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("VERALITH_BACKEND", "openai")
    monkeypatch.setenv("VERALITH_BASE_URL", batch_server.base_url)
    monkeypatch.setenv("VERALITH_API_KEY", "test")
    monkeypatch.setenv("VERALITH_JUDGE_MODEL", "gpt-4o")
    monkeypatch.setenv("VERALITH_BATCH_POLL_S", "0.02")
    settings.reload()
    return batch_server


def run(*args: str):
    from veralith.llm.backends import forget_clients

    forget_clients()   # each command starts as a new process would
    return CliRunner().invoke(app, list(args))


def stored(store, n: int = N) -> dict[str, EvaluationResult]:
    """The stored results of records r0..r{n-1} that are done."""
    out = {}
    for i in range(n):
        info = store.read(ops.find_external, "default", f"r{i}")
        if info is not None and info.status == "done":
            out[f"r{i}"] = store.read(ops.load_result, info.trace_id)
    return out
