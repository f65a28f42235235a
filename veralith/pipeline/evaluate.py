"""The orchestrator: validate → decompose → three judges (concurrently) → classify → review → suggest → store.

In the single-call mode (veralith.pipeline.fast) one call does decompose and the three judges; from
its reply on, every stage is the same code.

Each judge is isolated: its own calls, its own error slot, its own timing. One failing never
stops the others; a judge that failed leaves None behind, and everything that depends on it
(the cell, the gate) says "unknown" rather than guessing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from veralith.config import settings
from veralith.errors import JudgeCallError, JudgeServerDown
from veralith.llm.base import JudgeClient
from veralith.llm.calls import Batch, Outcome, Steps, adrive, drive
from veralith.llm.tasks import COMPLETENESS, FAITHFULNESS, SUFFICIENCY, Task
from veralith.models import (
    ContextChunk,
    Diagnosis,
    EvaluationResult,
    FailureCell,
    Gate,
    JudgeError,
    Phase,
    Reference,
    Repair,
    Status,
    ThresholdSource,
    Verdict,
)
from veralith.pipeline import classify as classify_mod, explain as explain_mod, reference as reference_mod
from veralith.pipeline.decompose import Decomposition, decompose_steps
from veralith.pipeline.fast import FastReply, ask_steps, effective_mode, verdict_steps
from veralith.pipeline.inputs import (
    as_of as as_of_date,
    check_knowledge_base,
    check_metadata,
    check_query,
    check_text,
    normalize_context,
)
from veralith.pipeline.judges import completeness, faithfulness, sufficiency
from veralith.pipeline.partial import Judged, Missing, decide
from veralith.pipeline.reference_inputs import check_reference
from veralith.pipeline.review import REVIEW_BELOW, deciders, flagged_by, least_sure
from veralith.pipeline.suggest import suggest, with_cause
from veralith.policy import REFUSAL_KINDS, reference_gate, status
from veralith.usage import CallUsage, OutputSize
from veralith.validate import check_flag, check_stored_inputs
from veralith.work.judged import Judged as JudgedTrace

if TYPE_CHECKING:  # the store loads sqlite-utils, only when something is stored
    from veralith.store.protocol import Store, TraceInput

__all__ = ["TraceJudge", "aevaluate", "aevaluate_checked", "ajudge_checked", "arun_pipeline", "evaluate",
           "evaluate_checked", "judge_checked", "run_pipeline"]


def evaluate(query: str, context: Any, response: str, *, persist: bool = True, trace_id: int | None = None,
             knowledge_base: str = "default", metadata: dict[str, Any] | None = None,
             sync: bool | None = None, client: JudgeClient | None = None,
             explain: bool | None = None, reference: str | None = None,
             reference_contexts: Any = None) -> EvaluationResult:
    """Evaluate one trace synchronously and return the typed result (stored when `persist`).

    `explain=True` adds, for a failing trace, one more judge call that explains what went wrong in it
    (`result.explanation`, beside the rule-based suggestion; counted by the budget guard); default:
    the `explain` setting (VERALITH_EXPLAIN, off).

    `reference` (the answer a person wrote) and `reference_contexts` (the chunks that should have been
    retrieved: texts or ids) add `result.reference`: per reference fact, context recall and answer
    correctness, and the correctness layer (veralith.pipeline.reference); the six cells stay reference-free.

    `sync` exists for symmetry with `log()` and has no effect: evaluate() is always synchronous.
    `trace_id` re-evaluates that stored trace in place.
    """
    del sync
    if explain is not None:
        with settings.override(explain=check_flag("explain", explain)):
            return evaluate(query, context, response, persist=persist, trace_id=trace_id,
                            knowledge_base=knowledge_base, metadata=metadata, client=client, reference=reference,
                            reference_contexts=reference_contexts)
    run = _Prepared(query, context, response, persist=persist, trace_id=trace_id, knowledge_base=knowledge_base,
                    metadata=metadata, client=client, reference=(reference, reference_contexts))
    return evaluate_checked(run.query, run.chunks, run.response, store=run.store, client=run.client,
                            trace_id=trace_id, knowledge_base=run.knowledge_base, metadata=run.metadata,
                            reference=run.reference)


async def aevaluate(query: str, context: Any, response: str, *, persist: bool = True, trace_id: int | None = None,
                    knowledge_base: str = "default", metadata: dict[str, Any] | None = None,
                    sync: bool | None = None, client: JudgeClient | None = None,
                    explain: bool | None = None, reference: str | None = None,
                    reference_contexts: Any = None) -> EvaluationResult:
    """`evaluate` for asyncio code: the same arguments, checks and result, the judge calls awaited on the
    running event loop (AsyncOpenAI), so many traces can be judged at once without a thread each.

    Validation, the budget guard and the store's reads and writes are the same as `evaluate`'s and
    run in the loop's thread (they are short; a remote store's round trips are the exception).
    """
    del sync
    if explain is not None:
        with settings.override(explain=check_flag("explain", explain)):
            return await aevaluate(query, context, response, persist=persist, trace_id=trace_id,
                                   knowledge_base=knowledge_base, metadata=metadata, client=client,
                                   reference=reference, reference_contexts=reference_contexts)
    run = _Prepared(query, context, response, persist=persist, trace_id=trace_id, knowledge_base=knowledge_base,
                    metadata=metadata, client=client, reference=(reference, reference_contexts))
    return await aevaluate_checked(run.query, run.chunks, run.response, store=run.store, client=run.client,
                                   trace_id=trace_id, knowledge_base=run.knowledge_base, metadata=run.metadata,
                                   reference=run.reference)


class _Prepared:
    """evaluate()'s arguments checked (the checks log() makes), the client chosen and the budget guard
    passed, the store opened: everything before the first judge call, shared by evaluate and aevaluate."""

    def __init__(self, query: str, context: Any, response: str, *, persist: bool, trace_id: int | None,
                 knowledge_base: str, metadata: dict[str, Any] | None, client: JudgeClient | None,
                 reference: tuple[Any, Any] = (None, None)) -> None:
        self.query = check_query(query)
        self.response = check_text("response", response)
        self.chunks = normalize_context(context)
        self.knowledge_base = check_knowledge_base(knowledge_base)
        self.metadata = check_metadata(metadata)
        self.reference = check_reference(*reference)
        if trace_id is not None and (isinstance(trace_id, bool) or not isinstance(trace_id, int)):
            raise TypeError(f"trace_id must be an int or None, got {type(trace_id).__name__}")
        persist = check_flag("persist", persist)
        # the same checks log() makes, before any call
        check_stored_inputs(self.query, self.chunks, self.response, self.metadata)
        if client is None:
            from veralith.llm import get_client
            client = get_client()
        self.client = client
        if settings.per_trace_budget_usd is not None:
            from veralith.pipeline.budget import enforce_budget
            # Priced for the client that will run, before anything is written or called.
            enforce_budget(self.query, self.chunks, self.response, client=client,
                           reference=self.reference.answer if self.reference else None)
        self.store = None
        if persist:
            from veralith.store import open_store, ops
            self.store = open_store()
            if trace_id is not None:
                self.store.read(ops.trace_info, trace_id)  # TraceNotFound now, before paying for any judge call


def evaluate_checked(query: str, chunks: list[ContextChunk], response: str, *, store: Store | None,
                     client: JudgeClient,
                     trace_id: int | None = None, knowledge_base: str = "default",
                     metadata: dict[str, Any] | None = None, reference: Reference | None = None) -> EvaluationResult:
    """Evaluate inputs that were already validated and budget-checked, storing into `store` if given
    (`trace_id`: that stored trace, re-judged in place without a claim, refused while another
    process evaluates it; else a new trace).

    Stored traces that a process claims are judged by `judge_checked` through the work layer's
    runner (veralith.work.runner), which writes the outcome only while the claim is ours.
    """
    setting = _Setting(query, chunks, response, store=store, trace_id=trace_id, knowledge_base=knowledge_base,
                       metadata=metadata, reference=reference)
    return setting.saved(drive(_pipeline(client, query, chunks, response, **setting.pipeline), client))


async def aevaluate_checked(query: str, chunks: list[ContextChunk], response: str, *, store: Store | None,
                            client: JudgeClient, trace_id: int | None = None, knowledge_base: str = "default",
                            metadata: dict[str, Any] | None = None,
                            reference: Reference | None = None) -> EvaluationResult:
    """`evaluate_checked` with the judge calls awaited on the running event loop. The store's reads and
    the write of the result run on a thread (the store is shared by threads already): a database round
    trip never stalls the loop and the other traces' replies waiting on it."""
    if store is None:
        setting = _Setting(query, chunks, response, store=None, trace_id=trace_id, knowledge_base=knowledge_base,
                           metadata=metadata, reference=reference)
        return setting.saved(await adrive(_pipeline(client, query, chunks, response, **setting.pipeline), client))
    setting = await asyncio.to_thread(_Setting, query, chunks, response, store=store, trace_id=trace_id,
                                      knowledge_base=knowledge_base, metadata=metadata, reference=reference)
    judged = await adrive(_pipeline(client, query, chunks, response, **setting.pipeline), client)
    return await asyncio.to_thread(setting.saved, judged)


