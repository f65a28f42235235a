"""The store protocol (issue 11, item 7; issue 23): the SQLite and PostgreSQL stores satisfy it, and a
third store written only against it (an in-memory one, below) works for every call the SDK, the
batch runner and the orchestrator make, with no change to them."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import inspect
import itertools
import json
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from veralith.cli import batch
from veralith.config import settings
from veralith.llm import get_client
from veralith.models import EvaluationResult, Explanation, ThresholdSource
from veralith.pipeline.calibrate import current_threshold
from veralith.sdk.stored import evaluate_stored, resumable
from veralith.store import (
    AmbiguousTraceId,
    BrowseStore,
    DuplicateExternalId,
    RunStore,
    Store,
    StoredResult,
    TraceInfo,
    TraceInput,
    TraceNotEvaluated,
    TraceNotFound,
    TraceStore,
)
from veralith.store.calibration import CALIBRATION_CELL, calibrate
from veralith.usage import OutputSize, output_sizes_of

QUERY, RESPONSE = "What is P/E?", "P/E is price divided by earnings."
CONTEXT = ["The P/E ratio is price divided by earnings."]


class MemoryStore:
    """A TraceStore in a dict: one process, no files. Written against the protocol's docstrings only."""

    url = "memory:"
    read_only = False

    def __init__(self) -> None:
        self.traces: dict[int, dict[str, Any]] = {}
        self.past: list[tuple[int, str | None]] = []
        self.spooled: list[tuple[int, TraceInput, bool]] = []
        self.cache: dict[str, str] = {}
        self.sizes: dict[tuple[str, str, str], OutputSize] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _now(self) -> str:
        return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")

    def _get(self, trace_id: int) -> dict[str, Any]:
        if trace_id not in self.traces:
            raise TraceNotFound(f"no trace with id {trace_id}")
        return self.traces[trace_id]

    def spool_trace(self, trace: TraceInput, *, run: str | None = None, evaluate_here: bool = True) -> int:
        with self._lock:
            trace_id = next(self._ids)
            self.spooled.append((trace_id, trace, evaluate_here))
            return trace_id

    def ship(self) -> list[int]:
        with self._lock:
            spooled, self.spooled = self.spooled, []
        for trace_id, trace, _ in spooled:
            self._add(trace_id, trace)
        return [trace_id for trace_id, _, here in spooled if here]

    def recover(self) -> int:
        return 0  # one process: no other process's spool to take over

    def _add(self, trace_id: int, trace: TraceInput) -> None:
        now = self._now()
        self.traces[trace_id] = {"input": trace, "status": "pending", "created_at": now, "updated_at": now,
                                 "result": None, "error": None, "evaluated_at": None}

    def create_trace(self, trace: TraceInput, *, queued: bool = False, run: str | None = None,
                     run_id: int | None = None) -> int:
        with self._lock:
            if trace.external_id is not None and self.find_external(trace.knowledge_base, trace.external_id):
                raise DuplicateExternalId(trace.external_id)
            trace_id = next(self._ids)
            self._add(trace_id, trace)
            return trace_id

    def claim(self, trace_id: int, *, failed: bool = False, again: bool = False) -> bool:
        with self._lock:
            row = self._get(trace_id)
            has_errors = row["status"] == "error" or bool(row["result"] and row["result"].errors)
            if not (row["status"] == "pending" or (again and row["status"] in ("done", "error"))
                    or (failed and has_errors)):
                return False
            row["status"], row["updated_at"] = "running", self._now()
            return True

    def claim_batch(self, limit: int, *, knowledge_base: str | None = None) -> list[int]:
        taken = []
        for trace_id in self.resumable():
            if knowledge_base is not None and self.traces[trace_id]["input"].knowledge_base != knowledge_base:
                continue
            if len(taken) < limit and self.claim(trace_id):
                taken.append(trace_id)
        return taken

    def renew(self, trace_ids: Collection[int]) -> None:
        pass  # one process: a lease cannot go stale under us

    def held(self) -> list[int]:
        return sorted(i for i, r in self.traces.items() if r["status"] == "running")

    def release(self, trace_id: int) -> bool:
        row = self._get(trace_id)
        if row["status"] == "running":
            row["status"] = "pending"
        return True

    def drop_lease(self, trace_id: int) -> None:
        pass

    def save_explanation(self, trace_id: int, explanation: Explanation) -> None:
        with self._lock:
            row = self.traces[trace_id]
            row["result"] = row["result"].model_copy(update={"explanation": explanation})

    def save_result(self, result: EvaluationResult) -> int:
        measured = output_sizes_of(result)
        with self._lock:
            for size in measured:
                key = (size.task, size.model, size.prompt_version)
                old_size = self.sizes.get(key)
                self.sizes[key] = size if old_size is None else dataclasses.replace(old_size, **{
                    name: getattr(old_size, name) + getattr(size, name)
                    for name in ("traces", "planned_calls", "calls", "allowance_tokens", "output_tokens")})
            trace_id = result.trace_id
            if trace_id is None:
                trace_id = next(self._ids)
                self.traces[trace_id] = {"created_at": self._now(), "error": None}
            row = self.traces[trace_id]
            if row.get("result") is not None or row.get("error"):
                self.past.append((trace_id, row["result"].failure_cell.value if row.get("result") else None))
            old = row.get("input")
            row.update(input=TraceInput(query=result.query, context=result.context, response=result.response,
                                        knowledge_base=result.knowledge_base, metadata=result.metadata,
                                        external_id=old.external_id if old else None),
                       result=result.model_copy(update={"trace_id": trace_id}), status="done", error=None,
                       evaluated_at=self._now(), updated_at=self._now())
            return trace_id

    def mark_error(self, trace_id: int, message: str) -> bool:
        row = self._get(trace_id)
        row.update(status="error", error=message, updated_at=self._now())
        return True

    def load_input(self, trace_id: int) -> TraceInput:
        return self._get(trace_id)["input"]

    def load_result(self, trace_id: int) -> EvaluationResult:
        row = self._get(trace_id)
        if row["result"] is None:
            raise TraceNotEvaluated(trace_id, row["status"], row["error"])
        return copy.deepcopy(row["result"])

    def trace_info(self, trace_id: int) -> TraceInfo:
        row = self._get(trace_id)
        result = row["result"]
        return TraceInfo(trace_id=trace_id, knowledge_base=row["input"].knowledge_base,
                         external_id=row["input"].external_id, status=row["status"], created_at=row["created_at"],
                         updated_at=row["updated_at"], evaluated_at=row["evaluated_at"], has_result=result is not None,
                         backend=result.backend if result else None, judge_model=result.judge_model if result else None,
                         prompt_versions=dict(result.prompt_versions) if result else {})

    def find_external(self, knowledge_base: str, external_id: str) -> TraceInfo | None:
        for trace_id, row in self.traces.items():
            if (row["input"].knowledge_base, row["input"].external_id) == (knowledge_base, external_id):
                return self.trace_info(trace_id)
        return None

    def resolve(self, ref: str, *, knowledge_base: str | None = None) -> int:
        if ref.isdecimal() and int(ref) in self.traces and knowledge_base in (
                None, self.traces[int(ref)]["input"].knowledge_base):
            return int(ref)
        found = [(i, r["input"].knowledge_base) for i, r in self.traces.items() if r["input"].external_id == ref
                 and knowledge_base in (None, r["input"].knowledge_base)]
        if len(found) > 1:
            raise AmbiguousTraceId(ref, sorted(kb for _, kb in found))
        if not found:
            raise TraceNotFound(ref)
        return found[0][0]

    def resumable(self, *, failed: bool = False) -> list[int]:
        if failed:
            return [i for i, r in self.traces.items()
                    if r["status"] == "error" or (r["result"] is not None and r["result"].errors)]
        return [i for i, r in self.traces.items() if r["status"] == "pending"]

    def abandoned(self) -> list[int]:
        return []  # one process: nothing can be left behind by another one

    def history(self, trace_id: int) -> list[dict[str, Any]]:
        return [{"failure_cell": cell} for i, cell in self.past if i == trace_id]

    def list_traces(self, *, limit: int = 50, cell: str | None = None, kb: str | None = None,
                    status: str | None = None, since: str | None = None,
                    preview_chars: int | None = 80) -> list[dict[str, Any]]:
        rows = [{"id": i, "status": r["status"], "knowledge_base": r["input"].knowledge_base}
                for i, r in sorted(self.traces.items(), reverse=True)]
        return rows[:limit]

    def stats(self, *, kb: str | None = None) -> dict[str, Any]:
        names = {r["input"].knowledge_base for r in self.traces.values()} if kb is None else {kb}
        return {"traces": len(self.traces), "thresholds": {n: calibrate(self, n).threshold for n in sorted(names)}}

    def iter_results(self, since: str | dt.datetime | None = None,
                     on_error: Callable[[int, Exception], None] | None = None,
                     trace_ids: list[int] | None = None) -> Iterator[StoredResult]:
        for trace_id in sorted(self.traces):
            if self.traces[trace_id]["result"] is not None and (trace_ids is None or trace_id in trace_ids):
                yield StoredResult(self.load_result(trace_id), self.trace_info(trace_id))

    def _calibration(self, knowledge_base: str) -> list[float]:
        return sorted(r["result"].diagnosis.sufficiency_fraction for r in self.traces.values()
                      if r["status"] == "done" and r["input"].knowledge_base == knowledge_base
                      and r["result"].failure_cell is not None and r["result"].failure_cell.value == CALIBRATION_CELL)

    def calibration_count(self, knowledge_base: str) -> int:
        return len(self._calibration(knowledge_base))

    def calibration_values(self, knowledge_base: str, offset: int, limit: int) -> list[float]:
        return self._calibration(knowledge_base)[offset:offset + limit]

    def output_sizes(self) -> list[OutputSize]:
        return [self.sizes[key] for key in sorted(self.sizes)]

    def cache_get(self, key: str) -> str | None:
        return self.cache.get(key)

    def cache_put(self, key: str, value: str, *, task: str = "", model: str = "", prompt_version: str = "") -> None:
        self.cache[key] = value

    def cache_count_hits(self, hits: Mapping[str, int]) -> None:
        pass

    def close(self) -> None:
        pass


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
    _same_signatures(store, (TraceStore, RunStore, BrowseStore))


