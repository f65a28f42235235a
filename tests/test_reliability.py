"""Reliability and security regressions (issue 10): never hurt the host, never lose data, never leak a secret.

Each test names the issue item it guards. No wall-clock assertions: waits use events or thread
joins with generous bounds, so a loaded machine makes them slower, never red.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from store_support import sql, statuses
from typer.testing import CliRunner
from work_support import claim, create_trace, drop_lease, held, resumable, save_result

from veralith.cli import app
from veralith.config import ConfigError, load_settings, settings
from veralith.errors import JudgeCallError
from veralith.sdk.log import log, resume, shutdown
from veralith.store import TraceInput, load_result, open_store, ops
from veralith.work import leases
from veralith.work.claims import LeaseLost

QUERY, RESPONSE = "What is P/E?", "P/E is price over earnings."
CONTEXT = ["The P/E ratio is price divided by earnings."]
GOOD = {"query": QUERY, "context": CONTEXT, "response": RESPONSE}


@pytest.fixture(autouse=True)
def _fresh_worker():
    shutdown(wait=True)
    yield
    shutdown(wait=True)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "200"})


def _jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def _statuses() -> dict[int, str]:
    return statuses(open_store())


def _pending(*, queued: bool = False) -> int:
    """A trace stored pending (reserved for this process's own queue with `queued`)."""
    return create_trace(open_store(), TraceInput(query=QUERY, context=[], response=RESPONSE), queued=queued)


# The SQLite file, then PostgreSQL as VERALITH_DB_URL.
both = pytest.mark.usefixtures("store_url")


def _cli(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VERALITH_")}
    return subprocess.run([sys.executable, "-m", "veralith.cli", *args], env={**clean, **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


# -- 1. an output path that is the database ----------------------------------------------------------

@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "link"])
def test_1_export_and_eval_refuse_the_database_as_output(runner, tmp_path, suffix):
    trace_id = log(QUERY, CONTEXT, RESPONSE, sync=True).trace_id
    db_file = Path(settings.db_path)
    target = Path(str(db_file) + suffix) if suffix != "link" else tmp_path / "innocent.jsonl"
    if suffix == "link":
        target.symlink_to(db_file)
    before = db_file.stat().st_size
    for args in (["export", "-o", str(target)],
                 ["eval", str(_jsonl(tmp_path / "in.jsonl", [GOOD])), "-o", str(target)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and "destroy the stored traces" in result.stderr, result.output
    assert db_file.stat().st_size >= before and load_result(trace_id).trace_id == trace_id


# -- 2. .env from the working directory only ---------------------------------------------------------

def test_2_dotenv_is_read_from_the_working_directory_only(tmp_path):
    parent, cwd = tmp_path, tmp_path / "project"
    cwd.mkdir()
    (parent / ".env").write_text("VERALITH_JUDGE_MODEL=from-parent\nVERALITH_BASE_URL=http://evil.example/v1\n")
    probe = ["-c", "from veralith.config import settings; print(settings.judge_model, settings.base_url)"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    out = subprocess.run([sys.executable, *probe], env=clean, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["gpt-4o", "None"], out.stderr
    (cwd / ".env").write_text("VERALITH_JUDGE_MODEL=from-cwd\n")
    out = subprocess.run([sys.executable, *probe], env=clean, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["from-cwd", "None"], out.stderr
    # An exported variable wins over the file.
    out = subprocess.run([sys.executable, *probe], env={**clean, "VERALITH_JUDGE_MODEL": "exported"}, cwd=cwd,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[0] == "exported"


# -- 3. URL passwords are redacted wherever the key is -----------------------------------------------

def test_3_redact_url_userinfo_and_echoed_headers():
    from veralith.redact import redact, redact_url

    assert redact_url("http://user:s3cretpw@host:8000/v1") == "http://***@host:8000/v1"
    assert redact_url("https://tok3n@host/v1") == "https://***@host/v1"
    assert redact_url("http://host/v1") == "http://host/v1" and redact_url(None) is None
    text = redact("POST http://u:s3cretpw@h/v1 -> 401 {'Authorization': 'Bearer sk-live-123'} sk-live-123",
                  ["sk-live-123"])
    assert "s3cretpw" not in text and "sk-live-123" not in text


def test_3_settings_repr_and_cli_errors_hide_the_url_password():
    s = load_settings({"VERALITH_BASE_URL": "http://127.0.0.1:9/v1", "VERALITH_API_KEY": "sk-abcdef"})
    assert "sk-abcdef" not in repr(s)
    # A URL carrying user info is refused (it would be sent as Basic auth), and the refusal hides it.
    with pytest.raises(ConfigError) as refused:
        load_settings({"VERALITH_BASE_URL": "http://user:s3cretpw@127.0.0.1:9/v1"})
    assert "s3cretpw" not in str(refused.value)
    with pytest.raises(ConfigError) as refused, settings.override(base_url="http://user:s3cretpw@127.0.0.1:9/v1"):
        pass
    assert "s3cretpw" not in str(refused.value)
    with pytest.raises(ConfigError) as info:
        load_settings({"VERALITH_BASE_URL": "http://user:s3cretpw@host:notaport/v1"})
    assert "s3cretpw" not in str(info.value)
    out = _cli(["list"], {"VERALITH_BASE_URL": "http://user:s3cretpw@host:notaport/v1"})
    assert out.returncode == 2 and "s3cretpw" not in out.stderr + out.stdout


@both
def test_3_stored_failure_messages_hide_the_key_and_url_password(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("POST http://user:s3cretpw@127.0.0.1:9/v1 failed; Authorization: Bearer sk-abcdef12")
    monkeypatch.setattr("veralith.pipeline.evaluate.judge_checked", boom)
    with settings.override(api_key="sk-abcdef12"):
        trace_id = log(QUERY, CONTEXT, RESPONSE)
    shutdown(wait=True)
    [(stored,)] = sql(open_store(), "SELECT error_message FROM traces WHERE id = ?", [trace_id])
    assert "RuntimeError" in stored and "s3cretpw" not in stored and "sk-abcdef12" not in stored


# -- 11. an invalid VERALITH_* value: one line, exit 2; --help still works ---------------------------

def test_11_invalid_setting_is_one_line_and_help_still_works(tmp_path):
    env = {"VERALITH_BATCH_SIZE": "many", "VERALITH_DB_PATH": str(tmp_path / "v.db")}
    help_ = _cli(["--help"], env)
    assert help_.returncode == 0 and "eval" in help_.stdout
    assert _cli(["eval", "--help"], env).returncode == 0
    for args in (["list"], ["stats"], ["eval", str(_jsonl(tmp_path / "in.jsonl", [GOOD]))]):
        out = _cli(args, env)
        assert out.returncode == 2, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: VERALITH_BATCH_SIZE:")
        assert "Traceback" not in out.stderr


# -- 8. overrides are context-local --------------------------------------------------------------------

def test_8_overrides_are_per_thread_and_restored():
    base = settings.batch_size
    barrier, seen = threading.Barrier(2, timeout=30), {}

    def worker(size: int) -> None:
        with settings.override(batch_size=size):
            barrier.wait()           # both overrides are in force now
            seen[size] = settings.batch_size
            barrier.wait()
        seen[f"after-{size}"] = settings.batch_size

    threads = [threading.Thread(target=worker, args=(n,)) for n in (2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert seen == {2: 2, 3: 3, "after-2": base, "after-3": base}
    assert settings.batch_size == base


def test_8_overrides_are_per_asyncio_task():
    base = settings.batch_size

    async def one(size: int, gate: asyncio.Event, other: asyncio.Event) -> int:
        with settings.override(batch_size=size):
            gate.set()
            await other.wait()       # the other task's override is in force meanwhile
            return settings.batch_size

    async def main() -> list[int]:
        a, b = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(one(4, a, b), one(5, b, a))

    assert asyncio.run(main()) == [4, 5] and settings.batch_size == base


def test_8_background_work_uses_the_callers_settings(tmp_path):
    other = tmp_path / "other.db"
    with settings.override(db_path=str(other)):
        trace_id = log(QUERY, CONTEXT, RESPONSE)
    shutdown(wait=True)
    assert open_store(other).read(ops.load_result, trace_id).trace_id == trace_id


# -- 5. the at-exit drain has a deadline ---------------------------------------------------------------

def test_5_exit_with_a_hung_judge_waits_at_most_the_shutdown_timeout(tmp_path):
    child = textwrap.dedent("""
        import threading
        import veralith.pipeline.evaluate as ev
        import veralith.sdk.log as sdk
        ev.judge_checked = lambda *a, **k: threading.Event().wait()   # a judge that never answers
        for i in range(3):
            sdk.log(f"What is item {i}?", ["Item is a widget."], "A widget.")
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERALITH_")}
    env.update(VERALITH_DB_PATH=str(tmp_path / "v.db"), VERALITH_BACKEND="local", VERALITH_SHUTDOWN_TIMEOUT_S="0.5")
    out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("veralith:")]
    assert len(lines) == 1 and "3 logged trace(s)" in lines[0] and "veralith resume" in lines[0]
    with settings.override(db_path=str(tmp_path / "v.db")):
        assert resume() == 3                                 # nothing was lost


def test_5_overflowed_traces_are_drained_at_shutdown(monkeypatch):
    from veralith.pipeline import evaluate as evaluate_mod
    real, gate, started = evaluate_mod.judge_checked, threading.Event(), threading.Event()

    def gated(*args, **kwargs):
        started.set()
        gate.wait(60)
        return real(*args, **kwargs)
    monkeypatch.setattr(evaluate_mod, "judge_checked", gated)
    with settings.override(queue_size=1):
        ids = [log(QUERY, CONTEXT, RESPONSE)]
        assert started.wait(60)
        ids += [log(QUERY, CONTEXT, RESPONSE) for _ in range(4)]     # one queued, three overflow
    gate.set()
    assert shutdown(wait=True) == 0
    assert {_statuses()[i] for i in ids} == {"done"}


# -- 7. the lease owner is more than host + pid ------------------------------------------------------

@both
def test_7_a_lease_with_our_pid_but_another_token_is_stale():
    store = open_store()
    mine = _pending(queued=True)
    earlier = _pending(queued=True)
    # A previous process with our pid (a container restarted as pid 1 on the same host name).
    sql(store, "UPDATE traces SET lease_token = 'previous-incarnation' WHERE id = ?", [earlier])
    assert resumable(store) == [earlier]
    sql(store, "UPDATE traces SET status = 'running' WHERE id = ?", [earlier])
    assert resumable(store) == [earlier] and claim(store, earlier)
    assert mine not in resumable(store)                  # our own reservation is still ours
    assert leases.token() == leases.token()                # one token per process


# -- 6. the lease is renewed while evaluating; a lost lease never overwrites --------------------------

@both
def test_6_running_leases_are_renewed():
    from veralith.work.claims import renewer

    store = open_store()
    trace_id = _pending()
    assert claim(store, trace_id) and held(store) == [trace_id]
    sql(store, "UPDATE traces SET lease_at = 1 WHERE id = ?", [trace_id])   # looks ancient
    renewer.renew_now()
    [(lease_at,)] = sql(store, "SELECT lease_at FROM traces WHERE id = ?", [trace_id])
    assert lease_at > 1 and trace_id not in resumable(store)
    drop_lease(store, trace_id)
    assert held(store) == []


@both
def test_6_a_result_is_saved_only_while_the_lease_is_ours(monkeypatch):
    from veralith.llm import get_client
    from veralith.pipeline import evaluate as evaluate_mod
    from veralith.work.policy import Action
    from veralith.work.runner import Runner

    store = open_store()
    trace_id = _pending()
    real = evaluate_mod.judge_checked

    def taken_over(*args, **kwargs):
        judged = real(*args, **kwargs)
        # Meanwhile another process decided our lease was stale and took the trace.
        sql(store, "UPDATE traces SET lease_host = 'elsewhere', lease_pid = 4242, lease_token = 't'"
                   " WHERE id = ?", [trace_id])
        return judged
    with monkeypatch.context() as patch:
        patch.setattr(evaluate_mod, "judge_checked", taken_over)
        outcome = Runner(store, evaluate_mod.TraceJudge(get_client())).run(trace_id)
        assert outcome.action is Action.NOT_OURS
    row = sql(store, "SELECT status, lease_host, execution FROM traces WHERE id = ?", [trace_id])
    assert row == [("running", "elsewhere", None)]   # the new owner's work is untouched
    with pytest.raises(LeaseLost):                   # nor does evaluate(trace_id=) overwrite it
        save_result(store, _result(trace_id))


def _result(trace_id: int):
    from veralith.llm import get_client
    from veralith.models import ThresholdSource
    from veralith.pipeline.evaluate import run_pipeline
    return run_pipeline(get_client(), QUERY, [], RESPONSE, threshold=1.0, threshold_source=ThresholdSource.fallback,
                        trace_id=trace_id)


# -- 9. failed work can be finished ------------------------------------------------------------------

class _Outage:
    """The local client, but the sufficiency judge's server is down."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def run(self, task, payload):
        if task.name == "sufficiency":
            raise JudgeCallError("timeout", "judge server unreachable", attempts=3)
        return self._inner.run(task, payload)


@pytest.fixture
def outage(monkeypatch):
    import veralith.llm as llm
    real = llm.get_client
    monkeypatch.setattr(llm, "get_client", lambda *a, **k: _Outage(real(*a, **k)))
    return lambda: monkeypatch.setattr(llm, "get_client", real)


@both
def test_9_resume_failed_rejudges_and_keeps_the_earlier_errors(outage):
    first = log(QUERY, CONTEXT, RESPONSE, sync=True)
    assert first.errors                                   # recorded, the trace is done
    assert resume() == 0                                  # nothing pending: plain resume does not help
    outage()                                              # the judge server is back
    assert resume(failed=True) == 1
    again = load_result(first.trace_id)
    assert not again.errors and again.sufficiency
    past = open_store().read(ops.history, first.trace_id)
    assert len(past) == 1 and past[0]["judge_errors"][0]["message"] == "judge server unreachable"
    assert resume(failed=True) == 0


def test_9_cli_resume_failed(runner, outage):
    trace_id = log(QUERY, CONTEXT, RESPONSE, sync=True).trace_id
    assert "nothing to resume" in runner.invoke(app, ["resume"]).stdout
    outage()
    result = runner.invoke(app, ["resume", "--failed"])
    assert result.exit_code == 0, result.output
    assert not load_result(trace_id).errors and len(open_store().read(ops.history, trace_id)) == 1


# -- 10. one bad record never aborts `veralith eval` ---------------------------------------------------

def test_10_bad_values_are_file_line_errors_and_the_run_goes_on(runner, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join([json.dumps(GOOD),
                               '{"query": "a\\ud800", "context": [], "response": "r"}',
                               '{"query": "q", "context": [], "response": "r", "metadata": {"x": 1e400}}',
                               json.dumps({**GOOD, "metadata": {"1": {"2": "ok"}}})]) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["eval", str(path)])
    assert result.exit_code == 2, result.output
    assert f"{path}:2:" in result.stderr and "surrogate" in result.stderr
    assert f"{path}:3:" in result.stderr and "inf" in result.stderr
    assert sorted(_statuses().values()) == ["done", "done"]
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("message", ["database or disk is full", "attempt to write a readonly database"])
def test_10_full_disk_or_read_only_stops_with_one_line_and_keeps_what_was_stored(runner, tmp_path, monkeypatch,
                                                                                    message):
    from veralith.store import repository
    real, calls = repository.create_trace, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) >= 3:
            raise sqlite3.OperationalError(message)
        return real(*args, **kwargs)
    monkeypatch.setattr(repository, "create_trace", failing)
    path = _jsonl(tmp_path / "in.jsonl", [GOOD] * 6)
    result = runner.invoke(app, ["eval", str(path), "--concurrency", "1"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "stopped accepting writes" in errors[0] and "Traceback" not in result.output
    first, second = _statuses().values()   # both written before the failure; nothing lost
    assert first == "done" and second in ("done", "pending")   # a not-yet-started one stays resumable


# -- 12. metadata is validated before anything is written or paid ------------------------------------

@pytest.mark.parametrize("metadata, word", [
    ({1: "x"}, "keys must be str"),
    ({"x": float("nan")}, "NaN"),
    ({"x": object()}, "JSON-serialisable"),
    ({"x": "a\ud800"}, "surrogate"),
])
def test_12_log_refuses_bad_metadata_before_writing(metadata, word):
    with pytest.raises((TypeError, ValueError), match=word):
        log(QUERY, CONTEXT, RESPONSE, metadata=metadata)
    assert _statuses() == {}


def test_12_deep_metadata_and_bad_chunk_metadata_are_refused():
    deep: dict = {}
    cur = deep
    for _ in range(5000):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(ValueError, match="nested"):
        log(QUERY, CONTEXT, RESPONSE, metadata=deep)
    with pytest.raises(ValueError, match="context\\[0\\] metadata"):
        log(QUERY, [{"text": "t", "metadata": {"score": float("inf")}}], RESPONSE)
    assert _statuses() == {}


# -- 13. smaller ones -----------------------------------------------------------------------------------

@pytest.mark.parametrize("env, name", [
    ({"VERALITH_PRICING": '{"m": {"input": -1, "output": 1}}'}, "VERALITH_PRICING"),
    ({"VERALITH_PRICING": '{"m": {"input": NaN, "output": 1}}'}, "VERALITH_PRICING"),
    ({"VERALITH_TIMEOUT_S": "inf"}, "VERALITH_TIMEOUT_S"),
    ({"VERALITH_TIMEOUT_S": "nan"}, "VERALITH_TIMEOUT_S"),
    ({"VERALITH_BASE_URL": "http://host:99999999/v1"}, "VERALITH_BASE_URL"),
    ({"VERALITH_BASE_URL": "not a url"}, "VERALITH_BASE_URL"),
])
def test_13_unusable_values_are_refused(env, name):
    with pytest.raises(ConfigError, match=name):
        load_settings(env)


def test_13_cli_edge_inputs_are_messages_not_tracebacks(runner, tmp_path):
    log(QUERY, CONTEXT, RESPONSE, sync=True)
    huge = str(10**30)
    for args in (["list", "--limit", huge], ["list", "--status", "bogus"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and not isinstance(result.exception, (OverflowError, ValueError)), args
    assert "pending, running, done, error" in runner.invoke(app, ["list", "--status", "bogus"]).stderr
    out = _cli(["list"], {"VERALITH_DB_PATH": os.devnull})
    assert out.returncode == 2 and out.stderr.startswith("error:") and "Traceback" not in out.stderr


def test_13_bidi_marks_are_escaped_and_terminal_exports_are_inert():
    from veralith.cli import records, render
    assert "\u200f" not in render.literal("a\u200fb\u061cc\u200e").plain
    log(QUERY + "\u202e\x1b[31m\x9b", CONTEXT, RESPONSE, sync=True)
    for fmt in ("csv", "jsonl"):
        import io
        sink = io.StringIO()
        records.write_export((r.result for r in open_store().stream(ops.iter_results)), sink, fmt,
                             escape=render.terminal_safe)
        text = sink.getvalue()
        assert not any(ch in text for ch in "\u202e\x1b\x9b"), fmt
        if fmt == "jsonl":
            assert json.loads(text)["query"] == QUERY + "\u202e\x1b[31m\x9b"  # still valid JSON, same value


def test_13_a_damaged_page_is_reported_and_export_goes_on(runner, tmp_path):
    marker = "Z" * 50_000                                  # spills into overflow pages
    ids = [log(QUERY, CONTEXT, r, sync=True).trace_id for r in (RESPONSE, RESPONSE + " " + marker, RESPONSE)]
    from veralith.store.db import close_all, open_db
    db = open_db()
    try:  # the overflow pages holding the middle trace's long response
        pages = [r[0] for r in db.execute("SELECT pageno FROM dbstat WHERE name = 'traces' AND pagetype = 'overflow'")]
    except sqlite3.OperationalError:
        pytest.skip("this SQLite has no dbstat table to find a page to damage")
    size = db.execute("PRAGMA page_size").fetchone()[0]
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    close_all()
    path = Path(settings.db_path)
    data = bytearray(path.read_bytes())
    at = (pages[len(pages) // 2] - 1) * size
    data[at:at + 4] = b"\xff\xff\xff\xff"                # break the overflow chain of the middle trace
    path.write_bytes(bytes(data))
    result = runner.invoke(app, ["export", "--format", "jsonl"])
    assert result.exit_code == 2, result.output
    exported = [json.loads(line)["trace_id"] for line in result.stdout.splitlines()]
    assert f"trace {ids[1]} cannot be read" in result.stderr, result.stderr
    assert exported == [ids[0], ids[2]], result.stderr
    bad = runner.invoke(app, ["inspect", str(ids[1])])
    assert bad.exit_code == 2 and "cannot be read" in bad.stderr
    assert bad.exception is None or isinstance(bad.exception, SystemExit)


# -- 4. log() never waits on the store: another process holding SQLite's write lock costs it nothing -

def test_4_log_spools_while_the_database_is_locked_and_loses_nothing():
    open_store().read(ops.knowledge_bases)                        # the file exists and is migrated
    # Another process holds the write lock from before this process's first log() (its spooler,
    # shipper and evaluator start under the lock) until after its last.
    holder = sqlite3.connect(settings.db_path, isolation_level=None, timeout=60)
    holder.execute("BEGIN IMMEDIATE")
    box: dict = {}

    def calls() -> None:
        box["ids"] = [log(QUERY, CONTEXT, RESPONSE + f" spooled {i}") for i in range(3)]

    caller = threading.Thread(target=calls)
    caller.start()
    caller.join(30)                                       # the busy timeout is 60 s: returning at all is the point
    assert not caller.is_alive() and holder.in_transaction
    ids = box["ids"]
    folder = Path(settings.db_path + ".spool")
    spooled = "".join(p.read_text() for p in folder.iterdir() if p.name != "next-id")
    assert all(f'"id":{i},' in spooled for i in ids)      # durable on disk while the store cannot take them
    assert _unlocked_statuses() == {}
    holder.execute("COMMIT")
    holder.close()
    shutdown(wait=True)
    assert [load_result(i).response for i in ids] == [RESPONSE + f" spooled {i}" for i in range(3)]
    assert [p.name for p in folder.iterdir() if not p.name.startswith("next-id.")] == ["next-id"]   # every spool file shipped and removed


def _unlocked_statuses() -> dict[int, str]:
    """What the store holds, read without the write lock (WAL readers never wait)."""
    with sqlite3.connect(f"file:{settings.db_path}?mode=ro", uri=True) as conn:
        return dict(conn.execute("SELECT id, status FROM traces").fetchall())


@both
def test_4_a_dead_processs_spool_is_recovered_by_resume(monkeypatch):
    from veralith.models import ContextChunk
    from veralith.work.spool import Spool
    from veralith.work.spooler import spooler_for

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    spooler = spooler_for(open_store().spool_url)
    trace_id = spooler.ids.take()
    # What a process with that pid on this host left behind: one trace, then a line a crash cut short.
    host = leases.mine()[0]
    with monkeypatch.context() as patch:
        patch.setattr(leases, "mine", lambda: (host, gone.pid, "t0ken"))
        dead = Spool(spooler.folder).file                # the name that process's spool file had
    entry = {"id": trace_id, "uid": "u" * 32, "created_at": "2026-01-01T00:00:00.000000+00:00", "run": None,
             "here": True, **TraceInput(query=QUERY, context=[ContextChunk(id="c0", text=CONTEXT[0])],
                                        response=RESPONSE, metadata={"k": 1}).to_json()}
    dead.parent.mkdir(parents=True, exist_ok=True)
    dead.write_text(json.dumps(entry) + "\n" + '{"id": 99, "cut short by a cra')
    assert resume() == 1
    assert load_result(trace_id).metadata == {"k": 1}
    assert [p.name for p in spooler.folder.iterdir() if not p.name.startswith("next-id.")] == ["next-id"]
