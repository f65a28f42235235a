"""The per-trace budget guard: estimate before any call, refuse before anything is written."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import warnings

import pytest
from conftest import data_file
from fake_openai_server import need_offline_encodings

import veralith
from veralith.config import ConfigError, settings
from veralith.llm import tokens
from veralith.observability.cost import CostWarning
from veralith.pipeline.budget import BudgetExceeded, enforce_budget, estimate_trace
from veralith.store import open_store, ops

QUERY = "When was the Eiffel Tower finished, and how tall is it?"
CONTEXT = ["The Eiffel Tower was completed in 1889.", "It is 330 metres tall."]
RESPONSE = "The Eiffel Tower was finished in 1889. It is 330 metres tall. It is in Paris."


@pytest.fixture
def fresh_encodings():
    """Forget loaded encodings and the once-only warning, before and after."""
    import tiktoken.registry

    def forget() -> None:
        tokens._encodings.clear()
        tokens._loaders.clear()
        tokens._count_static.cache_clear()
        tokens._fallback_warned = False

    forget()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tiktoken.registry, "ENCODINGS", {})  # tiktoken's own in-process cache
        yield
    forget()


def _judge(server, **extra):
    values = {"backend": "openai", "base_url": server.base_url, "api_key": "test", "judge_model": "gpt-4o",
              "max_retries": 0, **extra}
    return settings.override(**values)


def test_the_estimate_mirrors_the_calls_the_pipeline_skips(openai_server):
    with _judge(openai_server, cache=False):
        no_context = estimate_trace(QUERY, [], RESPONSE)
        veralith.evaluate(QUERY, [], RESPONSE, persist=False)
        assert no_context.calls == openai_server.count == 3   # questions, claims, completeness
        before = openai_server.count
        no_claims = estimate_trace(QUERY, CONTEXT, "")
        veralith.evaluate(QUERY, CONTEXT, "", persist=False)
    # questions, sufficiency: an empty response makes no claims call, so no faithfulness or completeness
    assert no_claims.calls == openai_server.count - before == 2
    assert openai_server.by_task()["sufficiency"] == 1


def test_a_tiny_budget_refuses_before_any_call_or_write(openai_server, monkeypatch):
    monkeypatch.setenv("VERALITH_PER_TRACE_BUDGET_USD", "0.000001")
    settings.reload()
    with _judge(openai_server), pytest.raises(BudgetExceeded) as caught:
        veralith.evaluate(QUERY, CONTEXT, RESPONSE)
    err = caught.value
    assert openai_server.count == 0
    assert err.budget_usd == 0.000001 and err.estimated_usd > err.budget_usd
    message = str(err)
    assert "1e-06" in message and f"{err.estimated_usd:.6g}" in message
    assert "VERALITH_PER_TRACE_BUDGET_USD" in message
    assert isinstance(err, veralith.errors.VeralithError)
    assert open_store().read(ops.list_traces) == []


def test_a_sufficient_budget_lets_the_trace_through(openai_server):
    with _judge(openai_server, per_trace_budget_usd=1.0):
        result = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    assert openai_server.count == result.usage.calls > 0


def test_no_budget_means_no_estimate():
    assert enforce_budget(QUERY, CONTEXT, RESPONSE) is None


def test_the_local_backend_costs_nothing_so_never_exceeds():
    estimate = enforce_budget(QUERY, CONTEXT, RESPONSE, budget_usd=1e-9)
    assert estimate is not None and estimate.usd == 0 and estimate.method == "local"


def test_a_budget_on_an_unpriced_model_fails_loudly(openai_server):
    with _judge(openai_server, judge_model="my-llama"), pytest.raises(ConfigError, match="VERALITH_PRICING"):
        warnings.simplefilter("ignore", CostWarning)
        enforce_budget(QUERY, CONTEXT, RESPONSE, budget_usd=1.0)
    with _judge(openai_server, judge_model="my-llama", pricing={"my-llama": {"input": 0, "output": 0}}):
        assert enforce_budget(QUERY, CONTEXT, RESPONSE, budget_usd=1e-9).usd == 0


def _needs_tiktoken_files() -> None:
    need_offline_encodings()


def test_the_estimate_follows_the_pipelines_batching(openai_server):
    _needs_tiktoken_files()
    response = " ".join(f"Fact number {n} is true." for n in range(1, 14))  # 13 sentences
    with _judge(openai_server, batch_size=5):
        est = estimate_trace(QUERY, CONTEXT, response)
        veralith.evaluate(QUERY, CONTEXT, response, persist=False)
    # 1 questions + 1 claims + 1 sufficiency (one query sentence) + 3 faithfulness (13 claims / 5)
    # + 1 completeness; the fake server decomposes exactly as the estimate assumes, so the counts match.
    assert est.calls == 7 == openai_server.count
    assert est.method == "tiktoken:o200k_base"


def _dev_traces(n: int) -> list[dict]:
    rows = []
    for name in ("faithfulness_halueval_qa", "faithfulness_begin_wow", "claims_wice"):
        with open(data_file(f"{name}.dev.jsonl"), encoding="utf-8") as handle:
            rows += [row for row in map(json.loads, handle) if row["query"].strip()][:n]
    return rows


def test_the_estimate_is_within_30_percent_of_what_the_server_counted(openai_server):
    _needs_tiktoken_files()
    openai_server.count_tokens = True
    estimated = received = 0
    for row in _dev_traces(4):
        with _judge(openai_server, cache=False):
            est = estimate_trace(row["query"], row["context"], row["response"])
            result = veralith.evaluate(row["query"], row["context"], row["response"], persist=False)
        got = result.usage.input_tokens
        estimated, received = estimated + est.input_tokens, received + got
        if re.search(r"[^\W\d_]", row["response"]):
            assert abs(est.input_tokens - got) <= 0.30 * got, row["id"]
        else:
            # A bare number ("300"): the fake decomposer drops it, a real model rewrites it as a claim
            # (and the estimate counts it). Over, never under: the guard errs on the safe side.
            assert est.input_tokens >= got, row["id"]
    assert abs(estimated - received) <= 0.30 * received


def test_the_estimate_bounds_the_bill_with_the_untimed_schemas_and_a_prefix_grown_for_the_cache(openai_server):
    """gpt-4.1 bills cached input at a quarter: its claims and faithfulness calls show further examples
    (veralith.llm.prefix), and nothing here is dated, so faithfulness's schema asks for no dates. The
    estimate renders the same prompts and schemas, so it still bounds what the server counted."""
    _needs_tiktoken_files()
    openai_server.count_tokens = True
    rows = [{"id": "eiffel", "query": QUERY, "context": CONTEXT, "response": RESPONSE},
            {"id": "two chunks", "query": "Who wrote Dracula, and when was it published?",
             "context": ["Dracula is a novel by Bram Stoker.", "Dracula was first published in 1897."],
             "response": "Bram Stoker wrote Dracula. It came out in 1897. It was an instant bestseller."}]
    for row in rows:
        with _judge(openai_server, cache=False, judge_model="gpt-4.1"):
            est = estimate_trace(row["query"], row["context"], row["response"])
            result = veralith.evaluate(row["query"], row["context"], row["response"], persist=False)
        assert est.usd is not None and result.usage.usd is not None
        assert est.usd >= result.usage.usd, row["id"]
        assert abs(est.input_tokens - result.usage.input_tokens) <= 0.30 * result.usage.input_tokens, row["id"]
    faith = [b for b in openai_server.requests if b["response_format"]["json_schema"]["name"] == "faithfulness"]
    assert faith and all(b["messages"][0]["content"].count("Example:") == 2 for b in faith)
    item = next(iter(faith[0]["response_format"]["json_schema"]["schema"]["$defs"].values()))
    assert all("dates" not in d.get("properties", {}) for d in faith[0]["response_format"]["json_schema"]["schema"][
        "$defs"].values()) and item


def test_the_estimate_bounds_the_bill_whether_completeness_asks_for_gaps_or_not(openai_server):
    """Completeness asks for gaps only when the response states one (tasks.gapless), and the grounding and
    supporting chunks are never asked (derived from the quotes); the estimate plans the larger, gapful
    call, so it bounds what the server counted either way."""
    _needs_tiktoken_files()
    openai_server.count_tokens = True
    for response, gaps in ((RESPONSE, False), (RESPONSE + " I couldn't find who designed it.", True)):
        before = openai_server.count
        with _judge(openai_server, cache=False, decomposer_model="gpt-4o-mini"):
            est = estimate_trace(QUERY, CONTEXT, response)
            result = veralith.evaluate(QUERY, CONTEXT, response, persist=False)
        assert not result.errors and est.usd is not None and result.usage.usd is not None
        assert est.input_tokens >= result.usage.input_tokens and est.usd >= result.usage.usd, response
        sent = {b["response_format"]["json_schema"]["name"]: b["response_format"]["json_schema"]["schema"]
                for b in openai_server.requests[before:]}
        assert ("gaps" in sent["completeness"]["properties"]) is gaps
        defs = [d for name in ("sufficiency", "faithfulness") for d in sent[name]["$defs"].values()]
        assert not any({"supporting_chunk_ids", "grounding_chunk_ids"} & set(d["properties"]) for d in defs)


def test_offline_fallback_is_fast_warns_once_and_never_fails(tmp_path, monkeypatch, fresh_encodings):
    # No cache file and no network: tiktoken's own download (no timeout) may only run in the
    # background; the count must come back at once, from the documented character estimate.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    attempts = []

    def no_network(*args, **kwargs):
        attempts.append(args)
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tokens.count_tokens("x" * 401, "gpt-4o") == (101, "chars/4")
        est = estimate_trace(QUERY, CONTEXT, RESPONSE, client=_FakeOpenAI())
    assert time.perf_counter() - started < tokens.LOAD_WAIT_S + 1.0
    assert est.method == "chars/4" and est.input_tokens > 0 and est.usd > 0
    fallback = [w for w in caught if issubclass(w.category, CostWarning)]
    assert len(fallback) == 1 and "ceil(characters / 4)" in str(fallback[0].message)
    assert tokens._loaders["o200k_base"][0].daemon  # a download that hung could never block exit


def test_a_download_that_hangs_is_waited_for_once_and_briefly(monkeypatch, fresh_encodings):
    release = threading.Event()
    monkeypatch.setattr(tokens, "LOAD_WAIT_S", 0.2)
    monkeypatch.setattr(tokens, "_cached_file_ok", lambda name: False)
    monkeypatch.setattr(tokens, "_load", lambda name: release.wait(30))  # tiktoken stuck on the network
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        started = time.perf_counter()
        assert tokens.count_tokens("abcd" * 10, "gpt-4o") == (10, "chars/4")
        first = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(20):
            tokens.count_tokens("abcd", "gpt-4o")
        later = time.perf_counter() - started
    release.set()
    assert 0.15 < first < 1.0 and later < 0.1


def test_a_cache_file_with_the_wrong_checksum_is_not_trusted(tmp_path, monkeypatch, fresh_encodings):
    import hashlib

    name = hashlib.sha1(tokens._URL.format("o200k_base").encode()).hexdigest()
    (tmp_path / name).write_bytes(b"not an encoding")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    assert not tokens._cached_file_ok("o200k_base")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        assert tokens.count_tokens("abcd" * 10, "gpt-4o") == (10, "chars/4")


def test_encodings_by_model():
    assert tokens.encoding_for("gpt-4o-2024-08-06") == "o200k_base"
    assert tokens.encoding_for("gpt-4.1-mini") == "o200k_base"
    assert tokens.encoding_for("o3") == "o200k_base"
    assert tokens.encoding_for("gpt-5-mini") == "o200k_base"
    assert tokens.encoding_for("gpt-4") == "cl100k_base"
    assert tokens.encoding_for("gpt-4-turbo") == "cl100k_base"
    assert tokens.encoding_for("gpt-3.5-turbo-0125") == "cl100k_base"


class _FakeOpenAI:
    backend = "openai"
    model = "gpt-4o"


def test_a_logged_or_batched_trace_is_estimated_once(monkeypatch, openai_server, tmp_path):
    """log() and `veralith eval` check the budget before writing; evaluating the stored trace must
    not render and count every prompt a second time."""
    from veralith import log
    from veralith.pipeline import budget as budget_mod

    calls = []
    real = budget_mod.estimate_trace
    monkeypatch.setattr(budget_mod, "estimate_trace", lambda *a, **k: calls.append(1) or real(*a, **k))
    with settings.override(backend="openai", base_url=openai_server.base_url, api_key="test",
                           per_trace_budget_usd=10.0):
        log("What is a P/E ratio?", ["P/E is price over earnings."], "P/E is price over earnings.", sync=True)
    assert len(calls) == 1


def test_the_estimate_and_get_client_choose_the_backend_by_one_rule(openai_server):
    from veralith.llm import get_client
    from veralith.llm.backends import resolve_backend

    cases = [({"backend": "auto"}, "local"), ({"backend": "auto", "base_url": openai_server.base_url}, "openai"),
             ({"backend": "auto", "api_key": "test"}, "openai"), ({"backend": "local", "api_key": "test"}, "local")]
    for values, expected in cases:
        with settings.override(**values):
            assert resolve_backend() == expected == get_client().backend, values
            local = estimate_trace(QUERY, CONTEXT, RESPONSE).method == "local"
            assert local == (expected == "local"), values
    with pytest.raises(ConfigError, match="VERALITH_BACKEND"):
        resolve_backend("cloud")


def test_the_estimate_normalises_context_as_evaluate_does():
    from veralith.pipeline.inputs import normalize_context

    with settings.override(backend="openai", api_key="test"), warnings.catch_warnings():
        warnings.simplefilter("ignore", CostWarning)
        raw = estimate_trace(QUERY, [{"page_content": CONTEXT[0]}, CONTEXT[1]], RESPONSE)
        assert raw == estimate_trace(QUERY, normalize_context(CONTEXT), RESPONSE)
        with pytest.raises(TypeError, match="wrap a single text"):
            estimate_trace(QUERY, "one string", RESPONSE)   # the same error evaluate() gives


def test_a_result_records_what_its_calls_wrote_against_the_plan_and_leaves_out_what_it_cannot_compare():
    """veralith.llm.estimate.output_sizes, what `--dry-run` learns from: a planned task the pipeline
    decided without a call counts 0 requests and 0 tokens; a failed call or a reply-cache hit leaves
    its task out; the decomposition is keyed on the decomposer model."""
    from veralith.llm.estimate import output_sizes
    from veralith.pipeline.inputs import normalize_context
    from veralith.usage import CallUsage

    def usage(output: int, *, calls: int = 1, hit: int = 0) -> CallUsage:
        return CallUsage(model="served-name", calls=calls, cache_hits=hit, output_tokens=output)

    spent = [("questions", usage(30)), ("claims", usage(50, calls=2)),   # a re-ask: two requests
             ("sufficiency", usage(0, calls=0, hit=1)), ("completeness", None)]   # faithfulness never asked
    with settings.override(backend="openai", judge_model="gpt-4o"):
        sizes = output_sizes(QUERY, normalize_context(CONTEXT), RESPONSE, spent, model="gpt-4o",
                             decomposer_model="gpt-4o-mini", versions={"claims": "v9"}, batch_size=50, mode="full",
                             as_of="2026-12-01")
    found = {s.task: s for s in sizes}
    assert sorted(found) == ["claims", "faithfulness", "questions"]
    assert (found["claims"].model, found["claims"].prompt_version, found["claims"].calls,
            found["claims"].planned_calls, found["claims"].output_tokens) == ("gpt-4o-mini", "v9", 2, 1, 50)
    assert (found["faithfulness"].model, found["faithfulness"].calls, found["faithfulness"].output_tokens,
            found["faithfulness"].planned_calls) == ("gpt-4o", 0, 0, 1)
    assert all(s.allowance_tokens > 0 and s.traces == 1 for s in sizes)
