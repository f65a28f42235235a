"""The shipped examples run offline and show what they promise."""

from __future__ import annotations

import json
import os
import re
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
QUICKSTART = EXAMPLES.parent / "docs" / "quickstart.md"
# The inspect screen in docs/quickstart.md, between these lines; `python tests/test_cli_examples.py`
# writes it from a real run, and test_quickstart_inspect_screen_is_what_inspect_prints checks it.
SCREEN = re.compile(r"(<!-- inspect-screen: [^\n]*-->\n```text\n)(.*?)(```\n)", re.S)
SCREEN_TRACE, SCREEN_COLUMNS = 7, 100  # examples/traces.jsonl line 7: the P/E question of the quickstart


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


def inspect_screen(workdir: Path) -> str:
    """`veralith eval examples/traces.jsonl` then `veralith inspect 7`, offline, as a person sees it
    at 100 columns without colour, prompts included."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    env.update(VERALITH_DB_PATH=str(workdir / "screen.db"), VERALITH_BACKEND="local",
               COLUMNS=str(SCREEN_COLUMNS), NO_COLOR="1", PYTHONPATH=str(EXAMPLES.parent))
    cli = [sys.executable, "-m", "veralith.cli"]
    subprocess.run([*cli, "eval", "examples/traces.jsonl"], env=env, cwd=EXAMPLES.parent, check=True,
                   capture_output=True, timeout=300)
    shown = subprocess.run([*cli, "inspect", str(SCREEN_TRACE)], env=env, cwd=EXAMPLES.parent, check=True,
                           capture_output=True, text=True, timeout=120)
    lines = [line.rstrip() for line in shown.stdout.splitlines()]
    return f"$ veralith inspect {SCREEN_TRACE}\n" + "\n".join(lines) + "\n"


def _comparable(screen: str) -> str:
    # What differs from run to run: the creation time, and the timings of the last line (whose
    # digits can move where it wraps).
    screen = re.sub(r"created \d{4}-\d\d-\d\d \d\d:\d\d UTC", "created <time>", screen)
    head, latency, timings = screen.partition("\nlatency ")
    return head + latency + " ".join(re.sub(r"\d+ ms", "N ms", timings).split())


def test_quickstart_inspect_screen_is_what_inspect_prints(tmp_path):
    documented = SCREEN.search(QUICKSTART.read_text(encoding="utf-8"))
    assert documented, "docs/quickstart.md lost its inspect-screen block"
    assert _comparable(documented.group(2)) == _comparable(inspect_screen(tmp_path)), (
        "docs/quickstart.md shows an outdated inspect screen; rewrite it with `python tests/test_cli_examples.py`")


if __name__ == "__main__":  # rewrite the inspect screen of docs/quickstart.md from a real run
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        screen = inspect_screen(Path(tmp))
    text = QUICKSTART.read_text(encoding="utf-8")
    if not SCREEN.search(text):
        raise SystemExit("docs/quickstart.md has no inspect-screen block to rewrite")
    QUICKSTART.write_text(SCREEN.sub(lambda m: m.group(1) + screen + m.group(3), text, count=1), encoding="utf-8")
    print(f"docs/quickstart.md: inspect screen rewritten ({screen.count(chr(10))} lines)")
