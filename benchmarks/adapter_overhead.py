"""What each integration adds to the app's own call: the LangChain and LlamaIndex adapters, the
wrapped OpenAI client and @veralith.trace, per call, by profile and by wall time.

    .venv/bin/python benchmarks/adapter_overhead.py [--calls 1000] [--rounds 3] [--only llamaindex,...]

Each integration runs the same RAG call N times in one process, with fake models so nothing
waits on a network: a LangChain LCEL chain (fake chat model, a small retriever), a LlamaIndex
query engine (MockLLM, a small retriever), a chat completion through an OpenAI client whose
`chat.completions.create` returns a prepared ChatCompletion (the SDK's own type; the HTTP layer
is left out because its noise would hide the adapter), and a traced function.

- **Profile** (the figure the target is on): the call run under cProfile, timed in process CPU time
  (so other processes' load is not charged to it), with the integration on; the time spent in
  Veralith's own functions (any frame under veralith/) per call, with log() replaced by a stub that
  only records its arguments, so the figure is the adapter's work, not the trace store's (log()
  itself is measured by benchmarks/log_overhead.py). Best and median of `--rounds` profiled runs of
  N calls; cProfile's own cost per profiled function call is included, so the figure errs high.
- **CPU time**: blocks of 50 calls without the integration and with it (log() stubbed), alternating
  (`--rounds` x N/50 pairs of blocks, so drift and other processes' load fall on both sides
  alike); the median per-call difference of the pairs, in the process's CPU time (profiling
  overhead left out). Noisy at the tens-of-microseconds level on a shared machine; shown beside
  the profile, not instead of it.

Prints one JSON object. No data set is needed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

QUESTION = "How long is the Halvard 2 kettle's warranty?"
TEXTS = ["Every Halvard 2 kettle comes with a two-year warranty against defects.",
         "The Halvard 2 kettle holds 1.5 litres and boils in about four minutes.",
         "Replacement lids are sold separately."]
ANSWER = "The Halvard 2 kettle has a two-year warranty."
Setup = Callable[[], tuple[Callable[[], Any], Callable[[], None], Callable[[], None]]]


def _stub_log() -> list[int]:
    """Replace veralith.log() (as adapters and @trace call it) by a counter; return the counter."""
    import veralith.sdk.log as sdk_log
    import veralith.sdk.trace as sdk_trace

    seen = [0]

    def log(*args: Any, **kwargs: Any) -> int:
        seen[0] += 1
        return seen[0]

    sdk_log.log = log  # type: ignore[assignment]
    sdk_trace.log = log  # type: ignore[assignment]
    return seen


def langchain() -> tuple[Callable[[], Any], Callable[[], None], Callable[[], None]]:
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough

    import veralith.adapters.langchain as adapter

    class Retriever(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            return [Document(page_content=t, metadata={"source": f"doc{i}"}) for i, t in enumerate(TEXTS)]

    prompt = ChatPromptTemplate.from_messages([("system", "Context:\n{context}"), ("human", "{question}")])
    chain = ({"context": Retriever() | RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs)),
              "question": RunnablePassthrough()} | prompt | FakeListChatModel(responses=[ANSWER]) | StrOutputParser())
    return (lambda: chain.invoke(QUESTION)), adapter.install, adapter.uninstall


def llamaindex() -> tuple[Callable[[], Any], Callable[[], None], Callable[[], None]]:
    from llama_index.core import Settings
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.schema import NodeWithScore, TextNode

    import veralith.adapters.llamaindex as adapter

    class Retriever(BaseRetriever):
        def _retrieve(self, query_bundle: Any) -> list[NodeWithScore]:
            return [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=1.0 - i / 10) for i, t in enumerate(TEXTS)]

    Settings.llm, Settings.embed_model = MockLLM(max_tokens=8), MockEmbedding(embed_dim=8)
    engine = RetrieverQueryEngine.from_args(Retriever())
    return (lambda: engine.query(QUESTION)), adapter.install, adapter.uninstall


def openai_wrap() -> tuple[Callable[[], Any], Callable[[], None], Callable[[], None]]:
    from openai.types.chat import ChatCompletion

    import veralith
    from veralith.adapters.openai import wrap

    completion = ChatCompletion.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ANSWER}}]})
    raw = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=lambda **kw: completion)))
    state = {"client": raw}
    messages = [{"role": "system", "content": "Answer from the context."}, {"role": "user", "content": QUESTION}]

    def call() -> Any:
        with veralith.context(TEXTS):
            return state["client"].chat.completions.create(model="gpt-test", messages=messages)

    return call, lambda: state.update(client=wrap(raw)), lambda: state.update(client=raw)


def traced() -> tuple[Callable[[], Any], Callable[[], None], Callable[[], None]]:
    import veralith

    def answer(question: str) -> tuple[str, list[str]]:
        return ANSWER, TEXTS

    state = {"fn": answer}
    wrapped = veralith.trace(answer)
    return (lambda: state["fn"](QUESTION)), (lambda: state.update(fn=wrapped)), (lambda: state.update(fn=answer))


SETUPS: dict[str, Setup] = {"langchain": langchain, "llamaindex": llamaindex, "openai": openai_wrap,
                            "trace": traced}


def _veralith_seconds(stats: pstats.Stats) -> float:
    """Time spent in Veralith's own frames (tottime, so nothing the app or the framework did counts)."""
    root = str(REPO / "veralith")
    return sum(row[2] for (path, _, _), row in stats.stats.items() if path.startswith(root))  # type: ignore[attr-defined]


