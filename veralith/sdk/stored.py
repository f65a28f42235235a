"""Evaluating stored traces: the one path by which `log()`'s worker, `resume()`, `veralith eval`
and `veralith resume` claim a trace, evaluate it and record the outcome.

`resumable(store)` says which traces a resume takes; `evaluate_stored(store, id)` claims one,
evaluates it into the store and always ends its lease: with the result saved, with the failure
recorded on the trace (status error, message with secrets masked), or, when the lease was lost to
another process meanwhile, with nothing written (that process decides the outcome).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from veralith.models import EvaluationResult

if TYPE_CHECKING:  # the store loads sqlite-utils: only once something is stored, never at `import veralith`
    from veralith.store.protocol import TraceInput, TraceStore

__all__ = ["aevaluate_stored", "evaluate_stored", "failure_message", "resumable"]

logger = logging.getLogger("veralith.sdk")


def resumable(store: TraceStore, *, failed: bool = False) -> list[int]:
    """The traces a resume takes now, oldest first: pending and nobody's, left running by a process
    that is gone, or made durable outside the store by one (moved in first). With `failed`, instead
    the traces whose last evaluation failed (judge errors, or status error)."""
    if not failed:
        store.recover()
    return store.resumable(failed=failed)


def failure_message(exc: BaseException) -> str:
    """What is stored (and shown) for a failed evaluation: type and message, secrets masked."""
    from veralith.config import redact_configured

    return redact_configured(f"{type(exc).__name__}: {exc}")


def evaluate_stored(store: TraceStore, trace_id: int, *, client: Any = None, claim: bool = True,
                    failed: bool = False, again: bool = False, trace: TraceInput | None = None,
                    record_failure: Callable[[], bool] | None = None) -> EvaluationResult | None:
    """Claim, evaluate and store one stored trace; the result, or None when it was not ours to take
    (claimed by another process, or our lease was lost meanwhile).

    `failed` / `again` claim a trace whose last evaluation failed / any trace nobody is evaluating
    (re-judging in place; the outcome it replaces goes to the trace's history). `trace` gives the
    inputs to judge instead of the stored ones (a re-run record whose inputs changed; they replace
    the stored ones with the result). `claim=False`: the caller holds the claim already.

    An evaluation that raises is recorded on the trace and the exception re-raised, unless
    `record_failure()` says no (the SDK at interpreter exit, where the failure is not the trace's).
    WritesStopped is raised as is: nothing more can be written. JudgeServerDown is raised after the
    trace is handed back as pending (`release`): a dead server is not the trace's failure.
    """
    from veralith.pipeline.evaluate import evaluate_checked

    if claim and not store.claim(trace_id, failed=failed, again=again):
        return None
    try:
        client, inputs = _inputs(store, trace_id, client, trace)
        # Validated and budget-checked when it was logged or read; stored where it was logged.
        return evaluate_checked(inputs.query, inputs.context, inputs.response, store=store, client=client,
                                trace_id=trace_id, knowledge_base=inputs.knowledge_base, metadata=inputs.metadata)
    except Exception as exc:
        _ended(store, trace_id, exc, record_failure)   # raises, unless the lease was lost
        return None
    finally:
        store.drop_lease(trace_id)  # no-op once saved or marked


async def aevaluate_stored(store: TraceStore, trace_id: int, *, client: Any = None, claim: bool = True,
                           failed: bool = False, again: bool = False, trace: TraceInput | None = None,
                           record_failure: Callable[[], bool] | None = None) -> EvaluationResult | None:
    """`evaluate_stored` with the judge calls awaited on the running event loop (the same claim, outcomes
    and lease); the store's work runs on a thread, so a database round trip never stalls the loop."""
    from veralith.pipeline.evaluate import aevaluate_checked

    if claim and not await asyncio.to_thread(store.claim, trace_id, failed=failed, again=again):
        return None
    try:
        client, inputs = await asyncio.to_thread(_inputs, store, trace_id, client, trace)
        return await aevaluate_checked(inputs.query, inputs.context, inputs.response, store=store, client=client,
                                       trace_id=trace_id, knowledge_base=inputs.knowledge_base,
                                       metadata=inputs.metadata)
    except Exception as exc:
        await asyncio.to_thread(_ended, store, trace_id, exc, record_failure)   # raises, unless the lease was lost
        return None
    finally:
        await asyncio.to_thread(store.drop_lease, trace_id)  # no-op once saved or marked


def _inputs(store: TraceStore, trace_id: int, client: Any, trace: TraceInput | None) -> tuple[Any, TraceInput]:
    """The judge client (the configured one when none is given) and the inputs to judge."""
    if client is None:
        from veralith.llm import get_client

        client = get_client()
    return client, store.load_input(trace_id) if trace is None else trace


def _ended(store: TraceStore, trace_id: int, exc: Exception, record_failure: Callable[[], bool] | None) -> None:
    """What an evaluation that raised `exc` leaves: None when the lease was lost, else `exc` re-raised,
    recorded on the trace first when it is the trace's failure (see evaluate_stored)."""
    from veralith.errors import JudgeServerDown
    from veralith.store.errors import StoreUnavailable, WritesStopped
    from veralith.store.ownership import LeaseLost

    if isinstance(exc, LeaseLost):
        logger.warning("veralith: %s", exc)
        return
    if isinstance(exc, (WritesStopped, StoreUnavailable)):
        # Not the trace's failure: the store stopped or went away. Nothing is recorded (nothing could
        # be); the trace stays claimable by this process (veralith.store.repository.claim_trace).
        raise exc
    if isinstance(exc, JudgeServerDown):
        # Not the trace's failure: nothing was judged, so it goes back to pending for a later run.
        store.release(trace_id)
        raise exc
    if record_failure is None or record_failure():
        try:
            store.mark_error(trace_id, failure_message(exc))
        except WritesStopped:
            raise
        except Exception:
            logger.exception("veralith: could not record the failure of trace %s", trace_id)
    raise exc
