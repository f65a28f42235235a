"""veralith.adapters.openai.wrap(): the real openai SDK against the fake server on 127.0.0.1.

A completion over retrieved context (a veralith.context(...) block, or the results of a named
retrieval tool) is one trace, on every path (sync, async, streamed, the tool-calling loop); the
app receives exactly what the SDK returns; nothing Veralith does wrong reaches the app.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time

import openai
import pytest
from adapter_support import counter_delta, record_logs, shape, where_traced_calls_go
from fake_openai_server import Reply
from pydantic import BaseModel

import veralith
from veralith.adapters.openai import _calls, _read, stats, unwrap, wrap
from veralith.store import ops

QUESTION = "When was Acme founded?"
DOCS = ["Acme was founded in 1947.", "Acme sells anvils."]
ANSWER = "Acme was founded in 1947."
TOOLS = [{"type": "function", "function": {"name": "search_docs", "description": "Search the docs.",
                                            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


@pytest.fixture
def logged(monkeypatch):
    monkeypatch.setattr(_calls.counters, "_warned", set())
    return record_logs(monkeypatch)


@pytest.fixture
def counted():
    return counter_delta(stats)


def _clients(server, **kwargs):
    raw = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    return raw, wrap(raw, **kwargs)


def _async_client(server, **kwargs):
    return wrap(openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0), **kwargs)


def _same(a, b) -> bool:
    """Two completions (or chunks) alike but for the ids and times the server gives each request."""
    def clean(x):
        return {k: v for k, v in x.model_dump().items() if k not in ("id", "created")}
    return clean(a) == clean(b)


def _ask(client, **kwargs):
    return client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": QUESTION}], **kwargs)


# --- marked context ----------------------------------------------------------------------------------


def test_a_completion_inside_veralith_context_is_one_trace_and_the_app_gets_the_sdks_object(openai_server, logged,
                                                                                           counted):
    raw, client = _clients(openai_server, knowledge_base="support", metadata={"app": "bot"}, run="nightly")
    openai_server.enqueue(ANSWER, ANSWER)
    plain = _ask(raw)
    with veralith.context(DOCS):
        reply = _ask(client, metadata={"user": "u-1"})
    assert type(reply) is type(plain) and _same(reply, plain)
    (call,) = logged
    assert (call["query"], [c["text"] for c in call["context"]], call["response"]) == (QUESTION, DOCS, ANSWER)
    assert (call["knowledge_base"], call["run"]) == ("support", "nightly")
    metadata = call["metadata"]
    assert set(metadata) == shape("openai") | {"app"}
    assert (metadata["source"], metadata["chain"], metadata["run_id"], metadata["run_name"], metadata["partial"],
            metadata["openai_metadata"]) == ("openai", "gpt-test", reply.id, "chat.completions.create", False,
                                             {"user": "u-1"})
    assert set(call["latency_ms"]) == {"generation"} and call["latency_ms"]["generation"] > 0
    assert counted() == {"logged": 1, "ignored": 0, "skipped": {}}


def test_a_completion_without_retrieved_context_is_passed_through_and_not_logged(openai_server, logged, counted):
    raw, client = _clients(openai_server)
    openai_server.enqueue(ANSWER, ANSWER)
    assert _same(_ask(client), _ask(raw))
    assert logged == [] and counted() == {"logged": 0, "ignored": 1, "skipped": {}}


def test_the_query_of_the_context_block_wins_and_list_content_is_read(openai_server, logged):
    _, client = _clients(openai_server)
    openai_server.enqueue(ANSWER, ANSWER)
    with veralith.context(DOCS, query="Founding year of Acme?"):
        _ask(client)
    with veralith.context(DOCS):
        client.chat.completions.create(model="m", messages=[
            {"role": "system", "content": "Answer from the documents."},
            {"role": "user", "content": [{"type": "text", "text": "When was"}, {"type": "text", "text": "Acme founded?"}]}])
    assert [c["query"] for c in logged] == ["Founding year of Acme?", "When was\nAcme founded?"]


# --- the tool-calling loop ---------------------------------------------------------------------------


def _loop(client, *, stream=False, work_s=0.05, results=None):
    """The app's loop: ask, run the retrieval tool the model calls, send its result, get the answer."""
    messages = [{"role": "user", "content": QUESTION}]
    seen = []
    while True:
        reply = client.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS, stream=stream)
        if stream:
            chunks = list(reply)
            seen.append(chunks)
            calls = {}
            for chunk in chunks:
                for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                    calls[call.index] = call
            if not calls:
                return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), seen
            messages.append({"role": "assistant", "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                              "arguments": c.function.arguments}}
                for c in calls.values()]})
            ids = [c.id for c in calls.values()]
        else:
            seen.append(reply)
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content, seen
            messages.append(message)  # the SDK's own object, as apps append it
            ids = [c.id for c in message.tool_calls]
        time.sleep(work_s)  # the app runs its retriever
        for call_id in ids:
            messages.append({"role": "tool", "tool_call_id": call_id,
                             "content": json.dumps(results.pop(0) if results else DOCS)})


