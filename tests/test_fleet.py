"""Fleet mode: remote evaluation, `veralith worker`, several workers at once, a killed worker's traces
taken over, and `veralith migrate --to`. Each runs against both stores (SQLite and a real PostgreSQL)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import subprocess_env
from work_support import create_trace

import veralith
from veralith.config import settings
from veralith.models import ContextChunk
from veralith.store import open_store, ops, store_url
from veralith.store.outputsizes import add_output_sizes
from veralith.store.protocol import TraceInput
from veralith.usage import OutputSize

QUERY = "What is the capital of France?"
CONTEXT = ["Paris is the capital of France."]
RESPONSE = "Paris is the capital of France."


def _pending(n: int, kb: str = "default") -> list[int]:
    store = open_store()
    return [create_trace(store, TraceInput(query=f"{QUERY} ({i})", context=[ContextChunk(id="c0", text=CONTEXT[0])],
                                          response=RESPONSE, knowledge_base=kb)) for i in range(n)]


def _statuses() -> dict[str, int]:
    by_status: dict[str, int] = open_store(read_only=True).read(ops.stats)["by_status"]
    return {k: v for k, v in by_status.items() if v}


def test_remote_evaluation_records_only_and_a_worker_judges(store_url, monkeypatch):
    monkeypatch.setenv("VERALITH_EVALUATE", "remote")
    settings.reload()
    ids = [veralith.log(QUERY, CONTEXT, RESPONSE) for _ in range(5)]
    ids.append(veralith.log(QUERY, CONTEXT, RESPONSE, evaluate=True))  # this one is judged here after all
    assert veralith.shutdown() == 0
    from veralith.work.ids import RANDOM_BASE

    # Ids increase per host; on PostgreSQL a fresh host's traces logged before its first block of
    # ids arrived were given random ones (log() never waits for the block).
    counted = [i for i in ids if i < RANDOM_BASE]
    assert counted == sorted(counted) and len(set(ids)) == 6
    assert _statuses() == {"pending": 5, "done": 1}
    from veralith.sdk.worker import run_worker

    totals = run_worker(open_store(), concurrency=2, stop=threading.Event(), once=True, poll_s=0.05)
    assert (totals.judged, totals.failed) == (5, 0)
    assert _statuses() == {"done": 6}


def test_log_evaluate_false_is_recorded_for_a_worker(store_url):
    trace_id = veralith.log(QUERY, CONTEXT, RESPONSE, evaluate=False)
    veralith.shutdown()
    assert open_store().read(ops.trace_info, trace_id).status == "pending"


def test_worker_command_once_judges_what_waits_and_exits_zero(store_url):
    _pending(4)
    done = subprocess.run([sys.executable, "-m", "veralith.cli", "worker", "--once", "--concurrency", "2"],
                          env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "stopped: 4 judged, 0 failed" in done.stderr
    assert _statuses() == {"done": 4}


def test_worker_only_takes_its_knowledge_base(store_url):
    _pending(2, kb="a")
    _pending(3, kb="b")
    from veralith.sdk.worker import run_worker

    totals = run_worker(open_store(), concurrency=2, stop=threading.Event(), once=True, knowledge_base="b", poll_s=0.05)
    assert totals.judged == 3
    assert _statuses() == {"pending": 2, "done": 3}


def test_several_worker_processes_judge_every_trace_exactly_once(store_url):
    ids = _pending(60)
    workers = [subprocess.Popen([sys.executable, "-m", "veralith.cli", "worker", "--once", "--concurrency", "2"],
                                env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
    outputs = [w.communicate(timeout=180) for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0], outputs
    store = open_store()
    assert _statuses() == {"done": 60}
    # One claim and one result per trace: attempts counts claims, the history would keep a second outcome.
    with store.connection() as db:  # type: ignore[attr-defined]
        attempts = {row[0] for row in db.execute("SELECT attempts FROM traces").fetchall()}
        history = db.execute("SELECT COUNT(*) FROM trace_history").fetchone()[0]
    assert attempts == {1} and history == 0
    judged = sum(int(err.rsplit("stopped: ", 1)[1].split(" judged")[0]) for _, err in outputs)
    assert judged == len(ids)


_HOLD_CLAIM = """
import sys, time
from veralith.store import open_store
from veralith.work.claims import claims_for
from veralith.store import ops
store = open_store()
claimed = claims_for(store).claim_batch(int(sys.argv[1]))
print(",".join(map(str, claimed)), flush=True)
time.sleep(600)
"""


def test_a_killed_workers_traces_are_taken_over_once(store_url):
    _pending(5)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_CLAIM, "3"], env=subprocess_env(), stdout=subprocess.PIPE,
                              text=True)
    claimed = [int(i) for i in holder.stdout.readline().strip().split(",")]  # type: ignore[union-attr]
    assert len(claimed) == 3
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert _statuses() == {"pending": 2, "running": 3}
    from veralith.sdk.worker import run_worker

    # Same host, process gone: taken over at once, not after the lease timeout.
    totals = run_worker(open_store(), concurrency=2, stop=threading.Event(), once=True, poll_s=0.05)
    assert totals.judged == 5
    assert _statuses() == {"done": 5}
    with open_store().connection() as db:  # type: ignore[attr-defined]
        assert db.execute("SELECT COUNT(*) FROM trace_history").fetchone()[0] == 0


def test_sigterm_finishes_or_gives_back_and_exits_zero(store_url, openai_server):
    _pending(6)
    openai_server.latency_s = 30  # every judge call outlasts the grace period
    worker = subprocess.Popen(
        [sys.executable, "-m", "veralith.cli", "worker", "--concurrency", "3"],
        env=subprocess_env(VERALITH_BACKEND="openai", VERALITH_BASE_URL=openai_server.base_url, VERALITH_API_KEY="test",
                 VERALITH_SHUTDOWN_TIMEOUT_S="0.5", VERALITH_MAX_RETRIES="0"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while _statuses().get("running", 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _statuses().get("running") == 3
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "given back to pending" in err
    assert _statuses() == {"pending": 6}


def test_migrate_copies_a_sqlite_history_into_postgres_once(tmp_path, pg_server, monkeypatch):
    sqlite = f"sqlite:///{tmp_path / 'laptop.db'}"
    monkeypatch.setenv("VERALITH_DB_URL", sqlite)
    settings.reload()
    first = [veralith.log(QUERY, CONTEXT, RESPONSE, run="nightly") for _ in range(4)]
    veralith.shutdown()
    veralith.evaluate(QUERY, CONTEXT, "Lyon is the capital of France.", persist=True)
    source = open_store(sqlite)
    results = {i: source.read(ops.load_result, i) for i in first}
    learnt = OutputSize(task="claims", model="gpt-4o-mini", prompt_version="claims-v4", planned_calls=3, calls=3,
                        allowance_tokens=300, output_tokens=120, traces=3)   # what --dry-run learns from
    with source.connection() as db, db.write():
        add_output_sizes(db, [learnt], "2026-12-01T00:00:00Z")
    target = pg_server.new_database()
    monkeypatch.setenv("VERALITH_SPOOL_DIR", str(tmp_path / "pg-spool"))
    settings.reload()

    def migrate() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "veralith.cli", "migrate", "--to", target], env=subprocess_env(),
                              capture_output=True, text=True, timeout=120)

    done = migrate()
    assert done.returncode == 0, done.stderr
    assert "copied 5 traces (0 already there)" in done.stdout
    again = migrate()
    assert again.returncode == 0, again.stderr
    assert "copied 0 traces (5 already there)" in again.stdout
    copy = open_store(target)
    assert copy.read(ops.stats)["traces"] == 5 and copy.read(ops.stats)["by_gate"] == source.read(ops.stats)["by_gate"]
    assert copy.read(ops.output_sizes) == [learnt]                    # copied once, not added twice
    for trace_id, result in results.items():
        assert copy.read(ops.load_result, trace_id) == result          # ids kept, results equal
    assert [r.name for r in copy.read(ops.list_runs)] == ["nightly"]
    # New traces in the target never reuse a copied id.
    monkeypatch.setenv("VERALITH_DB_URL", target)
    settings.reload()
    assert create_trace(copy, TraceInput(query=QUERY, context=[], response=RESPONSE)) > max(first)


def test_migrate_refuses_the_same_store_and_an_unreachable_one(store, store_url, tmp_path):
    create_trace(store, TraceInput(query=QUERY, context=[], response=RESPONSE))  # a source to copy from
    same = subprocess.run([sys.executable, "-m", "veralith.cli", "migrate", "--to", store_url], env=subprocess_env(),
                          capture_output=True, text=True, timeout=60)
    assert same.returncode == 2 and "nothing to do" in same.stderr
    dead = subprocess.run([sys.executable, "-m", "veralith.cli", "migrate", "--to",
                           "postgresql://nobody:secret@127.0.0.1:9/none"], env=subprocess_env(),
                          capture_output=True, text=True, timeout=60)
    assert dead.returncode == 2, dead.stderr
    assert "cannot reach PostgreSQL" in dead.stderr and "secret" not in dead.stderr
    assert "Traceback" not in dead.stderr


def test_store_url_reads_every_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert store_url("x.db") == f"sqlite:///{tmp_path / 'x.db'}"
    assert store_url("sqlite:///x.db") == f"sqlite:///{tmp_path / 'x.db'}"
    assert store_url(f"sqlite:///{tmp_path}/y.db") == f"sqlite:///{tmp_path / 'y.db'}"
    assert store_url("postgresql://u@h/d") == "postgresql://u@h/d"
    assert Path(store_url()[len("sqlite:///"):]).name == "veralith.db"
