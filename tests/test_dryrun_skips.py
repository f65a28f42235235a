"""`veralith eval FILE --dry-run` leaves out what a real run would skip (already evaluated), reading
the database read-only; `--rejudge` (and `--no-persist`) price every record; no database, none made."""

from __future__ import annotations

import gc
import json
import os
import re
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veralith.cli import app
from veralith.config import settings

RECORDS = [
    {"id": "pe", "query": "What is a P/E ratio?",
     "context": ["The price-to-earnings (P/E) ratio is a company's share price divided by its earnings per share."],
     "response": "A P/E ratio divides a company's share price by its earnings per share."},
    {"id": "fr", "query": "What is the capital of France?", "context": ["Paris is the capital of France."],
     "response": "The capital of France is Paris."},
    {"id": 7, "query": "What is H2O?", "context": ["H2O is the chemical formula of water."],
     "response": "H2O is water. It boils at 50 degrees.", "knowledge_base": "chemistry"},
]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _cli(*args: str, env: dict[str, str] | None = None):
    # Wide enough that no label or total is wrapped, so rows can be read back one per line.
    return CliRunner(env={"COLUMNS": "200", **(env or {})}).invoke(app, list(args))


def _eval(path: Path, *args: str) -> None:
    result = _cli("eval", str(path), *args)
    assert result.exit_code == 0, result.output


def _dry(path: Path, *args: str, env: dict[str, str] | None = None):
    result = _cli("eval", str(path), "--dry-run", *args, env=env)
    assert result.exit_code == 0, result.output
    return result


def _priced(output: str) -> list[str]:
    """The trace labels of the estimate table's rows, in order (the total row excluded)."""
    labels = []
    for line in output.splitlines():
        cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()]
        if len(cells) == 5 and cells[1].isdigit() and not cells[0].startswith("total"):
            labels.append(cells[0])
    return labels


def _db_files() -> list[Path]:
    db = Path(settings.db_path)
    return [Path(f"{db}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")]


def test_a_dry_run_after_an_eval_prices_nothing_and_says_why(tmp_path):
    path = _write(tmp_path / "a.jsonl", RECORDS)
    _eval(path)
    result = _dry(path)
    assert _priced(result.stdout) == []
    assert "total (0 traces; 3 skipped)" in result.stdout
    assert "3 would be skipped (already evaluated)" in result.stdout
    assert "the database was only read" in result.stdout


def test_only_changed_new_and_id_less_records_are_priced(tmp_path):
    _eval(_write(tmp_path / "a.jsonl", RECORDS))
    changed = [dict(r) for r in RECORDS]
    changed[1]["response"] = "The capital of France is Lyon."           # new inputs: re-judged
    changed[2]["metadata"] = {"as_of": "2020-01-01"}                    # metadata counts as input too
    changed.append({**RECORDS[0], "id": "pe2"})                         # an id not stored yet
    changed.append({k: v for k, v in RECORDS[0].items() if k != "id"})  # no id: never matched
    result = _dry(_write(tmp_path / "b.jsonl", changed))
    assert _priced(result.stdout) == ["fr", "7", "pe2", "line 5"]
    assert "total (4 traces; 1 skipped)" in result.stdout and "1 would be skipped" in result.stdout


def test_the_same_id_in_another_knowledge_base_is_priced(tmp_path):
    _eval(_write(tmp_path / "a.jsonl", RECORDS))
    result = _dry(_write(tmp_path / "b.jsonl", [{**RECORDS[2], "knowledge_base": "physics"}]))
    assert _priced(result.stdout) == ["7"]


def test_the_dry_run_skips_exactly_what_the_real_run_then_skips(tmp_path):
    _eval(_write(tmp_path / "a.jsonl", RECORDS))
    changed = [dict(r) for r in RECORDS]
    changed[0]["response"] = "A P/E ratio is the price of a share."
    path = _write(tmp_path / "b.jsonl", changed)
    assert _priced(_dry(path).stdout) == ["pe"]
    real = _cli("eval", str(path))
    assert real.exit_code == 0, real.output
    assert re.search(r"evaluated\s+1\b", real.stdout) and re.search(r"skipped\s+2 already evaluated", real.stdout)


def test_rejudge_and_no_persist_price_every_record(tmp_path):
    path = _write(tmp_path / "a.jsonl", RECORDS)
    _eval(path)
    for flag in ("--rejudge", "--no-persist"):
        result = _dry(path, flag)
        assert _priced(result.stdout) == ["pe", "fr", "7"], flag
        assert "total (3 traces)" in result.stdout and "skipped" not in result.stdout