def judge_checked(query: str, chunks: list[ContextChunk], response: str, *, store: Store | None,
                  client: JudgeClient, trace_id: int | None = None, knowledge_base: str = "default",
                  metadata: dict[str, Any] | None = None, reference: Reference | None = None) -> JudgedTrace:
    """Judge checked inputs against what `store` knows of the trace (its knowledge base's threshold,
    the day it was logged), writing nothing: the caller writes the outcome (veralith.work.runner)."""
    setting = _Setting(query, chunks, response, store=store, trace_id=trace_id, knowledge_base=knowledge_base,
                       metadata=metadata, reference=reference)
    return drive(_pipeline(client, query, chunks, response, **setting.pipeline), client)


async def ajudge_checked(query: str, chunks: list[ContextChunk], response: str, *, store: Store | None,
                         client: JudgeClient, trace_id: int | None = None, knowledge_base: str = "default",
                         metadata: dict[str, Any] | None = None,
                         reference: Reference | None = None) -> JudgedTrace:
    """`judge_checked` with the judge calls awaited; the store's reads on a thread."""
    setting = await asyncio.to_thread(_Setting, query, chunks, response, store=store, trace_id=trace_id,
                                      knowledge_base=knowledge_base, metadata=metadata, reference=reference)
    return await adrive(_pipeline(client, query, chunks, response, **setting.pipeline), client)


