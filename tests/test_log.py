"""log(): persisted first, evaluated in the background, never raising into the host."""

from __future__ import annotations

import logging
import threading

import pytest

from veralith.config import settings
from veralith.models import EvaluationResult
from veralith.sdk import log as log_mod
from veralith.sdk.log import log, resume, shutdown
from veralith.store import load_result
from veralith.store.db import open_db
from veralith.store.repository import create_trace, list_traces

QUERY, CONTEXT, RESPONSE = "What is P/E?", ["The P/E ratio is price divided by earnings."], "P/E is price over earnings."


@pytest.fixture(autouse=True)
def _fresh_worker():
    """Each test gets its own worker (queue size and DB path are read when it starts)."""
    shutdown(wait=True)
    yield
    shutdown(wait=True)


def statuses() -> dict[int, str]:
    return {r["id"]: r["status"] for r in list_traces(open_db(), limit=10_000)}


def test_log_returns_the_id_and_the_worker_stores_the_result():
    trace_id = log(QUERY, CONTEXT, RESPONSE, knowledge_base="docs", metadata={"user": 7})
    assert isinstance(trace_id, int)
    shutdown(wait=True)
    result = load_result(trace_id)
    assert result.trace_id == trace_id and result.knowledge_base == "docs" and result.metadata == {"user": 7}
    assert result.query == QUERY and result.context[0].text == CONTEXT[0] and result.backend == "local"


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


def test_background_errors_are_stored_and_logged_never_raised(monkeypatch, caplog):
    def boom(*args, **kwargs):
        raise RuntimeError("judge server on fire")
    monkeypatch.setattr("veralith.pipeline.evaluate.evaluate_checked", boom)
    with caplog.at_level(logging.WARNING, logger="veralith.sdk"):
        trace_id = log(QUERY, CONTEXT, RESPONSE)
        shutdown(wait=True)
    row = list_traces(open_db())[0]
    assert (row["id"], row["status"], row["error_message"]) == (trace_id, "error", "RuntimeError: judge server on fire")
    assert "judge server on fire" in caplog.text


def test_sync_errors_are_stored_and_raised(monkeypatch):
    monkeypatch.setattr("veralith.pipeline.evaluate.evaluate_checked", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        log(QUERY, CONTEXT, RESPONSE, sync=True)
    assert list(statuses().values()) == ["error"]


def test_a_full_queue_returns_at_once_and_leaves_the_trace_pending(monkeypatch):
    from veralith.pipeline import evaluate as evaluate_mod
    release, started = threading.Event(), threading.Event()
    real = evaluate_mod.evaluate_checked

    def slow(*args, **kwargs):
        started.set()
        release.wait(30)
        return real(*args, **kwargs)
    monkeypatch.setattr(evaluate_mod, "evaluate_checked", slow)
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
        lease = open_db().execute("SELECT status, lease_pid FROM traces WHERE id = ?", [third]).fetchone()
        assert lease == ("pending", None)             # nobody's: any resume may take it
        release.set()
        shutdown(wait=True)
    assert statuses()[first] == statuses()[second] == "done"
    # The worker sweeps overflowed traces whenever its queue runs empty, so it may have taken the
    # third before shutdown's stop marker arrived; otherwise resume() finds it.
    left = 1 if statuses()[third] == "pending" else 0
    assert resume() == left
    assert set(statuses().values()) == {"done"}


def test_overflowed_traces_are_picked_up_when_the_queue_drains(monkeypatch):
    with settings.override(queue_size=1):
        ids = [log(QUERY, CONTEXT, RESPONSE) for _ in range(20)]  # most overflow
        assert shutdown(wait=True) == 0   # the worker's sweeps and the final drain take them all
    assert sorted(statuses()) == ids and set(statuses().values()) == {"done"}


def test_resume_evaluates_pending_traces_and_the_worker_sweeps_at_start():
    db = open_db()
    left = [create_trace(db, query=QUERY, context=[], response=RESPONSE) for _ in range(3)]
    assert resume() == 3
    assert resume() == 0
    orphan = create_trace(db, query=QUERY, context=[], response=RESPONSE)
    fresh = log(QUERY, CONTEXT, RESPONSE)                   # starts a worker, which sweeps first
    shutdown(wait=True)
    assert {statuses()[i] for i in [*left, orphan, fresh]} == {"done"}


def test_shutdown_without_wait_leaves_queued_traces_pending_for_later(monkeypatch):
    gate = threading.Event()
    monkeypatch.setattr(log_mod, "_evaluate_claimed", lambda *a, **k: gate.wait(10))
    ids = [log(QUERY, CONTEXT, RESPONSE) for _ in range(5)]
    shutdown(wait=False)
    gate.set()
    monkeypatch.undo()
    assert set(statuses().values()) == {"pending"} and sorted(statuses()) == ids


def test_shutdown_with_a_timeout_leaves_the_rest_pending(monkeypatch):
    from veralith.pipeline import evaluate as evaluate_mod
    real, gate, started = evaluate_mod.evaluate_checked, threading.Event(), threading.Event()

    def stuck(*args, **kwargs):
        started.set()
        gate.wait(60)                 # a judge that does not answer until the test says so
        return real(*args, **kwargs)
    monkeypatch.setattr(evaluate_mod, "evaluate_checked", stuck)
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


def test_every_resume_and_the_worker_take_one_path(monkeypatch):
    """The SDK worker, resume() and `veralith resume` all evaluate stored traces through
    veralith.sdk.stored (claim, evaluate, record the outcome): one rule, not three copies."""
    from typer.testing import CliRunner

    from veralith.cli import app
    from veralith.sdk import stored

    real, seen = stored.evaluate_stored, []

    def spy(store, trace_id, **kwargs):
        seen.append(trace_id)
        return real(store, trace_id, **kwargs)

    monkeypatch.setattr(stored, "evaluate_stored", spy)
    logged = log(QUERY, CONTEXT, RESPONSE)                             # the worker
    shutdown(wait=True)
    left = [create_trace(open_db(), query=QUERY, context=[], response=RESPONSE) for _ in range(2)]
    assert resume(concurrency=1) == 2                                  # resume() takes the pending ones...
    later = create_trace(open_db(), query=QUERY, context=[], response=RESPONSE)
    assert CliRunner().invoke(app, ["resume"]).exit_code == 0          # ...and so does `veralith resume`
    assert seen == [logged, *left, later]
    assert set(statuses().values()) == {"done"}
