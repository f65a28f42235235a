"""`veralith eval FILE --batch` and `veralith batch status|collect`: the OpenAI Batch API through the real
SDK, against the fake files + batches server on 127.0.0.1 (tests/fake_batch_server.py), on both stores."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import batch_support
import pytest
from batch_support import N, run, stored, traces, traces_file
from conftest import subprocess_env
from fake_batch_server import batch_server  # noqa: F401
from fake_openai_server import task_of
from work_support import batch_jobs, claim, claim_batch, create_trace, resumable

from veralith.config import settings
from veralith.models import EvaluationResult
from veralith.store import ops

REPO = Path(__file__).resolve().parents[1]
batch_env = batch_support.batch_env


_VOLATILE = {"trace_id", "latency_ms", "created_at", "evaluated_at", "id", "uid"}


def _form(result: EvaluationResult) -> dict:
    data = result.model_dump(mode="json")
    data = {k: v for k, v in data.items() if k not in _VOLATILE}
    data["usage"] = {k: v for k, v in data["usage"].items() if k != "usd"}
    return data


def test_batch_results_are_the_synchronous_ones_at_half_the_price(batch_env, store, tmp_path):
    path = traces_file(tmp_path)
    result = run("eval", str(path), "--batch", "--run-name", "nightly")
    assert result.exit_code == 0, result.output
    assert "batch job job-" in result.stderr and "veralith batch collect" in result.stderr
    assert "40 requests sent; batches: batch-fake-" in result.stderr   # progress, round by round
    assert "20 judged this round, 0 traces waiting" in result.stderr
    batched = stored(store)
    assert len(batched) == N
    # Decomposition, then the three judges (then any re-ask the synchronous path makes too); each request once.
    assert set(batch_env.sent.values()) == {1} and batch_env.sync_calls == 0
    phases = [{task_of(line["body"]) for line in b["lines"]} for b in batch_env.batches.values()]
    assert phases[0] == {"questions", "claims"} and phases[1] == {"sufficiency", "faithfulness", "completeness"}
    synchronous = tmp_path / "sync.jsonl"
    result = run("eval", str(path), "--no-persist", "-o", str(synchronous))
    assert result.exit_code == 0, result.output
    assert batch_env.sync_calls == sum(batch_env.sent.values())   # the same calls, sent one by one
    by_id = {}
    for line in synchronous.read_text(encoding="utf-8").splitlines():
        r = EvaluationResult.model_validate_json(line)
        by_id[r.metadata.get("id") or r.query] = r
    sync = {f"r{i}": next(r for r in by_id.values() if f"compound {i}?" in r.query) for i in range(N)}
    for key, got in batched.items():
        assert _form(got) == _form(sync[key])
        assert got.usage.usd == pytest.approx(sync[key].usage.usd / 2)
    runs = run("runs")
    assert "nightly" in runs.output


def test_a_partly_failed_batch_resends_only_its_failures(batch_env, store, tmp_path):
    failed_once: set[str] = set()

    def fail(body):
        text = json.dumps(body, sort_keys=True)
        if '"faithfulness"' in text and "compound 3?" in text.lower() and text not in failed_once:
            failed_once.add(text)
            return True
        return False

    batch_env.fail = fail
    assert run("eval", str(traces_file(tmp_path)), "--batch").exit_code == 0
    assert len(failed_once) == 1
    twice = [name for name, n in batch_env.sent.items() if n == 2]
    assert len(twice) == 1 and set(batch_env.sent.values()) == {1, 2}
    resent = [b for b in batch_env.batches.values() if any(line["custom_id"] in twice for line in b["lines"])]
    assert len(resent) == 2 and len(resent[1]["lines"]) == 1    # re-sent alone
    results = stored(store)
    assert len(results) == N and not any(r.errors for r in results.values())


def test_an_expired_batch_is_resent_for_its_unanswered_part(batch_env, store, tmp_path):
    batch_env.expire_next = 1          # the decomposition batch answers half, then expires
    result = run("eval", str(traces_file(tmp_path)), "--batch")
    assert result.exit_code == 0, result.output
    counts = Counter(batch_env.sent.values())
    assert counts[2] == N              # 2N decomposition requests: the unanswered half sent again
    assert counts[1] == len(batch_env.sent) - N
    results = stored(store)
    assert len(results) == N and not any(r.errors for r in results.values())


def test_an_expired_batch_out_of_tries_is_reported_on_its_traces(batch_env, store, tmp_path, monkeypatch):
    monkeypatch.setenv("VERALITH_BATCH_MAX_TRIES", "1")
    settings.reload()
    batch_env.expire_next = 1
    result = run("eval", str(traces_file(tmp_path)), "--batch")
    assert result.exit_code == 2, result.output    # judge errors, as a synchronous eval reports them
    results = stored(store)
    assert len(results) == N
    first = next(iter(batch_env.batches.values()))["lines"]
    unanswered = {int(n) for line in first[len(first) // 2:]
                  for n in re.findall(r"ompound (\d+)\b", json.dumps(line["body"]))}
    failed = [r for r in results.values() if r.errors]
    # The traces the expired batch left a request of unanswered, no more; nothing was sent twice.
    assert {int(r.metadata["id"][1:]) for r in failed} == unanswered and set(batch_env.sent.values()) == {1}
    assert all("Batch API gave no reply" in r.errors[0].message for r in failed)


def test_killed_while_waiting_then_collected_loses_nothing_and_judges_once(batch_env, store, store_url, tmp_path):
    batch_env.polls_to_finish = 10**9  # nothing finishes while the first process waits
    env = subprocess_env(VERALITH_BACKEND="openai", VERALITH_BASE_URL=batch_env.base_url, VERALITH_API_KEY="test",
                         VERALITH_JUDGE_MODEL="gpt-4o", VERALITH_BATCH_POLL_S="0.05")
    proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "eval", str(traces_file(tmp_path)), "--batch"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not batch_env.batches and time.monotonic() < deadline:
            time.sleep(0.05)
        assert batch_env.batches, "the batch was never submitted"
        time.sleep(0.3)                # it polls a few times
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    jobs = batch_jobs(store).job_rows()
    assert len(jobs) == 1 and jobs[0]["state"] == "running" and jobs[0]["traces"] == N
    status = run("batch", "status")
    assert status.exit_code == 0 and jobs[0]["id"] in status.output and "0/20 traces judged" in status.output
    batch_env.polls_to_finish = 1
    result = run("batch", "collect")
    assert result.exit_code == 0, result.output
    assert f"batch job {jobs[0]['id']}: {N} traces judged and stored here; done" in result.output
    results = stored(store)
    assert len(results) == N and not any(r.errors for r in results.values())
    assert set(batch_env.sent.values()) == {1}   # the killed process's batch was picked up, not re-sent
    assert all(store.read(ops.trace_info, r.trace_id).status == "done" for r in results.values())
    assert all(len(store.read(ops.history, r.trace_id)) == 0 for r in results.values())   # judged once
    again = run("batch", "collect", jobs[0]["id"])
    assert again.exit_code == 0 and "nothing to collect" in again.output


def test_cached_replies_are_not_sent_and_the_budget_is_checked_before(batch_env, store, tmp_path, monkeypatch):
    path = traces_file(tmp_path)
    assert run("eval", str(path), "--batch").exit_code == 0
    sent, batches = dict(batch_env.sent), len(batch_env.batches)
    result = run("eval", str(path), "--batch", "--rejudge")   # every request is in the reply cache
    assert result.exit_code == 0, result.output
    assert dict(batch_env.sent) == sent and len(batch_env.batches) == batches
    results = stored(store)
    assert len(results) == N and all(r.usage.cache_hits and not r.usage.calls for r in results.values())
    assert all(len(store.read(ops.history, r.trace_id)) == 1 for r in results.values())
    monkeypatch.setenv("VERALITH_PER_TRACE_BUDGET_USD", "0.000001")
    settings.reload()
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({**traces(1)[0], "id": "x", "query": "A new question?"}) + "\n", encoding="utf-8")
    result = run("eval", str(other), "--batch")
    assert result.exit_code == 2 and "exceeds the per-trace budget" in result.stderr
    assert len(batch_env.batches) == batches


def test_a_reserved_trace_is_taken_once_and_by_nobody_else(batch_env, store):
    from veralith.sdk.batchjob import start
    from veralith.store.protocol import TraceInput

    ids = [create_trace(store, TraceInput(query=f"q{i}?", context=[], response="r."), queued=True) for i in range(3)]
    job = start(store, ids)
    jobs = batch_jobs(store)
    assert jobs.reserved(job) == ids
    assert resumable(store) == [] and claim_batch(store, 10) == []   # no resume or worker takes them
    assert not claim(store, ids[0])
    assert jobs.take_reserved(job, ids[0]) and not jobs.take_reserved(job, ids[0])
    assert jobs.reserved(job) == ids[1:]
    assert jobs.take_job(job) is True and jobs.take_job("job-none") is None


def test_refusals_are_one_line(batch_env, tmp_path, monkeypatch):
    path = traces_file(tmp_path, 2)
    result = run("eval", str(path), "--batch", "--no-persist")
    assert result.exit_code == 2 and "--batch cannot be used with --no-persist" in result.stderr
    monkeypatch.setenv("VERALITH_BACKEND", "local")
    settings.reload()
    result = run("eval", str(path), "--batch")
    assert result.exit_code == 2 and "--batch needs the OpenAI backend" in result.stderr
    assert run("batch", "collect", "job-nope").exit_code == 1
    assert "no batch jobs" in run("batch", "status").output


def test_a_job_another_live_process_collects_is_left_to_it(batch_env, store, tmp_path):
    from veralith.sdk.batchjob import start
    from veralith.store.protocol import TraceInput
    from veralith.work import leases

    ids = [create_trace(store, TraceInput(query="q?", context=[], response="r."), queued=True)]
    job = start(store, ids)
    host, _pid, _token = leases.mine()
    at = time.time()
    with store.connection() as db, db.write():   # the parent process (alive, this host) holds the job
        db.execute("UPDATE batch_jobs SET lease_host = ?, lease_pid = ?, lease_token = 'other', lease_at = ?",
                   [host, os.getppid(), at])
    result = run("batch", "collect", job)
    assert result.exit_code == 2 and "being collected by another live process" in result.stderr
    assert f"collected by {host}/{os.getppid()}" in run("batch", "status").output
    assert batch_jobs(store).reserved(job) == ids and not batch_env.batches   # nothing sent, nothing taken


def test_dry_run_with_batch_names_the_discount(batch_env, tmp_path):
    result = run("eval", str(traces_file(tmp_path, 2)), "--dry-run", "--batch")
    assert result.exit_code == 0, result.output
    assert "with --batch, the Batch API bills every token at 50% of the prices above" in result.output
    assert not batch_env.batches
