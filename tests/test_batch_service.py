"""`veralith eval --batch` as the real Batch API behaves (issue 40), against the strict fake server
(tests/fake_batch_server.py, tests/fake_batch_rules.py), on both stores: one model per batch, rounds
split at the limits, failed batches read, 4xx lines answered as on the synchronous path, a batch
recorded before it is created, cancelled batches, a late collect, a dead batch service."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import batch_support
from batch_support import N, run, stored, traces, traces_file
from conftest import subprocess_env
from fake_batch_server import batch_server  # noqa: F401
from fake_openai_server import task_of
from work_support import batch_jobs, create_trace

from veralith.config import settings
from veralith.models import EvaluationResult
from veralith.store import ops

batch_env = batch_support.batch_env


def _models(server, batch_id: str) -> set[str]:
    return {line["body"]["model"] for line in server.lines_of(batch_id)}


def _verdicts(result: EvaluationResult) -> dict:
    """A result without what differs between two runs (ids, times, usage: calls and tokens)."""
    data = result.model_dump(mode="json")
    return {k: v for k, v in data.items() if k not in {"trace_id", "latency_ms", "created_at", "evaluated_at", "id",
                                                        "uid", "usage", "metadata"}}


def _requests(store) -> dict[str, dict]:
    with store.connection() as db:
        rows = db.query("SELECT custom_id, state, error, tries FROM batch_requests")
        return {r["custom_id"]: r for r in rows}


def test_each_batch_holds_one_model_also_when_a_resend_meets_the_judges(batch_env, store, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("VERALITH_DECOMPOSER_MODEL", "gpt-4o-mini")
    settings.reload()
    failed: list[str] = []

    def fail(body):   # one claims request fails once: it is sent again in the round the judges go out
        text = json.dumps(body).lower()
        if task_of(body) == "claims" and "compound 3?" in text and not failed:
            failed.append(text)
            return True
        return False

    batch_env.fail = fail
    result = run("eval", str(traces_file(tmp_path)), "--batch")
    assert result.exit_code == 0, result.output
    batches = sorted(batch_env.batches.values(), key=lambda b: b["n"])
    assert all(b["state"]["status"] == "completed" for b in batches)   # the service refuses two models in one
    models = [_models(batch_env, b["state"]["id"]) for b in batches]
    assert all(len(m) == 1 for m in models)
    resend = next(i for i, b in enumerate(batches) if len(b["lines"]) == 1 and models[i] == {"gpt-4o-mini"})
    assert {"gpt-4o"} in (models[resend - 1], models[resend + 1])        # the same round, a batch of its own
    results = stored(store)
    assert len(results) == N and not any(r.errors for r in results.values())
    assert sorted(batch_env.sent.values()).count(2) == 1


def test_a_round_past_the_limits_goes_out_as_several_batches_waited_for_together(batch_env, store, tmp_path,
                                                                                 monkeypatch):
    # 19 requests a batch bind the decomposition round (about 3.3 kB each, 63 kB a batch); the judges'
    # requests are larger (about 3.6 kB), so there the byte limit binds first (18 of them a batch).
    monkeypatch.setenv("VERALITH_BATCH_MAX_REQUESTS", "19")
    monkeypatch.setenv("VERALITH_BATCH_MAX_BYTES", "65536")
    settings.reload()
    batch_env.max_requests, batch_env.max_bytes = 19, 65536   # the service refuses a batch past either
    result = run("eval", str(traces_file(tmp_path)), "--batch")
    assert result.exit_code == 0, result.output
    batches = sorted(batch_env.batches.values(), key=lambda b: b["n"])
    sizes = [(len(b["lines"]), len(batch_env.files[b["state"]["input_file_id"]]["data"])) for b in batches]
    assert all(b["state"]["status"] == "completed" for b in batches)
    assert all(n <= 19 and size <= 65536 for n, size in sizes) and max(n for n, _ in sizes) == 19
    assert max(n for n, _ in sizes[3:]) < 19   # the judges' batches: cut by bytes
    # Each round's requests went out at once, then were waited for together.
    rounds = [line for line in result.stderr.splitlines() if "requests sent; batches:" in line]
    assert "40 requests sent" in rounds[0] and rounds[0].count(" validating 0/") == 3
    assert "finalizing 0/19" in rounds[1] and "60 requests sent" in rounds[2] and "4 validating" in rounds[2]
    first_judges = next(i for i, b in enumerate(batches) if task_of(b["lines"][0]["body"]) not in ("questions", "claims"))
    assert first_judges == 3 and len(batches) >= 3 + 4
    results = stored(store)
    assert len(results) == N and not any(r.errors for r in results.values())
    assert set(batch_env.sent.values()) == {1}


def test_a_batch_refused_at_validation_shows_why_and_is_not_sent_again(batch_env, store, tmp_path):
    batch_env.unbatchable = {"gpt-4o"}
    result = run("eval", str(traces_file(tmp_path, 4)), "--batch")
    assert result.exit_code == 2, result.output       # judge errors, as a synchronous eval reports them
    assert len(batch_env.batches) == 1 and set(batch_env.sent.values()) == {1}
    status = run("batch", "status")
    assert status.exit_code == 0
    assert "failed: model_not_found (line 1): The model `gpt-4o` does not exist or is not available" in status.output
    assert "8 failed" in status.output
    results = stored(store, 4)
    assert len(results) == 4
    assert all(r.errors and "model_not_found" in r.errors[0].message for r in results.values())
    assert all(r["error"].startswith("the Batch API refused batch ") for r in _requests(store).values())


def test_a_batch_failed_for_the_queue_limit_is_sent_again(batch_env, store, tmp_path):
    batch_env.capacity_next = 1
    result = run("eval", str(traces_file(tmp_path, 4)), "--batch")
    assert result.exit_code == 0, result.output
    first = min(batch_env.batches.values(), key=lambda b: b["n"])
    assert first["state"]["status"] == "failed" and first["state"]["errors"]["data"][0]["code"] == "token_limit_exceeded"
    assert sorted(batch_env.sent.values()).count(2) == 8    # its 8 decomposition requests, sent again once
    assert "token_limit_exceeded" in run("batch", "status").output
    results = stored(store, 4)
    assert len(results) == 4 and not any(r.errors for r in results.values())


def test_an_option_the_model_refuses_is_dropped_as_on_the_synchronous_path(batch_env, store, tmp_path):
    batch_env.refuses = {"gpt-4o": {"logprobs"}}    # a 400 for a judge request asking for log-probabilities
    path = traces_file(tmp_path, 4)
    result = run("eval", str(path), "--batch")
    assert result.exit_code == 0, result.output
    results = stored(store, 4)
    assert len(results) == 4 and not any(r.errors for r in results.values())
    requests = _requests(store)
    refused = [r for r in requests.values() if r["state"] == "refused"]
    assert len(refused) == 12 and all("Unsupported parameter: 'logprobs'" in r["error"] for r in refused)
    assert set(batch_env.sent.values()) == {1}   # the refused ones never again; their adapted ones once
    assert "12 refused" in run("batch", "status").output
    synchronous = tmp_path / "sync.jsonl"
    assert run("eval", str(path), "--no-persist", "-o", str(synchronous)).exit_code == 0
    sync = {r.query: r for r in map(EvaluationResult.model_validate_json,
                                    synchronous.read_text(encoding="utf-8").splitlines())}
    assert {r.query: _verdicts(r) for r in results.values()} == {q: _verdicts(r) for q, r in sync.items()}


def test_a_4xx_that_no_option_explains_is_the_judge_call_s_error_and_not_sent_again(batch_env, store, tmp_path):
    def fail(body):
        if task_of(body) == "faithfulness" and "compound 3?" in json.dumps(body).lower():
            return 400, "This model's maximum context length is 128000 tokens."
        return None

    batch_env.fail = fail
    result = run("eval", str(traces_file(tmp_path, 4)), "--batch")
    assert result.exit_code == 2, result.output
    results = stored(store, 4)
    errors = {key: [(e.phase.value, e.message) for e in r.errors] for key, r in results.items() if r.errors}
    assert list(errors) == ["r3"] and errors["r3"][0][0] == "faithfulness"
    assert "HTTP 400" in errors["r3"][0][1] and "maximum context length" in errors["r3"][0][1]
    assert set(batch_env.sent.values()) == {1}


def test_a_cancelled_batch_is_sent_again_for_its_unanswered_part(batch_env, store, tmp_path):
    batch_env.cancel_next = 1
    result = run("eval", str(traces_file(tmp_path, 4)), "--batch")
    assert result.exit_code == 0, result.output
    assert "cancelling" in result.stderr
    first = min(batch_env.batches.values(), key=lambda b: b["n"])
    assert first["state"]["status"] == "cancelled"
    assert sorted(batch_env.sent.values()).count(2) == 4    # the half the cancel left unanswered
    results = stored(store, 4)
    assert len(results) == 4 and not any(r.errors for r in results.values())


def test_a_late_collect_after_the_output_was_deleted_sends_those_requests_again(batch_env, store):
    from veralith.llm.batchremote import FINISHED
    from veralith.models import ContextChunk
    from veralith.sdk.batchjob import collect, start
    from veralith.store.protocol import TraceInput

    ids = [create_trace(store, TraceInput(query=t["query"], response=t["response"],
                                          context=[ContextChunk(id=f"c{n}", text=c) for n, c in enumerate(t["context"])]),
                        queued=True) for t in traces(2)]
    job = start(store, ids)
    slept: list[float] = []

    def thirty_days_later(wait: float) -> None:   # the first batch finished, and its files expired, meanwhile
        if not slept:
            for batch_id in list(batch_env.batches):
                while batch_env.retrieve(batch_id)["status"] not in FINISHED:
                    pass
            batch_env.expire_files()
        slept.append(wait)

    assert collect(store, job, sleep=thirty_days_later) == 2
    first = min(batch_env.batches.values(), key=lambda b: b["n"])
    assert {batch_env.sent[line["custom_id"]] for line in first["lines"]} == {2}
    sends = batch_jobs(store).send_rows(job)
    assert sends[0]["status"] == "completed" and "is gone from the service" in sends[0]["error"]
    assert all(store.read(ops.trace_info, i).status == "done" and not store.read(ops.load_result, i).errors for i in ids)


def test_killed_between_creating_a_batch_and_recording_it_nothing_is_sent_twice(batch_env, store, tmp_path):
    batch_env.stall_create = threading.Event()   # the batch is made; its id never reaches the process
    env = subprocess_env(VERALITH_BACKEND="openai", VERALITH_BASE_URL=batch_env.base_url, VERALITH_API_KEY="test",
                         VERALITH_JUDGE_MODEL="gpt-4o", VERALITH_BATCH_POLL_S="0.05")
    proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "eval", str(traces_file(tmp_path, 4)), "--batch"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not batch_env.batches and time.monotonic() < deadline:
            time.sleep(0.05)
        assert batch_env.batches, "no batch was created"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        batch_env.stall_create.set()
    batch_env.stall_create = None
    status = run("batch", "status")
    assert "(being created)" in status.output and "8 sending" in status.output
    result = run("batch", "collect")
    assert result.exit_code == 0, result.output
    assert set(batch_env.sent.values()) == {1}   # the batch the killed process made was found and collected
    results = stored(store, 4)
    assert len(results) == 4 and not any(r.errors for r in results.values())


def test_collect_stops_on_a_dead_batch_service_with_one_line_and_leaves_the_rest_pending(batch_env, store,
                                                                                        monkeypatch):
    from veralith.sdk.batchjob import start
    from veralith.store.protocol import TraceInput

    ids = [create_trace(store, TraceInput(query=f"q{i}?", context=[], response="r."), queued=True) for i in range(3)]
    job = start(store, ids)
    batch_env.stop()                              # nothing listens on its port any more
    monkeypatch.setenv("VERALITH_MAX_RETRIES", "0")
    settings.reload()
    result = run("batch", "collect", job)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "is down" in lines[0] and f"batch job {job} stopped" in lines[0]
    assert "3 traces left pending" in lines[0] and "Traceback" not in result.output
    assert batch_jobs(store).reserved(job) == ids
    assert all(store.read(ops.trace_info, i).status == "pending" for i in ids)


def test_requests_are_cut_into_batches_of_one_model_within_both_limits():
    from veralith.llm.batchlines import chunks

    def body(model: str, size: int) -> str:
        return json.dumps({"model": model, "messages": [{"role": "user", "content": "x" * size}]}, separators=(",", ":"))

    requests = [(f"a{i}", body("m1", 100)) for i in range(10)] + [(f"b{i}", body("m2", 850)) for i in range(5)]
    parts, too_big = chunks([*requests, ("c", body("m1", 5000))], max_requests=4, max_bytes=3000)
    assert [name for name, _ in too_big] == ["c"] and "VERALITH_BATCH_MAX_BYTES" in too_big[0][1]
    assert [(p.model, len(p.custom_ids)) for p in parts] == [("m1", 4), ("m1", 4), ("m1", 2), ("m2", 3), ("m2", 2)]
    assert all(len(p.data) <= 3000 for p in parts)   # m2: three lines fit in 3,000 bytes, four would not
    assert [c for p in parts for c in p.custom_ids] == [name for name, _ in requests]
    lines = [json.loads(x) for p in parts for x in p.data.splitlines()]
    assert all(x["method"] == "POST" and x["url"] == "/v1/chat/completions" for x in lines)
    assert [x["body"] for x in lines] == [json.loads(b) for _, b in requests]


def test_a_request_no_batch_can_hold_fails_its_call_without_being_sent(batch_env, store, tmp_path, monkeypatch):
    monkeypatch.setenv("VERALITH_BATCH_MAX_BYTES", "65536")
    settings.reload()
    record = {**traces(1)[0], "context": ["A very long chunk. " * 4000]}
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    result = run("eval", str(path), "--batch")
    assert result.exit_code == 2, result.output
    (got,) = stored(store, 1).values()
    assert got.errors and "VERALITH_BATCH_MAX_BYTES" in got.errors[0].message
    assert batch_env.batches   # its decomposition went out; the judges' requests, holding the chunk, did not
    assert not any("A very long chunk" in json.dumps(line) for b in batch_env.batches.values()
                   for line in b["lines"])
