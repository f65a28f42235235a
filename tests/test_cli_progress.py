"""A long `veralith eval` shows a progress bar on a terminal and plain progress lines otherwise."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pty_support import readable

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _file(tmp_path: Path, n: int = 100) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"query": f"What is compound {i}?", "context": [f"Compound {i} boils at {i} C."],
                                        "response": f"Compound {i} boils at {i} C."}) + "\n" for i in range(n)),
                    encoding="utf-8")
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    env.update(VERALITH_DB_PATH=str(tmp_path / "v.db"), VERALITH_BACKEND="local", COLUMNS="100", TERM="xterm")
    return env


def test_on_a_terminal_eval_draws_a_progress_bar(tmp_path):
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "eval", str(_file(tmp_path)), "-c", "1"],
                            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=_env(tmp_path), cwd=tmp_path)
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if readable(leader, 0.5):
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(leader)
    text = seen.decode("utf-8", "replace")
    assert proc.returncode == 0, text[-2000:]
    assert "evaluating" in text and "━" in text and "/100" in text, text[-2000:]


def test_in_a_pipe_eval_prints_plain_progress_lines(tmp_path):
    run = subprocess.run([sys.executable, "-m", "veralith.cli", "eval", str(_file(tmp_path)), "-c", "1"],
                         capture_output=True, text=True, env=_env(tmp_path), cwd=tmp_path, timeout=180)
    assert run.returncode == 0, run.stderr
    assert "━" not in run.stderr and "\x1b[" not in run.stderr
    progress = [line for line in run.stderr.splitlines() if line.startswith("veralith: ")]
    assert progress and all("/100 done" in line for line in progress), run.stderr
