"""A database that cannot be written or reached is one line and exit 2, never a traceback, and what
was committed stays; a database that cannot be written can still be read by every reading command."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from typer.testing import CliRunner

from veralith.cli import app
from veralith.config import settings
from veralith.store import open_store, ops

QUERY = "What is the capital of France?"
RECORD = {"query": QUERY, "context": ["Paris is the capital of France."], "response": "Paris is the capital."}

_HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


def _file(tmp_path: Path, n: int = 3) -> Path:
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps({**RECORD, "id": f"r{i}"}) + "\n" for i in range(n)))
    return path


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "200"})


def test_eval_against_a_database_locked_past_the_busy_timeout_is_one_line_and_exit_2(runner, tmp_path, monkeypatch):
    records = _file(tmp_path)
    assert runner.invoke(app, ["eval", str(records)]).exit_code == 0  # the database exists and is migrated
    monkeypatch.setenv("VERALITH_BUSY_TIMEOUT_S", "0.3")
    settings.reload()
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, settings.db_path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"  # type: ignore[union-attr]
        other = tmp_path / "more.jsonl"
        other.write_text(json.dumps({**RECORD, "id": "new"}) + "\n")
        done = runner.invoke(app, ["eval", str(other), "--run-name", "blocked"])
    finally:
        holder.communicate("go\n", timeout=30)
    assert done.exit_code == 2, done.output
    assert "stayed locked by another process" in done.output
    assert "Traceback" not in done.output and done.exception is None or isinstance(done.exception, SystemExit)
    assert open_store().read(ops.stats)["traces"] == 3   # nothing half-written


@pytest.mark.parametrize("message", ["database or disk is full", "attempt to write a readonly database"])
def test_a_run_that_cannot_be_closed_is_one_line_and_exit_2(runner, tmp_path, monkeypatch, message):
    from veralith.store import runs

    def full(*args, **kwargs):
        raise sqlite3.OperationalError(message)

    monkeypatch.setattr(runs, "finish_run", full)
    done = runner.invoke(app, ["eval", str(_file(tmp_path)), "--run-name", "full"])
    assert done.exit_code == 2, done.output
    assert "the run could not be closed" in done.output and "stopped accepting writes" in done.output
    assert done.exception is None or isinstance(done.exception, SystemExit)
    assert open_store().read(ops.stats)["by_status"]["done"] == 3   # every result committed before stays


def test_a_write_that_fails_mid_batch_ends_the_batch_with_one_line(runner, tmp_path, monkeypatch):
    from veralith.store import repository

    real, calls = repository.write_result, []

    def failing(db, result, trace_id, **kwargs):
        calls.append(1)
        if len(calls) > 2:
            raise sqlite3.OperationalError("database or disk is full")
        return real(db, result, trace_id, **kwargs)

    monkeypatch.setattr(repository, "write_result", failing)
    done = runner.invoke(app, ["eval", str(_file(tmp_path, 6)), "--concurrency", "1"])
    assert done.exit_code == 2, done.output
    assert "stopped accepting writes" in done.output
    assert "OperationalError" not in done.output
    assert done.exception is None or isinstance(done.exception, SystemExit)
    assert open_store().read(ops.stats)["by_status"]["done"] == 2


def _as_reader() -> list[str]:
    """Run a command that file modes apply to: root ignores them unless it drops the capability."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot drop the right to override file modes")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


@pytest.mark.parametrize("leftover_wal", [False, True])
def test_reading_commands_work_on_a_database_nobody_may_write(runner, tmp_path, leftover_wal):
    assert runner.invoke(app, ["eval", str(_file(tmp_path))]).exit_code == 0
    folder = Path(settings.db_path).parent
    db = Path(settings.db_path)
    from veralith.store import _stores

    for opened in list(_stores.values()):
        opened.close()
    _stores.clear()
    if leftover_wal:   # another process still has it open: the WAL and its index are there, read-only too
        keep = sqlite3.connect(db)
        keep.execute("SELECT count(*) FROM traces").fetchone()
    for path in folder.iterdir():
        path.chmod(0o444)
    folder.chmod(0o555)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERALITH_")}
    env.update(VERALITH_DB_PATH=str(db), VERALITH_BACKEND="local", PYTHONPATH=str(REPO), HOME=str(tmp_path))
    try:
        for argv in (["stats"], ["list"], ["export"], ["inspect", "1"], ["runs"]):
            done = subprocess.run([*_as_reader(), sys.executable, "-m", "veralith.cli", *argv], env=env,
                                  capture_output=True, text=True, timeout=60, cwd="/")
            assert done.returncode == 0, (argv, done.stderr)
            assert "readonly" not in done.stderr and "Traceback" not in done.stderr
        stats = subprocess.run([*_as_reader(), sys.executable, "-m", "veralith.cli", "stats"], env=env,
                               capture_output=True, text=True, timeout=60, cwd="/").stdout
        assert "3 evaluated of 3 traces" in stats
    finally:
        folder.chmod(0o755)
        for path in folder.iterdir():
            path.chmod(0o644)
        if leftover_wal:
            keep.close()
