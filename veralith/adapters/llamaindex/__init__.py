"""LlamaIndex adapter: every question a LlamaIndex query or chat engine answers also becomes a Veralith trace.

    import veralith.adapters.llamaindex as adapter
    adapter.install(knowledge_base="manuals", metadata={"app": "support"})
    ...      # query_engine.query / aquery (streaming too), chat_engine.chat / achat / stream_chat / astream_chat
    adapter.stats()          # {"logged": 12, "skipped": 1, "skipped_by_reason": {...}, "ignored": 40}
    adapter.uninstall()

`install()` adds one span handler and one event handler to LlamaIndex's root dispatcher (its
instrumentation API, which every LlamaIndex module reports to); nothing of LlamaIndex's is patched,
and `uninstall()` removes them. One user call makes one trace: the query or chat engine called by
the app, with the nodes its answer was made from as chunks (text, id, metadata, source, rank,
score), its question and answer, the metadata shape every adapter shares, and its timings (the
call, its retrievers, its model calls). A streamed answer is logged once, when its model ends (what
was streamed, marked partial, when the consumer stops early). Inside a `@veralith.trace` call the
adapter logs nothing itself and hands what it saw to that call, retrievers used on their own
included. Details: docs/llamaindex.md.

LlamaIndex is imported only when the adapter is installed, never at `import veralith` or on
importing this module. Whatever goes wrong inside the adapter becomes a counted skip and a warning;
the app's own results and exceptions pass through untouched.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from veralith.adapters._common import Options, VeralithAdapterWarning, checked_options

__all__ = ["VeralithAdapterWarning", "install", "is_installed", "stats", "uninstall"]

INSTALL_HINT = 'LlamaIndex is not installed; install the extra with: pip install "veralith-rag[llamaindex]"'
_lock = threading.Lock()


def is_installed() -> bool:
    return _installed


def install(*, knowledge_base: str = "default", metadata: dict[str, Any] | None = None,
            run: str | None = None) -> None:
    """Log every question a LlamaIndex query or chat engine answers. `metadata` is added to every
    trace's metadata (under the adapter's own keys); `run` names the run the traces belong to.
    Calling it again replaces the options. Raises ImportError (with the pip command) when
    llama-index-core is missing, TypeError or ValueError for bad options."""
    global _installed
    options = checked_options(knowledge_base, metadata, run)
    try:
        importlib.import_module("llama_index.core.instrumentation")
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    from veralith.adapters.llamaindex import _handlers

    with _lock:
        _handlers.options = options
        span_handler, event_handler, tracker = _handlers.handlers()
        root = _root()
        if span_handler not in root.span_handlers:
            root.add_span_handler(span_handler)
        if event_handler not in root.event_handlers:
            root.add_event_handler(event_handler)
        tracker.enabled = True
        _installed = True


def uninstall() -> None:
    """Remove the handlers from LlamaIndex's dispatcher; calls already under way are not logged."""
    global _installed
    with _lock:
        if not _installed:
            return
        from veralith.adapters.llamaindex import _handlers

        span_handler, event_handler, tracker = _handlers.handlers()
        tracker.enabled = False
        root = _root()
        root.span_handlers = [h for h in root.span_handlers if h is not span_handler]
        root.event_handlers = [h for h in root.event_handlers if h is not event_handler]
        _handlers.options = Options()
        _installed = False


def stats() -> dict[str, Any]:
    """Counts since the process started: `logged` traces; `skipped` calls that retrieved but were
    not logged, with `skipped_by_reason` (`inside_veralith_scope`: handed to an enclosing
    @veralith.trace call; `error`: the call raised; `no_question` / `no_answer`; `stream_not_read`: a
    streamed answer its consumer never read; `log_failed`; `adapter_error`); `ignored` calls that
    retrieved nothing (not RAG answers)."""
    from veralith.adapters.llamaindex import _handlers

    return _handlers.counters.stats()


def _root() -> Any:
    from llama_index.core.instrumentation import get_dispatcher

    return get_dispatcher()


_installed = False
