"""The work layer under the faults a fleet meets (issue 35): a store outage in the middle of judging,
a dead judge server in every drain, a worker whose clock runs ahead, and runs that stay true after an
outage. Each runs on both stores where a store is involved."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import subprocess_env
from store_support import sql, statuses
from work_support import claim, claim_batch, create_trace, resumable

from veralith.models import ContextChunk
from veralith.store import open_store, ops
from veralith.store.protocol import TraceInput

QUERY = "What is the capital of France?"
CONTEXT = ["Paris is the capital of France."]
RESPONSE = "Paris is the capital of France."


def _trace(i: int = 0) -> TraceInput:
    return TraceInput(query=f"{QUERY} ({i})", context=[ContextChunk(id="c0", text=CONTEXT[0])], response=RESPONSE)


def _dead_port() -> int:
    with socket.socket() as sock:   # free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- fault 9: a worker whose clock runs ahead never takes another's fresh lease ------------------------

def test_a_clock_far_ahead_does_not_make_fresh_leases_of_others_look_stale(store, monkeypatch):
    ids = [create_trace(store, _trace(i)) for i in range(3)]
    # Another host's worker claimed them a moment ago, by the database's clock.
    epoch = "((julianday('now') - 2440587.5) * 86400.0)" if store.url.startswith("sqlite") else \
        "extract(epoch FROM clock_timestamp())"
    sql(store, f"UPDATE traces SET status = 'running', lease_host = 'elsewhere', lease_pid = 7, lease_token = 't',"
               f" lease_at = {epoch}")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 400)   # this process's clock: 400 s ahead
    assert claim_batch(store, 10) == []
    assert resumable(store) == []
    assert not any(claim(store, i) for i in ids)
    assert set(statuses(store).values()) == {"running"}


def test_a_lease_older_than_the_timeout_by_the_databases_clock_is_taken(store, monkeypatch):
    trace_id = create_trace(store, _trace())
    sql(store, "UPDATE traces SET status = 'running', lease_host = 'elsewhere', lease_pid = 7, lease_token = 't',"
               " lease_at = ?", [time.time() - 3600])
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 7200)   # this process's clock: two hours behind
    assert claim_batch(store, 10) == [trace_id]


# -- fault 4: a store outage while judging leaves nothing running --------------------------------------

class _HeldJudge:
    """Judges at once, then holds each result until `gate` opens (so a test can take the store away
    between the judgment and its write)."""

    def __init__(self) -> None:
        from veralith.llm import get_client
        from veralith.pipeline.evaluate import TraceJudge

        self.inner = TraceJudge(get_client())
        self.gate, self.judged = threading.Event(), []

    def judge(self, store, trace_id, inputs):
        judged = self.inner.judge(store, trace_id, inputs)
        self.judged.append(trace_id)
        self.gate.wait(60)
        return judged

    async def ajudge(self, store, trace_id, inputs):  # pragma: no cover - the thread path is used here
        raise NotImplementedError


@pytest.mark.slow
def test_results_computed_during_a_postgres_outage_are_written_when_it_is_back(own_pg_server):
    from veralith.work.worker import run

    store = open_store()
    ids = [create_trace(store, _trace(i)) for i in range(3)]
    judge, stop, lines = _HeldJudge(), threading.Event(), []
    worker = threading.Thread(target=lambda: run(store, judge, concurrency=3, stop=stop, report=lines.append,
                                                 poll_s=0.05))
    worker.start()
    deadline = time.monotonic() + 60
    while len(judge.judged) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(judge.judged) == ids
    own_pg_server.halt()
    judge.gate.set()          # the results are ready; the store is not, for longer than a connection waits
    time.sleep(12.0)
    own_pg_server.start()
    deadline = time.monotonic() + 90
    while set(statuses(store).values()) != {"done"} and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    worker.join(60)
    assert statuses(store) == {i: "done" for i in ids}      # nothing left running, nothing judged twice
    assert {row[0] for row in sql(store, "SELECT attempts FROM traces")} == {1}
    assert any(line.startswith("waiting for the store") for line in lines), lines
    assert any(line.startswith("the store is back") for line in lines), lines


# -- fault 5: every drain stops on a dead judge server --------------------------------------------------

def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return subprocess_env(VERALITH_DB_PATH=str(tmp_path / "v.db"), VERALITH_BACKEND="openai",
                          VERALITH_BASE_URL=f"http://127.0.0.1:{_dead_port()}/v1", VERALITH_JUDGE_MODEL="m",
                          VERALITH_PRICING='{"*": {"input": 0, "output": 0}}', **extra)


@pytest.mark.slow
@pytest.mark.parametrize("command", [["worker", "--once"], ["resume"]])
def test_a_drain_stops_on_a_dead_judge_with_one_line_and_exit_2(tmp_path, command):
    env = _env(tmp_path)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"query": f"{QUERY} {i}", "context": CONTEXT, "response": RESPONSE}) + "\n"
                            for i in range(6)))
    stored = subprocess.run([sys.executable, "-m", "veralith.cli", "eval", str(path)], env=env, capture_output=True,
                            text=True, timeout=120)
    assert stored.returncode == 2, stored.stderr   # the same dead server: every trace left pending
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "veralith.cli", *command], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 60
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "is down" in errors[0] and "Traceback" not in done.stderr, done.stderr
    import sqlite3

    with sqlite3.connect(tmp_path / "v.db") as conn:
        assert dict(conn.execute("SELECT status, COUNT(*) FROM traces GROUP BY status").fetchall()) == {"pending": 6}


# -- fault 12: runs stay true after an outage ----------------------------------------------------------

@pytest.mark.slow
def test_a_run_stopped_by_a_judge_outage_takes_the_results_resume_writes(tmp_path):
    env = _env(tmp_path)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "query": f"{QUERY} {i}", "context": CONTEXT,
                                        "response": RESPONSE}) + "\n" for i in range(4)))
    first = subprocess.run([sys.executable, "-m", "veralith.cli", "eval", str(path), "--run-name", "before"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 2, first.stderr
    resumed = subprocess.run([sys.executable, "-m", "veralith.cli", "resume", "--backend", "local"],
                             env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    runs = subprocess.run([sys.executable, "-m", "veralith.cli", "runs", "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert runs.returncode == 0, runs.stderr
    [run] = [r for r in json.loads(runs.stdout) if r["name"] == "before"]
    assert run["n_traces"] == 4 and run["n_unevaluated"] == 0, run
    assert run["n_pass"] + run["n_fail"] + run["n_indeterminate"] == 4


def test_a_run_keeps_its_own_outcome_when_a_later_run_judges_again(tmp_path):
    from typer.testing import CliRunner

    from veralith.cli import app

    path = tmp_path / "t.jsonl"
    runner = CliRunner()
    for name, answer in (("one", RESPONSE), ("two", "Berlin is the capital of France.")):
        path.write_text(json.dumps({"id": "r0", "query": QUERY, "context": CONTEXT, "response": answer}) + "\n")
        assert runner.invoke(app, ["eval", str(path), "--run-name", name]).exit_code == 0
    store = open_store()
    one, two = store.read(ops.resolve_run, "one"), store.read(ops.resolve_run, "two")
    assert (one.n_traces, one.n_pass, one.n_unevaluated) == (1, 1, 0)
    assert (two.n_traces, two.n_fail, two.n_unevaluated) == (1, 1, 0)


def test_the_policy_decides_each_fault_once():
    from veralith.config import ConfigError
    from veralith.errors import JudgeCallError, JudgeServerDown
    from veralith.store.errors import StoreUnavailable, WritesStopped
    from veralith.work.claims import LeaseLost
    from veralith.work.policy import Action, decide, intake

    down = JudgeServerDown("http://h/v1", "3 requests in a row failed", retry_after_s=30.0)
    assert (decide(down).action, decide(down).stops_drain, decide(down).wait_s) == (Action.GIVE_BACK, True, 30.0)
    assert decide(JudgeCallError("auth", "HTTP 401")).action is Action.GIVE_BACK
    assert decide(JudgeCallError("auth", "HTTP 401")).stops_drain
    assert decide(StoreUnavailable("away")).action is Action.KEEP
    assert decide(WritesStopped("full")).action is Action.STOP
    assert decide(ConfigError("VERALITH_X: bad")).action is Action.STOP
    assert decide(LeaseLost("taken")).action is Action.NOT_OURS
    assert decide(ValueError("a bug")).action is Action.RECORD and not decide(ValueError()).stops_drain
    assert intake(StoreUnavailable("away")).action is Action.RETRY
    assert intake(WritesStopped("full")).action is Action.STOP
    assert intake(ValueError("text fields cannot contain NUL")).action is Action.SET_ASIDE


# -- kill -9 of an app before its first ship: no database yet, only its spool --------------------------

_LOG_AND_WAIT = """
import sys, time, veralith
from veralith.work import background
from veralith.store import ops
background.Background._ship_all = lambda self: False   # this process never ships (it dies first)
for seq in range(20):
    print(veralith.log(f"What is the capital of France? ({seq})", ["Paris is the capital of France."],
                       "Paris is the capital of France.", metadata={"seq": seq}), flush=True)
