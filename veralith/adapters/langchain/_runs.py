"""The runs of one top-level LangChain call, and which traces they make.

The handler records every run below a top-level run (chains, tools, retrievers, models) with its
parent; when the top-level run ends, `plan()` decides what to log from the whole tree at once:

- Each retriever run belongs to the innermost chain above it that answered from documents: a
  nested retrieval-QA chain (its output has a `result` or `answer` key), else the top-level run.
  So a RetrievalQA inside an LCEL pipeline is logged with its own question and answer whether the
  pipeline was invoked, streamed or awaited.
- A top-level run whose output is no answer (e.g. `RunnableParallel(first=rag1, second=rag2)`
  returns a dict of answers) gives one trace per branch that retrieved and ran a model.
- A stream the consumer stopped early gives a trace of what was generated so far, marked partial.

Nothing here imports LangChain.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from veralith.adapters.langchain import _read

UNSET: Any = object()


@dataclass
class Run:
    id: uuid.UUID
    parent: uuid.UUID | None
    kind: str                           # "chain", "tool", "retriever" or "llm"
    seq: int = 0                        # start order within its tree
    name: str | None = None
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    inputs: Any = UNSET
    end_inputs: Any = UNSET             # streamed runs report their input only at the end
    outputs: Any = UNSET
    state: str = "running"              # "running", "ok", "error" or "stopped" (GeneratorExit)
    children: list[uuid.UUID] = field(default_factory=list)
    query: str | None = None            # retrievers: the query they were given
    documents: list[Any] = field(default_factory=list)  # retrievers: what they returned
    tokens: list[str] = field(default_factory=list)     # models: streamed tokens
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None                          # when it ended, however it ended

    def input_value(self) -> Any:
        return self.end_inputs if self.end_inputs is not UNSET else self.inputs


@dataclass
class Tree:
    root: Run
    runs: dict[uuid.UUID, Run]
    skip: str | None = None             # why nothing of this tree may be logged, decided at its start
    collector: Any = None               # inside a @veralith.trace call: its handoff.Collector


@dataclass
class Trace:
    """One trace to log: the run that answered, the documents retrieved under it, and extras."""

    unit: Run
    query: str | None
    answer: str | None
    documents: list[Any]
    extra: dict[str, Any]
    answer_type: str                    # the type of the output the answer was read from, for warnings
    ranks: list[int] = field(default_factory=list)      # each document's position in its retriever's results
    latency_ms: dict[str, float] = field(default_factory=dict)  # the unit's duration; retrieval; generation


def plan(tree: Tree) -> tuple[list[Trace], str | None]:
    """The traces a finished tree makes, or ([], reason) when it makes none.

    Reasons: "no_retrieval" (not a RAG call: nothing to judge), "error" (the call raised),
    "no_answer" (no answer could be read from any run that retrieved).
    """
    retrievers = [r for r in tree.runs.values() if r.kind == "retriever" and r.state == "ok"]
    if not retrievers:
        return [], "no_retrieval"
    root = tree.root
    partial = root.state == "stopped" or any(
        r.kind == "llm" and r.state in ("running", "stopped") for r in tree.runs.values())
    if root.state == "error":
        return [], "error"
    groups: dict[uuid.UUID, list[Run]] = {}
    for retriever in sorted(retrievers, key=lambda r: r.seq):
        groups.setdefault(_answering_run(tree, retriever).id, []).append(retriever)
    traces: list[Trace] = []
    for unit_id, found in groups.items():
        unit = tree.runs[unit_id]
        if unit is root and _answer(tree, root, partial) is None:
            traces += _branches(tree, found, partial)
        else:
            traces.append(_trace(tree, unit, found, partial))
    if not traces:
        return [], "no_answer"
    return traces, None


def _answering_run(tree: Tree, retriever: Run) -> Run:
    run = tree.runs.get(retriever.parent) if retriever.parent else None
    while run is not None and run is not tree.root:
        if run.kind == "chain" and run.state == "ok" and _read.rag_answer(run.outputs) is not None:
            return run
        run = tree.runs.get(run.parent) if run.parent else None
    return tree.root


def _branches(tree: Tree, retrievers: list[Run], partial: bool) -> list[Trace]:
    """Split a top-level run with no readable answer into its direct children that retrieved and
    generated (the branches of a RunnableParallel); a branch without a model run is a formatting
    step, not an answer."""
    by_child: dict[uuid.UUID, list[Run]] = {}
    for retriever in retrievers:
        run = retriever
        while run.parent is not None and run.parent != tree.root.id:
            run = tree.runs[run.parent]
        if run is not retriever:
            by_child.setdefault(run.id, []).append(retriever)
    traces = []
    for child_id, found in by_child.items():
        child = tree.runs[child_id]
        if child.kind == "chain" and _has_model(tree, child) and _answer(tree, child, partial) is not None:
            traces.append(_trace(tree, child, found, partial))
    if not traces:  # report the top-level run's own unreadable output
        return [_trace(tree, tree.root, retrievers, partial)]
    return traces


def _has_model(tree: Tree, run: Run) -> bool:
    return any(tree.runs[c].kind == "llm" or _has_model(tree, tree.runs[c]) for c in run.children)


def _answer(tree: Tree, run: Run, partial: bool) -> str | None:
    if run.outputs is not UNSET:
        answer = _read.rag_answer(run.outputs) if run is not tree.root else None
        return answer if answer is not None else _read.answer_text(run.outputs)
    if partial:  # stopped before the run reported an output: what its last model streamed
        models = [r for r in _descendants(tree, run) if r.kind == "llm" and r.tokens]
        return "".join(models[-1].tokens) if models else None
    return None


def _descendants(tree: Tree, run: Run) -> list[Run]:
    found = []
    for child in run.children:
        found.append(tree.runs[child])
        found += _descendants(tree, tree.runs[child])
    return sorted(found, key=lambda r: r.seq)


def _trace(tree: Tree, unit: Run, retrievers: list[Run], partial: bool) -> Trace:
    documents = [doc for r in retrievers for doc in r.documents]
    retriever_query = next((r.query for r in retrievers if r.query), None)
    inputs = unit.input_value()
    extra: dict[str, Any] = {"partial": partial}
    query = None
    if isinstance(unit.outputs, dict) and isinstance(unit.outputs.get("messages"), list):
        # A message state: the question is the last human message the final answer replies to.
        query = _read.last_human(unit.outputs["messages"])
    if query is None and isinstance(inputs, dict) and retriever_query and _read.history(inputs.get(_read.HISTORY_KEY)):
        # History-aware retrieval: the retriever was given a standalone question rewritten from the
        # follow-up and the history; that is what the documents answer, so it is the query.
        query = retriever_query
        extra["input"] = _read.query_text(inputs)
        extra["chat_history"] = _read.history(inputs[_read.HISTORY_KEY])
    if query is None:
        query = _read.query_text(inputs, retriever_query)
    if isinstance(unit.outputs, dict) and isinstance(unit.outputs.get("sources"), str):
        extra["sources"] = unit.outputs["sources"]
    if unit.parent == tree.root.id:  # a branch of a top-level parallel map: LangChain tags it with its key
        branch = next((tag[len("map:key:"):] for tag in unit.tags if tag.startswith("map:key:")), None)
        if branch is not None:
            extra["branch"] = branch
    output_type = "nothing" if unit.outputs is UNSET else type(unit.outputs).__name__
    return Trace(unit=unit, query=query, answer=_answer(tree, unit, partial), documents=documents, extra=extra,
                 answer_type=output_type, ranks=[i + 1 for r in retrievers for i in range(len(r.documents))],
                 latency_ms=timings(tree, unit, retrievers))


def _below(tree: Tree, run: Run) -> list[Run]:
    """Every run below `run`, in no particular order (cheaper than _descendants, which sorts)."""
    if run is tree.root:
        return [r for r in tree.runs.values() if r is not run]
    found, stack = [], list(run.children)
    while stack:
        child = tree.runs[stack.pop()]
        found.append(child)
        stack.extend(child.children)
    return found


def timings(tree: Tree, unit: Run, retrievers: list[Run]) -> dict[str, float]:
    """The unit's own duration (`total`), the time its retrievers took (`retrieval`) and the time in
    model calls below it (`generation`), in ms; a run still open counts until now."""
    now = time.perf_counter()

    def ms(run: Run) -> float:
        return ((run.ended if run.ended is not None else now) - run.started) * 1000.0

    models = [r for r in _below(tree, unit) if r.kind == "llm"]
    out = {"total": ms(unit), "retrieval": sum(ms(r) for r in retrievers)}
    if models:
        out["generation"] = sum(ms(r) for r in models)
    return out