def test_the_memory_store_satisfies_the_trace_store_protocol():
    store = MemoryStore()
    assert isinstance(store, TraceStore)
    _same_signatures(store, (TraceStore,))


def test_a_store_is_not_bound_to_a_thread(store):
    trace_id = store.create_trace(TraceInput(query=QUERY, context=[], response=RESPONSE))
    seen: list[str] = []
    worker = threading.Thread(target=lambda: seen.append(store.trace_info(trace_id).status))
    worker.start()
    worker.join()
    assert seen == ["pending"]


def _evaluate_all(store: TraceStore, rows: list[dict[str, Any]], tmp_path: Path, **kw: Any) -> batch.Tally:
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


def test_a_second_store_needs_no_caller_change(tmp_path):
    store = MemoryStore()
    rows = [{"id": f"r{i}", "query": QUERY, "context": CONTEXT, "response": RESPONSE} for i in range(3)]
    tally = _evaluate_all(store, rows, tmp_path)                     # the batch runner and the orchestrator
    assert tally.evaluated == 3 and [store.trace_info(i).external_id for i in (1, 2, 3)] == ["r0", "r1", "r2"]
    assert store.load_result(2).query == QUERY and store.resolve("r1") == 2
    again = _evaluate_all(store, rows, tmp_path)                     # idempotent re-run, same rule
    assert (again.evaluated, again.unchanged) == (0, 3)
    changed = _evaluate_all(store, [{**rows[0], "response": "P/E is a ratio."}], tmp_path)
    assert changed.evaluated == 1 and store.load_result(1).response == "P/E is a ratio." and store.past == [
        (1, store.past[0][1])]
    # resume, as the SDK and `veralith resume` run it
    pending = store.create_trace(TraceInput(query=QUERY, context=[], response=RESPONSE))
    assert resumable(store) == [pending]
    assert evaluate_stored(store, pending).trace_id == pending and resumable(store) == []


