"""log(): persisted first, evaluated in the background, never raising into the host."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from store_support import sql, statuses as stored_statuses
from work_support import create_trace

from veralith.config import settings
from veralith.models import EvaluationResult
from veralith.sdk import log as log_mod
from veralith.sdk.log import log, resume, shutdown
from veralith.store import TraceInput, load_result, open_store, ops

QUERY, CONTEXT, RESPONSE = "What is P/E?", ["The P/E ratio is price divided by earnings."], "P/E is price over earnings."


@pytest.fixture(autouse=True)
def _fresh_worker():
    """Each test gets its own worker (queue size and DB path are read when it starts)."""
    shutdown(wait=True)
    yield
    shutdown(wait=True)


def statuses() -> dict[int, str]:
    return stored_statuses(open_store())


def pending_trace() -> int:
    """A trace stored pending and nobody's, as a process that died before evaluating it leaves it."""
    return create_trace(open_store(), TraceInput(query=QUERY, context=[], response=RESPONSE))


# These take `store_url`: the same test against the SQLite file and against PostgreSQL.
both = pytest.mark.usefixtures("store_url")


@both
def test_log_returns_the_id_and_the_worker_stores_the_result():
    trace_id = log(QUERY, CONTEXT, RESPONSE, knowledge_base="docs", metadata={"user": 7})
    assert isinstance(trace_id, int)
    shutdown(wait=True)
    result = load_result(trace_id)
    assert result.trace_id == trace_id and result.knowledge_base == "docs" and result.metadata == {"user": 7}
    assert result.query == QUERY and result.context[0].text == CONTEXT[0] and result.backend == "local"


@both
def test_sync_evaluates_now_and_returns_the_stored_result():
    result = log(QUERY, CONTEXT, RESPONSE, sync=True)
    assert isinstance(result, EvaluationResult)
    assert load_result(result.trace_id) == result
    with settings.override(sync=True):
        assert isinstance(log(QUERY, CONTEXT, RESPONSE), EvaluationResult)
    assert isinstance(log(QUERY, CONTEXT, RESPONSE, sync=False), int)


@pytest.mark.parametrize("args,kwargs,exc,word", [
    ((None, CONTEXT, RESPONSE), {}, TypeError, "query"),
    ((QUERY, "one chunk", RESPONSE), {}, TypeError, "context"),
    ((QUERY, CONTEXT, b"bytes"), {}, TypeError, "response"),
    ((QUERY, [{"no_text": 1}], RESPONSE), {}, ValueError, "context[0]"),
    ((QUERY, CONTEXT, RESPONSE), {"knowledge_base": ""}, ValueError, "knowledge_base"),
    ((QUERY, CONTEXT, RESPONSE), {"metadata": [1]}, TypeError, "metadata"),
    ((QUERY, CONTEXT, RESPONSE), {"sync": "yes"}, TypeError, "sync"),
])
def test_bad_arguments_fail_before_anything_is_written(args, kwargs, exc, word):
    with pytest.raises(exc, match=word.replace("[", r"\[")):
        log(*args, **kwargs)
    assert statuses() == {}


def test_over_budget_raises_before_anything_is_written():
    from veralith.observability.cost import BudgetExceeded
    # The local backend is free, so price the trace for an OpenAI model (never contacted: it raises first).
    with settings.override(per_trace_budget_usd=1e-9, backend="openai", api_key="test",
                           base_url="http://127.0.0.1:9/v1"), pytest.raises(BudgetExceeded):
        log(QUERY, CONTEXT, RESPONSE)
    assert statuses() == {}


@both
def test_background_errors_are_stored_and_logged_never_raised(monkeypatch, caplog):
    def boom(*args, **kwargs):
        raise RuntimeError("judge server on fire")
    monkeypatch.setattr("veralith.pipeline.evaluate.judge_checked", boom)
    with caplog.at_level(logging.WARNING, logger="veralith.sdk"):
        trace_id = log(QUERY, CONTEXT, RESPONSE)
        shutdown(wait=True)
    row = open_store().read(ops.list_traces)[0]
    assert (row["id"], row["status"], row["error_message"]) == (trace_id, "error", "RuntimeError: judge server on fire")
    assert "judge server on fire" in caplog.text


