"""SqlStore: the Store (veralith.store.protocol) over any SQL connection (veralith.store.sql).

A store runs a caller's function on a connection it borrows (`connection()`, which each store
provides): `read`, `write`, `stream`. The functions are the shared SQL of repository, queries,
runs, browse, calibration, patterns and replies, gathered in veralith.store.ops; ids, the spool
and claims are the work layer's (veralith.work). What a subclass adds is only what differs by
database: how connections are made and which of the database's own errors mean "stopped taking
writes" or "unavailable" (`_classify`). So the two stores cannot drift: a rule lives in one SQL
module, and the store restates none of them.

Errors: whatever the database raises is turned into a StoreError subclass where it means something
a caller can act on (WritesStopped, StoreUnavailable); anything else propagates unchanged.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from veralith.errors import StoreError
from veralith.store import replies
from veralith.store.protocol import Replies, Store
from veralith.store.sql import Db

__all__ = ["SqlStore"]

logger = logging.getLogger("veralith.store")
F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
T = TypeVar("T")


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

    def stream(self, fn: Callable[Concatenate[Db, P], Iterator[T]], /, *args: P.args,
               **kwargs: P.kwargs) -> Iterator[T]:
        try:
            with self.connection() as db:
                yield from fn(db, *args, **kwargs)
        except StoreError:
            raise
        except Exception as exc:
            mapped = self._classify(exc)
            if mapped is not None:
                raise mapped from exc
            raise

    def replies(self) -> Replies:
        return _ConnectedReplies(self)

    # -- internals -------------------------------------------------------------------------------
    def after_copy(self, db: Db) -> None:  # noqa: B027 - a hook: SQLite keeps nothing beside its rows
        """After rows were written with ids of their own (veralith.store.copy): what a database keeps
        beside its rows (PostgreSQL's sequences and running totals) catches up. Trace ids are the
        work layer's (veralith.work)."""


class _ConnectedReplies:
    """The reply cache's rows through the store's own connections (veralith.store.replies)."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def get(self, key: str) -> str | None:
        return self.store.read(replies.get_reply, key)

    def put(self, key: str, value: str, *, task: str, model: str, prompt_version: str) -> None:
        self.store.write(replies.put_replies, [(key, task, model, prompt_version, value)])

    def count_hits(self, hits: Mapping[str, int]) -> None:
        self.store.write(replies.count_hits, hits)


if TYPE_CHECKING:  # mypy checks here that SqlStore implements the whole protocol
    def _conforms(store: SqlStore) -> Store:
        return store
