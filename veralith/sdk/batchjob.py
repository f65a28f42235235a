"""Batch-API jobs: judge stored traces through the OpenAI Batch API (`veralith eval --batch`,
`veralith batch collect`).

`start(store, trace_ids)` puts traces this process queued into a new job (reserved for it in the
store: veralith.work.batchjobs). `collect(store, job)` then works the job to its end, in rounds:

1. find any batch recorded but never known to be created (a crash), and read every batch of the job
   that finished (veralith.sdk.batchsend: replies kept, a 4xx kept as the service's answer, requests
   failed or left unanswered made new again while VERALITH_BATCH_MAX_TRIES allows, a batch whose
   input the service refused given up with its reason);
2. a pass over the job's traces with `BatchClient` (veralith.llm.batchreplay): each trace is judged
   by the synchronous pipeline, its calls answered from the replies. A trace whose calls are all
   answered is taken out of the reservation and its result saved (one conditional UPDATE: judged
   exactly once, whichever collector gets there); the others name the requests they still need;
3. the new requests go out (only those: a partly failed batch re-sends its failures), as one batch
   per model, each within the service's limits (VERALITH_BATCH_MAX_REQUESTS, VERALITH_BATCH_MAX_BYTES);
   all of a round's batches are then waited for together;
4. wait (VERALITH_BATCH_POLL_S, growing 1.5 times per round without news, up to ten times) and
   go round again, until no trace is left. A round in which no batch came back makes no pass (2.).

Everything needed to go on is in the store after each step, so the process may die at any point:
`collect` in any process (another host, in fleet mode) takes the job over once its collector's
lease is stale. The reply cache applies as in the synchronous path: a request it answers is never
sent. A batch service that cannot be reached (or answers 5xx) stops the collect with
JudgeServerDown, the job left as it is, its traces pending.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veralith.config import settings
from veralith.errors import StoreError, VeralithError
from veralith.models import EvaluationResult
from veralith.work.batchjobs import BatchJobs

if TYPE_CHECKING:
    from veralith.store.protocol import Store

__all__ = ["JobBusy", "JobNotFound", "Round", "collect", "start"]

logger = logging.getLogger("veralith.sdk")


class JobNotFound(StoreError):
    """No batch job by that id in this store."""


class JobBusy(VeralithError):
    """Another live process is collecting the job."""


@dataclass
class Round:
    """Where a job stands after one round (for progress lines)."""

    job: str
    traces_left: int
    judged: int = 0                                  # traces judged and stored in this round
    sent: int = 0                                    # requests sent in a new batch this round
    batches: list[tuple[str, str, int, int]] = field(default_factory=list)   # (id, status, done, total) out


def start(store: Store, trace_ids: list[int], *, run_id: int | None = None) -> str:
    """A new job holding these traces (pending, queued by this process); its id."""
    from veralith.work.claims import claims_for

    jobs = BatchJobs(store)
    job = "job-" + secrets.token_hex(6)
    current = settings.current
    jobs.create_job(job, {"judge_model": current.judge_model, "decomposer_model": current.decomposer_model,
                          "run_id": run_id})
    jobs.reserve(job, trace_ids)
    claims = claims_for(store)
    for trace_id in trace_ids:   # a trace claimed to be re-judged in place: its lease is the job's now
        claims.drop(trace_id)
    return job


def collect(store: Store, job: str, *, on_result: Callable[[EvaluationResult], None] | None = None,
            on_round: Callable[[Round], None] | None = None, sdk: Any = None,
            sleep: Callable[[float], None] = time.sleep) -> int:
    """Work the job to its end (see the module docstring); the number of traces judged here.

    JobNotFound / JobBusy when there is no such job / another live collector has it. `on_result`
    gets each stored result, `on_round` where the job stands after each round.
    """
    from veralith.llm import batchremote
    from veralith.sdk import batchsend

    jobs = BatchJobs(store)
    taken = jobs.take_job(job)
    if taken is None:
        raise JobNotFound(f"no batch job {job!r} in {store.url} (see `veralith batch status`)")
    if not taken:
        raise JobBusy(f"batch job {job} is being collected by another live process; it is left to it")
    sdk = sdk or batchremote.connect()
    first = settings.current.batch_poll_s
    wait, judged, passes = first, 0, 0
    try:
        while True:
            batchsend.recover(sdk, jobs, job)   # looked at with the others just below
            news, out = batchsend.gather(sdk, jobs, job)
            traces = jobs.reserved(job)
            if not traces:
                jobs.finish_job(job)
                return judged
            now = Round(job, len(traces))
            waiting = any(status not in batchremote.FINISHED for _, status, _, _ in out) or bool(jobs.unsent(job))
            if news or not waiting or not passes:
                # Without a batch back since the last pass, a pass would find the same answers and
                # defer the same calls: skipped while batches are out, however long they take.
                passes += 1
                now.judged, needed = _pass(store, job, traces, jobs.replies(job), on_result)
                judged += now.judged
                if needed:
                    jobs.add_requests(job, sorted(needed.items()))
            new = jobs.to_send(job)
            created: list[tuple[str, str, int]] = []
            if new:
                now.sent, created = batchsend.send(sdk, jobs, job, new)
            now.traces_left = len(traces) - now.judged
            now.batches = [*out, *((b, status, 0, total) for b, status, total in created)]
            if on_round is not None:
                on_round(now)
            if all(status in batchremote.FINISHED for _, status, _, _ in now.batches) and not jobs.unsent(job):
                if now.traces_left and not now.judged:
                    # Every call answered or given up, yet traces were neither judged nor waiting: a
                    # bug, never a loop. Stop with the job left as it is (collect takes it up again).
                    raise StoreError(f"batch job {job}: {now.traces_left} traces neither judged nor waiting")
                continue
            wait = first if (news or now.judged or now.sent) else min(wait * 1.5, first * 10)
            sleep(wait)
            jobs.renew_job(job)
    finally:
        jobs.release_job(job)


def _pass(store: Store, job: str, traces: list[int], answers: dict[str, tuple[str, str | None]],
          on_result: Callable[[EvaluationResult], None] | None) -> tuple[int, dict[str, str]]:
    """Judge every trace whose calls are answered; (how many were stored, the requests still needed)."""
    from veralith.llm.batchreplay import BatchClient

    client = BatchClient(answers)
    workers = max(1, min(settings.current.concurrency, len(traces)))

    def one(trace_id: int) -> bool:
        return client.run_pass(lambda: _judge(store, job, trace_id, client, on_result))

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="veralith-batch") as pool:
        stored = sum(pool.map(_deferred_is_false(one), traces))
    return stored, dict(client.needed)


def _deferred_is_false(one: Callable[[int], bool]) -> Callable[[int], bool]:
    from veralith.llm.batchreplay import CallDeferred

    def wrapped(trace_id: int) -> bool:
        try:
            return one(trace_id)
        except CallDeferred:
            return False
    return wrapped


def _judge(store: Store, job: str, trace_id: int, client: Any,
           on_result: Callable[[EvaluationResult], None] | None) -> bool:
    """One trace through the work layer's runner, its calls answered from the job's replies; written
    (True) once they all are. The trace is taken out of the job's reservation only then (one
    conditional UPDATE: only the collector that takes it writes a result, veralith.work.batchjobs);
    a call still unanswered (CallDeferred) leaves it reserved for a later pass."""
    from veralith.llm.batchreplay import CallDeferred
    from veralith.pipeline.evaluate import TraceJudge
    from veralith.work.policy import Action
    from veralith.work.runner import Runner

    jobs = BatchJobs(store)
    runner = Runner(store, TraceJudge(client), passthrough=(CallDeferred,))
    outcome = runner.run(trace_id, claim=False, take=jobs.taker(job))
    if outcome.action is Action.SAVED:
        if on_result is not None and outcome.result is not None:
            on_result(outcome.result)
        return True
    if outcome.decision is not None and outcome.decision.stops_drain and outcome.error is not None:
        raise outcome.error   # not the trace's failure: the collect stops, the job stays for a later one
    if outcome.action is Action.RECORD:
        logger.warning("veralith: batch job %s: trace %s failed: %s", job, trace_id, outcome.error)
    return False
