"""Ids that cannot collide (issue 35, Deliver 3 and 6): a returned id names the trace it was returned
for whatever `migrate`, a deleted or damaged counter file or a store that is down does; and `log()`
returns at once on a fresh host while PostgreSQL is down."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import subprocess_env
from store_support import sql
from work_support import create_trace

import veralith
from veralith.config import settings
from veralith.models import ContextChunk
from veralith.store import open_store, store_url as configured_url
from veralith.store.protocol import TraceInput
from veralith.work.ids import RANDOM_BASE, IdFile

QUERY = "What is the capital of France?"
CONTEXT = ["Paris is the capital of France."]
RESPONSE = "Paris is the capital of France."

# An app: logs `count` traces tagged with its name, printing each id as it goes, pausing between calls.
_APP = """
import json, os, sys, time, veralith
tag, count, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
while os.environ.get("TEST_GO") and not os.path.exists(os.environ["TEST_GO"]):   # started, waiting for its turn
    time.sleep(0.005)
for seq in range(count):
    trace_id = veralith.log(f"What is the capital of France? ({tag} {seq})", ["Paris is the capital of France."],
                            "Paris is the capital of France.", metadata={"tag": tag, "seq": seq}, evaluate=False)
    print(json.dumps({"seq": seq, "id": trace_id}), flush=True)
    time.sleep(pause)
veralith.shutdown(wait=True, timeout=30)
"""


def _app(tag: str, count: int, pause: float, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _APP, tag, str(count), str(pause)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _returned(proc: subprocess.Popen[str]) -> list[dict[str, int]]:
    """The lines an app printed (those not read already), once it exited."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _names_its_trace(store, tag: str, lines: list[dict[str, int]]) -> list[int]:
    """The returned ids that do not name the trace they were returned for."""
    stored = {int(i): json.loads(m or "{}") for i, m in sql(store, "SELECT id, metadata FROM traces")}
    return [line["id"] for line in lines if stored.get(line["id"]) != {"tag": tag, "seq": line["seq"]}]


# -- fault 8: the counter file deleted while two apps log ---------------------------------------------------

