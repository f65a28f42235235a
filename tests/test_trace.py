"""@trace: bare and configured, sync and async; the caller gets the response, telemetry never breaks it."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from veralith.sdk.log import shutdown
from veralith.sdk.trace import TraceContext, TraceExtractionError, TraceReturn, TraceWarning, trace
from veralith.store import open_store, ops

CHUNKS = ["The P/E ratio is price divided by earnings."]


@pytest.fixture(autouse=True)
def _fresh_worker():
    shutdown(wait=True)
    yield
    shutdown(wait=True)


def list_traces() -> list[dict]:
    return open_store().read(ops.list_traces)


def stored() -> list[dict]:
    shutdown(wait=True)
    return list_traces()


def load_trace_input(trace_id: int) -> tuple:
    """What was logged: (query, context, response, knowledge base, metadata)."""
    found = open_store().read(ops.load_input, trace_id)
    return found.query, found.context, found.response, found.knowledge_base, found.metadata


@pytest.mark.usefixtures("store_url")
def test_bare_decorator_logs_and_returns_only_the_response():
    @trace
    def rag(question: str, k: int = 3):
        return f"Answer to {question}", CHUNKS

    assert rag("What is P/E?", k=1) == "Answer to What is P/E?"
    assert rag.__name__ == "rag"
    (row,) = stored()
    query, context, response, kb, _ = load_trace_input(row["id"])
    assert (query, context[0].text, response, kb) == ("What is P/E?", CHUNKS[0], "Answer to What is P/E?", "default")
    assert row["status"] == "done"


@pytest.mark.usefixtures("store_url")
def test_parameterised_with_query_arg_sync_and_knowledge_base():
    @trace(query_arg="user_question", sync=True, knowledge_base="faq")
    def rag(user_id: int, user_question: str):
        return TraceReturn(response="P/E is price over earnings.", context=[{"text": CHUNKS[0], "id": "d1"}])

    assert rag(42, user_question="What is P/E?") == "P/E is price over earnings."
    (row,) = list_traces()  # sync: already stored and evaluated, no drain needed
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
    assert list_traces()[0]["status"] == "done"


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


# --- one call, one trace ----------------------------------------------------------------------------


def test_a_traced_function_called_by_a_traced_function_stands_down():
    @trace
    def retrieve_and_answer(question: str):
        return "inner answer", CHUNKS

    @trace(knowledge_base="outer")
    def answer(question: str):
        return "outer: " + retrieve_and_answer(question), CHUNKS

    assert answer("What is P/E?") == "outer: inner answer"
    assert [(r["knowledge_base"], r["query_preview"]) for r in stored()] == [("outer", "What is P/E?")]
    assert retrieve_and_answer("Alone?") == "inner answer"  # outside any scope it logs again
    assert len(stored()) == 2


def test_the_scope_follows_asyncio_tasks_and_is_not_shared_between_concurrent_calls():
    @trace
    async def inner(question: str):
        return "inner", CHUNKS

    @trace
    async def outer(question: str):
        await asyncio.gather(inner(question), asyncio.create_task(inner(question)))
        return "outer", CHUNKS

    async def main():
        await asyncio.gather(outer("first?"), outer("second?"))

    asyncio.run(main())
    assert sorted(r["query_preview"] for r in stored()) == ["first?", "second?"]


# --- streams ----------------------------------------------------------------------------------------


def test_a_sync_generator_is_logged_once_when_exhausted_with_the_joined_text():
    @trace
    def stream(question: str):
        yield TraceContext(CHUNKS)
        yield from ["P/E is ", "price over ", "earnings."]

    chunks = list(stream("What is P/E?"))
    assert chunks == ["P/E is ", "price over ", "earnings."]  # the context marker is not passed on
    (row,) = stored()
    query, _, response, _, metadata = load_trace_input(row["id"])
    assert (query, response, metadata) == ("What is P/E?", "P/E is price over earnings.", {})


def test_an_async_generator_is_logged_once_when_exhausted():
    @trace(knowledge_base="faq")
    async def stream(question: str):
        for part in ["P/E is ", "price over earnings."]:
            yield part
        yield TraceContext(CHUNKS)

    async def consume():
        return [part async for part in stream("What is P/E?")]

    assert asyncio.run(consume()) == ["P/E is ", "price over earnings."]
    (row,) = stored()
    _, _, response, kb, _ = load_trace_input(row["id"])
    assert (response, kb) == ("P/E is price over earnings.", "faq")


def test_a_stream_stopped_early_is_logged_as_partial_sync_and_async():
    @trace
    def stream(question: str):
        yield TraceContext(CHUNKS)
        yield from ["one ", "two ", "three"]

    @trace
    async def astream(question: str):
        yield TraceContext(CHUNKS)
        for part in ["one ", "two ", "three"]:
            yield part

    for i, _ in enumerate(stream("sync?")):
        if i == 1:
            break

    async def consume():
        agen = astream("async?")
        async for _ in agen:
            break
        await agen.aclose()

    asyncio.run(consume())
    rows = {r["query_preview"]: r["id"] for r in stored()}
    for question, text in [("sync?", "one two "), ("async?", "one ")]:
        _, _, response, _, metadata = load_trace_input(rows[question])
        assert (response, metadata) == (text, {"partial": True})


def test_a_stream_without_context_warns_saying_what_happened():
    @trace
    def no_context(question: str):
        yield "text"

    @trace
    def late_context(question: str):
        yield "text"
        yield TraceContext(CHUNKS)

    with pytest.warns(TraceWarning, match="yielded no TraceContext"):
        assert list(no_context("q")) == ["text"]
    with pytest.warns(TraceWarning, match=r"stopped by its consumer after 1 chunk"):
        for _ in late_context("q"):
            break
    assert stored() == []


def test_a_generator_that_raises_propagates_and_logs_nothing():
    @trace
    def stream(question: str):
        yield TraceContext(CHUNKS)
        yield "partial "
        raise LookupError("model down")

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(LookupError, match="model down"):
            list(stream("q"))
    assert stored() == []


# --- what reaches log() -----------------------------------------------------------------------------


def test_a_str_subclass_response_is_logged_as_plain_text():
    class Accessor(str):  # what LangChain 1.x's message.text returns
        def __call__(self) -> str:
            return str(self)

    @trace(sync=True)
    def rag(question: str):
        return Accessor("subclass answer"), CHUNKS

    assert rag("q?") == "subclass answer"
    (row,) = list_traces()
    assert load_trace_input(row["id"])[2] == "subclass answer"


def test_run_is_passed_to_log_only_when_given(monkeypatch):
    import veralith.sdk.trace as module

    seen: list[dict] = []
    monkeypatch.setattr(module, "log", lambda *args, **kwargs: seen.append(kwargs))

    @trace(run="nightly")
    def named(question: str):
        return "a", CHUNKS

    @trace
    def unnamed(question: str):
        return "a", CHUNKS

    named("q")
    unnamed("q")
    assert seen[0]["run"] == "nightly" and "run" not in seen[1]
    with pytest.raises(TypeError, match="run"):
        trace(run=3)
