"""What the SDK, the CLI and the orchestrator need from a trace store, and nothing more.

`TraceStore` is the interface callers are typed against; `veralith.store.sqlite.SQLiteStore` is
its implementation over one SQLite file, and `veralith.store.open_store()` returns the configured
one. A second implementation (another database, a service) satisfies this protocol and no caller
changes. The rules a store must keep, whatever it is built on:

- `create_trace` makes the trace durable before it returns. With `wait_ms` it returns within about
  that long even while the store is busy, still durable, under the id it will keep.
- A trace is evaluated by whoever claims it. `claim` is atomic (two callers never both get True),
  the claim is a lease the store renews itself (`renew`) until `save_result`, `mark_error` or
  `drop_lease` ends it, and a lease whose holder is gone becomes claimable again (`resumable`).
- `save_result` stores a whole result and marks the trace done in one step, and only while the
  caller still holds the lease (LeaseLost otherwise). The outcome it replaces, if any, is kept in
  the trace's history.
- `external_id` is unique within a knowledge base.
- Calibration's rule (veralith.store.calibration.calibrate) runs over `calibration_count` and
  `calibration_values`, so every store calibrates alike.

Errors: TraceNotFound, TraceNotEvaluated, AmbiguousTraceId, DuplicateExternalId, LeaseLost and
WritesStopped (the store stopped taking writes: full disk, read-only file), all StoreError.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from veralith.models import ContextChunk, EvaluationResult

__all__ = ["StoredResult", "TraceInfo", "TraceInput", "TraceStore"]


@dataclass(frozen=True)
class TraceInput:
    """What was logged for a trace: its inputs, already validated and normalised."""

    query: str
    context: list[ContextChunk]
    response: str
    knowledge_base: str = "default"
    metadata: dict[str, Any] = field(default_factory=dict)
    external_id: str | None = None
    # The app's own time for the call, {part: ms} with parts from pipeline.inputs.LATENCY_PARTS
    # (checked there). Kept beside the trace; the judges never read it.
    app_latency_ms: dict[str, float] = field(default_factory=dict)

    def same_inputs(self, other: TraceInput) -> bool:
        """Whether `other` logs the same thing: query, context, response, knowledge base and
        metadata. Metadata counts because the judges read it (metadata["as_of"] is the date they
        take as today) and because a trace found unchanged keeps what was stored before."""
        return (self.query, self.context, self.response, self.knowledge_base, self.metadata) == (
            other.query, other.context, other.response, other.knowledge_base, other.metadata)


@dataclass(frozen=True)
class TraceInfo:
    """A trace's bookkeeping: where it stands and what judged it last. Times are ISO-8601 UTC."""

    trace_id: int
    knowledge_base: str
    external_id: str | None
    status: str                      # pending | running | done | error
    created_at: str
    updated_at: str
    evaluated_at: str | None         # when the stored result was written, if there is one
    has_result: bool
    backend: str | None = None       # of the stored result
    judge_model: str | None = None
    prompt_versions: dict[str, str] = field(default_factory=dict)
    app_latency_ms: dict[str, float] = field(default_factory=dict)  # as logged (TraceInput.app_latency_ms)


class StoredResult(NamedTuple):
    result: EvaluationResult
    info: TraceInfo