def _script_loop(server, *answers):
    server.enqueue(Reply.tool_calls([{"id": "call_1", "name": "search_docs", "arguments": {"q": "Acme"}}]), *answers)


@pytest.mark.parametrize("stream", [False, True], ids=["reply", "stream"])
def test_a_tool_calling_loop_is_one_trace_with_the_tools_results_and_the_loops_timings(openai_server, logged,
                                                                                      stream):
    raw, client = _clients(openai_server, retrieval_tools=["search_docs"])
    _script_loop(openai_server, ANSWER)
    plain_answer, plain = _loop(raw, stream=stream)
    _script_loop(openai_server, ANSWER)
    answer, seen = _loop(client, stream=stream)
    assert answer == plain_answer == ANSWER
    for got, expected in zip(seen, plain, strict=True):  # every reply or chunk the app got, as without the wrap
        pairs = zip(got, expected, strict=True) if stream else [(got, expected)]
        assert all(_same(a, b) for a, b in pairs)
    (call,) = logged
    assert [(c["text"], c["rank"]) for c in call["context"]] == [(DOCS[0], 1), (DOCS[1], 2)]
    assert call["response"] == ANSWER and call["metadata"]["retrieval_tools"] == ["search_docs"]
    latency = call["latency_ms"]
    assert latency["retrieval"] >= 50 and latency["generation"] > 0
    assert latency["total"] >= latency["retrieval"] + latency["generation"] - 1


def test_a_loop_of_several_retrievals_and_parallel_calls_gives_one_trace_with_every_result(openai_server, logged):
    _, client = _clients(openai_server, retrieval_tools=["search_docs"])
    openai_server.enqueue(
        Reply.tool_calls([{"id": "a", "name": "search_docs", "arguments": {"q": "founding"}}]),
        Reply.tool_calls([{"id": "b", "name": "search_docs", "arguments": {"q": "x"}},
                          {"id": "c", "name": "search_docs", "arguments": {"q": "y"}}]),
        ANSWER)
    answer, _ = _loop(client, work_s=0.02, results=[["first"], ["second"], [{"text": "third", "id": "d3",
                                                                             "score": 0.5}]])
    (call,) = logged
    assert answer == ANSWER
    assert [c["text"] for c in call["context"]] == ["first", "second", "third"]
    assert call["context"][2]["score"] == 0.5 and call["latency_ms"]["retrieval"] >= 40


