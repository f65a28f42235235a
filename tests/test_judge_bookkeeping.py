"""What a judge call costs and says about itself: usage of every call (failed ones too), the model
recorded and priced, attempts, the slots a local server gets, reply length caps."""

from __future__ import annotations

import contextvars
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fake_openai_server import auto_reply, task_of

from veralith.config import settings
from veralith.llm.client import OpenAIClient
from veralith.llm.estimate import max_output_tokens
from veralith.llm.server import is_local
from veralith.llm.tasks import FAITHFULNESS, QUESTIONS, ChunkIn, ClaimIn, FaithfulnessInput, QuestionsInput

FREE = {"*": {"input": 0, "output": 0}}


def _evaluate():
    from veralith.pipeline.evaluate import evaluate

    return evaluate("How tall is the tower?", ["The tower is 330 metres tall."], "The tower is 330 metres tall.",
                    persist=False)


def test_both_failed_decomposition_calls_are_counted(openai_server):
    openai_server.usage = {"prompt_tokens": 1000, "completion_tokens": 7, "cached_tokens": 0}
    openai_server.responder = lambda body: "not json" if task_of(body) in ("questions", "claims") else None
    with settings.override(backend="openai", base_url=openai_server.base_url, judge_model="m", pricing=FREE):
        result = _evaluate()
    assert [e.kind for e in result.errors] == ["malformed_reply"]
    assert openai_server.count == 4   # each call and its re-ask
    assert result.usage.calls == 4 and result.usage.input_tokens == 4000 and result.usage.output_tokens == 28


def test_the_other_decomposition_call_is_counted_when_one_fails(openai_server):
    openai_server.usage = {"prompt_tokens": 1000, "completion_tokens": 7, "cached_tokens": 0}
    openai_server.responder = lambda body: "not json" if task_of(body) == "claims" else None
    with settings.override(backend="openai", base_url=openai_server.base_url, judge_model="m", pricing=FREE):
        result = _evaluate()
    assert openai_server.count == 3 and result.usage.calls == 3 and result.usage.input_tokens == 3000


def test_the_model_the_server_names_is_recorded_and_priced_with_one_warning(openai_server, caplog):
    openai_server.served_model = "qwen2.5-3b-instruct-q4_k_m.gguf"
    caplog.set_level(logging.WARNING, logger="veralith")
    prices = {"qwen2.5-3b-instruct-q4_k_m.gguf": {"input": 1.0, "output": 2.0}}
    with settings.override(backend="openai", base_url=openai_server.base_url, pricing=prices):
        first, second = _evaluate(), _evaluate()
    assert first.judge_model == second.judge_model == "qwen2.5-3b-instruct-q4_k_m.gguf"   # not "gpt-4o"
    assert first.usage.usd is not None and first.usage.usd > 0
    assert caplog.text.count("VERALITH_JUDGE_MODEL is not set") == 1
    # The configured model labels results; the price is still the served model's.
    with settings.override(backend="openai", base_url=openai_server.base_url, judge_model="my-judge",
                           pricing=prices):
        configured = _evaluate()
    assert configured.judge_model == "my-judge" and configured.usage.usd == pytest.approx(first.usage.usd)


def test_attempts_in_messages_and_usage_agree(openai_server):
    from fake_openai_server import Reply

    openai_server.enqueue(*[Reply.error(500, retry_after=0)] * 3)
    client = OpenAIClient(base_url=openai_server.base_url, api_key="k", model="m", max_retries=2)
    with pytest.raises(Exception) as info:
        client.run(QUESTIONS, QuestionsInput(query="Why?"))
    err = info.value
    assert err.attempts == 3 and "after 3 attempts" in err.message and err.usage.calls == 3


@pytest.mark.parametrize(("limit", "spread"), [(None, "serial"), (4, "parallel")])
def test_a_local_server_gets_one_request_at_a_time_and_timeouts_start_at_send(openai_server, limit, spread):
    openai_server.latency_s = 0.5
    with settings.override(server_concurrency=limit):
        client = OpenAIClient(base_url=openai_server.base_url, api_key="k", model="m", timeout_s=1.2, max_retries=0)
        started = time.monotonic()
        with ThreadPoolExecutor(4) as pool:   # the 4th waits ~1.5 s for its turn: more than the timeout
            futures = [pool.submit(contextvars.copy_context().run, client.run, QUESTIONS,
                                   QuestionsInput(query=f"Why {i}?")) for i in range(4)]
            results = [f.result() for f in futures]
        elapsed = time.monotonic() - started
    assert len(results) == 4   # no timeout: the clock started when each request was sent
    assert (elapsed >= 2.0) if spread == "serial" else (elapsed < 1.5), elapsed


def test_which_servers_are_local():
    assert all(is_local(u) for u in ("http://localhost:11434/v1", "http://127.0.0.1:8080/v1", "http://[::1]:8000/v1",
                                     "http://127.0.1.1/v1"))
    assert not any(is_local(u) for u in (None, "https://api.openai.com/v1", "http://10.0.0.5:8000/v1",
                                         "http://gpu-box.lan:8000/v1"))


def test_reply_caps_are_sized_per_task_and_batch(openai_server):
    chunks = [ChunkIn(id="c0", text="The tower is 330 metres tall.")]

    def faith(n):
        return FaithfulnessInput(query="How tall?", chunks=chunks,
                                 claims=[ClaimIn(id=f"k{i}", text="It is tall.") for i in range(1, n + 1)])
    one, six = max_output_tokens("faithfulness", faith(1), "m"), max_output_tokens("faithfulness", faith(6), "m")
    assert 256 < one < six < 3000 and six - one == 5 * 2 * 140
    openai_server.responder = auto_reply
    OpenAIClient(base_url=openai_server.base_url, api_key="k", model="m").run(FAITHFULNESS, faith(6))
    assert openai_server.requests[-1]["max_tokens"] == six
