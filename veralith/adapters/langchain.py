"""LangChain adapter: every retrieval-QA call LangChain makes also becomes a Veralith trace.

LangChain has two generations of chains, so there are two mechanisms, both set up by `install()`:

- Legacy chains (`RetrievalQA`, `RetrievalQAWithSourcesChain`): each class gets its own `invoke`
  that calls the inherited `Chain.invoke` unchanged and then logs (query, source documents, answer).
  Only these two classes are patched, never the `Chain` base, so the chains nested inside them are
  not logged a second time.
- LCEL chains: `VeralithCallbackHandler` follows run ids up to the top-level run, collects what any
  retriever below it returned, and logs once when that top-level run ends. `install()` registers
  one instance globally through LangChain's configure hook; it can also be passed explicitly with
  `config={"callbacks": [VeralithCallbackHandler()]}`.

    import veralith.adapters.langchain as adapter
    adapter.install()        # -> number of legacy chain classes patched
    adapter.uninstall()      # the classes get their original attributes back

LangChain is imported only when the adapter is used, never at `import veralith`. The adapter never
breaks a chain: whatever goes wrong while extracting or logging becomes a warning, and the chain's
own result and exceptions pass through untouched.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import json
import threading
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any

# VeralithCallbackHandler is built on first use by the module __getattr__ (LangChain loads lazily).
__all__ = ["VeralithAdapterWarning", "VeralithCallbackHandler", "install", "is_installed", "uninstall"]  # noqa: F822

_INSTALL_HINT = 'LangChain is not installed; install the extra with: pip install "veralith[langchain]"'
_CHAIN_MODULES = ("langchain_classic.chains", "langchain.chains")  # LangChain 1.x, then 0.3
_CHAIN_NAMES = ("RetrievalQA", "RetrievalQAWithSourcesChain")
_QUERY_KEYS = ("question", "query", "input")
_ANSWER_KEYS = ("answer", "result", "output", "text", "response", "content")
_MISSING = object()


class VeralithAdapterWarning(UserWarning):
    """Something could not be logged; the chain itself ran normally."""


_lock = threading.RLock()
_installed = False
_knowledge_base = "default"
_patched: dict[type, Any] = {}        # class -> its own `invoke` before patching, or _MISSING
_legacy_run_ids: set[uuid.UUID] = set()  # runs a patched invoke is logging; the handler leaves them alone
_warned: set[str] = set()
_hook_var: contextvars.ContextVar[Any] | None = None


def is_installed() -> bool:
    return _installed


def install(*, knowledge_base: str = "default") -> int:
    """Patch the legacy retrieval chains and register the LCEL handler; return how many classes are patched.

    Idempotent. Raises ImportError (with the pip command) only when LangChain itself is missing; a
    LangChain without the legacy chains still gets the LCEL handler and returns 0.
    """
    global _installed, _knowledge_base
    try:
        importlib.import_module("langchain_core.callbacks")
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    with _lock:
        _knowledge_base = knowledge_base
        for cls in _chain_classes():
            if cls not in _patched:
                _patched[cls] = cls.__dict__.get("invoke", _MISSING)
                setattr(cls, "invoke", _patched_invoke(getattr(cls, "invoke")))  # noqa: B009, B010 (keeps mypy off type.invoke)
        _register_hook()
        _installed = True
        return len(_patched)


def uninstall() -> None:
    """Undo `install()`: each class gets back exactly the attribute it had (usually none, so
    `RetrievalQA.invoke is Chain.invoke` again) and the global handler goes dormant."""
    global _installed
    with _lock:
        for cls, own in _patched.items():
            if own is _MISSING:
                delattr(cls, "invoke")
            else:
                setattr(cls, "invoke", own)  # noqa: B010
        _patched.clear()
        _installed = False


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
    """Register the global handler once per process; LangChain offers no way to unregister a hook,
    which is why `uninstall()` makes the handler dormant instead."""
    global _hook_var
    if _hook_var is not None:
        return
    from langchain_core.tracers.context import register_configure_hook

    handler_class = _langchain_classes()[0]
    # The handler is the ContextVar's *default*: a value set() in one context would be invisible to
    # plain threads and thread pools, which start from an empty context.
    # One shared handler is the intended default: every context that sets none uses the global one.
    _hook_var = contextvars.ContextVar("veralith_langchain_handler", default=handler_class(_global=True))  # noqa: B039
    # handle_class makes LangChain skip the global instance when the caller passed one explicitly.
    register_configure_hook(_hook_var, inheritable=True, handle_class=handler_class)


# --- legacy chains -------------------------------------------------------------------------------

def _patched_invoke(original: Any) -> Any:
    @functools.wraps(original)
    def invoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        if not _installed:  # a bound method captured before uninstall()
            return original(self, input, config, **kwargs)
        try:
            config, collector, run_id = _with_collector(config)
        except Exception as exc:
            _warn_once(f"prepare:{type(exc).__name__}", f"Veralith could not attach to this chain call: {exc}")
            return original(self, input, config, **kwargs)
        with _lock:
            _legacy_run_ids.add(run_id)
        try:
            result = original(self, input, config, **kwargs)
        finally:
            with _lock:
                _legacy_run_ids.discard(run_id)
        try:
            _log_legacy(self, input, result, collector)
        except Exception as exc:
            _warn_once(f"legacy:{type(exc).__name__}", f"Veralith could not log a {type(self).__name__} call: {exc}")
        return result

    return invoke


def _with_collector(config: Any) -> tuple[dict[str, Any], Any, uuid.UUID]:
    """Copy the caller's config, adding a collector for retriever output and a known run id."""
    from langchain_core.callbacks import BaseCallbackManager

    config = dict(config or {})
    collector = _langchain_classes()[1]()
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        callbacks = callbacks.copy()
        callbacks.add_handler(collector, inherit=True)
    else:
        callbacks = [*(callbacks or []), collector]
    config["callbacks"] = callbacks
    config["run_id"] = config.get("run_id") or uuid.uuid4()
    return config, collector, config["run_id"]