class TraceJudge:
    """The pipeline with one judge client, as the work layer's runner judges stored traces with it
    (veralith.work.runner.Judge): stored inputs are checked already (when logged or read)."""

    def __init__(self, client: JudgeClient) -> None:
        self.client = client

    def judge(self, store: Store, trace_id: int, inputs: TraceInput) -> JudgedTrace:
        return judge_checked(inputs.query, inputs.context, inputs.response, store=store, client=self.client,
                             trace_id=trace_id, knowledge_base=inputs.knowledge_base, metadata=inputs.metadata,
                             reference=inputs.reference)

    async def ajudge(self, store: Store, trace_id: int, inputs: TraceInput) -> JudgedTrace:
        return await ajudge_checked(inputs.query, inputs.context, inputs.response, store=store, client=self.client,
                                    trace_id=trace_id, knowledge_base=inputs.knowledge_base,
                                    metadata=inputs.metadata, reference=inputs.reference)


class _Setting:
    """What a checked evaluation is judged against (threshold, as-of date) and where it is stored."""

    def __init__(self, query: str, chunks: list[ContextChunk], response: str, *, store: Store | None,
                 trace_id: int | None, knowledge_base: str, metadata: dict[str, Any] | None,
                 reference: Reference | None = None) -> None:
        self.store = store
        self.trace_id = trace_id
        threshold, source, labelled = _threshold(knowledge_base, store)
        cutoff, cutoff_labels = _cutoff(knowledge_base, store)
        created = None
        if store is not None and trace_id is not None:
            from veralith.store import ops

            # a stored trace is judged as of the day it was logged
            created = store.read(ops.trace_info, trace_id).created_at
        self.pipeline: dict[str, Any] = dict(threshold=threshold, threshold_source=source, threshold_labels=labelled,
                                             knowledge_base=knowledge_base, metadata=metadata, trace_id=trace_id,
                                             as_of=as_of_date(metadata or {}, created), reference=reference,
                                             review_cutoff=cutoff, review_cutoff_labels=cutoff_labels)

    def saved(self, judged: JudgedTrace) -> EvaluationResult:
        """The result, written first when there is a store: a new trace under an id from the work
        layer's allocator, or the stored trace re-judged in place (no claim held)."""
        result = judged.result
        if self.store is not None:
            from veralith.work.intake import store_result

            sizes = judged.output_sizes() if judged.output_sizes is not None else []
            result.trace_id = store_result(self.store, result, sizes=sizes)
        return result


