"""@trace: bare and configured, sync and async; the caller gets the response, telemetry never breaks it."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from veralith.sdk.log import shutdown
from veralith.sdk.trace import TraceExtractionError, TraceReturn, TraceWarning, trace
from veralith.store.db import open_db
from veralith.store.repository import list_traces, load_trace_input

CHUNKS = ["The P/E ratio is price divided by earnings."]


@pytest.fixture(autouse=True)
def _fresh_worker():
    shutdown(wait=True)
    yield
    shutdown(wait=True)


def stored() -> list[dict]:
    shutdown(wait=True)
    return list_traces(open_db())


def test_bare_decorator_logs_and_returns_only_the_response():
    @trace
    def rag(question: str, k: int = 3):
        return f"Answer to {question}", CHUNKS

    assert rag("What is P/E?", k=1) == "Answer to What is P/E?"
    assert rag.__name__ == "rag"
    (row,) = stored()
    query, context, response, kb, _ = load_trace_input(open_db(), row["id"])
    assert (query, context[0].text, response, kb) == ("What is P/E?", CHUNKS[0], "Answer to What is P/E?", "default")
    assert row["status"] == "done"


def test_parameterised_with_query_arg_sync_and_knowledge_base():
    @trace(query_arg="user_question", sync=True, knowledge_base="faq")
    def rag(user_id: int, user_question: str):
        return TraceReturn(response="P/E is price over earnings.", context=[{"text": CHUNKS[0], "id": "d1"}])

    assert rag(42, user_question="What is P/E?") == "P/E is price over earnings."
    (row,) = list_traces(open_db())  # sync: already stored and evaluated, no drain needed
    assert (row["status"], row["knowledge_base"], row["query_preview"]) == ("done", "faq", "What is P/E?")


def test_async_function():
    @trace
    async def rag(question: str):
        await asyncio.sleep(0)
        return "async answer", CHUNKS

    assert asyncio.run(rag("What is P/E?")) == "async answer"
    assert [r["query_preview"] for r in stored()] == ["What is P/E?"]


def test_async_with_options():
    @trace(query_arg="q", sync=True, on_error="raise")
    async def rag(q: str):
        return TraceReturn(response="r", context=[])

    assert asyncio.run(rag(q="Q?")) == "r"
    assert list_traces(open_db())[0]["status"] == "done"


def test_bare_string_warns_and_passes_through_untouched():
    @trace
    def rag(question: str):
        return "just a string"

    with pytest.warns(TraceWarning, match="rag"):
        assert rag("q") == "just a string"
    marker = {"a": 1}

    @trace(on_error="warn")
    def rag2(question: str):
        return marker

    with pytest.warns(TraceWarning):
        assert rag2("q") is marker
    assert stored() == []


def test_on_error_raise_and_ignore():
    @trace(on_error="raise")
    def bare(question: str):
        return "no context"

    with pytest.raises(TraceExtractionError):
        bare("q")

    @trace(on_error="raise")
    def bad_context(question: str):
        return "answer", "not a list"

    with pytest.raises(TypeError, match="context"):
        bad_context("q")

    @trace(on_error="ignore")
    def quiet(question: str):
        return "answer", "not a list"

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert quiet("q") == "answer"  # the pair was recognised, so the caller still gets the response
    assert stored() == []


def test_the_functions_own_errors_propagate():
    @trace
    def rag(question: str):
        raise LookupError("retriever down")

    with pytest.raises(LookupError, match="retriever down"):
        rag("q")


def test_methods_use_the_first_argument_after_self():
    class Bot:
        @trace
        def answer(self, question: str):
            return "a", CHUNKS

    assert Bot().answer("From a method?") == "a"
    assert stored()[0]["query_preview"] == "From a method?"


def test_missing_query_warns():
    @trace(query_arg="q")
    def rag(q: str = "default"):
        return "a", CHUNKS

    with pytest.warns(TraceWarning, match="not passed"):
        assert rag() == "a"


def test_bad_options_fail_at_decoration():
    with pytest.raises(ValueError, match="on_error"):
        trace(on_error="explode")
    with pytest.raises(ValueError, match="query_arg"):
        trace(query_arg="nope")(lambda question: ("a", []))