def _log_legacy(chain: Any, input: Any, result: Any, collector: Any) -> None:
    name = type(chain).__name__
    query = _query_text(input, None)
    answer = _answer_text(result)
    if query is None or answer is None:
        _warn_once(f"shape:{name}", f"Veralith could not find the question or the answer of {name}; not logged.")
        return
    documents = result.get("source_documents") if isinstance(result, dict) else None
    if documents is None and collector.saw_retriever:
        documents = collector.documents
    if documents is None:
        _warn_once(f"docs:{name}", f"Veralith saw no retrieved documents for {name} (its retriever reported no "
                   "callbacks); build the chain with return_source_documents=True to have it logged.")
        return
    metadata: dict[str, Any] = {"source": "langchain", "chain": name}
    if isinstance(result, dict) and isinstance(result.get("sources"), str):
        metadata["sources"] = result["sources"]
    _log(query, documents, answer, metadata)


class _Collector:
    """Per-call record of what the retrievers below one legacy chain call returned."""

    def __init__(self) -> None:
        super().__init__()
        self.documents: list[Any] = []
        self.saw_retriever = False

    def on_retriever_end(self, documents: Any, **kwargs: Any) -> None:
        self.saw_retriever = True
        self.documents.extend(documents)


# --- LCEL chains ---------------------------------------------------------------------------------

@dataclass
class _Root:
    inputs: Any
    skip: bool                          # a patched legacy chain logs this call itself
    members: list[uuid.UUID] = field(default_factory=list)
    retriever_query: str | None = None
    documents: list[Any] = field(default_factory=list)
    saw_retriever: bool = False


