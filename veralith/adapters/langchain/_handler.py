"""The callback handler: records the runs of each top-level LangChain call and logs what `_runs.plan` finds.

One handler serves every call path (invoke, batch, stream, ainvoke, astream, the legacy chains'
`__call__`/`run`, LangGraph graphs), because LangChain reports all of them through the same
callbacks; so every trace has the same metadata shape (`trace_metadata`). The class subclasses
LangChain's BaseCallbackHandler, so it is built on first use (`handler_class()`), not at import.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from typing import Any

from veralith.adapters._common import Outcome, trace_metadata as common_metadata
from veralith.adapters.langchain import _read, _runs, _state
from veralith.sdk import handoff, scope


class _Tracker:
    """Callback logic without LangChain types, mixed into `VeralithCallbackHandler`.

    A run whose parent this handler never saw is top-level for it. Only top-level chain runs start
    a tree; a retriever, tool or model used on its own is not a RAG answer. Inside a
    @veralith.trace call a retriever used on its own starts one too: what it retrieved is handed to
    that call (veralith.sdk.handoff).
    """

    def __init__(self, *, knowledge_base: str | None = None, metadata: dict[str, Any] | None = None,
                 run: str | None = None, _global: bool = False) -> None:
        super().__init__()
        self._own = _state.Options(knowledge_base=knowledge_base or "default", metadata=dict(metadata or {}),
                                   run=run)
        self._has_kb = knowledge_base is not None
        self._global = _global
        self._state_lock = threading.Lock()
        self._root_of: dict[uuid.UUID, uuid.UUID] = {}
        self._trees: dict[uuid.UUID, _runs.Tree] = {}

    # --- recording --------------------------------------------------------------------------------

    def _start(self, kind: str, run_id: uuid.UUID, parent_run_id: uuid.UUID | None, inputs: Any,
               kwargs: dict[str, Any]) -> _runs.Run | None:
        if self._global and not _state.installed:  # the global handler after uninstall()
            return None
        with self._state_lock:
            root_id = self._root_of.get(parent_run_id) if parent_run_id is not None else None
            inside = root_id is None and scope.active() is not None
            if root_id is None and kind != "chain" and not (kind == "retriever" and inside):
                return None
            run = _runs.Run(id=run_id, parent=parent_run_id if root_id is not None else None, kind=kind,
                            name=kwargs.get("name"), tags=list(kwargs.get("tags") or []),
                            metadata=dict(kwargs.get("metadata") or {}), inputs=inputs)
            if root_id is None:
                root_id = run_id
                # One user call, one trace: inside a @veralith.trace call, that call's trace wins,
                # and what this tree retrieves and answers is handed to it.
                self._trees[run_id] = _runs.Tree(root=run, runs={}, skip="inside_veralith_scope" if inside else None,
                                                 collector=handoff.current() if inside else None)
            tree = self._trees[root_id]
            run.seq = len(tree.runs)
            tree.runs[run_id] = run
            if run.parent is not None and run.parent in tree.runs:
                tree.runs[run.parent].children.append(run_id)
            self._root_of[run_id] = root_id
            return run

    def _run(self, run_id: uuid.UUID) -> _runs.Run | None:
        root_id = self._root_of.get(run_id)
        tree = self._trees.get(root_id) if root_id is not None else None
        return tree.runs.get(run_id) if tree is not None else None

    def _end(self, run_id: uuid.UUID, state: str, **fields: Any) -> None:
        with self._state_lock:
            run = self._run(run_id)
            if run is None:
                return
            run.state, run.ended = state, time.perf_counter()
            for name, value in fields.items():
                setattr(run, name, value)
            tree = self._trees.pop(run_id, None) if self._root_of.get(run_id) == run_id else None
            if tree is not None:
                for member in tree.runs:
                    self._root_of.pop(member, None)
        if tree is not None:
            _emit(tree, self._options())

    def _options(self) -> _state.Options:
        base = _state.options
        return _state.Options(knowledge_base=self._own.knowledge_base if self._has_kb else base.knowledge_base,
                              metadata={**base.metadata, **self._own.metadata},
                              run=self._own.run or base.run)

    @staticmethod
    def _ended(error: BaseException) -> str:
        # A stream its consumer stopped early is closed with GeneratorExit: stopped, not failed.
        return "stopped" if isinstance(error, GeneratorExit) else "error"

    # --- LangChain's callbacks ----------------------------------------------------------------------

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: uuid.UUID,
                       parent_run_id: uuid.UUID | None = None, **kwargs: Any) -> None:
        self._start("chain", run_id, parent_run_id, inputs, kwargs)

    def on_tool_start(self, serialized: Any, input_str: Any, *, run_id: uuid.UUID,
                      parent_run_id: uuid.UUID | None = None, **kwargs: Any) -> None:
        self._start("tool", run_id, parent_run_id, input_str, kwargs)  # agents reach retrievers through tools

    def on_retriever_start(self, serialized: Any, query: Any, *, run_id: uuid.UUID,
                           parent_run_id: uuid.UUID | None = None, **kwargs: Any) -> None:
        run = self._start("retriever", run_id, parent_run_id, query, kwargs)
        if run is not None and isinstance(query, str):
            run.query = query

    def on_llm_start(self, serialized: Any, prompts: Any, *, run_id: uuid.UUID,
                     parent_run_id: uuid.UUID | None = None, **kwargs: Any) -> None:
        self._start("llm", run_id, parent_run_id, _runs.UNSET, kwargs)

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: uuid.UUID,
                            parent_run_id: uuid.UUID | None = None, **kwargs: Any) -> None:
        self._start("llm", run_id, parent_run_id, _runs.UNSET, kwargs)

    def on_llm_new_token(self, token: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._state_lock:
            run = self._run(run_id)
            if run is not None and isinstance(token, str):
                run.tokens.append(token)

    def on_retriever_end(self, documents: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._end(run_id, "ok", documents=list(documents or []))

    def on_tool_end(self, output: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._end(run_id, "ok")

    def on_llm_end(self, response: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._end(run_id, "ok")

    def on_chain_end(self, outputs: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        # Streaming starts a run before its input is known and reports the input at the end.
        fields = {"outputs": outputs}
        if "inputs" in kwargs:
            fields["end_inputs"] = kwargs["inputs"]
        self._end(run_id, "ok", **fields)

    def on_chain_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._end(run_id, self._ended(error))

    def on_tool_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._end(run_id, self._ended(error))

    def on_retriever_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._end(run_id, self._ended(error))

    def on_llm_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._end(run_id, self._ended(error))


# --- what gets logged --------------------------------------------------------------------------------

def trace_metadata(tree: _runs.Tree, trace: _runs.Trace, base: dict[str, Any]) -> dict[str, Any]:
    """The one metadata shape of every trace the adapter logs (veralith.adapters._common; documented
    in docs/langchain.md).

    The caller's install()/handler metadata first, then the adapter's keys: `source`, `chain` (the
    run that answered), `run_id`, `run_name`, `tags` and `langchain_metadata` (the caller's
    config["metadata"]) of the top-level run, `partial`; and when they apply `sources`, `branch`,
    `input` and `chat_history`.
    """
    extra = {k: v for k, v in trace.extra.items() if k != "partial"}
    return common_metadata(base, source="langchain", chain=trace.unit.name, run_id=str(tree.root.id),
                           run_name=tree.root.name, tags=tree.root.tags, framework_metadata=tree.root.metadata,
                           partial=bool(trace.extra.get("partial")), **extra)


def _emit(tree: _runs.Tree, options: _state.Options) -> None:
    try:
        traces, reason = _runs.plan(tree)
    except Exception as exc:  # never break the chain over the adapter's own bug
        _state.count("skipped", "adapter_error")
        _state.warn_once(f"plan:{type(exc).__name__}", f"Veralith could not read a LangChain run: {exc}")
        return
    if tree.collector is not None and tree.root.state != "error":
        _state.counters.run("a LangChain run", lambda: _hand_over(tree, traces, options))
        return
    if reason == "no_retrieval":
        _state.count("ignored")
        return
    if tree.skip is not None or reason is not None:
        _state.count("skipped", tree.skip or reason)  # a failed call or an outer @trace: no warning due
        return
    for trace in traces:
        if trace.query is None or trace.answer is None:
            what = "question" if trace.query is None else "answer"
            _state.count("skipped", f"no_{what}")
            _state.warn_once(f"shape:{what}:{trace.answer_type}",
                             f"Veralith could not find the {what} of a LangChain run ({trace.unit.name}, output "
                             f"type {trace.answer_type}); not logged")
            continue
        outcome = Outcome(query=trace.query, context=_read.context(trace.documents, trace.ranks), answer=trace.answer,
                          metadata=trace_metadata(tree, trace, options.metadata), latency_ms=trace.latency_ms)
        _state.counters.emit(outcome, options, None, source="langchain")


def _hand_over(tree: _runs.Tree, traces: list[_runs.Trace], options: _state.Options) -> None:
    """Inside a @veralith.trace call: hand its collector what this call retrieved and answered (a
    retriever used on its own hands its documents)."""
    if not traces:
        retrievers = [r for r in tree.runs.values() if r.kind == "retriever" and r.state == "ok"]
        if not retrievers:
            _state.count("ignored")
            return
        documents = [doc for r in retrievers for doc in r.documents]
        ranks = [i + 1 for r in retrievers for i in range(len(r.documents))]
        latency = _runs.timings(tree, tree.root, retrievers)
        traces = [_runs.Trace(unit=tree.root, query=next((r.query for r in retrievers if r.query), None), answer=None,
                              documents=documents, extra={}, answer_type="documents", ranks=ranks, latency_ms=latency)]
    for trace in traces:
        tree.collector.add(handoff.Handed(source="langchain", context=_read.context(trace.documents, trace.ranks),
                                          answer=trace.answer, query=trace.query,
                                          retrieval_ms=trace.latency_ms.get("retrieval"),
                                          generation_ms=trace.latency_ms.get("generation"),
                                          knowledge_base=options.knowledge_base, run=options.run))
        _state.count("skipped", "inside_veralith_scope")


@functools.cache
def handler_class() -> type:
    """VeralithCallbackHandler: subclasses LangChain's handler, so it is built on first use."""
    from langchain_core.callbacks import BaseCallbackHandler

    return type("VeralithCallbackHandler", (_Tracker, BaseCallbackHandler), {
        "__module__": "veralith.adapters.langchain",
        "__doc__": "Logs one Veralith trace per top-level LangChain run that retrieved and answered "
                   "(one per branch of a parallel map of RAG chains)."})