@pytest.mark.slow
def test_a_counter_deleted_while_two_apps_log_never_hands_an_id_out_twice(tmp_path):
    env = subprocess_env(VERALITH_DB_PATH=str(tmp_path / "v.db"))
    counter = tmp_path / "v.db.spool" / "next-id"
    first = _app("a", 300, 0.005, env)
    assert first.stdout is not None
    early = [json.loads(first.stdout.readline()) for _ in range(40)]   # a holds ids taken ahead, in memory
    counter.unlink()
    second = _app("b", 300, 0.005, env)                                # b starts a new counter meanwhile
    a_lines, b_lines = early + _returned(first), _returned(second)
    a_ids, b_ids = {line["id"] for line in a_lines}, {line["id"] for line in b_lines}
    assert len(a_ids) == 300 and len(b_ids) == 300
    assert not a_ids & b_ids, f"{len(a_ids & b_ids)} ids returned to both apps"
    done = subprocess.run([sys.executable, "-m", "veralith.cli", "resume"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    store = open_store(f"sqlite:///{tmp_path / 'v.db'}")
    assert _names_its_trace(store, "a", a_lines) == [] and _names_its_trace(store, "b", b_lines) == []


def test_a_lost_or_damaged_counter_starts_above_what_a_live_process_holds(tmp_path):
    path = tmp_path / "next-id"
    holder = IdFile(path, start=lambda: 1)
    held = [holder.take(ahead=True) for _ in range(3)]        # a batch taken ahead: the rest is in memory only
    path.unlink()
    assert IdFile(path, start=lambda: 1).take() > max(held) + 60
    path.write_bytes(b"00000000000000000002\n99999999999999999\n0000000001\n")   # damaged: the check fails
    assert IdFile(path, start=lambda: 1).take() > max(held) + 60
    path.write_bytes(b"00000000000000000002\n")                                    # cut short
    again = IdFile(path, start=lambda: 1).take()
    assert again > max(held) + 60
    # The holder takes its next batch from the new counter, above what the others took.
    taken = [holder.take(ahead=True) for _ in range(200)]
    assert len(set(taken)) == 200 and not set(taken) & set(held) and again not in taken


def test_a_counter_restored_from_an_older_copy_is_not_trusted(tmp_path):
    path = tmp_path / "next-id"
    ids = IdFile(path, start=lambda: 1)
    old = path.read_bytes() if path.exists() else b""
    first = [ids.take() for _ in range(5)]
    path.write_bytes(old or b"00000000000000000001\n04611686018427387903\n")    # an older copy put back
    assert ids.take() > max(first)


def test_a_counter_put_back_is_not_trusted_by_a_process_that_holds_nothing_yet(tmp_path):
    """A restore of the folder puts the counter back below what a live process took; a process that
    holds nothing yet (started after it) must not hand those ids out again before the live one looks."""
    from veralith.work.ids import _check

    path = tmp_path / "next-id"
    live = IdFile(path, start=lambda: 1)
    used = [live.take(ahead=True) for _ in range(3)]       # and more taken ahead, in memory only
    path.write_bytes(f"{2:020d}\n{(1 << 62) - 1:020d}\n{_check(2, (1 << 62) - 1):010d}\n".encode("ascii"))
    fresh = IdFile(path, start=lambda: 1)                   # (a process of its own, as far as ids go)
    first = fresh.take()
    assert first > max(used) + 60, first
    assert first not in [live.take(ahead=True) for _ in range(200)]

# -- fault 2: migrate into a PostgreSQL store a host is logging into ---------------------------------------

def _sqlite_history(tmp_path: Path, n: int, **inputs: object) -> str:
    url = f"sqlite:///{tmp_path / 'laptop.db'}"
    source = open_store(url)
    for i in range(n):
        external = inputs.get("external") and f"r{i}"
        create_trace(source, TraceInput(query=f"{QUERY} (copied {i})", context=[ChunkOf(CONTEXT[0])],
                                        response=RESPONSE, external_id=external, metadata={"copied": i}))
    return url


def ChunkOf(text: str) -> ContextChunk:   # noqa: N802 - reads as a constructor
    return ContextChunk(id="c0", text=text)


def _migrate(source: str, target: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "veralith.cli", "migrate", "--from", source, "--to", target, *args],
                          env=subprocess_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_migrate_into_a_store_in_use_never_takes_an_id_a_host_was_handed(tmp_path, store_url, monkeypatch):
    ours = [veralith.log(QUERY, CONTEXT, RESPONSE, evaluate=False, metadata={"tag": "h", "seq": i})
            for i in range(3)]
    assert veralith.shutdown() == 0                    # shipped: this host holds a block of ids now
    ours += [veralith.log(QUERY, CONTEXT, RESPONSE, evaluate=False, metadata={"tag": "h", "seq": 3})]
    source = _sqlite_history(tmp_path, 60)
    monkeypatch.setenv("VERALITH_DB_URL", store_url)
    settings.reload()
    done = _migrate(source, store_url)
    assert done.returncode == 0, done.stderr
    assert "copied 60 traces" in done.stdout
    ours += [veralith.log(QUERY, CONTEXT, RESPONSE, evaluate=False, metadata={"tag": "h", "seq": 4 + i})
             for i in range(20)]
    assert veralith.shutdown() == 0
    store = open_store(store_url)
    lines = [{"seq": i, "id": trace_id} for i, trace_id in enumerate(ours)]
    assert _names_its_trace(store, "h", lines) == []
    copied = sql(store, "SELECT metadata FROM traces WHERE metadata LIKE ?", ['%"copied"%'])
    assert len(copied) == 60


# -- fault 3: conflicts, two at once, killed half-way -------------------------------------------------------

@pytest.mark.slow
def test_migrate_skips_and_reports_each_conflicting_external_id_or_fails_before_copying(tmp_path, store, store_url):
    source = _sqlite_history(tmp_path, 6, external=True)
    create_trace(store, TraceInput(query="theirs", context=[], response="x", external_id="r2"))
    create_trace(store, TraceInput(query="theirs", context=[], response="x", external_id="r4"))
    failed = _migrate(source, store_url, "--on-conflict", "fail")
    assert failed.returncode == 2, failed.stderr
    assert "2 trace(s) of the source have an external id" in failed.stderr and "Traceback" not in failed.stderr
    assert len(sql(store, "SELECT id FROM traces")) == 2                      # nothing copied
    done = _migrate(source, store_url)
    assert done.returncode == 0, done.stderr
    skipped = [line for line in done.stderr.splitlines() if line.startswith("skipped:")]
    assert len(skipped) == 2 and all("'r2'" in s or "'r4'" in s for s in skipped), done.stderr
    assert "copied 4 traces" in done.stdout and "2 skipped" in done.stdout
    assert len(sql(store, "SELECT id FROM traces")) == 6


@pytest.mark.slow
def test_a_second_migrate_into_the_same_store_says_so_and_exits_2(tmp_path, store, store_url):
    from veralith.work.migrate import exclusive

    source = _sqlite_history(tmp_path, 3)
    with exclusive(store):
        second = _migrate(source, store_url)
    assert second.returncode == 2
    assert second.stderr.count("error:") == 1 and "another `veralith migrate`" in second.stderr
    assert "Traceback" not in second.stderr
    assert _migrate(source, store_url).returncode == 0


@pytest.mark.slow
def test_a_migrate_killed_half_way_leaves_whole_traces_and_a_rerun_finishes(tmp_path, store, store_url):
    source = _sqlite_history(tmp_path, 1600)
    proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "migrate", "--from", source, "--to", store_url],
                            env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "copied" in line and not line.strip().endswith(" 0 copied"):
            break
    proc.kill()
    proc.wait(timeout=30)
    half = len(sql(store, "SELECT id FROM traces"))
    chunks = sql(store, "SELECT COUNT(*) FROM context_chunks")[0][0]
    assert chunks == half                              # every copied trace has its context: nothing half-copied
    done = _migrate(source, store_url)
    assert done.returncode == 0, done.stderr
    assert f"({half:,} already there" in done.stdout
    assert len(sql(store, "SELECT id FROM traces")) == 1600


# -- fault 6: log() on a fresh host while PostgreSQL is down -----------------------------------------------

@pytest.mark.slow
def test_log_returns_at_once_on_a_fresh_host_while_postgres_is_down(own_pg_server):
    own_pg_server.halt()
    took, ids = [], []
    for i in range(20):
        started = time.perf_counter()
        ids.append(veralith.log(QUERY, CONTEXT, RESPONSE, evaluate=False, metadata={"tag": "f", "seq": i}))
        took.append((time.perf_counter() - started) * 1000)
    assert max(took[1:]) < 50, took        # (the first call of a process loads the spool's modules)
    assert max(took) < 500, took
    assert all(i >= RANDOM_BASE for i in ids) and len(set(ids)) == 20   # no block yet: ids drawn at random
    own_pg_server.start()
    assert veralith.shutdown(timeout=60) == 0
    store = open_store(configured_url())
    assert _names_its_trace(store, "f", [{"seq": i, "id": x} for i, x in enumerate(ids)]) == []


def test_what_dead_processes_held_is_forgotten_and_another_hosts_is_kept(tmp_path):
    import re
    import socket

    from veralith.work.holdings import held_above

    counter = tmp_path / "next-id"
    here = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())
    dead = tmp_path / f"next-id.held.{here}__999999__1-ab"      # no such pid: killed before it dropped it
    dead.write_text(f"{10**9:020d}\n")
    other = tmp_path / "next-id.held.elsewhere__7__1-cd"         # another host sharing the folder: kept
    other.write_text(f"{500:020d}\n")
    assert held_above(counter) == 500
    assert not dead.exists() and other.exists()


