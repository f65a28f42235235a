"""The work layer's calls as functions of a store, for tests that set up or inspect claims, spools
and results directly (veralith.work: the one place that claims traces and writes outcomes)."""

from __future__ import annotations

from typing import Any

from veralith.models import EvaluationResult
from veralith.store.protocol import TraceInput
from veralith.work import intake, shipper
from veralith.work.batchjobs import BatchJobs
from veralith.work.claims import claims_for
from veralith.work.spooler import spooler_for


def create_trace(store: Any, trace: TraceInput, *, queued: bool = False, run: str | None = None,
                 run_id: int | None = None) -> int:
    return intake.create(store, trace, queued=queued, run=run, run_id=run_id)


def save_result(store: Any, result: EvaluationResult) -> int:
    """Write a result as a caller without a claim would (a new trace, or one re-judged in place); a
    trace this process claimed is written as its holder."""
    if result.trace_id is not None and claims_for(store).holds(result.trace_id):
        return claims_for(store).save(result)
    return intake.store_result(store, result)


def claim(store: Any, trace_id: int, *, failed: bool = False, again: bool = False) -> bool:
    return claims_for(store).claim(trace_id, failed=failed, again=again)


def claim_batch(store: Any, limit: int, *, knowledge_base: str | None = None) -> list[int]:
    return claims_for(store).claim_batch(limit, knowledge_base=knowledge_base)


def resumable(store: Any, *, failed: bool = False) -> list[int]:
    return claims_for(store).resumable(failed=failed)


def abandoned(store: Any) -> list[int]:
    return claims_for(store).abandoned()


def held(store: Any) -> list[int]:
    return claims_for(store).held()


def release(store: Any, trace_id: int) -> bool:
    return claims_for(store).release(trace_id)


def drop_lease(store: Any, trace_id: int) -> None:
    claims_for(store).drop(trace_id)


def mark_error(store: Any, trace_id: int, message: str) -> bool:
    return claims_for(store).fail(trace_id, message)


def ship(store: Any) -> list[int]:
    return shipper.ship(store)


def recover(store: Any) -> int:
    return shipper.recover(store)


def spool_trace(store: Any, trace: TraceInput, *, run: str | None = None, evaluate_here: bool = True) -> int:
    return spooler_for(store.spool_url).append(trace, run=run, evaluate_here=evaluate_here)


def batch_jobs(store: Any) -> BatchJobs:
    return BatchJobs(store)
