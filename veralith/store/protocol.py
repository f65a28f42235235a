"""What the SDK, the CLI, the web view and the orchestrator need from a store, and nothing more.

`Store` is the interface every caller is typed against; `veralith.store.open_store()` returns the
one `VERALITH_DB_URL` names: `SQLiteStore` (one file, the default) or `PostgresStore` (a team's
shared history). Both are `SqlStore`s running the same SQL (veralith.store.sql). A store offers
one way to run code on its connection (`Connected`: `read`, `write`, `stream`); what callers run
is a function of the SQL modules, gathered in veralith.store.ops: `store.read(ops.stats, kb=kb)`.
The rules a store keeps, whatever it is built on:

- Storage only: who evaluates a trace and who may write its outcome (spool, ids, claims, leases)
  is the work layer's (veralith.work), which runs its own SQL through `read` / `write`.
- `external_id` is unique within a knowledge base.
- Calibration's rule (veralith.store.calibration.calibrate) runs over the same two reads on
  either store (`ops.calibration_count`, `ops.calibration_values`), so every store calibrates alike.

Errors, all StoreError: TraceNotFound, TraceNotEvaluated, AmbiguousTraceId, DuplicateExternalId,
RunNotFound, WritesStopped (full disk, read-only file) and StoreUnavailable (locked for
longer than the bound, unreachable, vanished).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Concatenate, NamedTuple, ParamSpec, Protocol, TypeVar, runtime_checkable

from veralith.models import ContextChunk, EvaluationResult

if TYPE_CHECKING:
    from veralith.store.sql import Db

__all__ = ["Connected", "Replies", "Store", "StoredResult", "TraceInfo", "TraceInput"]

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

    def same_inputs(self, other: TraceInput) -> bool:
        """Whether `other` logs the same thing: query, context, response, knowledge base and
        metadata. Metadata counts because the judges read it (metadata["as_of"] is the date they
        take as today) and because a trace found unchanged keeps what was stored before."""
        return (self.query, self.context, self.response, self.knowledge_base, self.metadata) == (
            other.query, other.context, other.response, other.knowledge_base, other.metadata)

    def to_json(self) -> dict[str, Any]:
        """As plain JSON values (the spool's line format)."""
        return {"query": self.query, "context": [c.model_dump() for c in self.context], "response": self.response,
                "knowledge_base": self.knowledge_base, "metadata": self.metadata, "external_id": self.external_id,
                "app_latency_ms": self.app_latency_ms}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TraceInput:
        return cls(query=data["query"], context=[ContextChunk(**c) for c in data["context"]],
                   response=data["response"], knowledge_base=data["knowledge_base"], metadata=data["metadata"],
                   external_id=data.get("external_id"), app_latency_ms=data.get("app_latency_ms") or {})


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

    def stream(self, fn: Callable[Concatenate[Db, P], Iterator[T]], /, *args: P.args,
               **kwargs: P.kwargs) -> Iterator[T]:
        """`fn`'s items as they come, on one connection held until the iteration ends (a cursor over
        a whole history: `store.stream(ops.iter_results)`)."""
        ...


class Replies(Protocol):
    """The judge-reply cache's table (veralith.llm.cache): one row per reply, and how often it was reused."""

    def get(self, key: str) -> str | None: ...

    def put(self, key: str, value: str, *, task: str, model: str, prompt_version: str) -> None: ...

    def count_hits(self, hits: Mapping[str, int]) -> None: ...


@runtime_checkable
class Store(Connected, Protocol):
    """What `open_store()` returns: a connected store, closed when done."""

    def replies(self) -> Replies:
        """The reply cache's table (SQLite keeps it on a connection of its own: judge threads must not
        queue behind trace writes for it)."""
        ...

    def close(self) -> None:
        """Release the connections this store holds; the next call reopens."""
        ...
