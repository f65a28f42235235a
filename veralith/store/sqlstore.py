"""SqlStore: the Store (veralith.store.protocol) over any SQL connection (veralith.store.sql).

Every method borrows a connection (`connection()`, which each store provides) and runs the shared
SQL in repository, queries, runs, browse, calibration, ownership and replies. Ids and the spool
are the store's `Spooler` (veralith.work.spooler), shared with `log()`. What a subclass adds is
only what differs by database: how connections are made and which of the database's own errors
mean "stopped taking writes" or "unavailable" (`_classify`). So the two stores cannot drift: a rule
lives in one SQL module, and this class is the only caller of those modules.

Errors: whatever the database raises is turned into a StoreError subclass where it means something
a caller can act on (WritesStopped, StoreUnavailable); anything else propagates unchanged.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from veralith.errors import StoreError
from veralith.models import EvaluationResult, Explanation
from veralith.store import browse, history, patterns, queries, replies, repository, runs as run_sql
from veralith.store.calibration import SqlCalibration
from veralith.store.outputsizes import read_output_sizes
from veralith.store.protocol import Store, StoredResult, TraceInfo, TraceInput
from veralith.store.sql import Db
from veralith.usage import OutputSize

if TYPE_CHECKING:
    import datetime as dt

    from veralith.store.browse import Neighbours, SortedPage, TraceFilter, TracePage
    from veralith.store.patterns import DocumentFigures, PatternScope
    from veralith.store.runs import Run

__all__ = ["SqlStore"]

logger = logging.getLogger("veralith.store")
F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
T = TypeVar("T")
_CLASH_RETRIES = 5


def _guarded(method: F) -> F:
    """Turn the database's own errors into the store's (see the module docstring)."""

    @functools.wraps(method)
    def wrapper(self: SqlStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except StoreError:
            raise
        except Exception as exc:
            mapped = self._classify(exc)
            if mapped is not None:
                raise mapped from exc
            raise
    return wrapper  # type: ignore[return-value]


def _writing(method: F) -> F:
    """A write: refused on a store opened read-only, and guarded."""

    @functools.wraps(method)
    def wrapper(self: SqlStore, *args: Any, **kwargs: Any) -> Any:
        if self.read_only:
            raise StoreError(f"{self.url} was opened read-only; {method.__name__} writes")
        return method(self, *args, **kwargs)
    return _guarded(wrapper)  # type: ignore[return-value]


class SqlStore(abc.ABC):
    """The shared implementation. Subclasses set `url` and `key` and provide `connection`,
    `_classify` and `close`."""

    url: str = ""          # where it is, for messages (a password masked)
    read_only: bool = False
    key: str = ""          # the database's identity for this process's leases (what its Db.key says)
    spool_url: str = ""    # the URL as opened (veralith.store.store_url): names log()'s spooler

    # -- what a subclass provides ----------------------------------------------------------------
    @abc.abstractmethod
    def connection(self) -> contextlib.AbstractContextManager[Db]:
        """A connection for the calling thread, for the length of the block."""

    @abc.abstractmethod
    def _classify(self, exc: BaseException) -> StoreError | None:
        """The StoreError `exc` means (WritesStopped, StoreUnavailable), or None to let it propagate."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connections this store holds; the next call reopens."""

    # -- the one way to run code on a connection (veralith.store.protocol.Connected) ---------------
    @_guarded
    def read(self, fn: Callable[Concatenate[Db, P], T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        with self.connection() as db:
            return fn(db, *args, **kwargs)

    @_writing
    def write(self, fn: Callable[Concatenate[Db, P], T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        with self.connection() as db:
            return fn(db, *args, **kwargs)

    @_writing
    def save_explanation(self, trace_id: int, explanation: Explanation) -> None:
        with self.connection() as db:
            repository.save_explanation(db, trace_id, explanation)

    # -- reads ---------------------------------------------------------------------------------
    @_guarded
    def load_input(self, trace_id: int) -> TraceInput:
        with self.connection() as db:
            return repository.load_input(db, trace_id)

    @_guarded
    def load_result(self, trace_id: int) -> EvaluationResult:
        with self.connection() as db:
            return repository.load_result(trace_id, db)

    @_guarded
    def trace_info(self, trace_id: int) -> TraceInfo:
        with self.connection() as db:
            return repository.trace_info(db, trace_id)

    @_guarded
    def find_external(self, knowledge_base: str, external_id: str) -> TraceInfo | None:
        with self.connection() as db:
            return repository.find_external(db, knowledge_base, external_id)

    @_guarded
    def resolve(self, ref: str, *, knowledge_base: str | None = None) -> int:
        with self.connection() as db:
            return repository.resolve(db, ref, knowledge_base=knowledge_base)

    @_guarded
    def history(self, trace_id: int) -> list[dict[str, Any]]:
        with self.connection() as db:
            return history.history(db, trace_id)

    def iter_results(self, since: str | dt.datetime | None = None,
                     on_error: Callable[[int, Exception], None] | None = None,
                     trace_ids: list[int] | None = None) -> Iterator[StoredResult]:
        try:
            with self.connection() as db:
                yield from repository.iter_stored(db, since=since, on_error=on_error, trace_ids=trace_ids)
        except StoreError:
            raise
        except Exception as exc:
            mapped = self._classify(exc)
            if mapped is not None:
                raise mapped from exc
            raise

    # -- calibration ---------------------------------------------------------------------------
    @_guarded
    def calibration_count(self, knowledge_base: str) -> int:
        with self.connection() as db:
            return SqlCalibration(db).calibration_count(knowledge_base)

    @_guarded
    def calibration_labels(self, knowledge_base: str) -> list[tuple[float, bool]]:
        with self.connection() as db:
            return SqlCalibration(db).calibration_labels(knowledge_base)

    @_guarded
    def calibration_values(self, knowledge_base: str, offset: int, limit: int) -> list[float]:
        with self.connection() as db:
            return SqlCalibration(db).calibration_values(knowledge_base, offset, limit)

    @_guarded
    def output_sizes(self) -> list[OutputSize]:
        with self.connection() as db:
            return read_output_sizes(db)

    # -- judge-reply cache ---------------------------------------------------------------------
    @_guarded
    def cache_get(self, key: str) -> str | None:
        with self.connection() as db:
            return replies.get_reply(db, key)

    @_writing
    def cache_put(self, key: str, value: str, *, task: str = "", model: str = "", prompt_version: str = "") -> None:
        with self.connection() as db:
            replies.put_replies(db, [(key, task, model, prompt_version, value)])

    @_writing
    def cache_count_hits(self, hits: Mapping[str, int]) -> None:
        with self.connection() as db:
            replies.count_hits(db, hits)

    # -- runs ------------------------------------------------------------------------------------
    @_writing
    def start_run(self, *, name: str | None, backend: str | None, model: str | None,
                  prompt_versions: dict[str, str] | None, input: str | None = None) -> int:
        with self.connection() as db:
            return run_sql.start_run(db, name=name, backend=backend, model=model, prompt_versions=prompt_versions,
                                  input=input)

    @_writing
    def tag_trace(self, run_id: int, trace_id: int) -> None:
        with self.connection() as db:
            run_sql.tag_trace(db, run_id, trace_id)

    @_writing
    def record_result(self, run_id: int, trace_id: int, reason: str | None = None) -> None:
        with self.connection() as db:
            run_sql.record_result(db, run_id, trace_id, reason)

    @_writing
    def finish_run(self, run_id: int) -> Run:
        with self.connection() as db:
            return run_sql.finish_run(db, run_id)

    @_writing
    def discard_if_empty(self, run_id: int) -> bool:
        with self.connection() as db:
            return run_sql.discard_if_empty(db, run_id)

    @_guarded
    def get_run(self, run_id: int) -> Run:
        with self.connection() as db:
            return run_sql.get_run(db, run_id)

    @_guarded
    def resolve_run(self, ref: str) -> Run:
        with self.connection() as db:
            return run_sql.resolve_run(db, ref)

    @_guarded
    def list_runs(self, *, limit: int = 50) -> list[Run]:
        with self.connection() as db:
            return run_sql.list_runs(db, limit=limit)

    @_guarded
    def trace_rows(self, run: Run) -> list[tuple[Any, ...]]:
        with self.connection() as db:
            return [tuple(row) for row in run_sql.trace_rows(db, run)]

    @_guarded
    def failure_details(self, trace_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        with self.connection() as db:
            return run_sql.failure_details(db, trace_ids)

    @_guarded
    def trace_run(self, trace_id: int) -> str | None:
        with self.connection() as db:
            return queries.trace_run(db, trace_id)

    # -- browsing and figures ------------------------------------------------------------------
    @_guarded
    def list_traces(self, *, limit: int = 50, cell: str | None = None, kb: str | None = None,
                    status: str | None = None, since: str | None = None,
                    preview_chars: int | None = queries.PREVIEW_CHARS) -> list[dict[str, Any]]:
        with self.connection() as db:
            return queries.list_traces(db, limit=limit, cell=cell, kb=kb, status=status, since=since,
                                       preview_chars=preview_chars)

    @_guarded
    def stats(self, *, kb: str | None = None) -> dict[str, Any]:
        with self.connection() as db:
            return queries.stats(db, kb=kb)

    @_guarded
    def knowledge_bases(self) -> list[str]:
        with self.connection() as db:
            return queries.knowledge_bases(db)

    @_guarded
    def page_traces(self, flt: TraceFilter, *, limit: int = 50, before: int | None = None,
                    after: int | None = None) -> TracePage:
        with self.connection() as db:
            return browse.page_traces(db, flt, limit=limit, before=before, after=after)

    @_guarded
    def page_sorted(self, flt: TraceFilter, *, sort: str, limit: int = 50,
                    cursor: tuple[float, int] | None = None) -> SortedPage:
        with self.connection() as db:
            return browse.page_sorted(db, flt, sort=sort, limit=limit, cursor=cursor)

    @_guarded
    def count_traces(self, flt: TraceFilter) -> int | None:
        with self.connection() as db:
            return browse.count_traces(db, flt)

    @_guarded
    def neighbours(self, trace_id: int, flt: TraceFilter) -> Neighbours:
        with self.connection() as db:
            return browse.neighbours(db, trace_id, flt)

    @_guarded
    def trace_row(self, trace_id: int) -> dict[str, Any] | None:
        with self.connection() as db:
            return browse.trace_row(db, trace_id)

    @_guarded
    def kb_figures(self) -> dict[str, dict[str, Any]]:
        with self.connection() as db:
            return browse.kb_figures(db)

    @_guarded
    def daily_figures(self, *, days: int = 30) -> dict[str, Any]:
        with self.connection() as db:
            return browse.daily_figures(db, days=days)

    @_guarded
    def run_cells(self, runs: list[tuple[int, str]]) -> dict[int, dict[str, Any]]:
        with self.connection() as db:
            return browse.run_cells(db, runs)

    @_guarded
    def run_labels(self, *, limit: int = 50) -> list[tuple[int, str]]:
        with self.connection() as db:
            return browse.run_labels(db, limit=limit)

    # -- patterns ------------------------------------------------------------------------------
    @_guarded
    def pattern_counts(self, scope: PatternScope) -> dict[str, int]:
        with self.connection() as db:
            return patterns.scope_counts(db, scope)

    @_guarded
    def document_figures(self, scope: PatternScope) -> list[DocumentFigures]:
        with self.connection() as db:
            return patterns.document_figures(db, scope)

    @_guarded
    def document_examples(self, scope: PatternScope, documents: Sequence[str], *, contradicting: bool,
                          per_document: int) -> dict[str, list[tuple[int, str]]]:
        with self.connection() as db:
            return patterns.document_examples(db, scope, documents, contradicting=contradicting,
                                              per_document=per_document)

    @_guarded
    def question_rows(self, scope: PatternScope, *, sample: int
                      ) -> tuple[list[tuple[int, str, str]], list[tuple[bool, str]]]:
        with self.connection() as db:
            return patterns.question_rows(db, scope, sample=sample)

    @_guarded
    def bad_claims(self, scope: PatternScope) -> list[tuple[int, str, str, str]]:
        with self.connection() as db:
            return patterns.bad_claims(db, scope)

    @_guarded
    def common_suggestions(self, trace_ids: Iterable[int]) -> list[tuple[str, str, int]]:
        with self.connection() as db:
            return patterns.common_suggestions(db, trace_ids)

    # -- internals -------------------------------------------------------------------------------
    def after_copy(self, db: Db) -> None:  # noqa: B027 - a hook: SQLite keeps nothing beside its rows
        """After rows were written with ids of their own (veralith.store.copy): what a database keeps
        beside its rows (PostgreSQL's sequences and running totals) catches up. Trace ids are the
        work layer's (veralith.work)."""


if TYPE_CHECKING:  # mypy checks here that SqlStore implements the whole protocol
    def _conforms(store: SqlStore) -> Store:
        return store