print("logged", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_resume_recovers_the_spool_of_an_app_killed_before_any_store_existed(tmp_path):
    env = subprocess_env(VERALITH_DB_PATH=str(tmp_path / "v.db"))
    app = subprocess.Popen([sys.executable, "-c", _LOG_AND_WAIT], env=env, stdout=subprocess.PIPE, text=True)
    assert app.stdout is not None
    ids = [int(app.stdout.readline()) for _ in range(20)]
    assert app.stdout.readline().strip() == "logged"
    app.kill()
    app.wait(timeout=30)
    assert not (tmp_path / "v.db").exists()       # nothing reached a store: every trace is in the spool
    done = subprocess.run([sys.executable, "-m", "veralith.cli", "resume"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    import sqlite3

    with sqlite3.connect(tmp_path / "v.db") as conn:
        rows = dict(conn.execute("SELECT id, metadata FROM traces WHERE status = 'done'").fetchall())
    assert sorted(rows) == sorted(ids) and [json.loads(rows[i])["seq"] for i in ids] == list(range(20))


def test_two_results_written_at_once_both_count_in_a_closed_run(pg_url):
    """The fault-12 flake on PostgreSQL (run 1 counted 11 of its 12 traces judged after `resume`): two
    results of one closed run written by two of resume's threads at once. Each transaction counted the
    run's totals before waiting for the other's lock on the runs row, so the later commit wrote totals
    that left out the earlier one's trace. The row is now locked before the totals are counted."""
    from veralith.store import runs

    store = open_store(pg_url)
    ids = [create_trace(store, _trace(i)) for i in range(2)]

    def closed_run(db):
        run_id = runs.start_run(db, name="before", backend="local", model=None, prompt_versions=None)
        for trace_id in ids:
            runs.record_result(db, run_id, trace_id)   # pending: the run holds them without an outcome
        runs.finish_run(db, run_id)
        return run_id

    run_id = store.write(closed_run)
    sql(store, "UPDATE traces SET status = 'done', quality_gate = 'pass', failure_cell = 'complete_grounded'")
    first_done, first_commit = threading.Event(), threading.Event()

    def first(db):
        with db.write():
            runs.fill_unjudged(db, ids[0])
            first_done.set()
            first_commit.wait(10)   # the second transaction counts (or waits) meanwhile

    def second(db):
        with db.write():
            runs.fill_unjudged(db, ids[1])

    one = threading.Thread(target=store.write, args=(first,))
    one.start()
    assert first_done.wait(10)
    two = threading.Thread(target=store.write, args=(second,))
    two.start()
    time.sleep(0.5)   # the second is inside its transaction, at the runs row the first holds
    first_commit.set()
    one.join(10)
    two.join(10)
    run = store.read(ops.get_run, run_id)
    assert (run.n_traces, run.n_pass, run.n_unevaluated) == (2, 2, 0), run


def test_a_result_locks_the_runs_waiting_for_it_in_run_id_order(store):
    """fill_unjudged locks each eval run waiting for the trace (SELECT ... FOR UPDATE on PostgreSQL): in
    run id order, whatever order the copies were stored in, so two workers filling traces that two runs
    share lock them in the same order and never deadlock."""
    from veralith.store import runs

    trace_id = create_trace(store, _trace())

    def two_runs(db):
        made = [runs.start_run(db, name=name, backend="local", model=None, prompt_versions=None)
                for name in ("first", "second")]
        for run_id in reversed(made):   # the later run's copy stored first
            runs.record_result(db, run_id, trace_id)
        return made

    made = store.write(two_runs)
    sql(store, "UPDATE traces SET status = 'done', quality_gate = 'pass', failure_cell = 'complete_grounded'")
    locked: list[int] = []

    class Watched:
        def __init__(self, db):
            self._db = db

        def __getattr__(self, name):
            return getattr(self._db, name)

        def execute(self, statement, parameters=None):
            if statement.startswith("SELECT ended_at FROM runs"):
                locked.append(parameters[0])
            return self._db.execute(statement, parameters)

    def fill(db):
        with db.write():
            runs.fill_unjudged(Watched(db), trace_id)

    store.write(fill)
    assert locked == sorted(made), locked