# -- a restore: the store (and its sequence or counter) put back to a backup while hosts log --------------

def _restore(store, url: str, tmp_path: Path, keep_through: int) -> None:
    """What a restore from a backup taken when ids up to `keep_through` were handed out does: the traces
    stored after it are gone and the sequence (PostgreSQL; with the record of the blocks handed out) or
    the counter file (SQLite) is back where it was then."""
    sql(store, "DELETE FROM traces WHERE id > ?", [keep_through])
    if url.startswith("sqlite:"):
        from veralith.work.ids import _check

        counter = Path(url[len("sqlite:///"):] + ".spool") / "next-id"
        nxt, end = keep_through + 1, (1 << 62) - 1
        counter.write_bytes(f"{nxt:020d}\n{end:020d}\n{_check(nxt, end):010d}\n".encode("ascii"))
    else:
        sql(store, "DELETE FROM trace_id_blocks")
        sql(store, "SELECT setval('veralith_trace_ids', 1, false)")   # backup taken before any block


@pytest.mark.slow
def test_a_restore_never_hands_an_id_out_twice(store_url, tmp_path):
    """Host a logs across a restore of the store; host b starts after it (a fresh host, or a new
    process). No id is returned to both, and every returned id names its own trace, or none (a trace
    the restore removed)."""
    store = open_store(store_url)
    env = subprocess_env()
    postgres = not store_url.startswith("sqlite:")
    # SQLite: a pauses long enough (64 ids taken ahead last it 3 s) that b reads the counter put back
    # before a does; a's own next look would start it again above what a took.
    count, pause = (500, 0.01) if postgres else (200, 0.05)
    first = _app("a", count, pause, {**env, "VERALITH_SPOOL_DIR": str(tmp_path / "spool-a")} if postgres else env)
    assert first.stdout is not None
    early: list[dict[str, int]] = []
    while len([line for line in early if line["id"] < RANDOM_BASE]) < 30 and len(early) < count - 100:
        early.append(json.loads(first.stdout.readline()))    # a draws a block (PostgreSQL) and logs from it
    counted = [line["id"] for line in early if line["id"] < RANDOM_BASE]
    assert len(counted) >= 30, "host a never drew a block"
    deadline = time.monotonic() + 60
    while not sql(store, "SELECT id FROM traces WHERE id = ?", [counted[20]]) and time.monotonic() < deadline:
        time.sleep(0.1)                                        # ... and has shipped traces of it
    go = tmp_path / "go"
    second = _app("b", 500, 0.01, {**env, "TEST_GO": str(go), **(
        {"VERALITH_SPOOL_DIR": str(tmp_path / "spool-b")} if postgres else {})})   # started, waits for `go`
    _restore(store, store_url, tmp_path, 0 if postgres else min(counted) + 9)
    if postgres:   # a's next shipping round (shipper.SECURE_EVERY_S): the window docs/sdk.md states
        time.sleep(3.0)
    # (SQLite: no wait. b's first look at the counter finds it below what the live a took.)
    go.touch()
    a_lines, b_lines = early + _returned(first), _returned(second)
    a_ids, b_ids = {line["id"] for line in a_lines}, {line["id"] for line in b_lines}
    assert len(a_ids) == count and len(b_ids) == 500
    assert not postgres or any(x < RANDOM_BASE for x in b_ids), "host b never drew a block"
    assert not a_ids & b_ids, f"{len(a_ids & b_ids)} ids returned to both hosts, e.g. {sorted(a_ids & b_ids)[:5]}"
    stored = {int(i): json.loads(m or "{}") for i, m in sql(store, "SELECT id, metadata FROM traces")}
    for tag, lines in (("a", a_lines), ("b", b_lines)):
        wrong = [x["id"] for x in lines if stored.get(x["id"], {"tag": tag, "seq": x["seq"]}) != {"tag": tag,
                                                                                               "seq": x["seq"]}]
        assert wrong == [], f"ids returned to {tag} that name another trace: {wrong[:5]}"
    assert _names_its_trace(store, "b", b_lines) == []


