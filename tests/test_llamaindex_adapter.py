"""The LlamaIndex adapter, exercised with real llama-index-core, its MockLLM and MockEmbedding (no network).

Every call path (query, aquery, streaming and async streaming queries, chat, achat, stream_chat,
astream_chat) gives one trace with the same metadata shape, the app's return values are the ones it
gets without the adapter, and nothing that goes wrong inside Veralith reaches the app.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import sys
import threading
import warnings

import pytest

pytest.importorskip("llama_index.core")

from adapter_support import counter_delta, record_logs, shape, where_traced_calls_go  # noqa: E402
from llama_index.core import Document, Settings, VectorStoreIndex  # noqa: E402
from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.embeddings import MockEmbedding  # noqa: E402
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.schema import NodeWithScore, TextNode  # noqa: E402

import veralith  # noqa: E402
import veralith.adapters.llamaindex as adapter  # noqa: E402
from veralith.adapters.llamaindex import _handlers, _read  # noqa: E402
from veralith.store import ops

QUESTION = "When was Acme founded?"
TEXTS = ["Acme was founded in 1947 by Ruth Calder.", "Acme sells anvils and rockets.", "Acme ships worldwide."]


class KeywordRetriever(BaseRetriever):
    """Returns the nodes sharing a word with the query, best first, scored by the words shared."""

    def __init__(self, texts: list[str] = TEXTS, k: int = 2, fail: bool = False) -> None:
        super().__init__()
        self._nodes = [TextNode(text=t, id_=f"n{i}", metadata={"source": f"doc{i}.md"}) for i, t in enumerate(texts)]
        self._k, self._fail = k, fail

    def _retrieve(self, query_bundle):
        if self._fail:
            raise RuntimeError("index offline")
        words = set(query_bundle.query_str.lower().replace("?", "").split())
        scored = [(len(words & set(n.text.lower().split())), n) for n in self._nodes]
        best = sorted((s for s in scored if s[0]), key=lambda s: -s[0])[: self._k]
        return [NodeWithScore(node=n, score=float(s)) for s, n in best]


@pytest.fixture(autouse=True)
def _llamaindex_settings():
    Settings.llm = MockLLM(max_tokens=6)
    Settings.embed_model = MockEmbedding(embed_dim=8)
    yield
    adapter.uninstall()


@pytest.fixture
def logged(monkeypatch):
    monkeypatch.setattr(_handlers.counters, "_warned", set())
    return record_logs(monkeypatch)


@pytest.fixture
def counted():
    return counter_delta(adapter.stats)


def _engine(**kwargs):
    return RetrieverQueryEngine.from_args(KeywordRetriever(), **kwargs)


def _chat_engine(mode: str = "context"):
    index = VectorStoreIndex.from_documents([Document(text=t, metadata={"source": f"doc{i}.md"})
                                             for i, t in enumerate(TEXTS)])
    return index.as_chat_engine(chat_mode=mode)


# --- query engines ---------------------------------------------------------------------------------


def test_a_query_gives_one_trace_with_ranked_scored_nodes_and_the_shape_of_every_adapter(logged, counted):
    adapter.install(knowledge_base="manuals", metadata={"app": "support"}, run="nightly")
    response = _engine().query(QUESTION)
    (call,) = logged
    assert (call["query"], call["response"], call["knowledge_base"], call["run"]) == (
        QUESTION, str(response), "manuals", "nightly")
    assert [(c["id"], c["text"], c["rank"], c["score"], c["source"]) for c in call["context"]] == \
        [("n0", TEXTS[0], 1, 3.0, "doc0.md"), ("n1", TEXTS[1], 2, 1.0, "doc1.md")]
    metadata = call["metadata"]
    assert set(metadata) == shape("llamaindex") | {"app"}
    assert (metadata["source"], metadata["chain"], metadata["run_name"], metadata["partial"]) == (
        "llamaindex", "RetrieverQueryEngine", "query", False)
    assert metadata["run_id"].startswith("RetrieverQueryEngine.query-") and metadata["app"] == "support"
    latency = call["latency_ms"]
    assert set(latency) == {"total", "retrieval", "generation"}
    assert latency["total"] >= latency["retrieval"] + latency["generation"] > 0
    assert counted() == {"logged": 1, "ignored": 0, "skipped": {}}


def test_the_app_gets_what_it_gets_without_the_adapter(logged):
    def outcome(response):
        return (str(response), [(n.node.node_id, n.score) for n in response.source_nodes], response.metadata)

    plain = outcome(_engine().query(QUESTION))
    adapter.install()
    assert outcome(_engine().query(QUESTION)) == plain
    assert outcome(asyncio.run(_engine().aquery(QUESTION))) == plain
    streamed = _engine(streaming=True).query(QUESTION)
    assert "".join(streamed.response_gen) == plain[0]
    assert len(logged) == 3


def test_aquery_gives_one_trace(logged):
    adapter.install()
    response = asyncio.run(_engine().aquery(QUESTION))
    assert [(c["query"], c["response"], c["metadata"]["run_name"]) for c in logged] == [
        (QUESTION, str(response), "aquery")]


def test_a_streamed_answer_is_logged_once_when_its_model_ends_with_what_the_consumer_got(logged):
    adapter.install()
    response = _engine(streaming=True).query(QUESTION)
    assert logged == []  # nothing generated yet
    tokens = list(response.response_gen)
    (call,) = logged
    assert call["response"] == "".join(tokens) and call["metadata"]["partial"] is False
    assert [c["id"] for c in call["context"]] == ["n0", "n1"] and call["latency_ms"]["total"] > 0


def test_an_async_stream_is_logged_once(logged):
    adapter.install()

    async def consume():
        response = await _engine(streaming=True, use_async=True).aquery(QUESTION)
        return [token async for token in response.async_response_gen()]

    tokens = asyncio.run(consume())
    assert [(c["response"], c["metadata"]["run_name"], c["metadata"]["partial"]) for c in logged] == [
        ("".join(tokens), "aquery", False)]


def test_a_stream_stopped_early_is_logged_as_partial_with_what_was_read(logged):
    adapter.install()
    response = _engine(streaming=True).query(QUESTION)
    read = []
    for token in response.response_gen:
        read.append(token)
        if len(read) == 2:
            break
    del response
    gc.collect()
    assert [(c["response"], c["metadata"]["partial"]) for c in logged] == [("".join(read), True)]


def test_a_stream_never_read_is_counted_not_logged(logged, counted):
    adapter.install()
    response = _engine(streaming=True).query(QUESTION)
    del response
    gc.collect()
    assert logged == [] and counted()["skipped"] == {"stream_not_read": 1}


def test_concurrent_queries_in_threads_each_get_their_own_trace(logged):
    adapter.install()
    questions = [f"When was Acme founded? ({i})" for i in range(6)]
    engine = _engine()
    workers = [threading.Thread(target=engine.query, args=(q,)) for q in questions]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(c["query"] for c in logged) == sorted(questions)
    assert len({c["metadata"]["run_id"] for c in logged}) == 6


# --- chat engines ----------------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["chat", "achat", "stream_chat", "astream_chat"])
def test_every_chat_call_path_gives_one_trace(logged, call):
    adapter.install()
    engine = _chat_engine()

    async def run_async():
        if call == "achat":
            return (await engine.achat(QUESTION)).response
        reply = await engine.astream_chat(QUESTION)
        return "".join([token async for token in reply.async_response_gen()])

    if call == "chat":
        answer = engine.chat(QUESTION).response
    elif call == "stream_chat":
        answer = "".join(engine.stream_chat(QUESTION).response_gen)
    else:
        answer = asyncio.run(run_async())
    (trace,) = logged
    assert (trace["query"], trace["metadata"]["chain"], trace["metadata"]["run_name"]) == (
        QUESTION, "ContextChatEngine", call)
    assert trace["response"].strip() == answer.strip() and len(trace["context"]) == 2
    assert set(trace["metadata"]) == shape("llamaindex")


def test_a_condensed_follow_up_is_judged_on_the_standalone_question(logged):
    adapter.install()
    engine = _chat_engine("condense_plus_context")
    engine.chat(QUESTION)
    engine.chat("And what does it sell?")
    first, follow_up = logged
    assert first["query"] == QUESTION and "input" not in first["metadata"]
    # MockLLM's condensed question is its own text; the retriever was asked that, so it is the query.
    assert follow_up["query"] != "And what does it sell?"
    assert follow_up["metadata"]["input"] == "And what does it sell?"
    assert [turn["role"] for turn in follow_up["metadata"]["chat_history"]] == ["user", "assistant"]


# --- one user call, one trace ----------------------------------------------------------------------


def test_a_traced_function_returning_the_response_object_is_logged_once(logged, counted):
    adapter.install()
    engine = _engine()

    @veralith.trace
    def answer(question):
        return engine.query(question)  # a LlamaIndex Response: the caller gets it back untouched

    response = answer(QUESTION)
    assert type(response).__name__ == "Response"
    (call,) = logged
    assert (call["query"], call["response"], [c["text"] for c in call["context"]]) == (
        QUESTION, str(response), TEXTS[:2])
    assert "metadata" not in call or call["metadata"] == {}
    assert {"total", "retrieval", "generation"} <= set(call["latency_ms"])
    assert counted() == {"logged": 0, "ignored": 0, "skipped": {"inside_veralith_scope": 1}}


def test_a_traced_call_goes_to_the_adapters_knowledge_base_and_run_unless_it_names_its_own(logged):
    adapter.install(knowledge_base="museum", run="canary")
    engine = _engine()
    assert where_traced_calls_go(logged, engine.query, QUESTION) == [("museum", "canary"), ("kiosk", "canary")]


def test_a_retriever_used_on_its_own_inside_a_traced_call_hands_over_its_nodes(logged):
    adapter.install()
    retriever = KeywordRetriever()

    @veralith.trace
    async def answer(question):
        nodes = await retriever.aretrieve(question)
        return f"{len(nodes)} passages"

    assert asyncio.run(answer(QUESTION)) == "2 passages"
    assert [[(c["text"], c["rank"], c["score"]) for c in call["context"]] for call in logged] == [
        [(TEXTS[0], 1, 3.0), (TEXTS[1], 2, 1.0)]]
    retriever.retrieve(QUESTION)  # outside a traced call a retriever alone is no answer
    assert len(logged) == 1


# --- failures --------------------------------------------------------------------------------------


def test_a_failing_call_raises_as_before_and_logs_nothing(logged, counted):
    adapter.install()
    engine = RetrieverQueryEngine.from_args(KeywordRetriever(fail=True))
    with pytest.raises(RuntimeError, match="index offline"):
        engine.query(QUESTION)
    assert logged == [] and counted()["skipped"] == {"error": 1}


def test_a_failure_inside_veralith_never_reaches_the_app(logged, counted, monkeypatch):
    adapter.install()
    plain, chunks = str(_engine().query(QUESTION)), _read.chunks
    monkeypatch.setattr(_read, "chunks", lambda nodes: 1 / 0)
    with pytest.warns(veralith.adapters.llamaindex.VeralithAdapterWarning, match="division by zero"):
        assert str(_engine().query(QUESTION)) == plain
    assert len(logged) == 1 and counted()["skipped"] == {"adapter_error": 1}

    import veralith.sdk.log as sdk_log

    def refuse(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(_read, "chunks", chunks)
    monkeypatch.setattr(sdk_log, "log", refuse)
    monkeypatch.setattr(_handlers.counters, "_warned", set())
    with pytest.warns(veralith.adapters.llamaindex.VeralithAdapterWarning, match="disk full"):
        assert str(_engine().query(QUESTION)) == plain
    assert counted()["skipped"] == {"adapter_error": 1, "log_failed": 1}


def test_a_query_that_retrieves_nothing_is_ignored(logged, counted):
    from llama_index.core.query_engine import CustomQueryEngine

    class Echo(CustomQueryEngine):
        def custom_query(self, query_str: str) -> str:
            return query_str

    adapter.install()
    assert str(Echo().query(QUESTION)) == QUESTION
    assert logged == [] and counted() == {"logged": 0, "ignored": 1, "skipped": {}}


# --- install -----------------------------------------------------------------------------------------


def test_install_registers_once_and_uninstall_removes_the_handlers(logged):
    from llama_index.core.instrumentation import get_dispatcher

    root = get_dispatcher()
    before = (len(root.span_handlers), len(root.event_handlers))
    adapter.install()
    adapter.install(knowledge_base="other")  # replaces the options only
    assert (len(root.span_handlers), len(root.event_handlers)) == (before[0] + 1, before[1] + 1)
    assert adapter.is_installed()
    _engine().query(QUESTION)
    adapter.uninstall()
    assert (len(root.span_handlers), len(root.event_handlers)) == before and not adapter.is_installed()
    _engine().query(QUESTION)
    assert [c["knowledge_base"] for c in logged] == ["other"]


def test_bad_options_and_a_missing_llamaindex_say_what_to_do(monkeypatch):
    with pytest.raises(ValueError, match="JSON values"):
        adapter.install(metadata={"when": object()})
    with pytest.raises(ValueError, match="run must be"):
        adapter.install(run=" ")
    monkeypatch.setitem(sys.modules, "llama_index.core.instrumentation", None)
    with pytest.raises(ImportError, match=r'pip install "veralith-rag\[llamaindex\]"'):
        adapter.install()
    assert not adapter.is_installed()


def test_a_logged_query_is_stored_with_its_ranks_scores_and_timings():
    from veralith.sdk.log import shutdown
    from veralith.store import open_store

    adapter.install()
    with warnings.catch_warnings():
        warnings.simplefilter("error", veralith.adapters.llamaindex.VeralithAdapterWarning)
        _engine().query(QUESTION)
    shutdown(wait=True)
    (row,) = open_store().read(ops.list_traces)
    store = open_store()
    stored = store.read(ops.load_result, row["id"])
    assert [(c.id, c.rank, c.score, c.source) for c in stored.context] == [("n0", 1, 3.0, "doc0.md"),
                                                                           ("n1", 2, 1.0, "doc1.md")]
    assert set(store.read(ops.trace_info, row["id"]).app_latency_ms) == {"total", "retrieval", "generation"}
    assert importlib.import_module("veralith.adapters.llamaindex").stats()["logged"] >= 1
