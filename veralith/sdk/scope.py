"""One user call, one trace: the outermost Veralith logger owns the call, the ones inside it stand down.

A `@veralith.trace` function that calls a LangChain chain the adapter would log, or another traced
function, would otherwise produce one trace per layer. Every Veralith logger opens a scope around
the call it would log; a logger that finds a scope already open logs nothing. The scope lives in a
ContextVar, so it follows the call into asyncio tasks it creates and into threads started with a
copy of its context (`contextvars.copy_context().run`, `asyncio.to_thread`, LangChain's executors),
and never leaks into unrelated concurrent calls.

    with scope.enter("trace:answer") as outermost:
        result = call()
    if outermost:
        log(...)

`veralith.log()` itself never consults the scope: an explicit call always logs.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["active", "enter"]

_owner: contextvars.ContextVar[str | None] = contextvars.ContextVar("veralith_scope", default=None)


def active() -> str | None:
    """The name of the logger that owns the current call, or None outside every Veralith scope."""
    return _owner.get()


@contextlib.contextmanager
def enter(owner: str) -> Iterator[bool]:
    """Open a scope named `owner` for the duration of the block, unless one is already open.

    Yields True when this block is the outermost scope (its logger should log), False when another
    logger already owns the call (this one should stand down). The scope is closed on exit, also
    when the block raises.
    """
    if _owner.get() is not None:
        yield False
        return
    token = _owner.set(owner)
    try:
        yield True
    finally:
        _owner.reset(token)
