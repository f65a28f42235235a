"""The LangChain adapter, exercised with LangChain's own fake models and a small real retriever.

Runs against LangChain 1.x (langchain-classic) and 0.3 (`langchain.chains`); the LangGraph tests
skip where langgraph is not installed.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import subprocess
import sys
import threading
import uuid
import warnings

import pytest

pytest.importorskip("langchain_core")


def _chains(module: str = ""):
    """A module of the legacy chains: langchain_classic in LangChain 1.x, langchain in 0.3."""
    for package in ("langchain_classic", "langchain"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return importlib.import_module(f"{package}.chains{module}")
        except ImportError:
            continue
    pytest.skip("neither langchain-classic nor LangChain 0.3 is installed", allow_module_level=True)


_legacy = _chains()
RetrievalQA, RetrievalQAWithSourcesChain = _legacy.RetrievalQA, _legacy.RetrievalQAWithSourcesChain
ConversationalRetrievalChain = _legacy.ConversationalRetrievalChain
create_retrieval_chain, create_history_aware_retriever = _legacy.create_retrieval_chain, _legacy.create_history_aware_retriever
create_stuff_documents_chain = _chains(".combine_documents").create_stuff_documents_chain
Chain = _chains(".base").Chain

from adapter_support import counter_delta, record_logs, where_traced_calls_go  # noqa: E402
from langchain_core.callbacks import CallbackManagerForRetrieverRun  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models.fake import FakeListLLM  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough  # noqa: E402

import veralith  # noqa: E402
import veralith.adapters.langchain as adapter  # noqa: E402
from veralith.adapters.langchain import _state  # noqa: E402
from veralith.store import ops  # noqa: E402

DOCS = [
    Document(page_content="The Orbitra 3 weather station runs for 14 months on two AA batteries.",
             metadata={"source": "battery.md"}),
    Document(page_content="The Orbitra 3 measures wind speed up to 160 km/h.", metadata={"source": "wind.md"}),
    Document(page_content="Firmware updates install overnight over Wi-Fi.", metadata={"source": "firmware.md"}),
]
QUESTION = "How long does the Orbitra 3 battery last?"
ANSWER = "The Orbitra 3 runs for 14 months on two AA batteries."
SHAPE = {"source", "chain", "run_id", "run_name", "tags", "langchain_metadata", "partial"}


class KeywordRetriever(BaseRetriever):
    """Returns the documents sharing a word with the query, best first."""

    docs: list[Document]
    k: int = 2

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        words = set(query.lower().replace("?", "").split())
        scored = [(-len(words & set(d.page_content.lower().split())), i) for i, d in enumerate(self.docs)]
        return [self.docs[i] for score, i in sorted(scored)[: self.k] if score]


@pytest.fixture
def logged(monkeypatch):
    """Record what the adapter (and @trace) hand to veralith.log() instead of evaluating it."""
    monkeypatch.setattr(_state.counters, "_warned", set())
    return record_logs(monkeypatch)


@pytest.fixture
def counted():
    """stats() changes since the test started."""
    return counter_delta(adapter.stats)


@pytest.fixture(autouse=True)
def _uninstalled():
    yield
    adapter.uninstall()


def _retrieval_qa(answer=ANSWER, **kwargs):
    return RetrievalQA.from_chain_type(llm=FakeListLLM(responses=[answer]), retriever=KeywordRetriever(docs=DOCS),
                                       **kwargs)


def _with_sources():
    llm = FakeListLLM(responses=[f"{ANSWER}\nSOURCES: battery.md"])
    return RetrievalQAWithSourcesChain.from_chain_type(llm=llm, retriever=KeywordRetriever(docs=DOCS))


def _lcel_chain(retriever=None, answer=ANSWER, *, parse=True):
    prompt = ChatPromptTemplate.from_messages([("system", "Answer from the context:\n{context}"),
                                               ("human", "{question}")])
    docs_to_text = RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs))
    chain = ({"context": (retriever or KeywordRetriever(docs=DOCS)) | docs_to_text, "question": RunnablePassthrough()}
             | prompt | FakeListChatModel(responses=[answer]))
    return chain | StrOutputParser() if parse else chain


def _retrieval_chain():
    prompt = ChatPromptTemplate.from_messages([("system", "Context:\n{context}"), ("human", "{input}")])
    combine = create_stuff_documents_chain(FakeListChatModel(responses=[ANSWER]), prompt)
    return create_retrieval_chain(KeywordRetriever(docs=DOCS), combine)


def _message_graph(*, tool: bool):
    """StateGraph(MessagesState): a model that calls a retriever tool (ToolNode), or a retriever node."""
    graph_module = pytest.importorskip("langgraph.graph")
    from langgraph.graph import END, START, MessagesState, StateGraph

    retriever = KeywordRetriever(docs=DOCS)
    model = FakeListChatModel(responses=[ANSWER])
    graph = StateGraph(MessagesState)
    if tool:
        from langchain_core.tools import create_retriever_tool
        from langgraph.prebuilt import ToolNode

        search = create_retriever_tool(retriever, "search_manual", "Search the Orbitra manual.")

        def agent(state):
            last = state["messages"][-1]
            if last.type == "human":  # what a tool-calling model would reply first
                call = {"name": "search_manual", "args": {"query": last.content}, "id": "call-1"}
                return {"messages": [AIMessage("", tool_calls=[call])]}
            return {"messages": [model.invoke(state["messages"])]}

        graph.add_node("agent", agent)
        graph.add_node("tools", ToolNode([search]))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", lambda s: "tools" if s["messages"][-1].tool_calls else END,
                                    ["tools", END])
        graph.add_edge("tools", "agent")
    else:
        def retrieve(state):
            docs = retriever.invoke(state["messages"][-1].content)
            return {"messages": [AIMessage("Context:\n" + "\n".join(d.page_content for d in docs))]}

        def generate(state):
            return {"messages": [model.invoke(state["messages"])]}

        graph.add_node("retrieve", retrieve)
        graph.add_node("generate", generate)
        graph.add_edge(graph_module.START, "retrieve")
        graph.add_edge("retrieve", "generate")
        graph.add_edge("generate", END)
    return graph.compile()


# --- one metadata shape for every call path (issue 13.1) ----------------------------------------

CONFIG = {"run_name": "support-bot", "tags": ["prod"], "metadata": {"user": "u-1"}}


def _arun(coro):
    return asyncio.run(coro)


# (id, chain factory, call, input, expected `chain`, expected `run_name`)
CALL_PATHS = [
    ("qa-invoke", _retrieval_qa, lambda c, x: c.invoke(x, config=CONFIG), {"query": QUESTION}, "support-bot", "support-bot"),
    ("qa-batch", _retrieval_qa, lambda c, x: c.batch([x], config=CONFIG), {"query": QUESTION}, "support-bot", "support-bot"),
    ("qa-ainvoke", _retrieval_qa, lambda c, x: _arun(c.ainvoke(x, config=CONFIG)), {"query": QUESTION}, "support-bot",
     "support-bot"),
    ("qa-abatch", _retrieval_qa, lambda c, x: _arun(c.abatch([x], config=CONFIG)), {"query": QUESTION}, "support-bot",
     "support-bot"),
    ("qa-stream", _retrieval_qa, lambda c, x: list(c.stream(x, config=CONFIG)), {"query": QUESTION}, "support-bot",
     "support-bot"),
    ("qa-call", _retrieval_qa, lambda c, x: c(x, tags=["prod"], metadata={"user": "u-1"}, run_name="support-bot"),
     {"query": QUESTION}, "support-bot", "support-bot"),
    ("qa-run", _retrieval_qa, lambda c, x: c.run(x, tags=["prod"], metadata={"user": "u-1"}), QUESTION, "RetrievalQA",
     "RetrievalQA"),
    ("qa-arun", _retrieval_qa, lambda c, x: _arun(c.arun(x, tags=["prod"], metadata={"user": "u-1"})), QUESTION,
     "RetrievalQA", "RetrievalQA"),
    ("sources-invoke", _with_sources, lambda c, x: c.invoke(x, config=CONFIG), {"question": QUESTION}, "support-bot",
     "support-bot"),
    ("sources-ainvoke", _with_sources, lambda c, x: _arun(c.ainvoke(x, config=CONFIG)), {"question": QUESTION},
     "support-bot", "support-bot"),
    ("lcel-invoke", _lcel_chain, lambda c, x: c.invoke(x, config=CONFIG), QUESTION, "support-bot", "support-bot"),
    ("lcel-batch", _lcel_chain, lambda c, x: c.batch([x], config=CONFIG), QUESTION, "support-bot", "support-bot"),
    ("lcel-stream", _lcel_chain, lambda c, x: "".join(c.stream(x, config=CONFIG)), QUESTION, "support-bot",
     "support-bot"),
    ("lcel-ainvoke", _lcel_chain, lambda c, x: _arun(c.ainvoke(x, config=CONFIG)), QUESTION, "support-bot",
     "support-bot"),
    ("lcel-astream", _lcel_chain, lambda c, x: _arun(_join(c.astream(x, config=CONFIG))), QUESTION, "support-bot",
     "support-bot"),
    ("retrieval-chain", _retrieval_chain, lambda c, x: c.invoke(x, config=CONFIG), {"input": QUESTION}, "support-bot",
     "support-bot"),
    ("graph-tool", lambda: _message_graph(tool=True), lambda c, x: c.invoke(x, config=CONFIG),
     {"messages": [("user", QUESTION)]}, "support-bot", "support-bot"),
    ("graph-node", lambda: _message_graph(tool=False), lambda c, x: c.invoke(x, config=CONFIG),
     {"messages": [HumanMessage(QUESTION)]}, "support-bot", "support-bot"),
    ("graph-stream", lambda: _message_graph(tool=True), lambda c, x: list(c.stream(x, config=CONFIG)),
     {"messages": [("user", QUESTION)]}, "support-bot", "support-bot"),
    ("graph-ainvoke", lambda: _message_graph(tool=True), lambda c, x: _arun(c.ainvoke(x, config=CONFIG)),
     {"messages": [("user", QUESTION)]}, "support-bot", "support-bot"),
]


async def _join(stream):
    return "".join([part async for part in stream])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # __call__, run and arun are deprecated, still used
@pytest.mark.parametrize(("factory", "call", "value", "chain", "run_name"), [p[1:] for p in CALL_PATHS],
                         ids=[p[0] for p in CALL_PATHS])
def test_every_call_path_logs_one_trace_with_the_same_metadata_shape(logged, factory, call, value, chain, run_name):
    adapter.install(metadata={"app": "orbitra-help"})
    call(factory(), value)
    assert len(logged) == 1, logged
    [trace] = logged
    assert trace["query"] == QUESTION and trace["response"].strip() == ANSWER
    assert [c["source"] for c in trace["context"]] == ["battery.md", "wind.md"]
    metadata = trace["metadata"]
    assert SHAPE <= set(metadata) <= SHAPE | {"app", "sources"}
    assert metadata["source"] == "langchain" and metadata["app"] == "orbitra-help" and metadata["partial"] is False
    assert (metadata["chain"], metadata["run_name"]) == (chain, run_name)
    assert uuid.UUID(metadata["run_id"])
    assert "prod" in metadata["tags"] and metadata["langchain_metadata"]["user"] == "u-1"
    assert ("sources" in metadata) == (factory is _with_sources)
    if factory is _with_sources:
        assert metadata["sources"] == "battery.md"


def test_run_id_is_the_outermost_runs_and_the_class_name_is_the_chain_without_run_name(logged):
    adapter.install()
    run_id = uuid.uuid4()
    _retrieval_qa().invoke({"query": QUESTION}, config={"run_id": run_id})
    _lcel_chain().invoke(QUESTION)
    assert logged[0]["metadata"]["run_id"] == str(run_id)
    assert [c["metadata"]["chain"] for c in logged] == ["RetrievalQA", "RunnableSequence"]
    assert [c["metadata"]["tags"] for c in logged] == [[], []]


def test_install_passes_run_to_log_only_when_given(logged):
    adapter.install(knowledge_base="orbitra")
    _lcel_chain().invoke(QUESTION)
    assert "run" not in logged[0] and logged[0]["knowledge_base"] == "orbitra"
    adapter.install(run="nightly-eval")
    _lcel_chain().invoke(QUESTION)
    assert logged[1]["run"] == "nightly-eval" and logged[1]["knowledge_base"] == "default"
    with pytest.raises(ValueError, match="run"):
        adapter.install(run=" ")
    with pytest.raises(ValueError, match="JSON"):
        adapter.install(metadata={"when": object()})


# --- the answer of a nested retrieval chain (13.2) --------------------------------------------------


def test_a_retrieval_qa_nested_in_lcel_logs_its_own_answer_sync_and_async(logged):
    adapter.install()
    qa = _retrieval_qa()
    # The outer step rewrites the answer; the trace's response is what the retrieval step fed.
    outer = RunnableLambda(lambda q, config: "Answer: " + qa.invoke({"query": q}, config=config)["result"])

    async def aouter(q, config):
        return "Answer: " + (await qa.ainvoke({"query": q}, config=config))["result"]

    assert outer.invoke(QUESTION) == "Answer: " + ANSWER
    qa = _retrieval_qa()
    assert asyncio.run(RunnableLambda(aouter).ainvoke(QUESTION)) == "Answer: " + ANSWER
    assert [(c["query"], c["response"], c["metadata"]["chain"], len(c["context"])) for c in logged] == \
        [(QUESTION, ANSWER, "RetrievalQA", 2)] * 2
    # The run is the outer call's: its run id and name, not the nested chain's.
    assert [c["metadata"]["run_name"] for c in logged] == ["RunnableLambda", "aouter"]


# --- shapes that were not logged, and counting what is not (13.3) --------------------------------


@pytest.mark.parametrize("tool", [True, False], ids=["retriever-tool", "retriever-node"])
def test_a_message_graph_logs_the_last_human_message_and_the_final_ai_message(logged, tool):
    adapter.install()
    graph = _message_graph(tool=tool)
    history = [HumanMessage("Hi"), AIMessage("Hello! Ask me about the Orbitra 3."), HumanMessage(QUESTION)]
    out = graph.invoke({"messages": history})
    assert out["messages"][-1].content == ANSWER
    [trace] = logged
    assert (trace["query"], trace["response"]) == (QUESTION, ANSWER)
    assert [c["source"] for c in trace["context"]] == ["battery.md", "wind.md"]
    assert trace["metadata"]["chain"] == "LangGraph"


@pytest.mark.parametrize("legacy", [False, True], ids=["lcel-branches", "retrieval-qa-branches"])
def test_each_branch_of_a_parallel_map_of_rag_chains_is_its_own_trace(logged, legacy):
    adapter.install()
    other = "It measures wind speed up to 160 km/h."
    if legacy:
        parallel = RunnableParallel(first=_retrieval_qa(), second=_retrieval_qa(answer=other))
        result = parallel.invoke({"query": QUESTION})
        assert (result["first"]["result"], result["second"]["result"]) == (ANSWER, other)
    else:
        parallel = RunnableParallel(first=_lcel_chain(), second=_lcel_chain(answer=other))
        assert parallel.invoke(QUESTION) == {"first": ANSWER, "second": other}
    assert sorted((c["metadata"]["branch"], c["response"], c["query"], len(c["context"])) for c in logged) == \
        [("first", ANSWER, QUESTION, 2), ("second", other, QUESTION, 2)]
    assert logged[0]["metadata"]["run_id"] == logged[1]["metadata"]["run_id"]  # one call, two answers


def test_skipped_runs_are_counted_though_the_warning_is_shown_once(logged, counted):
    adapter.install()
    chain = {"docs": KeywordRetriever(docs=DOCS), "q": RunnablePassthrough()} | RunnableLambda(lambda x: 42)
    with pytest.warns(adapter.VeralithAdapterWarning, match=r"int.*stats\(\)"):
        assert chain.invoke(QUESTION) == 42
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second miss is not warned about again ...
        chain.invoke(QUESTION)
    ChatPromptTemplate.from_messages([("human", "{q}")]).invoke({"q": "no retrieval here"})
    assert logged == []
    assert counted() == {"logged": 0, "ignored": 1, "skipped": {"no_answer": 2}}  # ... but it is counted


def test_a_failing_chain_raises_as_before_and_is_counted(logged, counted):
    adapter.install()

    class Broken(KeywordRetriever):
        def _get_relevant_documents(self, query, *, run_manager):
            raise RuntimeError("index offline")

    chain = RetrievalQA.from_chain_type(llm=FakeListLLM(responses=[ANSWER]), retriever=Broken(docs=DOCS))
    with pytest.raises(RuntimeError, match="index offline"):
        chain.invoke({"query": QUESTION})
    assert logged == []
    assert counted()["logged"] == 0


# --- one user call, one trace (13.4) -----------------------------------------------------------------


def test_a_traced_function_calling_a_logged_chain_gives_one_trace(logged, counted):
    adapter.install()
    chain = _lcel_chain()

    @veralith.trace
    def answer(question):
        text = chain.invoke(question)
        return "Traced: " + text, [d.page_content for d in DOCS[:1]]

    assert answer(QUESTION) == "Traced: " + ANSWER
    assert [(c["response"], len(c["context"])) for c in logged] == [("Traced: " + ANSWER, 1)]
    assert counted() == {"logged": 0, "ignored": 0, "skipped": {"inside_veralith_scope": 1}}


def test_a_traced_call_goes_to_the_adapters_knowledge_base_unless_it_names_its_own(logged):
    adapter.install(knowledge_base="museum", run="canary")
    chain = _lcel_chain()
    assert where_traced_calls_go(logged, chain.invoke, QUESTION) == [("museum", "canary"), ("kiosk", "canary")]


def test_a_traced_generator_streaming_a_logged_chain_gives_one_trace(logged, counted):
    from veralith.sdk.trace import TraceContext

    adapter.install()

    @veralith.trace
    def stream_answer(question):
        yield TraceContext([DOCS[0].page_content])
        yield from _lcel_chain().stream(question)

    assert "".join(stream_answer(QUESTION)) == ANSWER
    assert [(c["response"], len(c["context"]), c["metadata"]) for c in logged] == [(ANSWER, 1, {})]
    assert counted()["skipped"] == {"inside_veralith_scope": 1}


def test_the_outer_scope_holds_across_asyncio_tasks_and_copied_context_threads(logged):
    adapter.install()

    @veralith.trace
    async def answer(question):
        # Tasks copy the context of the task that creates them.
        await asyncio.gather(_lcel_chain().ainvoke(question), _retrieval_qa().ainvoke({"query": question}))
        return "outer", ["chunk"]

    @veralith.trace
    def threaded(question):
        context = contextvars.copy_context()
        worker = threading.Thread(target=context.run, args=(_lcel_chain().invoke, question))
        worker.start()
        worker.join()
        return "outer", ["chunk"]

    asyncio.run(answer(QUESTION))
    threaded(QUESTION)
    assert [c["response"] for c in logged] == ["outer", "outer"]


def test_a_chain_outside_any_scope_still_logs_after_a_traced_call(logged):
    adapter.install()

    @veralith.trace
    def answer(question):
        return _lcel_chain().invoke(question), []

    answer(QUESTION)
    _lcel_chain().invoke(QUESTION)
    assert [c["metadata"].get("source") for c in logged] == [None, "langchain"]


def test_a_traced_function_returning_the_chains_bare_answer_is_logged_with_its_documents(logged, counted):
    adapter.install()
    chain = _lcel_chain()

    @veralith.trace
    def answer(question):
        return chain.invoke(question)  # a bare string: the documents come from the adapter

    assert answer(QUESTION) == ANSWER
    (call,) = logged
    assert (call["query"], call["response"]) == (QUESTION, ANSWER)
    assert [(c["text"], c["rank"]) for c in call["context"]] == [(DOCS[0].page_content, 1),
                                                                  (DOCS[1].page_content, 2)]
    assert set(call["latency_ms"]) == {"total", "retrieval", "generation"}
    assert call["latency_ms"]["total"] >= call["latency_ms"]["retrieval"]
    assert counted() == {"logged": 0, "ignored": 0, "skipped": {"inside_veralith_scope": 1}}


def test_a_traced_function_returning_a_message_is_logged_with_the_models_answer(logged):
    adapter.install()
    pipeline = _lcel_chain(parse=False)  # ends with the model: returns its AIMessage

    @veralith.trace
    async def answer(question):
        return await pipeline.ainvoke(question)  # an AIMessage, handed back untouched

    message = asyncio.run(answer(QUESTION))
    assert isinstance(message, AIMessage) and message.content == ANSWER
    assert [(c["response"], len(c["context"])) for c in logged] == [(ANSWER, 2)]


def test_a_retriever_used_on_its_own_inside_a_traced_call_hands_over_its_documents(logged, counted):
    adapter.install()
    retriever = KeywordRetriever(docs=DOCS)

    @veralith.trace
    def answer(question):
        docs = retriever.invoke(question)
        return f"Found {len(docs)} passages."

    assert answer(QUESTION) == "Found 2 passages."
    assert [[c["text"] for c in call["context"]] for call in logged] == [[d.page_content for d in DOCS[:2]]]
    assert "retrieval" in logged[0]["latency_ms"]
    retriever.invoke(QUESTION)  # outside any traced call a lone retriever is no RAG answer: nothing logged
    assert len(logged) == 1 and counted()["skipped"] == {"inside_veralith_scope": 1}


def test_a_logged_chain_records_its_timings_and_document_scores(logged):
    adapter.install()
    scored = [Document(page_content=d.page_content, metadata={**d.metadata, "relevance_score": 0.9 - i / 10})
              for i, d in enumerate(DOCS)]
    _lcel_chain(KeywordRetriever(docs=scored)).invoke(QUESTION)
    (call,) = logged
    assert [(c["rank"], c["score"]) for c in call["context"]] == [(1, 0.9), (2, 0.8)]
    latency = call["latency_ms"]
    assert set(latency) == {"total", "retrieval", "generation"} and latency["total"] >= latency["generation"] > 0


# --- history-aware retrieval (13.5) ------------------------------------------------------------------

FOLLOW_UP = "and how long do they last?"
STANDALONE = "How long do the Orbitra 3 batteries last?"
HISTORY = [HumanMessage("What batteries does the Orbitra 3 take?"), AIMessage("Two AA batteries.")]


@pytest.mark.parametrize("history", [HISTORY, [(HISTORY[0].content, HISTORY[1].content)]],
                         ids=["messages", "string-pairs"])
def test_conversational_retrieval_chain_logs_the_standalone_question(logged, history):
    adapter.install()
    chain = ConversationalRetrievalChain.from_llm(
        llm=FakeListLLM(responses=[ANSWER]), retriever=KeywordRetriever(docs=DOCS),
        condense_question_llm=FakeListLLM(responses=[STANDALONE]))
    chain.invoke({"question": FOLLOW_UP, "chat_history": history})
    [trace] = logged
    assert trace["query"] == STANDALONE and trace["response"].strip() == ANSWER
    assert trace["metadata"]["input"] == FOLLOW_UP and trace["metadata"]["chain"] == "ConversationalRetrievalChain"
    assert trace["metadata"]["chat_history"] == [{"role": "human", "content": HISTORY[0].content},
                                                 {"role": "ai", "content": HISTORY[1].content}]


def test_a_history_aware_retriever_logs_the_rewritten_question(logged):
    adapter.install()
    rephrase = ChatPromptTemplate.from_messages([MessagesPlaceholder("chat_history"), ("human", "{input}")])
    retriever = create_history_aware_retriever(FakeListChatModel(responses=[STANDALONE]),
                                               KeywordRetriever(docs=DOCS), rephrase)
    qa_prompt = ChatPromptTemplate.from_messages([("system", "{context}"), MessagesPlaceholder("chat_history"),
                                                  ("human", "{input}")])
    chain = create_retrieval_chain(retriever, create_stuff_documents_chain(FakeListChatModel(responses=[ANSWER]),
                                                                           qa_prompt))
    chain.invoke({"input": FOLLOW_UP, "chat_history": HISTORY})
    [trace] = logged
    assert (trace["query"], trace["response"], trace["metadata"]["input"]) == (STANDALONE, ANSWER, FOLLOW_UP)
    assert len(trace["metadata"]["chat_history"]) == 2 and len(trace["context"]) == 2


def test_without_history_the_question_is_the_input(logged):
    adapter.install()
    chain = ConversationalRetrievalChain.from_llm(llm=FakeListLLM(responses=[ANSWER]),
                                                  retriever=KeywordRetriever(docs=DOCS))
    chain.invoke({"question": QUESTION, "chat_history": []})
    assert logged[0]["query"] == QUESTION and "input" not in logged[0]["metadata"]


# --- streams (13.6) ----------------------------------------------------------------------------------


def test_a_stream_stopped_early_logs_what_was_streamed_as_partial(logged):
    adapter.install()
    for i, _ in enumerate(_lcel_chain().stream(QUESTION)):
        if i == 5:
            break

    async def stop_early():
        stream = _lcel_chain().astream(QUESTION)
        async for _ in stream:
            break
        await stream.aclose()

    asyncio.run(stop_early())
    assert len(logged) == 2
    for trace in logged:
        assert trace["metadata"]["partial"] is True and trace["query"] == QUESTION and len(trace["context"]) == 2
        assert trace["response"] and ANSWER.startswith(trace["response"]) and trace["response"] != ANSWER


def test_a_stream_read_to_the_end_is_not_partial(logged):
    adapter.install()
    assert "".join(_lcel_chain().stream(QUESTION)) == ANSWER
    assert logged[0]["response"] == ANSWER and logged[0]["metadata"]["partial"] is False


# --- installing ------------------------------------------------------------------------------------


def test_install_counts_the_legacy_classes_and_patches_nothing():
    base_invoke = vars(Chain)["invoke"]
    assert not adapter.is_installed()
    assert adapter.install() == 2
    assert adapter.install() == 2
    assert adapter.is_installed()
    assert "invoke" not in vars(RetrievalQA) and vars(Chain)["invoke"] is base_invoke


def test_uninstall_makes_the_global_handler_dormant(logged):
    adapter.install()
    adapter.uninstall()
    _lcel_chain().invoke(QUESTION)
    _retrieval_qa().invoke({"query": QUESTION})
    assert logged == [] and not adapter.is_installed()


def test_documents_are_captured_without_return_source_documents(logged):
    adapter.install()
    result = _retrieval_qa().invoke({"query": QUESTION})
    assert "source_documents" not in result
    assert len(logged) == 1 and len(logged[0]["context"]) == 2


def test_a_legacy_chain_is_logged_once_with_an_explicit_handler_and_install(logged):
    adapter.install()
    handler = adapter.VeralithCallbackHandler()
    _retrieval_qa().invoke({"query": QUESTION}, config={"callbacks": [handler]})
    assert len(logged) == 1 and logged[0]["metadata"]["chain"] == "RetrievalQA"
    adapter.uninstall()
    _retrieval_qa().invoke({"query": QUESTION}, config={"callbacks": [handler]})  # the handler alone
    assert len(logged) == 2 and logged[1]["response"] == ANSWER and len(logged[1]["context"]) == 2


def test_explicit_handler_works_without_install_and_is_not_doubled_with_it(logged):
    handler = adapter.VeralithCallbackHandler(knowledge_base="manuals", metadata={"team": "docs"}, run="r1")
    _lcel_chain().invoke(QUESTION, config={"callbacks": [handler]})
    assert len(logged) == 1 and logged[0]["knowledge_base"] == "manuals" and logged[0]["run"] == "r1"
    assert logged[0]["metadata"]["team"] == "docs"
    adapter.install()
    _lcel_chain().invoke(QUESTION, config={"callbacks": [adapter.VeralithCallbackHandler()]})
    assert len(logged) == 2


def test_a_failing_log_warns_and_leaves_the_result_untouched(monkeypatch, logged, counted):
    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(sys.modules["veralith.sdk.log"], "log", explode)
    adapter.install()
    with pytest.warns(adapter.VeralithAdapterWarning, match="disk full"):
        result = _retrieval_qa().invoke({"query": QUESTION})
    assert result["result"] == ANSWER
    assert _lcel_chain().invoke(QUESTION) == ANSWER
    assert counted()["skipped"] == {"log_failed": 2}


def test_lcel_batch_threads_and_ainvoke_log_one_trace_per_call(logged):
    adapter.install()
    questions = [QUESTION, "What wind speed can it measure?", "How do firmware updates install?"]
    _lcel_chain().batch(questions)
    assert sorted(c["query"] for c in logged) == sorted(questions)
    chain = _lcel_chain()
    threads = [threading.Thread(target=chain.invoke, args=(QUESTION,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    async def main():
        return await asyncio.gather(*(_lcel_chain().ainvoke(QUESTION) for _ in range(3)))

    assert asyncio.run(main()) == [ANSWER] * 3
    assert len(logged) == 10 and all(c["context"] for c in logged)


def test_chunk_ids_from_the_retriever_are_kept_only_when_all_are_distinct(logged):
    adapter.install()
    docs = [Document(page_content=d.page_content, id=f"doc-{i}") for i, d in enumerate(DOCS)]
    _lcel_chain(KeywordRetriever(docs=docs)).invoke(QUESTION)
    assert [c["id"] for c in logged[0]["context"]] == ["doc-0", "doc-1"]
    docs[1].id = None
    _lcel_chain(KeywordRetriever(docs=docs)).invoke(QUESTION)
    assert all("id" not in c for c in logged[1]["context"])


# --- import hygiene -----------------------------------------------------------------------------


def test_importing_veralith_or_the_adapter_does_not_import_langchain():
    code = ("import sys, veralith, veralith.adapters.langchain as a\n"
            "assert not [m for m in sys.modules if m.startswith('langchain')], 'langchain imported'\n"
            "assert not a.is_installed() and a.stats()['logged'] == 0\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_install_without_langchain_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_core.callbacks", None)
    with warnings.catch_warnings(), pytest.raises(ImportError, match=r'pip install "veralith-rag\[langchain\]"'):
        adapter.install()
    assert not adapter.is_installed()


# --- end to end, through the real log() and the store ---------------------------------------------


@pytest.fixture
def stored():
    """Return a reader of every stored result, oldest first, after draining the background worker."""
    sdk_log = pytest.importorskip("veralith.sdk.log")
    from veralith.store import open_store

    def read():
        sdk_log.shutdown(wait=True)
        store = open_store()
        return [store.read(ops.load_result, row["id"]) for row in reversed(store.read(ops.list_traces, limit=1000))]

    yield read
    sdk_log.shutdown(wait=True)


def test_legacy_chain_is_judged_and_stored_synchronously(stored):
    from veralith.config import settings

    adapter.install(knowledge_base="orbitra")
    with settings.override(sync=True):
        _retrieval_qa().invoke({"query": QUESTION}, config=CONFIG)
    [result] = stored()
    assert result.query == QUESTION and result.response == ANSWER and result.knowledge_base == "orbitra"
    assert [c.source for c in result.context] == ["battery.md", "wind.md"]
    assert result.metadata["chain"] == "support-bot" and result.metadata["langchain_metadata"] == {"user": "u-1"}
    assert result.status.execution.value == "success"
    adapter.uninstall()
    _retrieval_qa().invoke({"query": QUESTION})
    assert len(stored()) == 1


def test_lcel_invoke_batch_and_ainvoke_are_stored_in_the_background(stored):
    adapter.install()
    chain = _lcel_chain()
    chain.invoke(QUESTION)
    chain.batch([QUESTION, "What wind speed can it measure?"])
    asyncio.run(chain.ainvoke(QUESTION))
    results = stored()
    assert len(results) == 4
    assert all(r.context and r.response == ANSWER and r.status.execution.value == "success" for r in results)
