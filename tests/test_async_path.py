"""The async path (veralith.aevaluate, AsyncOpenAI, VERALITH_ASYNC_CALLS) through the real SDK against
tests/fake_openai_server.py: the same results as the sync path, many requests in flight without a
thread each, the same retries and circuit breaker, and eval / resume / worker judging on it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from fake_openai_server import Reply, task_of
from typer.testing import CliRunner
from work_support import create_trace

import veralith
from veralith.cli import app
from veralith.config import settings
from veralith.errors import JudgeServerDown
from veralith.llm.backends import forget_clients
from veralith.models import ContextChunk
from veralith.store import ops

pytest.importorskip("veralith.store.repository")

QUERY = "What is the boiling point of compound {i} and is it a liquid?"
CONTEXT = ["Compound {i} boils at {b} degrees Celsius.", "Compound {i} is a clear liquid."]
RESPONSE = "Compound {i} boils at {b} degrees Celsius. It is a liquid. It is also sold in blue bottles."


def _trace(i: int) -> tuple[str, list[str], str]:
    return (QUERY.format(i=i), [c.format(i=i, b=100 + i) for c in CONTEXT], RESPONSE.format(i=i, b=100 + i))


def _openai(server, **kw):
    forget_clients()   # a fresh client and server state, as a new process would have
    return settings.override(backend="openai", base_url=server.base_url, api_key="sk-test-async", cache=False, **kw)


def _same(result) -> dict:
    """A result without what differs from run to run (timings)."""
    dumped = result.model_dump(mode="json")
    dumped.pop("latency_ms")
    dumped.pop("created_at", None)
    return dumped


def _async_requests(server) -> int:
    """Requests the AsyncOpenAI client sent (the SDK names itself in a header)."""
    return sum(h.get("x-stainless-async", "false").startswith("async:") for h in server.headers)


def test_aevaluate_gives_what_evaluate_gives(openai_server):
    openai_server.logprobs = True
    # Log-probabilities asked on every call: in auto mode a server on 127.0.0.1 gets a speed check that
    # may stop asking part-way (timing on a loaded machine), and the two runs would differ by that.
    with _openai(openai_server, logprobs="on"):
        sync = [veralith.evaluate(*_trace(i), persist=False) for i in range(4)]
        sync_requests = openai_server.count

        async def judge_all():
            return await asyncio.gather(*(veralith.aevaluate(*_trace(i), persist=False) for i in range(4)))

        asynchronous = asyncio.run(judge_all())
    assert openai_server.count == 2 * sync_requests and _async_requests(openai_server) == sync_requests
    assert [_same(r) for r in asynchronous] == [_same(r) for r in sync]
    assert all(r.usage.calls == 5 and not r.errors for r in asynchronous)


def test_aevaluate_stores_like_evaluate():
    # the local backend: no async client, its calls run on a thread each, one after the other
    result = asyncio.run(veralith.aevaluate(*_trace(1)))
    again = veralith.evaluate(*_trace(1))
    assert result.trace_id is not None and result.backend == "local"
    assert _same(result) | {"trace_id": 0} == _same(again) | {"trace_id": 0}


def test_many_requests_in_flight_on_one_thread(openai_server):
    openai_server.latency_s = 1.0
    n = 40
    seen_threads: set[str] = set()

    async def judge_all():
        async def watch():
            while True:
                seen_threads.update(t.name for t in threading.enumerate())
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        try:
            return await asyncio.gather(*(veralith.aevaluate(*_trace(i), persist=False) for i in range(n)))
        finally:
            watcher.cancel()

    # A server on 127.0.0.1 is taken to answer one request at a time unless told otherwise.
    with _openai(openai_server, server_concurrency=256):
        started = time.monotonic()
        results = asyncio.run(judge_all())
        elapsed = time.monotonic() - started
    assert len(results) == n and not any(r.errors for r in results)
    # More requests in flight at once than there are traces, from one thread (wall time is not asserted:
    # this server shares the test's process, and the machine its cores; on a loaded machine building 80
    # requests can take longer than one reply, so "all 2n decomposition calls at once" is not asserted).
    assert openai_server.max_in_flight > n, (openai_server.max_in_flight, elapsed)
    # No thread per request or per trace (the sync path has `veralith-judge-call` and pool threads).
    assert not [t for t in seen_threads if t.startswith(("veralith-judge-call", "ThreadPoolExecutor"))]


def test_requests_spread_over_connection_pools_only_past_a_share_each():
    from veralith.llm.client import _Pools

    made: list[object] = []
    pools = _Pools(lambda: made.append(object()) or made[-1])   # type: ignore[func-returns-value]
    taken = [pools.take() for _ in range(_Pools.SHARE)]
    assert taken == [0] * _Pools.SHARE and len(pools.sdks) == 1   # up to SHARE in flight: one client, as before
    assert pools.take() == 1 and pools.busy == [_Pools.SHARE, 1]
    pools.busy[0] = 0                                               # every request on the first ended
    assert [pools.take() for _ in range(3)] == [0, 0, 1]           # the least busy one, the first of equals
    for _ in range(_Pools.SHARE * _Pools.MAX):
        pools.take()
    assert len(pools.sdks) == _Pools.MAX and pools.sdks == made    # never more than MAX


def test_retries_are_counted_alike_on_both_paths(openai_server):
    failures = {"left": 0}
    lock = threading.Lock()

    def responder(body):
        with lock:
            if task_of(body) == "faithfulness" and failures["left"] > 0:
                failures["left"] -= 1
                return Reply.error(500, retry_after=0)
        return None   # the auto reply

    openai_server.responder = responder
    with _openai(openai_server, max_retries=3):
        failures["left"] = 2
        sync = veralith.evaluate(*_trace(1), persist=False)
        failures["left"] = 2
        asynchronous = asyncio.run(veralith.aevaluate(*_trace(1), persist=False))
    assert sync.usage.calls == asynchronous.usage.calls == 7 and not asynchronous.errors
    assert _same(asynchronous) == _same(sync)

    failures["left"] = 10   # more than the retries: the faithfulness judge fails, the others stand
    with _openai(openai_server, max_retries=1):
        failed = asyncio.run(veralith.aevaluate(*_trace(2), persist=False))
    assert [(e.phase.value, e.kind, e.attempts) for e in failed.errors] == [("faithfulness", "server_error", 2)]
    assert failed.sufficiency and failed.completeness is not None


def test_the_circuit_breaker_stops_the_async_path(openai_server, monkeypatch):
    import veralith.llm.server as server_mod

    monkeypatch.setattr(server_mod, "BREAKER_SPAN_S", 0.0)
    openai_server.responder = lambda body: Reply.error(503, retry_after=0)
    with _openai(openai_server, max_retries=5):
        with pytest.raises(JudgeServerDown):
            asyncio.run(veralith.aevaluate(*_trace(1), persist=False))
        sent = openai_server.count
        with pytest.raises(JudgeServerDown):   # open: nothing more is sent
            asyncio.run(veralith.aevaluate(*_trace(2), persist=False))
    # the breaker opens at the 5th failure; the other decomposition call may have been sent meanwhile
    assert server_mod.BREAKER_FAILURES <= sent <= server_mod.BREAKER_FAILURES + 1 and openai_server.count == sent


@pytest.fixture
def async_env(openai_server, monkeypatch):
    monkeypatch.setenv("VERALITH_BACKEND", "openai")
    monkeypatch.setenv("VERALITH_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("VERALITH_API_KEY", "test")
    monkeypatch.setenv("VERALITH_ASYNC_CALLS", "1")
    settings.reload()
    forget_clients()
    return openai_server


def _pending(n: int, first: int = 0) -> list[int]:
    from veralith.store import open_store
    from veralith.store.protocol import TraceInput

    store = open_store()
    ids = []
    for i in range(first, first + n):
        query, context, response = _trace(i)
        ids.append(create_trace(store, TraceInput(query=query, response=response, knowledge_base="default",
                                                 context=[ContextChunk(id=f"c{k}", text=t)
                                                          for k, t in enumerate(context)])))
    return ids


def _statuses() -> dict[str, int]:
    from veralith.store import open_store

    return {k: v for k, v in open_store(read_only=True).read(ops.stats)["by_status"].items() if v}


def test_eval_judges_on_the_async_path(async_env, tmp_path):
    import json

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": i, "query": q, "context": c, "response": r}) + "\n"
                            for i, (q, c, r) in enumerate(map(_trace, range(12)))), encoding="utf-8")
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(app, ["eval", str(path), "-c", "6", "-o", str(out)])
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    assert [json.loads(line)["metadata"].get("id", i) for i, line in enumerate(lines)] == list(range(12))
    assert _statuses() == {"done": 12}
    assert async_env.count == 60 and _async_requests(async_env) == 60


def test_resume_and_worker_judge_on_the_async_path(async_env):
    from veralith.sdk.worker import run_worker
    from veralith.store import open_store

    _pending(5)
    resumed = CliRunner().invoke(app, ["resume", "-c", "3"])
    assert resumed.exit_code == 0, resumed.output
    assert _statuses() == {"done": 5} and _async_requests(async_env) == 25

    _pending(4, first=5)   # other texts: nothing from the reply cache
    totals = run_worker(open_store(), concurrency=2, stop=threading.Event(), once=True, poll_s=0.05)
    assert (totals.judged, totals.failed) == (4, 0)
    assert _statuses() == {"done": 9} and _async_requests(async_env) == 45 == async_env.count