def _threshold(knowledge_base: str, store: Store | None) -> tuple[float, ThresholdSource, int | None]:
    """(threshold, source, labelled traces it was fitted to or None)."""
    if store is None:
        return settings.sufficiency_fallback, ThresholdSource.fallback, None
    from veralith.store import ops

    found = store.read(ops.calibration, knowledge_base)
    return found.threshold, found.source, found.labels


def _cutoff(knowledge_base: str, store: Store | None) -> tuple[float, int | None]:
    """(the review flag's cut-off, labelled traces it was fitted to or None: veralith.store.review_cutoff)."""
    if store is None:
        return REVIEW_BELOW, None
    from veralith.store import ops

    found = store.read(ops.review_cutoff, knowledge_base)
    return found.cutoff, found.labels


def run_pipeline(client: JudgeClient, query: str, chunks: list[ContextChunk], response: str, *,
                 threshold: float, threshold_source: ThresholdSource, knowledge_base: str = "default",
                 metadata: dict[str, Any] | None = None, trace_id: int | None = None,
                 as_of: str | None = None, reference: Reference | None = None) -> EvaluationResult:
    """Run every stage on validated inputs. Never raises for a judge failure; records it instead."""
    return drive(_pipeline(client, query, chunks, response, threshold=threshold, threshold_source=threshold_source,
                           knowledge_base=knowledge_base, metadata=metadata, trace_id=trace_id, as_of=as_of,
                           reference=reference),
                 client).result


async def arun_pipeline(client: JudgeClient, query: str, chunks: list[ContextChunk], response: str, *,
                        threshold: float, threshold_source: ThresholdSource, knowledge_base: str = "default",
                        metadata: dict[str, Any] | None = None, trace_id: int | None = None,
                        as_of: str | None = None, reference: Reference | None = None) -> EvaluationResult:
    """`run_pipeline` on the running event loop (the same stages; calls awaited, see veralith.llm.calls)."""
    return (await adrive(_pipeline(client, query, chunks, response, threshold=threshold,
                                   threshold_source=threshold_source, knowledge_base=knowledge_base,
                                   metadata=metadata, trace_id=trace_id, as_of=as_of, reference=reference),
                         client)).result