@runtime_checkable
class TraceStore(Protocol):
    """The store interface; see the module docstring for the rules every implementation keeps."""

    # -- traces in, work claimed and finished ---------------------------------------------------
    def create_trace(self, trace: TraceInput, *, queued: bool = False, wait_ms: float | None = None,
                     run: str | None = None, run_id: int | None = None) -> int:
        """Store a pending trace; return its id. `queued`: reserved for this process's own queue, so
        no other process resumes it while this one lives. `run` files it under the SDK run of that
        name, `run_id` under an open run. Raises DuplicateExternalId when the knowledge base already
        has a trace with `trace.external_id`."""
        ...

    def claim(self, trace_id: int, *, failed: bool = False, again: bool = False) -> bool:
        """Take a trace for evaluation (pending, or running under a stale lease). `failed` also takes
        one whose last evaluation failed; `again` any trace nobody is evaluating (re-judging in place).
        False when it is not ours to take; TraceNotFound for an unknown id."""
        ...

    def renew(self, trace_ids: Collection[int]) -> None:
        """Extend this process's leases on these traces (those still ours)."""
        ...

    def release(self, trace_id: int, *, wait_ms: float | None = None) -> bool:
        """Give back this process's reservation of a pending trace; False if the store stayed busy
        for `wait_ms` (the reservation then ends with the process)."""
        ...

    def drop_lease(self, trace_id: int) -> None:
        """Stop renewing the lease of an evaluation that ended without an outcome."""
        ...

    def save_result(self, result: EvaluationResult) -> int:
        """Store the result and mark the trace done (a new trace when `result.trace_id` is None)."""
        ...

    def mark_error(self, trace_id: int, message: str) -> bool:
        """Record a failed evaluation; False when our lease was lost (the new holder decides)."""
        ...

    # -- reads ---------------------------------------------------------------------------------
    def load_input(self, trace_id: int) -> TraceInput: ...

    def load_result(self, trace_id: int) -> EvaluationResult:
        """The stored result; TraceNotEvaluated when there is none yet."""
        ...

    def trace_info(self, trace_id: int) -> TraceInfo: ...

    def find_external(self, knowledge_base: str, external_id: str) -> TraceInfo | None: ...

    def resolve(self, ref: str, *, knowledge_base: str | None = None) -> int:
        """The trace a person means by `ref`: `#N` is trace id N; a bare number is a trace id if one
        exists (in `knowledge_base`, when given), else an external id. AmbiguousTraceId when a bare
        number is one trace's id and another's external id, or when the external id is used in
        several knowledge bases and none was given; TraceNotFound when nothing matches."""
        ...

    def resumable(self, *, failed: bool = False) -> list[int]:
        """Traces nobody is working on (pending, or running under a stale lease), oldest first; with
        `failed`, instead those whose last evaluation failed."""
        ...

    def recover(self) -> list[int]:
        """Bring in traces that processes now gone had made durable outside the store proper."""
        ...

    def flush(self) -> None:
        """Bring in what this process made durable outside the store proper (a busy-time spool)."""
        ...

    def list_traces(self, *, limit: int = 50, cell: str | None = None, kb: str | None = None,
                    status: str | None = None, since: str | None = None,
                    preview_chars: int | None = 80) -> list[dict[str, Any]]:
        """The newest traces first, filtered; each row a dict (veralith.store.queries.list_traces)."""
        ...

    def stats(self, *, kb: str | None = None) -> dict[str, Any]: ...

    def iter_results(self, since: str | dt.datetime | None = None,
                     on_error: Callable[[int, Exception], None] | None = None,
                     trace_ids: list[int] | None = None) -> Iterator[StoredResult]:
        """Every stored result with its bookkeeping, oldest first (only `trace_ids`, when given).
        `on_error` receives a trace that cannot be read, which is then skipped."""
        ...

    # -- calibration ---------------------------------------------------------------------------
    def calibration_count(self, knowledge_base: str) -> int:
        """Done results of this knowledge base in the calibration cell with a sufficiency fraction."""
        ...

    def calibration_values(self, knowledge_base: str, offset: int, limit: int) -> list[float]:
        """Their sufficiency fractions in ascending order, `limit` of them from rank `offset`."""
        ...

    # -- judge-reply cache ---------------------------------------------------------------------
    def cache_get(self, key: str) -> str | None:
        """The cached reply (JSON text) under `key`, or None."""
        ...

    def cache_put(self, key: str, value: str, *, task: str = "", model: str = "", prompt_version: str = "") -> None:
        """Keep `value` (JSON text) under `key`; task, model and prompt version are for people browsing."""
        ...

    def cache_count_hits(self, hits: Mapping[str, int]) -> None:
        """Add to the times these keys' replies were served from the store (batched by the caller)."""
        ...

    def close(self) -> None:
        """Release the connections this thread (and the reply cache) holds; the next call reopens."""
        ...