def test_results_of_other_tools_are_not_context_and_a_parser_can_read_a_tools_result(openai_server, logged):
    messages = [{"role": "user", "content": QUESTION},
                {"role": "assistant", "tool_calls": [
                    {"id": "w", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                    {"id": "s", "type": "function", "function": {"name": "search_docs", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "w", "content": "Sunny."},
                {"role": "tool", "tool_call_id": "s", "content": "doc1: Acme was founded in 1947.|doc2: Acme sells anvils."}]
    _, client = _clients(openai_server, retrieval_tools={
        "search_docs": lambda text: [{"id": part.split(": ")[0], "text": part.split(": ")[1]}
                                     for part in text.split("|")]})
    openai_server.enqueue(ANSWER)
    client.chat.completions.create(model="m", messages=messages)
    (call,) = logged
    assert [(c["id"], c["text"]) for c in call["context"]] == [("doc1", DOCS[0]), ("doc2", DOCS[1])]


def test_a_tool_result_that_is_no_json_list_is_one_chunk():
    assert _read.parse_result("Acme was founded in 1947.") == [{"text": "Acme was founded in 1947."}]
    assert _read.parse_result('{"answer": 1}') == [{"text": '{"answer": 1}'}]
    assert _read.parse_result('["a", {"content": "b", "rank": 7, "score": "high"}]') == [
        {"text": "a", "rank": 1}, {"text": "b", "rank": 7}]
    assert _read.parse_result('["a", 3]') == [{"text": '["a", 3]'}]


# --- streams -----------------------------------------------------------------------------------------


def test_a_stream_is_logged_once_when_read_to_its_end_and_gives_the_sdks_chunks(openai_server, logged):
    raw, client = _clients(openai_server)
    openai_server.enqueue(ANSWER, ANSWER)
    plain = list(_ask(raw, stream=True, stream_options={"include_usage": True}))
    with veralith.context(DOCS):
        stream = _ask(client, stream=True, stream_options={"include_usage": True})
        assert logged == []
        with stream as opened:
            chunks = list(opened)
    assert all(_same(a, b) for a, b in zip(chunks, plain, strict=True)) and len(chunks) == len(plain)
    assert type(chunks[0]) is type(plain[0])
    (call,) = logged
    assert call["response"] == ANSWER and call["metadata"]["partial"] is False


def test_a_stream_stopped_early_is_logged_as_partial_and_one_never_read_is_counted(openai_server, logged, counted):
    _, client = _clients(openai_server)
    openai_server.enqueue(ANSWER, ANSWER)
    with veralith.context(DOCS):
        stream = _ask(client, stream=True)
        read = []
        for chunk in stream:
            read.append(chunk.choices[0].delta.content or "")
            if len(read) == 3:
                break
        stream.close()
        _ask(client, stream=True).close()
    assert [(c["response"], c["metadata"]["partial"]) for c in logged] == [("".join(read), True)]
    assert counted()["skipped"] == {"stream_not_read": 1}


def test_a_dropped_stream_is_logged_with_what_was_read(openai_server, logged):
    _, client = _clients(openai_server)
    openai_server.enqueue(ANSWER)
    with veralith.context(DOCS):
        stream = _ask(client, stream=True)
        first = next(stream).choices[0].delta.content + next(stream).choices[0].delta.content
    del stream
    gc.collect()
    assert [(c["response"], c["metadata"]["partial"]) for c in logged] == [(first, True)]


# --- async ---------------------------------------------------------------------------------------------


def test_the_async_client_on_every_path(openai_server, logged):
    client = _async_client(openai_server, retrieval_tools=["search_docs"])
    openai_server.enqueue(ANSWER, ANSWER)
    _script_loop(openai_server, ANSWER)

    async def main():
        with veralith.context(DOCS):
            reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
            async with await client.chat.completions.create(model="m", stream=True, messages=[
                    {"role": "user", "content": QUESTION}]) as stream:
                streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        messages = [{"role": "user", "content": QUESTION}]
        first = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        messages += [first.choices[0].message, {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(DOCS)}]
        final = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        return reply.choices[0].message.content, streamed, final.choices[0].message.content

    assert asyncio.run(main()) == (ANSWER, ANSWER, ANSWER)
    assert [(c["response"], len(c["context"]), sorted(c["latency_ms"])) for c in logged] == [
        (ANSWER, 2, ["generation"]), (ANSWER, 2, ["generation"]), (ANSWER, 2, ["generation", "retrieval", "total"])]


def test_parse_is_logged_with_the_json_it_returned(openai_server, logged):
    class Year(BaseModel):
        year: int

    _, client = _clients(openai_server)
    openai_server.enqueue({"year": 1947})
    with veralith.context(DOCS):
        parsed = client.chat.completions.parse(model="m", messages=[{"role": "user", "content": QUESTION}],
                                               response_format=Year)
    assert parsed.choices[0].message.parsed == Year(year=1947)
    assert [(c["response"], c["metadata"]["run_name"]) for c in logged] == [('{"year": 1947}',
                                                                              "chat.completions.parse")]


# --- one user call, one trace ------------------------------------------------------------------------


def test_inside_a_traced_function_the_completion_is_handed_to_it(openai_server, logged, counted):
    _, client = _clients(openai_server)
    openai_server.enqueue(ANSWER)

    @veralith.trace
    def answer(question):
        with veralith.context(DOCS):
            return client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}])

    reply = answer(QUESTION)
    assert reply.choices[0].message.content == ANSWER  # the completion object, as the SDK returned it
    (call,) = logged
    assert (call["query"], [c["text"] for c in call["context"]], call["response"]) == (QUESTION, DOCS, ANSWER)
    assert call["latency_ms"]["generation"] > 0 and "total" in call["latency_ms"]
    assert counted() == {"logged": 0, "ignored": 0, "skipped": {"inside_veralith_scope": 1}}


def test_a_traced_call_goes_to_the_wrapped_clients_knowledge_base_unless_it_names_its_own(openai_server, logged):
    _, client = _clients(openai_server, knowledge_base="museum", run="canary")
    openai_server.enqueue(ANSWER)
    openai_server.enqueue(ANSWER)

    def ask(question):
        with veralith.context(DOCS):
            return client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}])

    assert where_traced_calls_go(logged, ask, QUESTION) == [("museum", "canary"), ("kiosk", "canary")]