def _pipeline(client: JudgeClient, query: str, chunks: list[ContextChunk], response: str, *,
              threshold: float, threshold_source: ThresholdSource, knowledge_base: str,
              metadata: dict[str, Any] | None, trace_id: int | None, as_of: str | None,
              threshold_labels: int | None = None, reference: Reference | None = None,
              review_cutoff: float = REVIEW_BELOW, review_cutoff_labels: int | None = None) -> Steps[JudgedTrace]:
    """Every stage, written once: it yields the judge calls it needs and is sent their outcomes. It
    returns the result with what its calls wrote per task (for the dry run, once it is stored)."""
    started = time.perf_counter()
    latency: dict[str, float] = {}
    usage = CallUsage()
    errors: list[JudgeError] = []
    versions: dict[str, str] = {}
    repairs: list[Repair] = []
    spent: list[tuple[str, CallUsage | None]] = []   # each call's usage by task (None: it failed), see below
    base = dict(trace_id=trace_id, knowledge_base=knowledge_base, metadata=metadata or {}, query=query,
                context=chunks, response=response, backend=client.backend, as_of=as_of)

    t0 = time.perf_counter()
    mode = effective_mode(client)
    base["mode"] = mode
    reply = None
    for task in ("fast",) if mode == "fast" else ("questions", "claims"):
        versions[task] = client.prompt_version(task)
    try:
        if mode == "fast":
            reply = yield from ask_steps(query, chunks, response, as_of)
            parts = reply.parts
        else:
            parts = yield from decompose_steps(query, response, concurrent=client.concurrent,
                                               extra=reference_mod.extraction_calls(query, reference))
        usage.add(parts.usage)
        spent += parts.by_task
        repairs += [Repair(phase=Phase.decompose, kind=k, message=m) for k, m in parts.repairs]
    except JudgeServerDown:
        raise   # not this trace's failure: it stays unjudged (pending) for a later run
    except Exception as exc:  # isolated: any failure becomes a recorded error, never a crash
        _add_failed_usage(usage, exc)
        errors.append(_error(Phase.decompose, _as_call_error(exc)))
        latency["decompose"] = _ms(t0)
        latency["total"] = _ms(started)
        return JudgedTrace(EvaluationResult(
            **base, status=status(errors=errors, failure_cell=None, response_kind=None, n_claims=0),
            errors=errors, latency_ms=latency, usage=usage.as_usage(), prompt_versions=versions,
            judge_model=client.model))
    latency["decompose"] = _ms(t0)

    riding = (reference_mod.Riding(query, chunks, parts.claims, reference, parts.extra, as_of, settings.batch_size)
              if reply is None and reference is not None else None)
    if reply is None:
        judged, missing = yield from _judge_steps(client, query, chunks, parts, latency, usage, errors, versions,
                                                  repairs, as_of, spent, riding)
    else:
        judged, missing = yield from _judges_of(reply, query, chunks, parts, latency, usage, errors, repairs, as_of,
                                                spent)
    assessment = None
    if reference is not None:   # the single-call mode has no batches to ride: its own steps
        assessment, ref_usage = riding.assessment() if riding is not None else (
            yield from reference_mod.reference_steps(query, chunks, parts.claims, reference, as_of,
                                                     settings.batch_size))
        usage.add(ref_usage)
    suff, faith, comp = judged.sufficiency, judged.faithfulness, judged.completeness

    t0 = time.perf_counter()
    # Where some verdicts are missing, only what every way they could have gone agrees on is decided.
    decision = decide(parts.sub_questions, parts.claims, parts.gaps, parts.asks_clarification, judged, missing,
                      threshold)
    cls, kind, level, suff_fraction = decision.classification, decision.kind, decision.level, decision.fraction
    example = decision.example
    shown = classify_mod.classify(parts.sub_questions, parts.claims, example.faithfulness, example.completeness)
    deciding = deciders(parts.sub_questions, parts.claims, parts.gaps, parts.asks_clarification, example.sufficiency,
                        example.faithfulness, example.completeness) if decision.gate_decided else []
    flagged = flagged_by(deciding, review_cutoff)
    diagnosis = Diagnosis(
        failure_cell=cls.failure_cell, sufficiency_level=level, sufficiency_fraction=suff_fraction,
        faithfulness_fraction=cls.faithfulness_fraction, threshold=threshold, threshold_source=threshold_source,
        threshold_labels=threshold_labels, n_sub_questions=len(parts.sub_questions), n_claims=len(parts.claims),
        n_uncovered_sub_questions=cls.n_uncovered_sub_questions, n_extra_claims=cls.n_extra_claims,
        n_partial_sub_questions=cls.n_partial_sub_questions, coverage=cls.coverage,
        needs_review=bool(flagged), review_ids=flagged, review_cutoff=review_cutoff,
        review_cutoff_labels=review_cutoff_labels, review_confidence=least_sure(deciding))
    refusal = kind in REFUSAL_KINDS
    suggestion = (suggest(cls.failure_cell, level, refusal=refusal, faithfulness=faith or [])
                  if cls.failure_cell is not None else None)
    ex_suff = example.sufficiency
    sufficient = None if ex_suff is None else {j.sub_question_id: j.verdict is Verdict.Y for j in ex_suff}
    st = status(errors=errors, failure_cell=cls.failure_cell, response_kind=kind, n_claims=len(parts.claims),
                coverage=shown.coverage, sufficient=sufficient, n_extra_claims=shown.n_extra_claims or 0)
    if missing and not decision.gate_decided and (cls.failure_cell is not None or _only_missing(errors)):
        st = _undecided(st, cls.failure_cell, missing)
    st, suggestion = reference_gate(st, assessment), with_cause(suggestion, assessment)
    latency["classify"] = _ms(t0)
    result = EvaluationResult(
        **base, sub_questions=parts.sub_questions, claims=parts.claims, gaps=parts.gaps, remarks=parts.remarks,
        response_kind=kind,
        refusal=refusal, sufficiency=suff or [], faithfulness=faith or [], completeness=comp, diagnosis=diagnosis,
        suggestion=suggestion, status=st, errors=errors, repairs=repairs, latency_ms=latency,
        usage=usage.as_usage(), prompt_versions=versions, judge_model=client.model, reference=assessment)
    # What `--dry-run` learns output sizes from, worked out only when the result is stored (the explain
    # call is left out: its allowance stays as it is).
    measured = _output_sizes(client, query, chunks, response, mode, as_of, spent)
    if settings.explain and explain_mod.wanted(result):
        t0 = time.perf_counter()
        versions["explain"] = client.prompt_version("explain")
        result.explanation = yield from explain_mod.explain_steps(client, result)
        usage.add(result.explanation.usage)   # the trace's cost includes its explanation
        result.usage, result.prompt_versions = usage.as_usage(), versions
        latency["explain"] = _ms(t0)
    latency["total"] = _ms(started)
    result.latency_ms = latency
    return JudgedTrace(result, measured)


