"""The judge-reply cache: reruns cost nothing, across processes too; corrupt rows and `cache=off`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from store_support import is_sqlite, scalar, sql

import veralith
from veralith.config import settings
from veralith.llm.cache import LLMCache, cache_for, get_cache
from veralith.store import store_url

QUERY = "What is the capital of France and what river runs through it?"
CONTEXT = ["Paris is the capital of France.", "The Seine flows through Paris."]
RESPONSE = "The capital of France is Paris. The Seine runs through it. Paris has about 2 million people."


@pytest.fixture
def judge(openai_server):
    """The fake OpenAI server as the judge. Its settings override is taken after the store's
    fixture sets the environment (list `store` / `store_url` first): an override holds every
    setting, the store's URL included."""
    with settings.override(backend="openai", base_url=openai_server.base_url, api_key="test",
                           judge_model="gpt-4o", max_retries=0):
        yield openai_server


def test_a_rerun_makes_no_request_and_costs_nothing(judge):
    first = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    calls = judge.count
    assert first.usage.calls == calls > 0 and first.usage.cache_hits == 0
    assert first.usage.usd and first.usage.usd > 0
    second = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    assert judge.count == calls                       # not one HTTP request
    assert second.usage.cache_hits == first.usage.calls
    assert second.usage.calls == 0 and second.usage.usd == 0
    assert second.failure_cell == first.failure_cell
    assert second.model_dump(exclude={"usage", "latency_ms"}) == first.model_dump(exclude={"usage", "latency_ms"})


def test_a_new_process_on_the_same_database_hits_too(store_url, judge):
    first = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    calls = judge.count
    script = ("import json, veralith\n"
              f"r = veralith.evaluate({QUERY!r}, {CONTEXT!r}, {RESPONSE!r}, persist=False)\n"
              "print(json.dumps(r.usage.model_dump()))\n")
    env = {**os.environ, "VERALITH_BACKEND": "openai", "VERALITH_BASE_URL": judge.base_url,
           "VERALITH_API_KEY": "test", "VERALITH_JUDGE_MODEL": "gpt-4o", "VERALITH_DB_PATH": settings.db_path,
           "VERALITH_DB_URL": store_url}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                         check=True).stdout
    usage = json.loads(out.strip().splitlines()[-1])
    assert judge.count == calls
    assert usage["cache_hits"] == first.usage.calls and usage["calls"] == 0 and usage["usd"] == 0


def test_cache_off_disables_both_layers(store, judge):
    with settings.override(cache=False):
        veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
        calls = judge.count
        again = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    assert judge.count == 2 * calls and again.usage.cache_hits == 0
    assert scalar(store, "SELECT count(*) FROM llm_cache") == 0


def test_rows_carry_their_metadata_and_disk_hits_are_counted(store, judge):
    veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    get_cache().current.clear_memory()            # force the second run through the store
    veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    get_cache().current.flush_hits()              # hit counters are written in batches (and at exit)
    rows = [dict(zip(("task", "model", "prompt_version", "hits"), r, strict=True))
            for r in sql(store, "SELECT task, model, prompt_version, hits FROM llm_cache")]
    assert {r["task"] for r in rows} == {"questions", "claims", "sufficiency", "faithfulness", "completeness"}
    assert all(r["model"] == "gpt-4o" and r["prompt_version"].startswith(r["task"]) for r in rows)
    assert all(r["hits"] == 1 for r in rows)


# ---------------------------------------------------------------- the cache object itself

def _fresh(size: int = 8) -> LLMCache:
    return LLMCache(store_url(), size)


@pytest.mark.usefixtures("store_url")
def test_get_returns_a_private_copy_and_put_only_takes_parsed_replies():
    cache = _fresh()
    cache.put("k", {"items": [1]})
    got = cache.get("k")
    got["items"].append(2)
    assert cache.get("k") == {"items": [1]}
    with pytest.raises(TypeError, match="parsed replies"):
        cache.put("k", "raw text")  # type: ignore[arg-type]


def test_a_corrupt_row_is_a_miss_and_is_replaced(store):
    if is_sqlite(store):  # SQLite's table refuses invalid JSON, so the damage must get past its CHECK
        sql(store, "PRAGMA ignore_check_constraints = ON")
    for key, value in (("bad", '{"items": ['), ("list", "[1, 2]")):
        sql(store, "INSERT INTO llm_cache (key, task, model, prompt_version, value, created_at)"
                   " VALUES (?, 't', 'm', 'v', ?, '2026-01-01')", [key, value])
    if is_sqlite(store):
        sql(store, "PRAGMA ignore_check_constraints = OFF")
    cache = _fresh()
    assert cache.get("bad") is None and cache.get("list") is None
    assert cache.stats.corrupt == 2
    cache.put("bad", {"items": []})
    assert _fresh().get("bad") == {"items": []}      # a new process-level cache reads the repaired row


def test_lru_evicts_the_least_recently_used_and_size_zero_keeps_nothing_in_memory():
    cache = _fresh(size=2)
    for key in ("a", "b", "c"):
        cache.put(key, {"v": key})
    cache.get("b")
    assert list(cache._lru) == ["c", "b"]
    assert cache.get("a") == {"v": "a"} and cache.stats.db_hits == 1  # evicted from memory, still on disk
    nothing = _fresh(size=0)
    nothing.put("z", {"v": 1})
    assert not nothing._lru and nothing.get("z") == {"v": 1}


def test_settings_cache_follows_the_current_database(tmp_path):
    get_cache().put("k", {"v": 1})
    with settings.override(db_path=str(tmp_path / "other.db")):
        assert get_cache().get("k") is None
        get_cache().put("k", {"v": 2})
        assert get_cache().get("k") == {"v": 2}
    assert get_cache().get("k") == {"v": 1}
    # One cache per store, named by its URL (a file path becomes sqlite:///...).
    assert cache_for(store_url(), settings.cache_size) is get_cache().current


def test_concurrent_threads_share_the_cache_safely(store):
    cache = _fresh(size=16)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(40):
                key = f"k{(n * 7 + i) % 50}"
                if cache.get(key) is None:
                    cache.put(key, {"v": key})
                assert cache.get(key) == {"v": key}
        except BaseException as exc:  # collected: an assertion in a thread would be lost otherwise
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert scalar(store, "SELECT count(*) FROM llm_cache") == 50
