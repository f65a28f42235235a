"""log() never waits on the store and never loses a trace: a SQLite write lock held by another
process (the first call of a fresh process included, and hundreds of calls), a PostgreSQL server
that is down, a process killed before its spool was shipped, and an exit while a trace is judged.

Speed is measured in benchmarks/log_overhead.py; here the order of events is what is checked: every
log() call returns while the lock is still held (the holder only lets go once told to)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import subprocess_env

from veralith.config import settings
from veralith.store import open_store, ops

QUERY = "What is the capital of France?"
CONTEXT = ["Paris is the capital of France."]
RESPONSE = "Paris is the capital of France."

_HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()          # hold the write lock until told to let go
conn.execute("COMMIT")
print("released", flush=True)
"""

_LOG_MANY = """
import json, sys, time, veralith
n = int(sys.argv[1])
ids, worst = [], 0.0
for i in range(n):
    start = time.perf_counter()
    ids.append(veralith.log("What is the capital of France?", ["Paris is the capital of France."],
                            "Paris is the capital of France.", metadata={"i": i}))
    worst = max(worst, time.perf_counter() - start)
print(json.dumps({"ids": ids, "worst_s": worst}), flush=True)
sys.stdin.readline()          # wait until the lock is gone, then exit (the at-exit drain ships and judges)
"""


def _statuses() -> dict[str, int]:
    return {k: v for k, v in open_store(read_only=True).read(ops.stats)["by_status"].items() if v}