def test_another_judge_configuration_is_priced_without_an_api_key(tmp_path, openai_server, monkeypatch):
    path = _write(tmp_path / "a.jsonl", RECORDS)
    _eval(path)                                               # judged by the local backend
    result = _dry(path, "--backend", "openai", "--model", "gpt-4o-mini")
    assert _priced(result.stdout) == ["pe", "fr", "7"]
    assert "$0.000000" not in result.stdout.split("total (3 traces)")[1].splitlines()[0]

    # judged by an OpenAI-compatible server; the dry run afterwards has neither its URL nor a key
    monkeypatch.setenv("VERALITH_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("VERALITH_API_KEY", "test")
    settings.reload()
    _eval(path, "--backend", "openai", "--model", "gpt-4o-mini")    # another judge: re-judged in place
    calls = openai_server.count
    monkeypatch.delenv("VERALITH_BASE_URL")
    monkeypatch.delenv("VERALITH_API_KEY")
    settings.reload()
    same = _dry(path, "--backend", "openai", "--model", "gpt-4o-mini")
    assert _priced(same.stdout) == [] and "3 would be skipped" in same.stdout
    other = _dry(path, "--backend", "openai", "--model", "gpt-4o")
    assert _priced(other.stdout) == ["pe", "fr", "7"]
    local = _dry(path)                                        # now stored as openai's: local would re-judge
    assert _priced(local.stdout) == ["pe", "fr", "7"]
    assert openai_server.count == calls                       # the dry runs called nothing


def test_the_dry_run_leaves_the_database_file_untouched(tmp_path, monkeypatch):
    path = _write(tmp_path / "a.jsonl", RECORDS)
    _eval(path)
    from veralith.store import db as dbmod

    dbmod.close_all()   # the last connection checkpoints the WAL: the file alone now holds everything
    gc.collect()        # and the eval's worker threads' connections, if any are left

    def read_write(*args, **kwargs):
        raise AssertionError("the dry run opened the database read-write")

    monkeypatch.setattr(dbmod, "connect", read_write)   # the one way to a writable (and migrating) connection
    db, wal = _db_files()[:2]
    before = (db.read_bytes(), os.stat(db).st_mtime_ns)
    wal_before = wal.read_bytes() if wal.exists() else None
    changed = [dict(r) for r in RECORDS]
    changed[0]["response"] = "A P/E ratio is the price of a share."
    for args in ((), ("--backend", "openai"), ("--rejudge",)):
        _dry(_write(tmp_path / "b.jsonl", changed), *args)
    assert (db.read_bytes(), os.stat(db).st_mtime_ns) == before
    # A read-only connection may create an empty -wal (SQLite's WAL mode needs one to read), never fill it.
    assert (wal.read_bytes() if wal.exists() else None) in (wal_before, b"")
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1    # the dry runs are not runs
    finally:
        conn.close()


def test_without_a_database_none_is_created_and_every_record_is_priced(tmp_path):
    result = _dry(_write(tmp_path / "a.jsonl", RECORDS))
    assert _priced(result.stdout) == ["pe", "fr", "7"] and "skipped" not in result.stdout
    assert "only read" not in result.stdout
    assert not any(f.exists() for f in _db_files())


def test_a_database_that_cannot_be_read_is_a_note_not_a_failure(tmp_path):
    db = Path(settings.db_path)
    db.write_bytes(b"not a database at all" * 100)
    before = (db.read_bytes(), os.stat(db).st_mtime_ns)
    result = _dry(_write(tmp_path / "a.jsonl", RECORDS))
    assert _priced(result.stdout) == ["pe", "fr", "7"]
    assert "every record is estimated, as if none had been evaluated" in result.stderr
    assert (db.read_bytes(), os.stat(db).st_mtime_ns) == before


@pytest.mark.parametrize("bad_line", ['{"id": "fr", "query": "q"}', "not json"])
def test_bad_lines_are_still_reported_beside_skipped_records(tmp_path, bad_line):
    _eval(_write(tmp_path / "a.jsonl", RECORDS))
    path = tmp_path / "b.jsonl"
    path.write_text(_write(tmp_path / "c.jsonl", RECORDS).read_text() + bad_line + "\n", encoding="utf-8")
    result = _cli("eval", str(path), "--dry-run")
    assert result.exit_code == 2, result.output
    assert f"{path}:4:" in result.stderr and "total (0 traces; 3 skipped)" in result.stdout
