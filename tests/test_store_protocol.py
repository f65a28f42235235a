"""The store protocol: the SQLite and PostgreSQL stores satisfy it, every caller (the SDK, the batch
runner, the orchestrator, the work layer) works on either with no change, and calibration has one
rule whatever the store."""

from __future__ import annotations

import inspect
import json
import threading
from pathlib import Path
from typing import Any

from work_support import create_trace, resumable

from veralith.cli import batch
from veralith.config import settings
from veralith.llm import get_client
from veralith.models import ThresholdSource
from veralith.pipeline.evaluate import TraceJudge
from veralith.store import Store, TraceInput, ops
from veralith.store.protocol import Connected
from veralith.work.policy import Action
from veralith.work.runner import Runner

QUERY, RESPONSE = "What is P/E?", "P/E is price divided by earnings."
CONTEXT = ["The P/E ratio is price divided by earnings."]


def _methods(*protocols: type) -> list[str]:
    return sorted({name for protocol in protocols for name, value in vars(protocol).items()
                   if callable(value) and not name.startswith("_")})


def _same_signatures(store: Any, protocols: tuple[type, ...]) -> None:
    for name in _methods(*protocols):
        expected = inspect.signature(getattr(next(p for p in protocols if name in vars(p)), name))
        actual = inspect.signature(getattr(type(store), name))
        # Same parameters, same kinds, same defaults: a caller typed against the protocol can make any call.
        assert [(p.name, p.kind, p.default) for p in actual.parameters.values()] == \
            [(p.name, p.kind, p.default) for p in expected.parameters.values()], name


def test_each_store_satisfies_the_whole_protocol_method_by_method(store):
    assert isinstance(store, Store)
    _same_signatures(store, (Connected, Store))


def test_a_store_is_not_bound_to_a_thread(store):
    trace_id = create_trace(store, TraceInput(query=QUERY, context=[], response=RESPONSE))
    seen: list[str] = []
    worker = threading.Thread(target=lambda: seen.append(store.read(ops.trace_info, trace_id).status))
    worker.start()
    worker.join()
    assert seen == ["pending"]


def _evaluate_all(store: Store, rows: list[dict[str, Any]], tmp_path: Path, **kw: Any) -> batch.Tally:
    """What `veralith eval` does with a file, against `store`."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    client, tally, reports = get_client(), batch.Tally(), []
    for job in batch.eval_jobs(path, default_kb="default", persist=True, store=store, client=client, tally=tally,
                               report=reports.append, **kw):
        result = batch.evaluate_record(job, persist=True, client=client, again=True, store=store)
        batch.record_outcome(tally, job, result, None, persist=True, report=reports.append, where="x")
    assert not reports, reports
    return tally


def test_every_caller_works_on_either_store(store, tmp_path):
    rows = [{"id": f"r{i}", "query": QUERY, "context": CONTEXT, "response": RESPONSE} for i in range(3)]
    tally = _evaluate_all(store, rows, tmp_path)                     # the batch runner and the orchestrator
    ids = [store.read(ops.resolve, f"r{i}") for i in range(3)]
    assert tally.evaluated == 3 and [store.read(ops.trace_info, i).external_id for i in ids] == ["r0", "r1", "r2"]
    assert store.read(ops.load_result, ids[1]).query == QUERY
    again = _evaluate_all(store, rows, tmp_path)                     # idempotent re-run, same rule
    assert (again.evaluated, again.unchanged) == (0, 3)
    changed = _evaluate_all(store, [{**rows[0], "response": "P/E is a ratio."}], tmp_path)
    assert changed.evaluated == 1 and store.read(ops.load_result, ids[0]).response == "P/E is a ratio."
    assert len(store.read(ops.history, ids[0])) == 1
    # resume, as the SDK and `veralith resume` run it
    pending = create_trace(store, TraceInput(query=QUERY, context=[], response=RESPONSE))
    assert resumable(store) == [pending]
    outcome = Runner(store, TraceJudge(get_client())).run(pending)
    assert outcome.action is Action.SAVED and outcome.result.trace_id == pending and resumable(store) == []


def test_a_failed_evaluation_is_recorded_by_the_runner(store, monkeypatch):
    trace_id = create_trace(store, TraceInput(query=QUERY, context=[], response=RESPONSE))
    monkeypatch.setattr("veralith.pipeline.evaluate.judge_checked", lambda *a, **k: 1 / 0)
    outcome = Runner(store, TraceJudge(get_client())).run(trace_id)
    assert outcome.action is Action.RECORD and isinstance(outcome.error, ZeroDivisionError)
    assert store.read(ops.trace_info, trace_id).status == "error" and resumable(store, failed=True) == [trace_id]


def test_calibration_has_one_rule_whatever_the_store(store, tmp_path):
    """The orchestrator's threshold and stats' threshold come from one rule over any store."""
    rows = [{"id": f"r{i}", "query": QUERY, "context": CONTEXT, "response": RESPONSE} for i in range(4)]
    with settings.override(calibration_min_traces=3):
        assert store.read(ops.current_threshold, "default") == (1.0, ThresholdSource.fallback)
        _evaluate_all(store, rows, tmp_path)
        assert store.read(ops.calibration_count, "default") == 4
        threshold, source = store.read(ops.current_threshold, "default")
        assert source is ThresholdSource.calibrated
        assert store.read(ops.stats)["thresholds"]["default"] == {
            "threshold": threshold, "source": "calibrated", "calibration_traces": 4,
            "review_cutoff": 0.7, "review_labels": None, "review_source": "default"}