# -- hosts sharing one spool folder: one owner of its blocks --------------------------------------------

def test_hosts_sharing_a_spool_folder_own_its_blocks_together(pg_url, tmp_path, monkeypatch, caplog):
    """Two hosts (processes with different host names) whose spool folder is one (a shared volume) share
    its counter and so its block: they are one owner of it in the store's record (a token file in the
    folder), so neither takes the other's block for a foreign one, drops it and warns every round."""
    import logging
    import socket

    from veralith.store import ops
    from veralith.work.ids import REMOTE_BLOCK

    store = open_store(pg_url)
    folder = tmp_path / "shared-spool"

    def host(name: str) -> IdFile:
        monkeypatch.setattr(socket, "gethostname", lambda: name)
        ids = IdFile(folder / "next-id", start=lambda: 1, remote=True, block=REMOTE_BLOCK)
        ids.attach(lambda count: store.write(ops.reserve_block, ids.high_water(), ids.owner))
        return ids

    a, b = host("host-a"), host("host-b")
    assert a.owner == b.owner and (folder / "next-id.owner").exists()
    a.fill()                                    # a draws the folder's block
    first = a.take()
    caplog.set_level(logging.WARNING, logger="veralith.store")
    for ids in (b, a, b):                       # each host's shipping round (shipper.secure)
        high, block, unused = ids.unused()
        assert block is not None
        taken = store.write(ops.secure_ids, ids.owner, high, block, unused)
        assert taken == {}, taken
    assert b.take() == first + 1                # the block is kept: no id lost, none handed out twice
    assert not caplog.records
    recorded = sql(store, "SELECT DISTINCT owner FROM trace_id_blocks")
    assert len(recorded) == 1


