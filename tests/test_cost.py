"""Cost tracking: the price table, the tracker, per-trace scopes and client instrumentation."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import warnings

import openai
import pytest

from veralith.config import settings
from veralith.observability import pricing
from veralith.observability.cost import (
    CostScope,
    CostWarning,
    get_tracker,
    instrument,
    price_usd,
    record_usage,
)


@pytest.fixture(autouse=True)
def _fresh_tracker():
    get_tracker().reset()
    pricing._warned.clear()
    yield
    get_tracker().reset()


# ---------------------------------------------------------------- prices

def test_table_prices_and_snapshots_resolve_to_their_family():
    assert price_usd("gpt-4o", 1_000_000, 0, 1_000_000) == pytest.approx(12.50)
    assert price_usd("gpt-4o-2024-08-06", 1_000_000, 0, 0) == pytest.approx(2.50)
    assert price_usd("gpt-4o-mini-2024-07-18", 0, 0, 1_000_000) == pytest.approx(0.60)
    assert price_usd("gpt-4.1-mini", 1_000_000, 0, 0) == pytest.approx(0.40)
    assert price_usd("o4-mini", 0, 0, 1_000_000) == pytest.approx(4.40)
    assert price_usd("gpt-5-nano-2025-08-07", 1_000_000, 0, 0) == pytest.approx(0.05)
    assert price_usd("gpt-4-0613", 1_000_000, 0, 0) == pytest.approx(30.0)
    assert pricing.PRICES_CHECKED  # the table carries the date it was checked


def test_cached_input_is_part_of_input_and_billed_at_the_cached_rate():
    # 1M prompt tokens of which 400k came from the provider's prompt cache.
    usd = price_usd("gpt-4o", 1_000_000, 400_000, 0)
    assert usd == pytest.approx(0.6 * 2.50 + 0.4 * 1.25)


def test_unknown_model_costs_none_with_one_warning_per_model():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert price_usd("my-local-llama", 100, 0, 10) is None
        assert price_usd("my-local-llama", 100, 0, 10) is None
        assert price_usd("other-model", 100, 0, 10) is None
    messages = [str(w.message) for w in caught if issubclass(w.category, CostWarning)]
    assert len(messages) == 2
    assert "my-local-llama" in messages[0] and "VERALITH_PRICING" in messages[0] and "None" in messages[0]


def test_pricing_override_and_catch_all(monkeypatch):
    monkeypatch.setenv("VERALITH_PRICING", '{"gpt-4o": {"input": 1, "output": 2}, "llama3": {"input": 0, "output": 0}}')
    settings.reload()
    assert price_usd("gpt-4o-2024-11-20", 1_000_000, 500_000, 1_000_000) == pytest.approx(3.0)  # cached = input
    assert price_usd("llama3", 10_000, 0, 10_000) == 0.0  # a local server priced at 0 on purpose
    with settings.override(pricing={"*": {"input": 0, "output": 0}}):
        assert price_usd("anything-at-all", 10, 0, 10) == 0.0
        assert price_usd("gpt-4o", 1_000_000, 0, 0) == pytest.approx(2.50)  # the table wins over "*"


# ---------------------------------------------------------------- tracker and scopes

def _call(model="gpt-4o", n_in=1000, n_out=100, **kw):
    record_usage(model, input_tokens=n_in, cached_input_tokens=0, output_tokens=n_out,
                 usd=price_usd(model, n_in, 0, n_out), **kw)


def test_nested_scopes_add_up_to_their_parent_and_hits_cost_nothing():
    with CostScope() as outer:
        _call()
        with CostScope() as inner:
            _call(n_in=2000)
            _call(cache_hit=True)
    assert (inner.calls, inner.cache_hits, inner.input_tokens) == (1, 1, 2000)
    assert (outer.calls, outer.cache_hits, outer.input_tokens, outer.output_tokens) == (2, 1, 3000, 200)
    assert outer.usd == pytest.approx(price_usd("gpt-4o", 3000, 0, 200))
    assert outer.tokens == 3200
    tracker = get_tracker()
    assert tracker.calls == 2 and tracker.cache_hits == 1 and tracker.total_tokens == 3200
    assert tracker.total_usd == pytest.approx(outer.usd)
    assert tracker.by_model()["gpt-4o"].calls == 2


def test_an_unpriced_call_makes_the_sum_unknown_not_zero():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        with CostScope() as scope:
            _call()
            _call(model="mystery-model")
    assert scope.usd is None
    assert get_tracker().total_usd is None
    assert get_tracker().unpriced_models == ["mystery-model"]
    assert get_tracker().by_model()["gpt-4o"].usd is not None


def test_concurrent_traces_in_threads_each_see_only_their_own_calls():
    barrier = threading.Barrier(8)
    scopes: dict[int, CostScope] = {}

    def trace(n: int) -> None:
        with CostScope() as scope:
            barrier.wait()
            # Three "judges" per trace, each in a worker thread running a copy of the trace's context,
            # as the pipeline runs them.
            workers = [threading.Thread(target=contextvars.copy_context().run, args=(_call,),
                                        kwargs={"n_in": 1000 * (n + 1)}) for _ in range(3)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        scopes[n] = scope

    threads = [threading.Thread(target=trace, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n, scope in scopes.items():
        assert scope.calls == 3
        assert scope.input_tokens == 3 * 1000 * (n + 1)
    assert get_tracker().calls == 24


def test_concurrent_traces_as_async_tasks():
    async def trace(n: int) -> CostScope:
        async with CostScope() as scope:
            for _ in range(n + 1):
                await asyncio.sleep(0)
                _call()
        return scope

    async def main() -> list[CostScope]:
        return list(await asyncio.gather(*(trace(n) for n in range(5))))

    for n, scope in enumerate(asyncio.run(main())):
        assert scope.calls == n + 1


# ---------------------------------------------------------------- instrumenting a raw SDK client

def _raw_client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)


def test_instrument_a_raw_openai_client(openai_server):
    openai_server.usage = {"prompt_tokens": 1200, "completion_tokens": 300, "cached_tokens": 200}
    client = instrument(_raw_client(openai_server))
    assert instrument(client) is client  # idempotent: no double wrapping
    other = _raw_client(openai_server)  # not instrumented: never counted
    with CostScope() as scope:
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        other.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert openai_server.count == 2
    assert scope.calls == 1
    assert (scope.input_tokens, scope.cached_input_tokens, scope.output_tokens) == (1200, 200, 300)
    expected = (1000 * 0.15 + 200 * 0.075 + 300 * 0.60) / 1e6
    assert scope.usd == pytest.approx(expected)
    assert get_tracker().by_model()["gpt-4o-mini"].calls == 1


def test_instrument_counts_structured_parse_calls_once(openai_server):
    from pydantic import BaseModel

    class Answer(BaseModel):
        answer: str

    openai_server.enqueue({"answer": "42"})
    client = instrument(_raw_client(openai_server))
    with CostScope() as scope:
        parsed = client.chat.completions.parse(model="gpt-4.1", messages=[{"role": "user", "content": "q"}],
                                               response_format=Answer)
    assert parsed.choices[0].message.parsed.answer == "42"
    assert scope.calls == 1 and scope.input_tokens == 100  # the server's default usage


def test_instrument_async_client(openai_server):
    async def main() -> CostScope:
        client = instrument(openai.AsyncOpenAI(base_url=openai_server.base_url, api_key="test", max_retries=0))
        async with CostScope() as scope:
            await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        await client.close()
        return scope

    scope = asyncio.run(main())
    assert scope.calls == 1 and scope.usd == pytest.approx(price_usd("gpt-4o", 100, 0, 20))


def test_instrument_rejects_what_it_cannot_wrap():
    with pytest.raises(TypeError, match="instrument"):
        instrument(object())


# ---------------------------------------------------------------- per-trace cost of real evaluations

def _judge(server):
    return settings.override(backend="openai", base_url=server.base_url, api_key="test", judge_model="gpt-4o",
                             max_retries=0, cache=False)


def test_scope_usd_is_the_servers_usage_times_the_table_price(openai_server):
    import veralith

    openai_server.usage = {"prompt_tokens": 1834, "completion_tokens": 211, "cached_tokens": 1024}
    with _judge(openai_server), CostScope() as scope:
        result = veralith.evaluate("What is the capital of France?", ["Paris is the capital of France."],
                                   "The capital is Paris. It is on the Seine.", persist=False)
    n = openai_server.count
    assert n > 0 and scope.calls == n and result.usage.calls == n
    per_call = ((1834 - 1024) * 2.50 + 1024 * 1.25 + 211 * 10.00) / 1e6
    assert round(scope.usd, 2) == round(n * per_call, 2)
    assert scope.usd == pytest.approx(n * per_call)
    assert result.usage.usd == pytest.approx(scope.usd)
    assert (scope.input_tokens, scope.output_tokens) == (n * 1834, n * 211)


def test_two_traces_evaluated_concurrently_each_get_only_their_own_cost(openai_server):
    from fake_openai_server import Reply, auto_reply

    import veralith

    # Trace A's requests are reported as 1000 prompt tokens, trace B's as 7000.
    def responder(body):
        text = json.dumps(body["messages"])
        return Reply.of(auto_reply(body), usage={"prompt_tokens": 7000 if "Germany" in text else 1000,
                                                 "completion_tokens": 50, "cached_tokens": 0})

    openai_server.responder = responder
    openai_server.latency_s = 0.02  # keeps the two traces' calls interleaved
    scopes: dict[str, CostScope] = {}
    barrier = threading.Barrier(2)

    def trace(name: str, query: str, context: str, response: str) -> None:
        barrier.wait()
        with CostScope() as scope:
            veralith.evaluate(query, [context], response, persist=False)
        scopes[name] = scope

    with _judge(openai_server):
        threads = [threading.Thread(target=trace, args=("A", "Capital of France?", "Paris is the capital.",
                                                          "It is Paris. Paris is large.")),
                   threading.Thread(target=trace, args=("B", "Capital of Germany?", "Berlin is the capital.",
                                                          "It is Berlin."))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    a, b = scopes["A"], scopes["B"]
    assert a.calls + b.calls == openai_server.count
    assert a.input_tokens == 1000 * a.calls and b.input_tokens == 7000 * b.calls
    assert a.usd == pytest.approx(price_usd("gpt-4o", 1000 * a.calls, 0, 50 * a.calls))
    assert b.usd == pytest.approx(price_usd("gpt-4o", 7000 * b.calls, 0, 50 * b.calls))


def test_instrument_counts_embeddings_calls():
    from types import SimpleNamespace

    response = SimpleNamespace(model="text-embedding-3-small", data=[], usage=SimpleNamespace(prompt_tokens=5000))
    sdk_like = SimpleNamespace(embeddings=SimpleNamespace(create=lambda **kwargs: response))
    instrument(sdk_like)
    with CostScope() as scope:
        assert sdk_like.embeddings.create(model="text-embedding-3-small", input=["a"]) is response
    assert (scope.calls, scope.input_tokens, scope.output_tokens) == (1, 5000, 0)
    assert scope.usd == pytest.approx(5000 * 0.02 / 1e6)


def test_a_veralith_judge_client_is_not_wrapped_twice():
    from veralith.llm import get_client

    local = get_client("local")
    assert instrument(local) is local


def test_instrument_records_a_streamed_call_from_its_usage_chunk():
    from types import SimpleNamespace

    def chunk(usage=None):
        return SimpleNamespace(model="gpt-4o-mini-2024-07-18", usage=usage, choices=[])

    class Stream:
        def __init__(self):
            self.closed = False

        def __iter__(self):
            yield chunk()
            yield chunk(SimpleNamespace(prompt_tokens=900, completion_tokens=40, prompt_tokens_details=None))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.closed = True

    stream = Stream()
    completions = SimpleNamespace(create=lambda **kw: stream if kw.get("stream") else None, parse=lambda **kw: None)
    client = instrument(SimpleNamespace(chat=SimpleNamespace(completions=completions)))
    with CostScope() as scope, client.chat.completions.create(model="gpt-4o-mini", messages=[], stream=True,
                                        stream_options={"include_usage": True}) as metered:
        assert scope.calls == 0  # nothing is known until the usage chunk arrives
        assert len(list(metered)) == 2
    assert stream.closed
    assert (scope.calls, scope.input_tokens, scope.output_tokens) == (1, 900, 40)
    assert scope.usd == pytest.approx(price_usd("gpt-4o-mini", 900, 0, 40))


def test_instrument_records_an_async_streamed_call():
    from types import SimpleNamespace

    async def chunks():
        yield SimpleNamespace(model="gpt-4o", usage=None)
        yield SimpleNamespace(model="gpt-4o", usage=SimpleNamespace(prompt_tokens=10, completion_tokens=5))

    async def create(**kwargs):
        return chunks()

    client = instrument(SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create, parse=create))))

    async def main() -> CostScope:
        async with CostScope() as scope:
            stream = await client.chat.completions.create(model="gpt-4o", messages=[], stream=True)
            assert [c async for c in stream][-1].usage.prompt_tokens == 10
        return scope

    scope = asyncio.run(main())
    assert (scope.calls, scope.input_tokens, scope.output_tokens) == (1, 10, 5)


def test_one_rule_sums_usage_everywhere():
    """CallUsage.add is the only summing rule: the result's usage, scopes, the tracker and the CLI tally."""
    from veralith.cli.batch import Tally
    from veralith.models import Usage
    from veralith.usage import CallUsage

    total = CallUsage()
    total.add(CallUsage(calls=2, cache_hits=1, input_tokens=100, cached_input_tokens=40, output_tokens=7, usd=0.5))
    total.add(Usage(calls=1, input_tokens=10, output_tokens=3, usd=0.25))
    assert (total.calls, total.cache_hits, total.input_tokens, total.cached_input_tokens, total.output_tokens,
            total.usd, total.tokens) == (3, 1, 110, 40, 10, 0.75, 120)
    assert total.as_usage() == Usage(calls=3, cache_hits=1, input_tokens=110, cached_input_tokens=40,
                                     output_tokens=10, usd=0.75)
    total.add(CallUsage(calls=1, usd=None))
    total.add(CallUsage(calls=1, usd=1.0))
    assert total.usd is None and total.calls == 5          # unknown stays unknown

    tally = Tally()
    for usd in (0.5, None, 0.25):
        tally.usage.add(Usage(calls=1, input_tokens=5, usd=usd))
    assert (tally.calls, tally.input_tokens, tally.usd) == (3, 15, None)


def test_the_tracker_and_scopes_add_from_many_threads_without_losing_a_call():
    get_tracker().reset()
    with CostScope() as scope:
        def work() -> None:
            for _ in range(200):
                record_usage("gpt-4o", input_tokens=1, cached_input_tokens=0, output_tokens=1, usd=0.0)

        threads = [threading.Thread(target=contextvars.copy_context().run, args=(work,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert scope.calls == get_tracker().calls == 1600 and scope.tokens == 3200
