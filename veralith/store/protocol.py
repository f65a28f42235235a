"""What the SDK, the CLI, the web view and the orchestrator need from a store, and nothing more.

`Store` is the interface every caller is typed against; `veralith.store.open_store()` returns the
one `VERALITH_DB_URL` names: `SQLiteStore` (one file, the default) or `PostgresStore` (a team's
shared history). Both are `SqlStore`s running the same SQL (veralith.store.sql). It is split into
the parts callers use — traces in and out (`TraceStore`), runs (`RunStore`), browsing and figures
(`BrowseStore`), the aggregates of `veralith patterns` (`PatternStore`) — so a caller's type says
what it touches. The rules a store keeps, whatever it is
built on:

- Storage only: who evaluates a trace and who may write its outcome (spool, ids, claims, leases)
  is the work layer's (veralith.work), which runs its own SQL through `read` / `write`.
- `external_id` is unique within a knowledge base.
- Calibration's rule (veralith.store.calibration.calibrate) runs over `calibration_count` and
  `calibration_values`, so every store calibrates alike.

Errors, all StoreError: TraceNotFound, TraceNotEvaluated, AmbiguousTraceId, DuplicateExternalId,
RunNotFound, WritesStopped (full disk, read-only file) and StoreUnavailable (locked for
longer than the bound, unreachable, vanished).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Concatenate, NamedTuple, ParamSpec, Protocol, TypeVar, runtime_checkable

from veralith.models import ContextChunk, EvaluationResult, Explanation, Reference

if TYPE_CHECKING:
    from veralith.store.browse import Neighbours, SortedPage, TraceFilter, TracePage
    from veralith.store.patterns import DocumentFigures, PatternScope
    from veralith.store.runs import Run
    from veralith.store.sql import Db
    from veralith.usage import OutputSize

__all__ = ["BrowseStore", "Connected", "PatternStore", "RunStore", "Store", "StoredResult",
           "TraceInfo", "TraceInput", "TraceStore"]

P = ParamSpec("P")
T = TypeVar("T")


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
    # The team's reference answer and expected chunks (veralith.pipeline.reference_inputs); None: none given.
    reference: Reference | None = None

    def same_inputs(self, other: TraceInput) -> bool:
        """Whether `other` logs the same thing: query, context, response, knowledge base and
        metadata. Metadata counts because the judges read it (metadata["as_of"] is the date they
        take as today) and because a trace found unchanged keeps what was stored before."""
        return (self.query, self.context, self.response, self.knowledge_base, self.metadata, self.reference) == (
            other.query, other.context, other.response, other.knowledge_base, other.metadata, other.reference)

    def to_json(self) -> dict[str, Any]:
        """As plain JSON values (the spool's line format)."""
        return {"query": self.query, "context": [c.model_dump() for c in self.context], "response": self.response,
                "knowledge_base": self.knowledge_base, "metadata": self.metadata, "external_id": self.external_id,
                "app_latency_ms": self.app_latency_ms,
                **({"reference": self.reference.model_dump()} if self.reference is not None else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TraceInput:
        return cls(query=data["query"], context=[ContextChunk(**c) for c in data["context"]],
                   response=data["response"], knowledge_base=data["knowledge_base"], metadata=data["metadata"],
                   external_id=data.get("external_id"), app_latency_ms=data.get("app_latency_ms") or {},
                   reference=Reference(**data["reference"]) if data.get("reference") else None)


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
class Connected(Protocol):
    """The one way to run code on a store's connection (as datasette's `execute_fn` /
    `execute_write_fn`): a query is a function of a `Db` (veralith.store.sql) written once in a SQL
    module, and `read(fn, ...)` / `write(fn, ...)` run it on a connection of the calling thread,
    turning the database's own errors into StoreErrors (StoreUnavailable, WritesStopped). `fn`
    opens its own transactions (`db.write()`, `db.read()`). `write` refuses a store opened
    read-only, and runs the store's after-write hook (PostgreSQL folds its running totals there)."""

    url: str            # where it is, with any password masked (for messages)
    spool_url: str      # where it is, as opened: names the work layer's spool and id file on this host
    read_only: bool     # opened by a reading command: every write raises StoreError

    def read(self, fn: Callable[Concatenate[Db, P], T], /, *args: P.args, **kwargs: P.kwargs) -> T: ...

    def write(self, fn: Callable[Concatenate[Db, P], T], /, *args: P.args, **kwargs: P.kwargs) -> T: ...


@runtime_checkable
class TraceStore(Protocol):
    """Traces in, work claimed and finished, results out; the judge-reply cache; calibration data."""

    url: str            # where it is, with any password masked (for messages)
    read_only: bool     # opened by a reading command: every write raises StoreError

    def save_explanation(self, trace_id: int, explanation: Explanation) -> None:
        """Store or replace a trace's explanation (`inspect --explain`); its result stays as it was."""
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

    def history(self, trace_id: int) -> list[dict[str, Any]]:
        """The trace's earlier outcomes, oldest first (veralith.store.ownership.history)."""
        ...

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
    def output_sizes(self) -> list[OutputSize]:
        """What past real runs' calls wrote, summed per (task, model, prompt version): what
        `veralith eval --dry-run` learns its expected output tokens from."""
        ...

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
        """Release the connections this store holds; the next call reopens."""
        ...


@runtime_checkable
class RunStore(Protocol):
    """Runs: one `veralith eval` invocation, or one named stream of logged traces (veralith.store.runs)."""

    def start_run(self, *, name: str | None, backend: str | None, model: str | None,
                  prompt_versions: dict[str, str] | None, input: str | None = None) -> int: ...

    def tag_trace(self, run_id: int, trace_id: int) -> None: ...

    def record_result(self, run_id: int, trace_id: int, reason: str | None = None) -> None: ...

    def finish_run(self, run_id: int) -> Run: ...

    def discard_if_empty(self, run_id: int) -> bool:
        """Delete an eval run that holds no trace (a run that stored nothing is not recorded); True
        when it was deleted."""
        ...

    def get_run(self, run_id: int) -> Run: ...

    def resolve_run(self, ref: str) -> Run: ...

    def list_runs(self, *, limit: int = 50) -> list[Run]: ...

    def trace_rows(self, run: Run) -> list[tuple[Any, ...]]: ...

    def failure_details(self, trace_ids: Iterable[int]) -> dict[int, dict[str, Any]]: ...

    def trace_run(self, trace_id: int) -> str | None:
        """The label of the run that last wrote or judged the trace ("#3 main"), or None."""
        ...


@runtime_checkable
class BrowseStore(Protocol):
    """Listing, paging and the figures of `list`, `stats` and the web view (veralith.store.browse,
    veralith.store.queries): each costs what it shows, not what the store holds."""

    def list_traces(self, *, limit: int = 50, cell: str | None = None, kb: str | None = None,
                    status: str | None = None, since: str | None = None,
                    preview_chars: int | None = 80) -> list[dict[str, Any]]: ...

    def stats(self, *, kb: str | None = None) -> dict[str, Any]: ...

    def knowledge_bases(self) -> list[str]: ...

    def page_traces(self, flt: TraceFilter, *, limit: int = 50, before: int | None = None,
                    after: int | None = None) -> TracePage: ...

    def page_sorted(self, flt: TraceFilter, *, sort: str, limit: int = 50,
                    cursor: tuple[float, int] | None = None) -> SortedPage:
        """One page in `sort` order (a key of veralith.store.browse.SORTS), keyset from `cursor`."""
        ...

    def count_traces(self, flt: TraceFilter) -> int | None:
        """How many traces match `flt`; None with a text filter (it has no index to count by)."""
        ...

    def neighbours(self, trace_id: int, flt: TraceFilter) -> Neighbours: ...

    def trace_row(self, trace_id: int) -> dict[str, Any] | None: ...

    def kb_figures(self) -> dict[str, dict[str, Any]]: ...

    def daily_figures(self, *, days: int = 30) -> dict[str, Any]: ...

    def run_cells(self, runs: list[tuple[int, str]]) -> dict[int, dict[str, Any]]: ...

    def run_labels(self, *, limit: int = 50) -> list[tuple[int, str]]: ...


@runtime_checkable
class PatternStore(Protocol):
    """The aggregates `veralith patterns` groups failing traces by (veralith.store.patterns): each a
    few scans of the scope, whatever its size; examples only for the documents asked about."""

    def pattern_counts(self, scope: PatternScope) -> dict[str, int]:
        """{"traces": with a result, "failing": ...} in the scope, and for a run "judged_since": its
        traces a later run judged again."""
        ...

    def document_figures(self, scope: PatternScope) -> list[DocumentFigures]:
        """Every document retrieved in the scope: retrievals, grounding and contradictions."""
        ...

    def document_examples(self, scope: PatternScope, documents: Sequence[str], *, contradicting: bool,
                          per_document: int) -> dict[str, list[tuple[int, str]]]:
        """Up to `per_document` failing traces per document, newest first, as (trace id, chunk id): where
        it contradicts a claim (`contradicting`), else where it was retrieved."""
        ...

    def question_rows(self, scope: PatternScope, *, sample: int
                      ) -> tuple[list[tuple[int, str, str]], list[tuple[bool, str]]]:
        """Missed sub-questions of failing traces (trace id, sub-question id, text), and the newest
        `sample` judged sub-questions of the scope (sufficient, text)."""
        ...

    def bad_claims(self, scope: PatternScope) -> list[tuple[int, str, str, str]]:
        """Ungrounded claims of failing traces: (trace id, claim id, relation, text)."""
        ...

    def common_suggestions(self, trace_ids: Iterable[int]) -> list[tuple[str, str, int]]:
        """These traces' stored suggestions, most common first: (title, summary, traces)."""
        ...


@runtime_checkable
class Store(Connected, TraceStore, RunStore, BrowseStore, PatternStore, Protocol):
    """Everything a store offers (what `open_store()` returns)."""