def test_a_trace_this_process_stores_during_a_shipping_round_is_not_taken_for_a_restore(store_url, caplog):
    """A shipping round reads the ranges its host has not handed out (IdFile.unused), then asks the store
    which of them are taken. A trace the same process stores in between (log(sync=True), eval: intake)
    lands in one of those ranges: that is this host's own id, not a restore. The range is checked again
    from where the host is now; nothing is dropped, no block given up, nothing logged."""
    import logging

    from veralith.store import ops
    from veralith.work import shipper
    from veralith.work.spooler import spooler_for

    store = open_store(store_url)

    def check(ids: IdFile, high: int, block: tuple[int, int] | None, unused: list[tuple[int, int]]) -> dict:
        if ids.remote:
            return store.write(ops.secure_ids, ids.owner, high, block, unused)
        return store.read(ops.taken_ids, unused)

    first = create_trace(store, TraceInput(query="q0", context=[ChunkOf("c")], response="r"))
    ids = spooler_for(store.spool_url).ids
    caplog.set_level(logging.WARNING, logger="veralith.store")
    high, block, unused = ids.unused()                       # the round's look at what is unused ...
    second = create_trace(store, TraceInput(query="q1", context=[ChunkOf("c")], response="r"))   # ... then this
    taken = check(ids, high, block, unused)                  # process stores a trace; then the store answers
    assert taken and list(taken.values()) == [second], taken
    again = ids.drop(taken)
    assert again and all(lo > second for lo, _hi in again), again
    assert check(ids, *ids.unused()[:2], again) == {}
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    third = create_trace(store, TraceInput(query="q2", context=[ChunkOf("c")], response="r"))
    assert second == first + 1 and third == second + 1      # the block (or counter) kept: no id lost
    shipper.secure(store, now=True)
    assert not caplog.records