class _Tracker:
    """Callback logic without LangChain types, mixed into `VeralithCallbackHandler`.

    Every run is mapped to its top-level run; a run whose parent this handler never saw counts as
    top-level for it. Only top-level runs during which a retriever ran are logged, so plain LLM
    calls and chains without retrieval are ignored.
    """

    def __init__(self, *, knowledge_base: str | None = None, _global: bool = False) -> None:
        super().__init__()
        self._kb = knowledge_base
        self._global = _global
        self._state_lock = threading.Lock()
        self._root_of: dict[uuid.UUID, uuid.UUID] = {}
        self._roots: dict[uuid.UUID, _Root] = {}

    def _attach(self, run_id: uuid.UUID, parent_run_id: uuid.UUID | None, inputs: Any) -> _Root | None:
        if self._global and not _installed:  # the global handler after uninstall()
            return None
        with self._state_lock:
            root_id = self._root_of.get(parent_run_id) if parent_run_id is not None else None
            if root_id is None:
                if inputs is _MISSING:  # a retriever or tool used on its own is not a RAG answer
                    return None
                root_id = run_id
                self._roots[run_id] = _Root(inputs=inputs, skip=False)
            root = self._roots[root_id]
            self._root_of[run_id] = root_id
            root.members.append(run_id)
            if run_id in _legacy_run_ids:
                root.skip = True
            return root

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: uuid.UUID,
                       parent_run_id: uuid.UUID | None = None, **kwargs: Any) -> None:
        self._attach(run_id, parent_run_id, inputs)

    def on_tool_start(self, serialized: Any, input_str: Any, *, run_id: uuid.UUID,
                      parent_run_id: uuid.UUID | None = None, **kwargs: Any) -> None:
        self._attach(run_id, parent_run_id, _MISSING)  # agents reach retrievers through tools

    def on_retriever_start(self, serialized: Any, query: Any, *, run_id: uuid.UUID,
                           parent_run_id: uuid.UUID | None = None, **kwargs: Any) -> None:
        root = self._attach(run_id, parent_run_id, _MISSING)
        if root is not None and root.retriever_query is None and isinstance(query, str):
            root.retriever_query = query

    def on_retriever_end(self, documents: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._state_lock:
            root_id = self._root_of.get(run_id)
            root = self._roots.get(root_id) if root_id is not None else None
            if root is not None:
                root.saw_retriever = True
                root.documents.extend(documents)

    def on_chain_end(self, outputs: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        root = self._finish(run_id)
        if root is None or root.skip or not root.saw_retriever:
            return
        try:
            # Streaming starts a run before its input is known and reports the input at the end.
            query = _query_text(kwargs.get("inputs"), None) or _query_text(root.inputs, root.retriever_query)
            answer = _answer_text(outputs)
            if query is None or answer is None:
                _warn_once(f"lcel:{type(outputs).__name__}", "Veralith could not find the question or the answer "
                           f"(output type {type(outputs).__name__}) of a LangChain run; not logged.")
                return
            _log(query, root.documents, answer, {"source": "langchain", "run_id": str(run_id)}, self._kb)
        except Exception as exc:
            _warn_once(f"lcel:{type(exc).__name__}", f"Veralith could not log a LangChain run: {exc}")

    def on_chain_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._finish(run_id)  # a failed run has no answer to judge

    def _finish(self, run_id: uuid.UUID) -> _Root | None:
        with self._state_lock:
            root = self._roots.pop(run_id, None)
            for member in root.members if root else ():
                self._root_of.pop(member, None)
            return root


@functools.cache
def _langchain_classes() -> tuple[type, type]:
    """(VeralithCallbackHandler, the legacy collector): both subclass LangChain's handler, so they
    are built on first use rather than at import."""
    from langchain_core.callbacks import BaseCallbackHandler

    handler = type("VeralithCallbackHandler", (_Tracker, BaseCallbackHandler), {
        "__module__": __name__, "__doc__": "Logs one Veralith trace per top-level LangChain run that retrieved."})
    return handler, type("_VeralithDocumentCollector", (_Collector, BaseCallbackHandler), {"__module__": __name__})


def __getattr__(name: str) -> Any:
    if name == "VeralithCallbackHandler":
        try:
            return _langchain_classes()[0]
        except ImportError as exc:
            raise ImportError(_INSTALL_HINT) from exc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- shared extraction and logging ---------------------------------------------------------------

def _query_text(inputs: Any, fallback: str | None) -> str | None:
    if isinstance(inputs, str) and inputs:
        return inputs
    if isinstance(inputs, dict):
        for key in _QUERY_KEYS:
            if isinstance(inputs.get(key), str) and inputs[key]:
                return inputs[key]
        strings = [v for v in inputs.values() if isinstance(v, str) and v]
        if len(strings) == 1:
            return strings[0]
    return fallback


def _answer_text(output: Any) -> str | None:
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        for key in _ANSWER_KEYS:
            if key in output:
                return _answer_text(output[key])
        return None
    text = getattr(output, "text", None)  # messages: `.text` joins the text parts of any content
    if isinstance(text, str):
        return str(text)  # langchain-core 1.x returns a callable str subclass
    if callable(text):  # langchain-core < 1.0, where `text` was a method
        return text()
    return None


def _context(documents: list[Any]) -> list[dict[str, Any]]:
    """LangChain Documents as context dicts; duplicates (several retrievers, one chunk) are dropped."""
    chunks: list[dict[str, Any]] = []
    seen: set[tuple[Any, str]] = set()
    for doc in documents:
        text = getattr(doc, "page_content", doc)
        doc_id = getattr(doc, "id", None)
        if not isinstance(text, str) or (doc_id, text) in seen:
            continue
        seen.add((doc_id, text))
        # Metadata is stored as JSON; values JSON cannot hold become their str().
        metadata = json.loads(json.dumps(dict(getattr(doc, "metadata", None) or {}), default=str))
        chunk: dict[str, Any] = {"text": text, "metadata": metadata}
        if metadata.get("source") is not None:
            chunk["source"] = str(metadata["source"])
        if doc_id:
            chunk["id"] = str(doc_id)
        chunks.append(chunk)
    # Retriever ids are kept only when every chunk has a distinct one; otherwise Veralith numbers them.
    ids = [c.get("id") for c in chunks]
    if None in ids or len(set(ids)) != len(ids):
        for chunk in chunks:
            chunk.pop("id", None)
    return chunks


def _log(query: str, documents: list[Any], answer: str, metadata: dict[str, Any],
         knowledge_base: str | None = None) -> None:
    # Looked up at call time so the module, not a copy of the function, is what gets called.
    sdk_log = importlib.import_module("veralith.sdk.log")
    sdk_log.log(query, _context(documents), answer, knowledge_base=knowledge_base or _knowledge_base,
                metadata=metadata)


def _warn_once(key: str, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, VeralithAdapterWarning, stacklevel=3)
