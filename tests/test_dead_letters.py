"""Issue 35, faults 1, 7 and 10: a record a store refuses never blocks the others (the dead-letter place,
on both stores), text no store can hold is refused once at validation, a spool segment that vanishes is
skipped, and a full spool disk is the documented WritesStopped."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import subprocess_env
from store_support import scalar, sql, statuses
from typer.testing import CliRunner
from work_support import create_trace, recover, ship, spool_trace

import veralith
from veralith.errors import InputError
from veralith.models import ContextChunk
from veralith.store import open_store, ops
from veralith.store.protocol import TraceInput

QUERY = "What is the capital of France?"
CONTEXT = "Paris is the capital of France."


def _trace(i: int, *, query: str | None = None, external_id: str | None = None) -> TraceInput:
    return TraceInput(query=query or f"{QUERY} ({i})", context=[ContextChunk(id="c0", text=CONTEXT)],
                      response=CONTEXT, metadata={"seq": i}, external_id=external_id)


def _seqs(store) -> list[int]:
    return sorted(json.loads(m)["seq"] for (m,) in sql(store, "SELECT metadata FROM traces"))


def _dead_process_spool(store, entries: list[TraceInput]) -> list[int]:
    """A spool file left by a process of this host that is gone (as a crash, or an older version, leaves
    it: lines written before the rule on stored text); the ids its traces were logged under."""
    from veralith.work import leases
    from veralith.work.spool import _name
    from veralith.work.spooler import new_id, spooler_for

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    folder = spooler_for(store.spool_url).folder
    folder.mkdir(parents=True, exist_ok=True)
    ids = [new_id(store.spool_url) for _ in entries]
    lines = [json.dumps({"id": i, "uid": f"{i:032x}", "created_at": "2026-12-01T00:00:00+00:00", "run": None,
                         "here": True, **t.to_json()}) for i, t in zip(ids, entries, strict=True)]
    (folder / f"{_name(leases.mine()[0], gone.pid, 'tok')}.jsonl").write_text("\n".join(lines) + "\n")
    return ids


# -- fault 1: text no store can hold is refused once, at validation -----------------------------------

@pytest.mark.parametrize("where", ["query", "context", "response", "metadata", "knowledge_base"])
def test_log_and_evaluate_refuse_a_nul_with_one_line_naming_the_field(where, tmp_path):
    args = {"query": QUERY, "context": [CONTEXT], "response": CONTEXT, "metadata": {"k": "v"},
            "knowledge_base": "kb"}
    args[where] = {"query": "a\x00b", "context": ["a\x00b"], "response": "a\x00b", "metadata": {"k": "a\x00b"},
                   "knowledge_base": "a\x00b"}[where]
    for call in (veralith.log, veralith.evaluate):
        with pytest.raises(InputError) as caught:
            call(args["query"], args["context"], args["response"], metadata=args["metadata"],
                 knowledge_base=args["knowledge_base"])
        message = str(caught.value)
        assert "\n" not in message and "NUL character" in message and "index 1" in message
        assert message.startswith("context[0] text" if where == "context" else where), message
    veralith.shutdown()
    from veralith.store import store_url
    from veralith.work.spooler import spooler_for

    assert not spooler_for(store_url()).spool.pending()   # nothing poisoned reached the spool


def test_eval_reports_a_nul_line_and_stores_the_rest(tmp_path):
    from veralith.cli import app

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"query": f"{QUERY} {i}" + ("\x00" if i == 1 else ""), "context": [CONTEXT],
                                        "response": CONTEXT}) + "\n" for i in range(3)))
    result = CliRunner().invoke(app, ["eval", str(path)])
    assert result.exit_code == 2, result.output
    assert "t.jsonl:2" in result.stderr and "NUL character" in result.stderr
    assert sorted(statuses(open_store()).values()) == ["done", "done"]


def test_a_spooled_nul_is_set_aside_and_the_rest_of_its_segment_ships(store):
    ids = [spool_trace(store, _trace(i, query=f"{QUERY} {i}" + ("\x00" if i == 3 else ""))) for i in range(10)]
    ship(store)
    assert _seqs(store) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    [(trace_id, source, reason, payload)] = sql(store, "SELECT trace_id, source, reason, payload FROM dead_letters")
    assert (trace_id, source) == (ids[3], "shipper") and "NUL character" in reason
    assert json.loads(payload)["query"] == f"{QUERY} 3\x00"     # kept exactly, on either store
    assert store.read(ops.stats)["dead_letters"] == 1
    later = [spool_trace(store, _trace(i)) for i in range(10, 13)]   # a later segment ships as well
    ship(store)
    assert set(later) <= set(statuses(store)) and len(statuses(store)) == 12


def test_a_dead_processs_spool_holding_a_nul_is_recovered(store):
    ids = _dead_process_spool(store, [_trace(0), _trace(1, query="bad\x00"), _trace(2)])
    assert recover(store) == 3
    assert sorted(statuses(store)) == [ids[0], ids[2]]
    assert scalar(store, "SELECT trace_id FROM dead_letters") == ids[1]
    assert recover(store) == 0   # the file is gone: nothing is shipped twice, nothing set aside twice
    assert scalar(store, "SELECT COUNT(*) FROM dead_letters") == 1


def test_a_record_the_store_refuses_is_set_aside_and_the_rest_ships(store):
    create_trace(store, _trace(100, external_id="taken"))
    ids = [spool_trace(store, _trace(i, external_id="taken" if i == 2 else None)) for i in range(6)]
    ship(store)
    assert _seqs(store) == [0, 1, 3, 4, 5, 100]
    [(trace_id, reason)] = sql(store, "SELECT trace_id, reason FROM dead_letters")
    assert trace_id == ids[2] and "external_id" in reason


def test_dead_letters_are_listed_retried_after_a_fix_and_dropped(store):
    from veralith.cli import app

    ids = [spool_trace(store, _trace(i, query=f"{QUERY} {i}" + ("\x00" if i else ""))) for i in range(3)]
    ship(store)
    runner = CliRunner()
    listed = runner.invoke(app, ["dead-letters"])
    assert listed.exit_code == 0 and "2 record(s) set aside" in listed.output and "NUL" in listed.output
    again = runner.invoke(app, ["dead-letters", "--retry"])   # nothing fixed: refused again, exit 2, one line
    assert again.exit_code == 2 and again.stderr.count("error:") == 1 and "--clean" in again.stderr
    assert scalar(store, "SELECT MIN(attempts) FROM dead_letters") == 1
    [first, second] = [int(r[0]) for r in sql(store, "SELECT id FROM dead_letters ORDER BY id")]
    dropped = runner.invoke(app, ["dead-letters", "--drop", str(second)])
    assert dropped.exit_code == 0, dropped.output
    cleaned = runner.invoke(app, ["dead-letters", "--retry", "--clean"])
    assert cleaned.exit_code == 0 and "stored 1" in cleaned.output, cleaned.output
    assert scalar(store, "SELECT query FROM traces WHERE id = ?", [ids[1]]) == f"{QUERY} 1\ufffd"   # under its id
    assert scalar(store, "SELECT COUNT(*) FROM dead_letters") == 0 and store.read(ops.stats)["dead_letters"] == 0
    assert runner.invoke(app, ["dead-letters", "--drop", str(first)]).exit_code == 1


@pytest.mark.slow
@pytest.mark.parametrize("command", [["resume"], ["worker", "--once"]])
def test_resume_and_worker_go_on_over_a_poisoned_spool(store, command):
    ids = _dead_process_spool(store, [_trace(0), _trace(1, query="bad\x00"), _trace(2), _trace(3)])
    done = subprocess.run([sys.executable, "-m", "veralith.cli", *command], env=subprocess_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert statuses(store) == {ids[0]: "done", ids[2]: "done", ids[3]: "done"}
    assert scalar(store, "SELECT trace_id FROM dead_letters") == ids[1]


# -- migrate: the same rule at the copy --------------------------------------------------------------

def test_migrate_sets_aside_a_nul_trace_and_copies_the_rest(store, store_url, tmp_path):
    from veralith.cli import app

    source = open_store(f"sqlite:///{tmp_path / 'history.db'}")
    for i in range(30):
        create_trace(source, _trace(i, query=f"{QUERY} {i}" + ("\x00" if i == 7 else "")))
    result = CliRunner().invoke(app, ["migrate", "--from", source.url, "--to", store_url])
    assert result.exit_code == 0, result.output
    assert "1 trace(s) hold text no store can hold" in result.stderr
    assert _seqs(store) == [i for i in range(30) if i != 7]
    [(source_name, reason)] = sql(store, "SELECT source, reason FROM dead_letters")
    assert source_name == "migrate" and "traces.query" in reason and "NUL" in reason
    again = CliRunner().invoke(app, ["migrate", "--from", source.url, "--to", store_url])   # a re-run: nothing twice
    assert again.exit_code == 0, again.output
    assert scalar(store, "SELECT COUNT(*) FROM traces") == 29 and scalar(store, "SELECT COUNT(*) FROM dead_letters") == 1


# -- fault 7: a spool segment that vanishes (another host recovered it) --------------------------------

def test_a_vanished_segment_is_skipped_later_traces_are_stored_and_shutdown_counts(store, monkeypatch):
    from veralith.config import settings
    from veralith.store.errors import StoreUnavailable
    from veralith.work import shipper
    from veralith.work.spooler import spooler_for

    monkeypatch.setenv("VERALITH_EVALUATE", "remote")
    settings.reload()
    real = shipper._ingest

    def away(*args, **kwargs):
        raise StoreUnavailable("the store is away")
    monkeypatch.setattr(shipper, "_ingest", away)
    early = [veralith.log(f"{QUERY} {i}", [CONTEXT], CONTEXT, metadata={"seq": i}) for i in range(3)]
    assert veralith.shutdown(wait=True, timeout=5) == 3      # still spooled: left, and said so
    folder = spooler_for(store.spool_url).folder
    segments = [p for p in folder.iterdir() if p.name.endswith(".seg") and p.stat().st_size and b'"seq"' in p.read_bytes()]
    assert segments
    elsewhere = Path(str(folder) + "-other-host")
    elsewhere.mkdir()
    for path in segments:   # another host's recovery took them (and will store them)
        path.rename(elsewhere / path.name)
    monkeypatch.setattr(shipper, "_ingest", real)
    later = [veralith.log(f"{QUERY} {i}", [CONTEXT], CONTEXT, metadata={"seq": i}) for i in range(3, 6)]
    assert veralith.shutdown(wait=True, timeout=30) == 0
    assert sorted(statuses(store)) == sorted(later)
    for path in elsewhere.iterdir():   # what the other host ships: the early ones, under their ids
        from veralith.work.spool import _ship_file

        _ship_file(path, lambda entries: shipper._ingest(store, entries, queued=False))
    assert sorted(statuses(store)) == sorted(early + later)


# -- fault 10: a full spool disk ---------------------------------------------------------------------

def test_a_full_spool_disk_raises_writes_stopped_and_keeps_what_was_spooled(store, monkeypatch):
    from veralith.store.errors import WritesStopped
    from veralith.work import spool

    logged = [veralith.log(f"{QUERY} {i}", [CONTEXT], CONTEXT, metadata={"seq": i}, evaluate=False)
              for i in range(5)]

    def full(fd, size):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(spool, "_allocate", full)
    with pytest.raises(WritesStopped) as caught:   # a line larger than a segment needs a new one: none can be made
        veralith.log(QUERY, [CONTEXT], "€" * 1_500_000, evaluate=False)
    assert not isinstance(caught.value, OSError)
    assert "No space left on device" in str(caught.value) and "free space" in str(caught.value)
    monkeypatch.undo()
    assert veralith.shutdown(wait=True, timeout=30) == 0
    assert sorted(statuses(store)) == sorted(logged)   # nothing spooled before was lost


def test_a_spool_goes_on_past_a_segment_taken_by_another_process(tmp_path):
    from veralith.store.errors import StoreUnavailable
    from veralith.work.spool import Spool

    spool = Spool(tmp_path, segment_bytes=1 << 16)
    spool.append({"n": 1})

    def away(entries):
        raise StoreUnavailable("away")
    with pytest.raises(StoreUnavailable):
        spool.ship(away)
    (taken,) = [p for p in tmp_path.glob("*.seg") if b'"n"' in p.read_bytes()]
    taken.unlink()   # recovered by another host meanwhile
    spool.append({"n": 2})
    got: list[dict] = []
    assert spool.ship(got.extend) == 1 and got == [{"n": 2}]
    assert spool.ship(got.extend) == 0 and not spool.pending()


def test_the_count_is_in_stats_the_worker_line_and_the_web_overview(store, store_url):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from veralith.cli import app
    from veralith.web.app import create_app
    from veralith.work.worker import WorkerReport, progress_line

    for i in range(3):
        spool_trace(store, _trace(i, query=f"{QUERY} {i}" + ("\x00" if i == 1 else "")))
    ship(store)
    assert store.read(ops.stats)["dead_letters"] == 1 and store.read(ops.stats, kb="default")["dead_letters"] == 1
    assert "set aside  1 record(s)" in CliRunner().invoke(app, ["stats"]).output
    assert ", 1 set aside" in progress_line(store, WorkerReport(), 0, None)
    page = TestClient(create_app(store_url), base_url="http://127.0.0.1").get("/").text
    assert "1 record(s) the store refused are set aside" in page and "veralith dead-letters" in page
