"""LangChain adapter: every retrieval-QA call LangChain makes also becomes a Veralith trace.

    import veralith.adapters.langchain as adapter
    adapter.install(knowledge_base="manuals", metadata={"app": "support"})
    ...                      # chain.invoke / batch / stream / ainvoke / astream, graph.invoke, unchanged
    adapter.stats()          # {"logged": 12, "skipped": 1, "skipped_by_reason": {...}, "ignored": 40}
    adapter.uninstall()

`install()` registers one `VeralithCallbackHandler` globally through LangChain's configure hook
(the mechanism LangSmith's tracer uses), so it sees every call in every thread and task, legacy
chains (`RetrievalQA`, `ConversationalRetrievalChain`, ...) and LCEL pipelines and LangGraph graphs
alike; nothing of LangChain's is patched. The handler can also be passed explicitly with
`config={"callbacks": [VeralithCallbackHandler()]}`. What it logs, and with which metadata, is in
docs/langchain.md; the parts:

- `_handler`: the callback handler (records each top-level call's runs, logs when it ends) and the
  one metadata shape;
- `_runs`: which traces a finished call makes (the run that answered, its documents, branches,
  partial streams);
- `_read`: questions, answers, messages and documents read from LangChain values;
- `_state`: install options, the counters behind `stats()`, one-time warnings.

LangChain is imported only when the adapter is used, never at `import veralith` or on importing
this module. The adapter never breaks a chain: whatever goes wrong while reading or logging becomes
a counted skip and a warning, and the chain's own result and exceptions pass through untouched.
"""

from __future__ import annotations

import contextvars
import importlib
import warnings
from typing import Any

from veralith.adapters._common import checked_options
from veralith.adapters.langchain import _state
from veralith.adapters.langchain._state import VeralithAdapterWarning

# VeralithCallbackHandler is built on first use by the module __getattr__ (LangChain loads lazily).
__all__ = ["VeralithAdapterWarning", "VeralithCallbackHandler", "install", "is_installed", "stats",  # noqa: F822
           "uninstall"]

_CHAIN_MODULES = ("langchain_classic.chains", "langchain.chains")  # LangChain 1.x, then 0.3
_CHAIN_NAMES = ("RetrievalQA", "RetrievalQAWithSourcesChain")
_hook_var: contextvars.ContextVar[Any] | None = None


def is_installed() -> bool:
    return _state.installed


def install(*, knowledge_base: str = "default", metadata: dict[str, Any] | None = None,
            run: str | None = None) -> int:
    """Log every LangChain call that retrieves and answers; return how many of the legacy retrieval
    chain classes (RetrievalQA, RetrievalQAWithSourcesChain) this LangChain has: 2 with
    langchain-classic (1.x) or LangChain 0.3, 0 without them (LCEL and LangGraph are logged either way).

    `metadata` is added to every trace's metadata (under the adapter's own keys); `run` names the
    run the traces belong to (passed to log() only when given). Calling it again replaces the
    options. Raises ImportError (with the pip command) when LangChain is missing, TypeError or
    ValueError for bad options.
    """
    options = checked_options(knowledge_base, metadata, run)
    try:
        importlib.import_module("langchain_core.callbacks")
    except ImportError as exc:
        raise ImportError(_state.INSTALL_HINT) from exc
    with _state.lock:
        _state.options = options
        _register_hook()
        _state.installed = True
        return len(_chain_classes())


def uninstall() -> None:
    """Stop logging through the global handler. LangChain offers no way to remove a configure hook,
    so the handler stays registered and ignores every run until the next install(); handlers
    passed explicitly keep working."""
    with _state.lock:
        _state.installed = False
        _state.options = _state.Options()


def stats() -> dict[str, Any]:
    """Counts since the process started, over every handler: `logged` traces; `skipped` calls that
    retrieved but were not logged, with `skipped_by_reason` (`inside_veralith_scope`: an outer
    @veralith.trace logged the call; `error`: the call raised; `no_question` / `no_answer`: not
    readable; `log_failed`; `adapter_error`); `ignored` top-level calls during which no retriever ran."""
    return _state.stats()


def _chain_classes() -> list[type]:
    for module_name in _CHAIN_MODULES:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # LangChain 0.3 warns about deprecated chains on import
                module = importlib.import_module(module_name)
        except ImportError:
            continue
        found = [cls for cls in (getattr(module, name, None) for name in _CHAIN_NAMES) if isinstance(cls, type)]
        if found:
            return found
    return []


def _register_hook() -> None:
    """Register the global handler once per process (LangChain cannot unregister a hook, hence the
    dormant handler after uninstall())."""
    global _hook_var
    if _hook_var is not None:
        return
    from langchain_core.tracers.context import register_configure_hook

    from veralith.adapters.langchain._handler import handler_class

    cls = handler_class()
    # The handler is the ContextVar's *default*: a value set() in one context would be invisible to
    # plain threads and thread pools, which start from an empty context.
    _hook_var = contextvars.ContextVar("veralith_langchain_handler", default=cls(_global=True))  # noqa: B039
    # handle_class makes LangChain skip the global instance when the caller passed one explicitly.
    register_configure_hook(_hook_var, inheritable=True, handle_class=cls)


def __getattr__(name: str) -> Any:
    if name == "VeralithCallbackHandler":
        try:
            from veralith.adapters.langchain._handler import handler_class

            return handler_class()
        except ImportError as exc:
            raise ImportError(_state.INSTALL_HINT) from exc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
