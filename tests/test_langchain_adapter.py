"""The LangChain adapter, exercised with LangChain's own fake models and a small real retriever."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import types
import warnings

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_classic")

from langchain_classic.chains import RetrievalQA, RetrievalQAWithSourcesChain  # noqa: E402
from langchain_classic.chains.base import Chain  # noqa: E402
from langchain_core.callbacks import CallbackManagerForRetrieverRun  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models.fake import FakeListLLM  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeListChatModel  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from langchain_core.runnables import RunnableLambda, RunnablePassthrough  # noqa: E402

import veralith.adapters.langchain as adapter  # noqa: E402

DOCS = [
    Document(page_content="The Orbitra 3 weather station runs for 14 months on two AA batteries.",
             metadata={"source": "battery.md"}),
    Document(page_content="The Orbitra 3 measures wind speed up to 160 km/h.", metadata={"source": "wind.md"}),
    Document(page_content="Firmware updates install overnight over Wi-Fi.", metadata={"source": "firmware.md"}),
]
QUESTION = "How long does the Orbitra 3 battery last?"
ANSWER = "The Orbitra 3 runs for 14 months on two AA batteries."


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
    """Record what the adapter hands to veralith.log() instead of evaluating it."""
    calls: list[dict] = []

    def fake_log(query, context, response, *, sync=None, knowledge_base="default", metadata=None):
        calls.append({"query": query, "context": context, "response": response,
                      "knowledge_base": knowledge_base, "metadata": metadata})
        return len(calls)

    try:
        import veralith.sdk.log as sdk_log
    except ImportError:
        sdk_log = types.ModuleType("veralith.sdk.log")
        monkeypatch.setitem(sys.modules, "veralith.sdk.log", sdk_log)
    monkeypatch.setattr(sdk_log, "log", fake_log, raising=False)
    yield calls


@pytest.fixture(autouse=True)
def _uninstalled():
    yield
    adapter.uninstall()


def _retrieval_qa(**kwargs):
    return RetrievalQA.from_chain_type(llm=FakeListLLM(responses=[ANSWER]), retriever=KeywordRetriever(docs=DOCS),
                                       **kwargs)


def _lcel_chain(retriever=None, answer=ANSWER):
    prompt = ChatPromptTemplate.from_messages([("system", "Answer from the context:\n{context}"),
                                               ("human", "{question}")])
    docs_to_text = RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs))
    return ({"context": (retriever or KeywordRetriever(docs=DOCS)) | docs_to_text, "question": RunnablePassthrough()}
            | prompt | FakeListChatModel(responses=[answer]) | StrOutputParser())


# --- legacy chains ------------------------------------------------------------------------------


def test_install_patches_both_legacy_classes_idempotently():
    base_invoke = vars(Chain)["invoke"]
    assert not adapter.is_installed()
    assert adapter.install() == 2
    assert adapter.install() == 2
    assert adapter.is_installed()
    assert "invoke" in vars(RetrievalQA) and "invoke" in vars(RetrievalQAWithSourcesChain)
    assert vars(Chain)["invoke"] is base_invoke  # the base class is never patched


def test_retrieval_qa_logs_one_trace_per_invoke_with_its_documents(logged):
    adapter.install()
    chain = _retrieval_qa(return_source_documents=True)
    result = chain.invoke({"query": QUESTION})
    assert result["result"] == ANSWER
    assert len(logged) == 1
    call = logged[0]
    assert call["query"] == QUESTION and call["response"] == ANSWER
    assert [c["text"] for c in call["context"]] == [DOCS[0].page_content, DOCS[1].page_content]
    assert call["context"][0]["source"] == "battery.md"
    assert call["metadata"]["chain"] == "RetrievalQA"
    chain.invoke({"query": QUESTION})
    assert len(logged) == 2


def test_documents_are_captured_without_return_source_documents(logged):
    adapter.install()
    result = _retrieval_qa().invoke({"query": QUESTION})
    assert "source_documents" not in result
    assert len(logged) == 1
    assert len(logged[0]["context"]) == 2


def test_uninstall_restores_the_inherited_invoke_and_stops_logging(logged):
    original = RetrievalQA.invoke
    adapter.install()
    assert RetrievalQA.invoke is not original
    adapter.uninstall()
    assert RetrievalQA.invoke is original and RetrievalQAWithSourcesChain.invoke is Chain.invoke
    assert "invoke" not in vars(RetrievalQA) and not adapter.is_installed()
    _retrieval_qa(return_source_documents=True).invoke({"query": QUESTION})
    assert logged == []


def test_retrieval_qa_with_sources_logs_answer_and_documents(logged):
    adapter.install()
    llm = FakeListLLM(responses=[f"{ANSWER}\nSOURCES: battery.md"])
    chain = RetrievalQAWithSourcesChain.from_chain_type(llm=llm, retriever=KeywordRetriever(docs=DOCS))
    result = chain.invoke({"question": QUESTION})
    assert result["sources"] == "battery.md"
    assert len(logged) == 1
    assert logged[0]["query"] == QUESTION and logged[0]["response"].strip() == ANSWER
    assert logged[0]["metadata"]["sources"] == "battery.md"
    assert len(logged[0]["context"]) == 2
    adapter.uninstall()
    chain.invoke({"question": QUESTION})
    assert len(logged) == 1 and RetrievalQAWithSourcesChain.invoke is Chain.invoke


def test_legacy_batch_and_ainvoke_log_once_per_call(logged):
    adapter.install()
    chain = _retrieval_qa(return_source_documents=True)
    chain.batch([{"query": QUESTION}, {"query": "What wind speed can it measure?"}])
    assert len(logged) == 2
    asyncio.run(chain.ainvoke({"query": QUESTION}))  # not patched: the global handler logs it
    assert len(logged) == 3 and logged[2]["response"] == ANSWER and len(logged[2]["context"]) == 2


def test_a_legacy_chain_is_logged_once_even_with_an_explicit_handler(logged):
    adapter.install()
    handler = adapter.VeralithCallbackHandler()
    _retrieval_qa().invoke({"query": QUESTION}, config={"callbacks": [handler]})
    assert len(logged) == 1 and logged[0]["metadata"]["chain"] == "RetrievalQA"
    adapter.uninstall()
    _retrieval_qa().invoke({"query": QUESTION}, config={"callbacks": [handler]})  # the handler alone
    assert len(logged) == 2 and logged[1]["response"] == ANSWER and len(logged[1]["context"]) == 2


def test_a_legacy_chain_nested_in_lcel_is_logged_once_by_the_patch(logged):
    adapter.install()
    qa = _retrieval_qa()
    # The nested call receives the parent's callback manager, not a list, as its callbacks.
    outer = RunnableLambda(lambda question, config: qa.invoke({"query": question}, config=config)["result"])
    assert outer.invoke(QUESTION) == ANSWER
    assert len(logged) == 1 and logged[0]["metadata"]["chain"] == "RetrievalQA"
    assert len(logged[0]["context"]) == 2


def test_a_failing_chain_raises_as_before_and_logs_nothing(logged):
    adapter.install()

    class Broken(KeywordRetriever):
        def _get_relevant_documents(self, query, *, run_manager):
            raise RuntimeError("index offline")

    chain = RetrievalQA.from_chain_type(llm=FakeListLLM(responses=[ANSWER]), retriever=Broken(docs=DOCS))
    with pytest.raises(RuntimeError, match="index offline"):
        chain.invoke({"query": QUESTION})
    assert logged == []


def test_a_failing_log_warns_and_leaves_the_result_untouched(monkeypatch, logged):
    import veralith.adapters.langchain as module

    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(sys.modules["veralith.sdk.log"], "log", explode)
    monkeypatch.setattr(module, "_warned", set())
    adapter.install()
    with pytest.warns(adapter.VeralithAdapterWarning, match="disk full"):
        result = _retrieval_qa(return_source_documents=True).invoke({"query": QUESTION})
    assert result["result"] == ANSWER
    with pytest.warns(adapter.VeralithAdapterWarning, match="disk full"):
        assert _lcel_chain().invoke(QUESTION) == ANSWER


# --- LCEL chains --------------------------------------------------------------------------------


def test_lcel_invoke_logs_one_trace(logged):
    adapter.install()
    assert _lcel_chain().invoke(QUESTION) == ANSWER
    assert len(logged) == 1
    assert logged[0]["query"] == QUESTION and logged[0]["response"] == ANSWER
    assert [c["source"] for c in logged[0]["context"]] == ["battery.md", "wind.md"]


def test_lcel_batch_logs_one_trace_per_item(logged):
    adapter.install()
    questions = [QUESTION, "What wind speed can it measure?", "How do firmware updates install?"]
    _lcel_chain().batch(questions)
    assert sorted(c["query"] for c in logged) == sorted(questions)


def test_lcel_from_plain_threads_logs_each_call(logged):
    adapter.install()
    chain = _lcel_chain()
    threads = [threading.Thread(target=chain.invoke, args=(QUESTION,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(logged) == 4


def test_lcel_ainvoke_logs_one_trace(logged):
    adapter.install()

    async def main():
        return await asyncio.gather(*(_lcel_chain().ainvoke(QUESTION) for _ in range(3)))

    assert asyncio.run(main()) == [ANSWER] * 3
    assert len(logged) == 3 and all(len(c["context"]) == 2 for c in logged)


def test_lcel_stream_and_astream_log_the_question_known_only_at_the_end(logged):
    adapter.install()
    assert "".join(_lcel_chain().stream(QUESTION)) == ANSWER

    async def main():
        return "".join([part async for part in _lcel_chain().astream(QUESTION)])

    assert asyncio.run(main()) == ANSWER
    assert [(c["query"], c["response"], len(c["context"])) for c in logged] == [(QUESTION, ANSWER, 2)] * 2


def test_explicit_handler_works_without_install_and_is_not_doubled_with_it(logged):
    handler = adapter.VeralithCallbackHandler(knowledge_base="manuals")
    _lcel_chain().invoke(QUESTION, config={"callbacks": [handler]})
    assert len(logged) == 1 and logged[0]["knowledge_base"] == "manuals"
    adapter.install()
    _lcel_chain().invoke(QUESTION, config={"callbacks": [adapter.VeralithCallbackHandler()]})
    assert len(logged) == 2


def test_chains_without_a_retriever_are_not_logged(logged):
    adapter.install()
    chain = ChatPromptTemplate.from_messages([("human", "{question}")]) | FakeListChatModel(responses=["hi"])
    chain.invoke({"question": "hello"})
    assert logged == []


def test_uninstall_makes_the_global_handler_dormant(logged):
    adapter.install()
    adapter.uninstall()
    _lcel_chain().invoke(QUESTION)
    assert logged == []


def test_an_unreadable_output_warns_and_passes_through(monkeypatch, logged):
    import veralith.adapters.langchain as module

    monkeypatch.setattr(module, "_warned", set())
    adapter.install()
    chain = {"docs": KeywordRetriever(docs=DOCS), "q": RunnablePassthrough()} | RunnableLambda(lambda x: 42)
    with pytest.warns(adapter.VeralithAdapterWarning, match="int"):
        assert chain.invoke(QUESTION) == 42
    assert logged == []


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
            "assert not a.is_installed()\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_install_without_langchain_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_core.callbacks", None)
    with warnings.catch_warnings(), pytest.raises(ImportError, match=r'pip install "veralith\[langchain\]"'):
        adapter.install()
    assert not adapter.is_installed()


# --- end to end, through the real log() and the store ---------------------------------------------


@pytest.fixture
def stored():
    """Return a reader of every stored result, oldest first, after draining the background worker."""
    sdk_log = pytest.importorskip("veralith.sdk.log")
    from veralith.store import db as store_db, repository as repo

    def read():
        sdk_log.shutdown(wait=True)
        db = store_db.open_db(store_db.resolve_path())
        return [repo.load_result(row["id"], db) for row in reversed(repo.list_traces(db, limit=1000))]

    yield read
    sdk_log.shutdown(wait=True)


def test_legacy_chain_is_judged_and_stored_synchronously(stored):
    from veralith.config import settings

    adapter.install(knowledge_base="orbitra")
    with settings.override(sync=True):
        _retrieval_qa().invoke({"query": QUESTION})
    [result] = stored()
    assert result.query == QUESTION and result.response == ANSWER and result.knowledge_base == "orbitra"
    assert [c.source for c in result.context] == ["battery.md", "wind.md"]
    assert result.metadata["chain"] == "RetrievalQA" and result.status.execution.value == "success"
    adapter.uninstall()
    _retrieval_qa().invoke({"query": QUESTION})
    assert len(stored()) == 1


def test_lcel_invoke_batch_threads_and_ainvoke_are_stored_in_the_background(stored):
    adapter.install()
    chain = _lcel_chain()
    chain.invoke(QUESTION)
    chain.batch([QUESTION, "What wind speed can it measure?"])
    worker = threading.Thread(target=chain.invoke, args=("How do firmware updates install?",))
    worker.start()
    worker.join()
    asyncio.run(chain.ainvoke(QUESTION))
    results = stored()
    assert len(results) == 5
    assert all(r.context and r.response == ANSWER and r.status.execution.value == "success" for r in results)
    assert sorted({r.query for r in results}) == sorted(
        {QUESTION, "What wind speed can it measure?", "How do firmware updates install?"})