def test_log_returns_while_another_process_holds_the_sqlite_write_lock():
    import veralith

    veralith.log(QUERY, CONTEXT, RESPONSE)  # the database exists and is migrated before the lock is taken
    veralith.shutdown()
    path = settings.db_path
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"  # type: ignore[union-attr]
    # A fresh process: its first call included, and more calls than an id block ever held.
    logger = subprocess.Popen([sys.executable, "-c", _LOG_MANY, "300"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
    line = logger.stdout.readline()  # type: ignore[union-attr]
    assert line, logger.stderr.read()  # type: ignore[union-attr]
    logged = json.loads(line)
    assert holder.poll() is None, "every log() call returned while the write lock was still held"
    assert logged["ids"] == list(range(2, 302))       # final ids, consecutive, none lost to a block
    holder.communicate("go\n", timeout=30)
    logger.communicate("go\n", timeout=120)
    assert logger.returncode == 0
    assert _statuses() == {"done": 301}


def _killed_before_shipping(count: int) -> list[int]:
    """An app that logs `count` traces while another process holds the database's write lock, killed
    with SIGKILL before its spool could be shipped; the lock is then released. The ids log() returned."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, settings.db_path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"  # type: ignore[union-attr]
    logger = subprocess.Popen([sys.executable, "-c", _LOG_MANY, str(count)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=subprocess_env())
    ids: list[int] = json.loads(logger.stdout.readline())["ids"]  # type: ignore[union-attr]
    logger.send_signal(signal.SIGKILL)                 # its spool was never shipped: the lock was held
    logger.wait(timeout=30)
    holder.communicate("go\n", timeout=30)
    return ids


def test_a_process_killed_before_shipping_loses_nothing():
    import veralith

    veralith.log(QUERY, CONTEXT, RESPONSE)
    veralith.shutdown()
    ids = _killed_before_shipping(25)
    assert _statuses() == {"done": 1}
    resumed = subprocess.run([sys.executable, "-m", "veralith.cli", "resume"], env=subprocess_env(), capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert _statuses() == {"done": 26}
    store = open_store()
    assert [store.read(ops.load_input, i).metadata["i"] for i in ids] == list(range(25))


def _prepared(spooler, timeout_s: float = 30.0) -> None:
    """Until the spooler's own thread has taken ids ahead and readied a spare segment."""
    deadline = time.monotonic() + timeout_s
    while (len(spooler.ids._held) < 2 or spooler.spool._spare is None) and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_warm_log_makes_no_system_call_on_the_callers_thread(monkeypatch):
    """Each system call lets a busy background thread take the GIL, for up to a switch interval
    (the p99 of issue 23): once the spooler is ready, log() makes none (ids in memory, the line
    copied into a mapped segment), while the shipper and evaluator keep working."""
    import fcntl
    import mmap
    import os
    import random
    import threading

    import veralith
    from veralith.store import store_url
    from veralith.work.spooler import spooler_for

    first = veralith.log(QUERY, CONTEXT, RESPONSE)
    spooler = spooler_for(store_url())
    caller, made = threading.get_ident(), []

    def watched(module, name):
        real = getattr(module, name)

        def call(*args, **kwargs):
            if threading.get_ident() == caller:
                made.append(name)
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, call)

    for name in ("open", "read", "write", "lseek", "getcwd", "urandom", "stat", "mkdir", "rename", "unlink",
                 "posix_fallocate"):
        watched(os, name)
    watched(fcntl, "flock")
    watched(mmap, "mmap")
    watched(random, "_urandom")   # what secrets.token_hex reads (bound in `random` at import)
    ids = []
    for _ in range(3):   # more ids than one batch: the spooler's thread takes more in between
        _prepared(spooler)
        ids += [veralith.log(QUERY, CONTEXT, RESPONSE, metadata={"n": len(ids) + k}) for k in range(50)]
    assert made == []
    monkeypatch.undo()
    assert ids == list(range(first + 1, first + 151))
    assert veralith.shutdown(timeout=120) == 0
    assert _statuses() == {"done": 151}
    assert [open_store().read(ops.load_input, i).metadata["n"] for i in ids] == list(range(150))


def test_a_dead_processs_segment_is_recovered_up_to_its_last_complete_line(monkeypatch):
    """A segment is preallocated and NUL-filled past what was written; a copy cut short by a crash
    leaves a last line without its newline. `veralith resume` ships the complete lines."""
    import veralith
    from veralith.models import ContextChunk
    from veralith.store import store_url
    from veralith.store.protocol import TraceInput
    from veralith.work import leases
    from veralith.work.spool import Spool
    from veralith.work.spooler import spooler_for

    veralith.log(QUERY, CONTEXT, RESPONSE)
    veralith.shutdown()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    spooler = spooler_for(store_url())
    host = leases.mine()[0]
    monkeypatch.setattr(leases, "mine", lambda: (host, gone.pid, "t0ken"))
    dead = Spool(spooler.folder)
    ids = [spooler.ids.take() for _ in range(2)]
    for trace_id in ids:
        dead.append({"id": trace_id, "uid": f"{trace_id:032x}", "created_at": "2026-01-01T00:00:00.000000+00:00",
                     "run": None, "here": True, **TraceInput(query=QUERY, context=[ContextChunk(id="c0", text=CONTEXT[0])],
                                                             response=RESPONSE, metadata={"k": trace_id}).to_json()})
    segment = dead._active
    assert segment is not None and segment.size > segment.used
    segment.map[segment.used:segment.used + 20] = b'{"id": 99, "cut shor'   # then the process died
    segment.close()
    monkeypatch.undo()
    assert veralith.resume() == 2
    store = open_store()
    assert [store.read(ops.load_input, i).metadata for i in ids] == [{"k": i} for i in ids]
    assert sorted(p.name for p in spooler.folder.iterdir() if not p.name.startswith("next-id.")) == ["next-id"]


def test_log_keeps_working_while_postgres_is_down_and_ships_when_it_is_back(own_pg_server):
    import veralith

    server = own_pg_server   # this test stops it
    before = [veralith.log(QUERY, CONTEXT, RESPONSE) for _ in range(3)]
    deadline = time.monotonic() + 60
    while _statuses().get("done", 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    server.halt()
    during = [veralith.log(QUERY, CONTEXT, RESPONSE, metadata={"outage": True}) for _ in range(5)]
    from veralith.work.ids import RANDOM_BASE

    # The host's block (reserved in the background after its first trace): no database needed.
    assert during == list(range(during[0], during[0] + 5)) and during[-1] < RANDOM_BASE
    time.sleep(1.0)     # the shipper meets the outage and backs off; nothing is lost meanwhile
    server.start()
    assert veralith.shutdown(timeout=60) == 0
    assert _statuses() == {"done": 8} and len(set(before + during)) == 8
    assert all(open_store().read(ops.load_input, i).metadata == {"outage": True} for i in during)


_EXIT_WHILE_JUDGING = """
import time, veralith
from veralith.store import open_store, ops
veralith.log("What is the capital of France?", ["Paris is the capital of France."], "Paris is the capital of France.")
store = open_store()
deadline = time.monotonic() + 60
while store.read(ops.stats)["by_status"]["running"] == 0 and time.monotonic() < deadline:
    time.sleep(0.05)   # until the judge is asked (it answers in 30 s)
"""


def test_a_trace_being_judged_at_exit_is_left_pending_not_running(store_url, openai_server):
    openai_server.latency_s = 30  # the judge call outlasts the exit drain
    done = subprocess.run([sys.executable, "-c", _EXIT_WHILE_JUDGING], capture_output=True, text=True, timeout=60,
                          env=subprocess_env(VERALITH_BACKEND="openai", VERALITH_BASE_URL=openai_server.base_url,
                                   VERALITH_API_KEY="test", VERALITH_SHUTDOWN_TIMEOUT_S="1",
                                   VERALITH_MAX_RETRIES="0"))
    assert done.returncode == 0, done.stderr
    assert "1 logged trace(s) not evaluated" in done.stderr
    assert _statuses() == {"pending": 1}


_LOG_FIVE = """
import veralith
from veralith.store import ops
for i in range(5):
    veralith.log("What is the capital of France?", ["Paris is the capital of France."], "Paris is the capital.")
"""


def test_an_app_whose_judge_server_is_dead_exits_in_time_and_leaves_its_traces_pending(store_url):
    import socket

    with socket.socket() as sock:   # a port nothing listens on: every connection is refused
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _LOG_FIVE], capture_output=True, text=True, timeout=120,
                          env=subprocess_env(VERALITH_BACKEND="openai", VERALITH_BASE_URL=dead, VERALITH_API_KEY="test",
                                   VERALITH_SHUTDOWN_TIMEOUT_S="30"))
    assert done.returncode == 0, done.stderr
    # The drain's deadline, not one timeout per trace and retry. The deadline leaves room for the
    # shipper's first round (it imports the store) on a loaded machine: at 10 s it once ran out there,
    # leaving traces in the spool for the next process (kept, but not yet in the store).
    assert time.monotonic() - started < 60
    assert done.stderr.count("is down") <= 1, done.stderr        # said once at most, never once per trace
    assert "Traceback" not in done.stderr
    assert _statuses() == {"pending": 5}