def measure(name: str, calls: int, rounds: int) -> dict[str, Any]:
    call, on, off = SETUPS[name]()
    seen = _stub_log()
    for _ in range(20):  # warm every path (imports, caches) with and without
        call()
    on()
    for _ in range(20):
        call()
    logged_before, profiled = seen[0], []
    for _ in range(rounds):
        # builtins=False: time in C functions Veralith calls (json, dict, time) counts as Veralith's.
        profiler = cProfile.Profile(time.process_time, builtins=False)
        profiler.enable()
        for _ in range(calls):
            call()
        profiler.disable()
        profiled.append(_veralith_seconds(pstats.Stats(profiler)) / calls * 1e6)
    profiled_logs = (seen[0] - logged_before) / rounds
    per_call_us = min(profiled)
    block, deltas, bases = 50, [], []
    for _ in range(max(1, rounds * calls // block)):
        off()
        t0 = time.process_time()
        for _ in range(block):
            call()
        base = time.process_time() - t0
        on()
        t0 = time.process_time()
        for _ in range(block):
            call()
        deltas.append((time.process_time() - t0 - base) / block * 1e6)
        bases.append(base / block * 1e6)
    off()
    return {"profile_us_per_call": round(per_call_us, 1),
            "profile_us_per_call_median": round(statistics.median(profiled), 1),
            "cpu_delta_us_per_call": round(statistics.median(deltas), 1),
            "cpu_delta_quartiles_us": [round(q, 1) for q in statistics.quantiles(deltas, n=4)] if len(deltas) > 1
            else None, "baseline_cpu_us_per_call": round(statistics.median(bases), 1),
            "traces_per_call": round(profiled_logs / calls, 3), "target_us": 1000, "met": per_call_us < 1000}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(SETUPS), help="comma-separated: " + ", ".join(SETUPS))
    args = parser.parse_args(argv)
    results = {}
    for name in args.only.split(","):
        try:
            results[name] = measure(name, args.calls, args.rounds)
        except ImportError as exc:
            results[name] = {"skipped": f"not installed: {exc.name}"}
    print(json.dumps({"calls": args.calls, "rounds": args.rounds, "python": sys.version.split()[0],
                      "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