def test_a_failed_evaluation_is_recorded_through_the_protocol(monkeypatch):
    store = MemoryStore()
    trace_id = store.create_trace(TraceInput(query=QUERY, context=[], response=RESPONSE))
    monkeypatch.setattr("veralith.pipeline.evaluate.evaluate_checked", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        evaluate_stored(store, trace_id)
    assert store.trace_info(trace_id).status == "error" and resumable(store, failed=True) == [trace_id]


def test_calibration_has_one_rule_whatever_the_store(store, tmp_path):
    """The orchestrator's threshold and stats' threshold come from one rule over any store."""
    rows = [{"id": f"r{i}", "query": QUERY, "context": CONTEXT, "response": RESPONSE} for i in range(4)]
    memory, sql_store = MemoryStore(), store
    with settings.override(calibration_min_traces=3):
        for each in (memory, sql_store):
            assert current_threshold("default", each) == (1.0, ThresholdSource.fallback)
            _evaluate_all(each, rows, tmp_path)
            assert each.calibration_count("default") == 4
            threshold, source = current_threshold("default", each)
            assert source is ThresholdSource.calibrated
            assert each.stats()["thresholds"]["default"] in (threshold, {"threshold": threshold,
                                                                         "source": "calibrated",
                                                                         "calibration_traces": 4})
        assert current_threshold("default", memory) == current_threshold("default", sql_store)