@both
def test_sync_errors_are_stored_and_raised(monkeypatch):
    monkeypatch.setattr("veralith.pipeline.evaluate.judge_checked", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        log(QUERY, CONTEXT, RESPONSE, sync=True)
    assert list(statuses().values()) == ["error"]


@both
def test_a_full_queue_returns_at_once_and_leaves_the_trace_pending(monkeypatch):
    from veralith.pipeline import evaluate as evaluate_mod
    release, started = threading.Event(), threading.Event()
    real = evaluate_mod.judge_checked

    def slow(*args, **kwargs):
        started.set()
        release.wait(30)
        return real(*args, **kwargs)
    monkeypatch.setattr(evaluate_mod, "judge_checked", slow)
    with settings.override(queue_size=1):
        first = log(QUERY, CONTEXT, RESPONSE)
        assert started.wait(10)                       # the worker is busy with the first
        second = log(QUERY, CONTEXT, RESPONSE)        # fills the one slot
        box: dict = {}
        caller = threading.Thread(target=lambda: box.setdefault("id", log(QUERY, CONTEXT, RESPONSE)))
        caller.start()                                # queue full: must return while the worker is stuck
        caller.join(30)
        assert not caller.is_alive() and not release.is_set()
        third = box["id"]
        # log() returns before the trace is stored; the shipper stores it, finds the queue full, gives it back.
        deadline = time.monotonic() + 30
        while sql(open_store(), "SELECT status, lease_pid FROM traces WHERE id = ?", [third]) != [("pending", None)]:
            assert time.monotonic() < deadline, "the overflowed trace was not left pending and nobody's"
            time.sleep(0.05)
        release.set()
        shutdown(wait=True)
    assert statuses()[first] == statuses()[second] == "done"
    # The worker sweeps overflowed traces whenever its queue runs empty, so it may have taken the
    # third before shutdown's stop marker arrived; otherwise resume() finds it.
    left = 1 if statuses()[third] == "pending" else 0
    assert resume() == left
    assert set(statuses().values()) == {"done"}


@both
def test_overflowed_traces_are_picked_up_when_the_queue_drains(monkeypatch):
    with settings.override(queue_size=1):
        ids = [log(QUERY, CONTEXT, RESPONSE) for _ in range(20)]  # most overflow
        assert shutdown(wait=True) == 0   # the worker's sweeps and the final drain take them all
    # Ids are unique, not necessarily in call order: on a host with no block of PostgreSQL ids yet,
    # log() takes random ones rather than wait for the database (veralith.store.ids).
    assert sorted(statuses()) == sorted(ids) and set(statuses().values()) == {"done"}


@both
def test_resume_evaluates_pending_traces_and_the_worker_sweeps_at_start():
    left = [pending_trace() for _ in range(3)]
    assert resume() == 3
    assert resume() == 0
    orphan = pending_trace()
    fresh = log(QUERY, CONTEXT, RESPONSE)                   # starts a worker, which sweeps first
    shutdown(wait=True)
    assert {statuses()[i] for i in [*left, orphan, fresh]} == {"done"}


@both
def test_shutdown_without_wait_leaves_queued_traces_pending_for_later(monkeypatch):
    gate = threading.Event()
    monkeypatch.setattr(log_mod, "_evaluate_claimed", lambda *a, **k: gate.wait(10))
    ids = [log(QUERY, CONTEXT, RESPONSE) for _ in range(5)]
    shutdown(wait=False)
    gate.set()
    monkeypatch.undo()
    assert set(statuses().values()) == {"pending"} and sorted(statuses()) == sorted(ids)


@both
def test_shutdown_with_a_timeout_leaves_the_rest_pending(monkeypatch):
    from veralith.pipeline import evaluate as evaluate_mod
    real, gate, started = evaluate_mod.judge_checked, threading.Event(), threading.Event()

    def stuck(*args, **kwargs):
        started.set()
        gate.wait(60)                 # a judge that does not answer until the test says so
        return real(*args, **kwargs)
    monkeypatch.setattr(evaluate_mod, "judge_checked", stuck)
    ids = [log(QUERY, CONTEXT, RESPONSE) for _ in range(10)]
    assert started.wait(60)
    worker, box = log_mod._current, {}
    stopper = threading.Thread(target=lambda: box.setdefault("left", shutdown(wait=True, timeout=0.5)))
    stopper.start()
    stopper.join(30)                  # returned although the evaluation in flight is still stuck
    assert not stopper.is_alive() and not gate.is_set() and box["left"] == len(ids)
    gate.set()
    worker.thread.join(60)            # the trace in flight finishes and is stored; nothing else starts
    done = [i for i in ids if statuses()[i] == "done"]
    assert len(done) == 1
    assert {statuses()[i] for i in ids if i not in done} == {"pending"}


@both
def test_every_resume_and_the_worker_take_one_path(monkeypatch):
    """The SDK worker, resume() and `veralith resume` all evaluate stored traces through the work
    layer's runner (claim, evaluate, record the outcome): one rule, not three copies."""
    from typer.testing import CliRunner

    from veralith.cli import app
    from veralith.work.runner import Runner

    real, seen = Runner.run, []

    def spy(self, trace_id, **kwargs):
        seen.append(trace_id)
        return real(self, trace_id, **kwargs)

    monkeypatch.setattr(Runner, "run", spy)
    logged = log(QUERY, CONTEXT, RESPONSE)                             # the worker
    shutdown(wait=True)
    left = [pending_trace() for _ in range(2)]
    assert resume(concurrency=1) == 2                                  # resume() takes the pending ones...
    later = pending_trace()
    assert CliRunner().invoke(app, ["resume"]).exit_code == 0          # ...and so does `veralith resume`
    assert seen == [logged, *left, later]
    assert set(statuses().values()) == {"done"}