def _output_sizes(client: JudgeClient, query: str, chunks: list[ContextChunk], response: str, mode: str,
                  as_of: str | None, spent: list[tuple[str, CallUsage | None]]) -> _Measured | None:
    """What the trace's calls wrote per task next to the dry run's plan and allowance for them, as a
    function called before the result is written; None for the offline judge, which makes no paid
    calls."""
    if client.backend == "local":
        return None
    tasks = ("fast",) if mode == "fast" else ("questions", "claims", "sufficiency", "faithfulness", "completeness")
    # The names the calls were sent under (the dry run's names), not the one a server reported back.
    return _Measured(query, chunks, response, spent, model=getattr(client, "sent_model", client.model),
                     decomposer_model=getattr(client, "decomposer_model", None),
                     versions={task: client.prompt_version(task) for task in tasks},
                     batch_size=settings.batch_size, mode=mode, as_of=as_of)


@dataclass(frozen=True, eq=False)
class _Measured:
    """veralith.llm.estimate.output_sizes of one evaluation, worked out when called: only a stored
    result needs it (it renders the dry run's plan of the trace)."""

    query: str
    chunks: list[ContextChunk]
    response: str
    spent: list[tuple[str, CallUsage | None]]
    model: str
    decomposer_model: str | None
    versions: dict[str, str]
    batch_size: int
    mode: str
    as_of: str | None

    def __call__(self) -> list[OutputSize]:
        from veralith.llm.estimate import output_sizes  # lazy: it loads the prompts and tiktoken

        return output_sizes(self.query, self.chunks, self.response, self.spent, model=self.model,
                            decomposer_model=self.decomposer_model, versions=self.versions,
                            batch_size=self.batch_size, mode=self.mode, as_of=self.as_of)