@pytest.mark.parametrize("code, kept", [("EOPNOTSUPP", True), ("ENOSPC", False)])
def test_a_file_system_without_fallocate_gets_its_segment_written_out(tmp_path, monkeypatch, code, kept):
    import errno
    import os

    from veralith.work.spool import Spool

    def refuse(fd, offset, length):
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))
    monkeypatch.setattr(os, "posix_fallocate", refuse, raising=False)
    spool = Spool(tmp_path, segment_bytes=1 << 17)
    if not kept:   # a full disk is a real answer: the caller hears it, as the documented WritesStopped
        from veralith.store.errors import WritesStopped

        with pytest.raises(WritesStopped, match="No space left on device"):
            spool.append({"n": 1})
        return
    spool.append({"n": 1})   # NFS and some FUSE mounts refuse fallocate: the blocks are written out instead
    (segment,) = tmp_path.glob("*.seg")
    assert segment.stat().st_size == 1 << 17
    got: list[dict] = []
    assert spool.ship(got.extend) == 1 and got == [{"n": 1}]


def test_a_process_has_one_lease_token_however_many_threads_ask_first(monkeypatch):
    # The caller's first log() names its spool segment with the token while the shipper asks for it
    # too; two tokens made the next append take the process for a forked child and forget the
    # segment holding the first traces (one trace of fifteen missing from the sample app's store).
    import threading

    from veralith.work import leases

    for _ in range(50):
        monkeypatch.setattr(leases, "_TOKEN", None)
        start, seen = threading.Barrier(8), []

        def ask(start=start, seen=seen):
            start.wait()
            seen.append(leases.token())

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(seen)) == 1


def test_resume_moves_a_spool_in_when_the_database_file_was_never_migrated():
    # An app killed while its first store opening was still migrating leaves a database file with no
    # schema: resume said "has schema none ... any writing command brings it up to date", exit 2, and
    # left every spooled trace out (found by benchmarks/fault_matrix.py, kill -9 of an app mid-burst).
    sqlite3.connect(settings.db_path).close()          # the file exists, nothing applied
    ids = _killed_before_shipping(5)
    resumed = subprocess.run([sys.executable, "-m", "veralith.cli", "resume"], env=subprocess_env(), capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    store = open_store()
    assert [store.read(ops.load_input, i).metadata["i"] for i in ids] == list(range(5))
