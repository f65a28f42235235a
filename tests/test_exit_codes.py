"""One exit-code table for every command (veralith.cli.exits), checked command by command.

Each command is run in the situations the table names: help (0), a usage error (2), an invalid
setting (2), what it was pointed at missing (1), a database it cannot use (2, one line, no
traceback), and, where the command has one, a check that fails (3). A command added to the CLI
without a row here fails `test_every_command_has_a_row`, so the table keeps covering all of them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from veralith.cli import app
from veralith.cli.exits import MEANING, ExitCode
from veralith.config import ConfigError, settings
from veralith.errors import StoreError

GOOD = {"id": "pe", "query": "What is a P/E ratio?",
        "context": ["The price-to-earnings (P/E) ratio is a company's share price divided by its earnings per share."],
        "response": "A P/E ratio divides a company's share price by its earnings per share."}
BAD = {"id": "h2o", "query": "What is H2O?", "context": ["H2O is the chemical formula of water."],
       "response": "H2O is water. It boils at 50 degrees."}

# Per command: arguments that make a valid call, and arguments that point at something missing
# (None: the command has nothing to find; with no database it reports an empty history and exits 0).
ROWS: dict[str, tuple[list[str], list[str] | None]] = {
    "eval": (["{input}"], ["{tmp}/missing.jsonl"]),
    "resume": ([], ["999"]),
    "inspect": (["1"], ["999"]),
    "list": ([], None),
    "stats": ([], None),
    "export": ([], ["999"]),
    "serve": (["--port", "0", "--db", "{db}"], ["--db", "{tmp}/missing.db"]),
    "runs": ([], None),
    "compare": (["1", "1"], ["nope-a", "nope-b"]),
    "patterns": ([], ["--run", "nope"]),
    "worker": (["--once"], None),
    "migrate": (["--to", "sqlite:///{tmp}/copy.db"], ["--from", "{tmp}/missing.db", "--to", "sqlite:///{tmp}/copy.db"]),
    "import": (["{otlp}"], ["{tmp}/missing.json"]),
    "batch": (["status"], ["collect", "job-missing"]),
    "dead-letters": ([], ["--drop", "999"]),
    "label": (["1", "--gate", "pass", "--by", "t"], ["999", "--gate", "pass", "--by", "t"]),
    "labels": (["export"], ["import", "{tmp}/missing.jsonl"]),
    "review": (["--by", "t"], None),
    "agreement": ([], None),
}


def _commands() -> list[str]:
    return sorted(typer.main.get_command(app).commands)


def _args(args: list[str], tmp_path: Path) -> list[str]:
    input_file = tmp_path / "in.jsonl"
    if not input_file.exists():
        input_file.write_text(json.dumps(GOOD) + "\n", encoding="utf-8")
    otlp = Path(__file__).parent / "import_fixtures" / "otlp_openinference.json"
    return [a.format(input=input_file, tmp=tmp_path, db=settings.db_path, otlp=otlp) for a in args]


def _run(args: list[str]):
    return CliRunner().invoke(app, args)


def _one_error_line(result) -> None:
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output


def test_every_command_has_a_row():
    assert set(_commands()) == set(ROWS), "add the new command to ROWS (and to the exit-code table if it needs a code)"


def test_the_table_is_documented_where_the_codes_are_defined():
    assert [int(code) for code in MEANING] == [0, 1, 2, 3, 130] == [int(code) for code in ExitCode]
    cli_md = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    for code, meaning in MEANING.items():
        assert f"| {int(code)} | {code.name} | {meaning} |" in cli_md


@pytest.mark.parametrize("command", sorted(ROWS))
def test_help_is_0_and_a_usage_error_is_2(command):
    assert _run([command, "--help"]).exit_code == ExitCode.OK
    result = _run([command, "--no-such-option"])
    assert result.exit_code == ExitCode.ERROR and "No such option" in result.output


@pytest.mark.parametrize("command", sorted(ROWS))
def test_an_invalid_setting_is_2_with_one_line(command, tmp_path, monkeypatch):
    args = _args(ROWS[command][0], tmp_path)
    if command == "serve":
        args = ["--port", "0"]  # the database path comes from the (broken) settings
    monkeypatch.setenv("VERALITH_BATCH_SIZE", "many")
    monkeypatch.setenv("VERALITH_DB_PATH", str(tmp_path / "v.db"))
    with pytest.raises(ConfigError):  # reading any setting raises it again, as at a command's start
        settings.reload()
    result = _run([command, *args])
    assert result.exit_code == ExitCode.ERROR, result.output
    _one_error_line(result)
    assert "VERALITH_BATCH_SIZE" in result.stderr


@pytest.mark.parametrize("command", [c for c, (_, missing) in sorted(ROWS.items()) if missing is not None])
def test_what_is_not_there_is_1(command, tmp_path):
    result = _run([command, *_args(ROWS[command][1], tmp_path)])
    assert result.exit_code == ExitCode.NOT_FOUND, result.output
    _one_error_line(result)


@pytest.mark.parametrize("command", [c for c, (_, missing) in sorted(ROWS.items()) if missing is not None])
def test_what_is_not_there_is_1_with_a_database_too(command, tmp_path):
    assert _run(["eval", *_args(["{input}"], tmp_path), "--run-name", "first"]).exit_code == 0
    if command == "serve":
        pytest.skip("serve's missing database is checked above; with one it serves")
    result = _run([command, *_args(ROWS[command][1], tmp_path)])
    assert result.exit_code == ExitCode.NOT_FOUND, result.output
    _one_error_line(result)


@pytest.mark.parametrize("command", sorted(ROWS))
def test_a_database_that_cannot_be_used_is_2_with_one_line(command, tmp_path):
    Path(settings.db_path).write_bytes(b"this is not a database, it is a text file " * 200)
    result = _run([command, *_args(ROWS[command][0], tmp_path)])
    assert result.exit_code == ExitCode.ERROR, result.output
    _one_error_line(result)


@pytest.mark.parametrize("error", [sqlite3.OperationalError("database is locked"),
                                   sqlite3.OperationalError("disk I/O error"), StoreError("the store is unavailable")])
@pytest.mark.parametrize("command", ["eval", "list", "stats", "export", "inspect", "resume", "runs"])
def test_a_database_failure_anywhere_in_a_command_is_2_with_one_line(command, error, tmp_path, monkeypatch):
    """The store raises StoreError (or, below it, sqlite3's own errors) for a database locked past its
    bound, vanished, full or read-only; the CLI shows any of them as one line (VeralithGroup)."""
    import veralith.store
    import veralith.store.db

    assert _run(["eval", *_args(["{input}"], tmp_path)]).exit_code == 0

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(veralith.store, "open_store", broken)
    monkeypatch.setattr(veralith.store.db, "open_db", broken)
    result = _run([command, *_args(ROWS[command][0], tmp_path)])
    assert result.exit_code == ExitCode.ERROR, result.output
    _one_error_line(result)
    assert str(error) in result.stderr


def test_failed_checks_are_3(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(BAD) + "\n", encoding="utf-8")
    assert _run(["eval", str(path), "--fail-under", "1", "--run-name", "before"]).exit_code == ExitCode.CHECK_FAILED
    # The same ids judged worse: one pass -> fail transition, more than --max-regressions 0.
    worse = tmp_path / "worse.jsonl"
    worse.write_text(json.dumps({**GOOD, "response": BAD["response"].replace("H2O", "The P/E ratio")}) + "\n"
                     + json.dumps(BAD) + "\n", encoding="utf-8")
    assert _run(["eval", str(worse), "--run-name", "after"]).exit_code == 0
    compared = _run(["compare", "before", "after"])
    assert compared.exit_code == ExitCode.CHECK_FAILED, compared.output
    assert _run(["compare", "before", "after", "--max-regressions", "5"]).exit_code == ExitCode.OK