def _only_missing(errors: list[JudgeError]) -> bool:
    return all(e.kind == "missing_items" for e in errors if e.phase is not Phase.sufficiency)


def _undecided(st: Status, cell: FailureCell | None, missing: Missing) -> Status:
    """The gate (and maybe the cell) depends on verdicts the judges did not give: indeterminate, naming them."""
    named = ", ".join(f"{i} ({phase})" for phase in ("faithfulness", "completeness", "sufficiency")
                      for i in getattr(missing, phase))
    what = ("No failure cell can be decided" if cell is None
            else f"The cell is {cell.value}, but the gate cannot be decided")
    return st.model_copy(update={"quality_gate": Gate.indeterminate, "reason": "missing_verdicts",
                                 "summary": f"{what} without the verdicts the judges did not give: {named}."})


Plan = tuple[Any, list[Any], Callable[[list[Any]], Any], Callable[[], Any]]


def _plans(query: str, chunks: list[ContextChunk], parts: Decomposition, size: int,
           as_of: str | None) -> dict[Phase, Plan]:
    """Per judge: (task, its call inputs in batches of `size`, how to assemble its calls, how to
    decide it without a call). A judge with nothing to ask a model (no context, no claims) has no inputs."""
    sqs, claims, gaps = parts.sub_questions, parts.claims, parts.gaps
    fplan = faithfulness.plan(query, claims, parts.context_notes, chunks, size, as_of, sqs)
    return {
        Phase.sufficiency: (SUFFICIENCY, sufficiency.plan(query, sqs, chunks, size, as_of),
                            lambda calls: sufficiency.assemble(calls, sqs),
                            lambda: sufficiency.without_call(sqs)),
        Phase.faithfulness: (FAITHFULNESS, fplan,
                             lambda calls: faithfulness.assemble(calls, claims, fplan),
                             lambda: faithfulness.without_call(claims)),
        Phase.completeness: (COMPLETENESS, completeness.plan(query, sqs, claims, gaps, parts.context_notes),
                             lambda calls: completeness.assemble(calls, sqs, claims, gaps),
                             lambda: completeness.without_call(sqs, claims, gaps)),
    }


def _judge_steps(client: JudgeClient, query: str, chunks: list[ContextChunk], parts: Decomposition,
                 latency: dict[str, float], usage: CallUsage, errors: list[JudgeError], versions: dict[str, str],
                 repairs: list[Repair], as_of: str | None,
                 spent: list[tuple[str, CallUsage | None]],
                 riding: reference_mod.Riding | None = None) -> Steps[tuple[Judged, Missing]]:
    """Ask every judge's batches at once (judges and batches all run concurrently on an I/O-bound
    backend), then assemble each judge from its own batches only. A judge with nothing to ask a
    model (no context, no claims) is decided in code and makes no call."""
    plans = _plans(query, chunks, parts, settings.batch_size, as_of)
    asked: list[tuple[Task, BaseModel]] = []
    for phase, (task, payloads, _, _) in plans.items():
        if payloads:
            versions[phase.value] = client.prompt_version(task.name)
        asked += [(task, p) for p in payloads]
    own = len(asked)
    asked += riding.calls if riding is not None else []   # the reference's verdicts ride this batch
    started = time.perf_counter()
    sent = (yield Batch(asked)) if asked else []
    if riding is not None:
        riding.outcomes = list(sent[own:])
    outcomes = iter(sent[:own])
    by_phase = {phase: [next(outcomes) for _ in payloads] for phase, (_, payloads, _, _) in plans.items()}
    return _gather(plans, by_phase, started, latency, usage, errors, repairs, spent=spent)