# --- failures and the wrap itself --------------------------------------------------------------------


def test_the_sdks_errors_reach_the_app_unchanged_and_nothing_is_logged(openai_server, logged):
    _, client = _clients(openai_server)
    openai_server.enqueue(Reply.error(500))
    with veralith.context(DOCS), pytest.raises(openai.InternalServerError):
        _ask(client)
    assert logged == []


def test_a_failure_inside_veralith_never_reaches_the_app(openai_server, logged, counted, monkeypatch):
    raw, client = _clients(openai_server)
    monkeypatch.setattr(_read, "answer", lambda completion: 1 / 0)
    openai_server.enqueue(ANSWER, ANSWER, ANSWER)
    with veralith.context(DOCS), pytest.warns(veralith.adapters.openai.VeralithAdapterWarning, match="division"):
        assert _same(_ask(client), _ask(raw))
    monkeypatch.undo()

    import veralith.sdk.log as sdk_log

    monkeypatch.setattr(sdk_log, "log", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    monkeypatch.setattr(_calls.counters, "_warned", set())
    with veralith.context(DOCS), pytest.warns(veralith.adapters.openai.VeralithAdapterWarning, match="disk full"):
        assert _ask(client).choices[0].message.content == ANSWER
    assert counted()["skipped"] == {"adapter_error": 1, "log_failed": 1}


def test_wrap_leaves_the_client_as_it_was_and_checks_its_arguments(openai_server):
    raw = openai.OpenAI(base_url=openai_server.base_url, api_key="test")
    assert raw.chat.completions  # the SDK builds its resources on first use; after that, nothing may change
    before = dict(vars(raw))
    client = wrap(raw, retrieval_tools=["search_docs"])
    assert vars(raw) == before and type(raw) is openai.OpenAI and "veralith" not in type(raw.chat.completions).__module__
    assert unwrap(client) is raw and unwrap(raw) is raw and unwrap(wrap(client)) is raw
    assert client.base_url == raw.base_url and unwrap(client.with_options(timeout=5)) is not raw
    assert client.models.list().data[0].id == "fake-model"  # everything else is forwarded
    with pytest.raises(TypeError, match="OpenAI client"):
        wrap(object())
    with pytest.raises(TypeError, match="list of tool names"):
        wrap(raw, retrieval_tools="search_docs")
    with pytest.raises(TypeError, match="must be a function"):
        wrap(raw, retrieval_tools={"search_docs": "parse"})
    with pytest.raises(ValueError, match="JSON values"):
        wrap(raw, metadata={"x": object()})


def test_a_wrapped_completion_is_stored_with_its_chunks_and_latency(openai_server):
    from veralith.sdk.log import shutdown
    from veralith.store import open_store

    _, client = _clients(openai_server)
    openai_server.enqueue(ANSWER)
    with veralith.context([{"text": DOCS[0], "id": "d1", "rank": 1, "score": 0.8}]):
        _ask(client)
    shutdown(wait=True)
    (row,) = open_store().read(ops.list_traces)
    store = open_store()
    assert [(c.id, c.rank, c.score) for c in store.read(ops.load_input, row["id"]).context] == [("d1", 1, 0.8)]
    assert set(store.read(ops.trace_info, row["id"]).app_latency_ms) == {"generation"}
