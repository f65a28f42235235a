"""The shipped examples run offline and show what they promise. (What the docs show them printing is
tests/test_doc_examples.py's.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veralith.cli import app
from veralith.config import settings
from veralith.models import FailureCell

pytest.importorskip("veralith.llm.local")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_example_traces_reach_all_six_cells_offline(tmp_path):
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(app, ["eval", str(EXAMPLES / "traces.jsonl"), "--no-persist", "-o", str(out),
                                      "--backend", "local"])
    assert result.exit_code == 0, result.output
    cells = {json.loads(line)["diagnosis"]["failure_cell"] for line in out.read_text().splitlines()}
    assert cells == {c.value for c in FailureCell}
    assert len(out.read_text().splitlines()) >= 12 and not Path(settings.db_path).exists()


def test_quickstart_prints_the_worst_case_cell(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    env.update(VERALITH_DB_PATH=str(tmp_path / "q.db"), PYTHONPATH=str(EXAMPLES.parent))
    run = subprocess.run([sys.executable, str(EXAMPLES / "quickstart.py")], env=env, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:2] == ["incomplete_ungrounded", "Worst-case failure"] and lines[2].startswith(" - ")
    assert not (tmp_path / "q.db").exists()


def test_sample_app_without_its_extra_prints_the_install_command():
    # chromadb mapped to None in sys.modules: `import chromadb` fails as it does when it is not installed.
    code = ("import runpy, sys; sys.modules['chromadb'] = None; "
            "runpy.run_module('sample_app', run_name='__main__', alter_sys=True)")
    run = subprocess.run([sys.executable, "-c", code], cwd=EXAMPLES.parent, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 1
    assert 'pip install "veralith-rag[sample]"' in run.stderr and "Traceback" not in run.stderr
    assert run.stdout == ""