def _judges_of(reply: FastReply, query: str, chunks: list[ContextChunk], parts: Decomposition,
               latency: dict[str, float], usage: CallUsage, errors: list[JudgeError], repairs: list[Repair],
               as_of: str | None, spent: list[tuple[str, CallUsage | None]]) -> Steps[tuple[Judged, Missing]]:
    """The single-call mode's judges: each one's items read out of the one reply, against the very input
    the full mode would have sent it (unbatched: the reply judged every item at once), the bad ones asked
    again once (veralith.pipeline.fast), then assembled and decided by the same code as the full mode's calls."""
    size = max(1, len(parts.sub_questions), len(parts.claims))
    plans = _plans(query, chunks, parts, size, as_of)
    started = time.perf_counter()
    asked = [(task, p) for task, payloads, _, _ in plans.values() for p in payloads]
    found, reask = yield from verdict_steps(reply, asked)
    if reask.calls:   # the re-ask is one more request of the single call
        usage.add(reask)
        spent.append((reply.parts.by_task[0][0], reask))
    outcomes = iter(found)
    by_phase = {phase: [next(outcomes) for _ in payloads] for phase, (_, payloads, _, _) in plans.items()}
    return _gather(plans, by_phase, started, latency, usage, errors, repairs)


def _gather(plans: dict[Phase, Plan], outcomes: dict[Phase, list[Outcome]], started: float,
            latency: dict[str, float], usage: CallUsage, errors: list[JudgeError],
            repairs: list[Repair], *,
            spent: list[tuple[str, CallUsage | None]] | None = None) -> tuple[Judged, Missing]:
    """Each judge assembled from its own calls only: a failed call is that judge's error, an item with
    no usable verdict is a missing verdict the pipeline decides around."""
    results: dict[Phase, Any] = {}
    missing: dict[Phase, dict[str, str]] = {}
    down: JudgeServerDown | None = None
    for phase, (task, payloads, assemble, decided) in plans.items():
        calls, failure = [], None
        for outcome in outcomes[phase]:
            if spent is not None:
                spent.append((task.name, None if isinstance(outcome, Exception) else outcome[0].usage))
            if isinstance(outcome, Exception):
                _add_failed_usage(usage, outcome)
                if isinstance(outcome, JudgeServerDown):
                    down = down or outcome
                failure = failure or _as_call_error(outcome)
                continue
            call, finished = outcome
            usage.add(call.usage)
            calls.append(call)
            repairs += [Repair(phase=phase, kind=k, message=m) for k, m in call.repairs]
            missing.setdefault(phase, {}).update(call.missing)
            latency[phase.value] = max(latency.get(phase.value, 0.0), (finished - started) * 1000)
        latency.setdefault(phase.value, 0.0)
        if failure is None:
            try:
                results[phase] = assemble(calls) if payloads else decided()
            except Exception as exc:
                failure = _as_call_error(exc)
        if failure is not None:
            errors.append(_error(phase, failure))
            results[phase] = None
            missing.pop(phase, None)
        elif missing.get(phase):
            errors.append(JudgeError(phase=phase, kind="missing_items", attempts=2, message=(
                "no usable verdict, even after a re-ask, for " + "; ".join(
                    f"{i}: {why}" for i, why in missing[phase].items()))))
    if down is not None:
        raise down   # not this trace's failure: it stays unjudged (pending) for a later run
    judged = Judged(results[Phase.sufficiency], results[Phase.faithfulness], results[Phase.completeness])
    return judged, Missing(*(tuple(missing.get(p, {})) for p in (Phase.sufficiency, Phase.faithfulness,
                                                                    Phase.completeness)))


def _as_call_error(exc: BaseException) -> JudgeCallError:
    if isinstance(exc, JudgeCallError):
        return exc
    # A bug or an unexpected reply shape: still isolated to its judge, and named so it can be reported.
    return JudgeCallError("internal", f"{type(exc).__name__}: {exc}")


def _add_failed_usage(usage: CallUsage, exc: BaseException) -> None:
    spent = getattr(exc, "usage", None)
    if isinstance(spent, CallUsage):
        usage.add(spent)


def _error(phase: Phase, exc: JudgeCallError) -> JudgeError:
    return JudgeError(phase=phase, kind=exc.kind, message=exc.message, attempts=exc.attempts)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)
