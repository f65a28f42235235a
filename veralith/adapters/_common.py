"""What every adapter shares: the one metadata shape, its counters and warnings, and how a trace
leaves an adapter (logged, or handed to an enclosing `@veralith.trace` call).

Every adapter logs a trace with the same metadata keys (documented in docs/langchain.md and
docs/integrations.md): the caller's own metadata first, then `source` (the framework), `chain`
(what answered), `run_id` and `run_name` (the framework's id and name for the call), `tags`,
`<source>_metadata` (the framework's own metadata for the call), `partial` (a stream its consumer
stopped early), and, when they apply, `input` and `chat_history` (a follow-up question and the
conversation before it) or anything else the adapter documents.

Nothing here imports a framework, and nothing an adapter does may reach the app: `Counters.run`
turns an exception of the adapter's own into a counted skip and a one-time warning.
"""

from __future__ import annotations

import importlib
import json
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from veralith.errors import VeralithWarning
from veralith.sdk import handoff

__all__ = ["Counters", "Options", "Outcome", "VeralithAdapterWarning", "checked_options", "json_safe",
           "trace_metadata"]


class VeralithAdapterWarning(VeralithWarning):
    """Something could not be logged; the app's own call ran normally."""


@dataclass(frozen=True)
class Options:
    """What every trace of an adapter is logged with (its install() options)."""

    knowledge_base: str = "default"
    metadata: dict[str, Any] = field(default_factory=dict)   # merged under the adapter's own keys
    run: str | None = None                                   # passed to log() only when set


_ENCODER = json.JSONEncoder(default=str)  # built once: adapters call this on every trace


def json_safe(value: Any) -> Any:
    """`value` as JSON can hold it: values JSON cannot represent become their str()."""
    if not value and isinstance(value, (dict, list)):
        return type(value)()
    return json.loads(_ENCODER.encode(value))


def checked_options(knowledge_base: str, metadata: Mapping[str, Any] | None, run: str | None) -> Options:
    """install() options, checked: TypeError/ValueError naming the bad one."""
    from veralith.pipeline.inputs import check_knowledge_base, check_metadata

    checked = check_metadata(metadata)
    if json_safe(checked) != checked:
        raise ValueError("install(metadata=...) must hold JSON values (str, numbers, bools, None, lists, dicts)")
    if run is not None and (not isinstance(run, str) or not run.strip()):
        raise ValueError(f"run must be a non-empty str or None, got {run!r}")
    return Options(knowledge_base=check_knowledge_base(knowledge_base), metadata=checked, run=run)


def trace_metadata(base: Mapping[str, Any], *, source: str, chain: str | None, run_id: str, run_name: str | None,
                   tags: list[str], framework_metadata: Any, partial: bool, **extra: Any) -> dict[str, Any]:
    """The one metadata shape of every adapter's traces (see the module docstring)."""
    return {**base, "source": source, "chain": chain, "run_id": run_id, "run_name": run_name, "tags": list(tags),
            f"{source}_metadata": json_safe(framework_metadata), "partial": partial, **extra}


@dataclass
class Outcome:
    """One trace an adapter found: what to log, or to hand to the enclosing traced call. A call that
    only retrieved (a retriever inside a traced call) has no answer; it can only be handed over."""

    query: str | None
    context: list[dict[str, Any]]
    answer: str | None
    metadata: dict[str, Any]
    latency_ms: dict[str, float]


class Counters:
    """An adapter's counters since the process started (`stats()`), and its one-time warnings.

    `logged` traces; `skipped` calls that retrieved but were not logged, by reason (among them
    `inside_veralith_scope`: an enclosing @veralith.trace call logs it, with what the adapter handed
    over; `adapter_error`: Veralith's own failure, never the app's); `ignored` calls that were not
    RAG answers (nothing retrieved)."""

    def __init__(self, name: str) -> None:
        self.name = name                     # e.g. "veralith.adapters.llamaindex", for messages
        self.lock = threading.RLock()
        self.logged = 0
        self.ignored = 0
        self.skipped: Counter[str] = Counter()
        self._warned: set[str] = set()

    def count(self, outcome: str, reason: str | None = None) -> None:
        with self.lock:
            if outcome == "logged":
                self.logged += 1
            elif outcome == "ignored":
                self.ignored += 1
            else:
                self.skipped[reason or "unknown"] += 1

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {"logged": self.logged, "skipped": sum(self.skipped.values()),
                    "skipped_by_reason": dict(self.skipped), "ignored": self.ignored}

    def warn_once(self, key: str, message: str) -> None:
        """Warn once per kind of problem; the counters keep counting every later one."""
        with self.lock:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(f"{message} ({self.name}.stats() counts every skipped call; this warning is shown once)",
                      VeralithAdapterWarning, stacklevel=4)

    def run(self, what: str, step: Callable[[], Any]) -> Any:
        """`step()`, or None after counting an adapter error and warning once: a bug of Veralith's must
        never reach the app."""
        try:
            return step()
        except Exception as exc:
            self.failed(what, exc)
            return None

    def failed(self, what: str, exc: Exception) -> None:
        """Count an adapter error (Veralith's own, caught before it reached the app) and warn once."""
        self.count("skipped", "adapter_error")
        self.warn_once(f"{what}:{type(exc).__name__}", f"Veralith could not read {what}: {exc}")

    def emit(self, outcome: Outcome, options: Options, collector: handoff.Collector | None, *,
             source: str) -> None:
        """Log the trace, or hand it to the traced call whose `collector` it ran in. A trace without
        its question or answer cannot be logged: counted (`no_question`, `no_answer`) and warned once."""
        if collector is not None:
            collector.add(handoff.Handed(source=source, context=outcome.context, answer=outcome.answer,
                                         query=outcome.query, retrieval_ms=outcome.latency_ms.get("retrieval"),
                                         generation_ms=outcome.latency_ms.get("generation"),
                                         knowledge_base=options.knowledge_base, run=options.run))
            self.count("skipped", "inside_veralith_scope")
            return
        if outcome.query is None or outcome.answer is None:
            missing = "question" if outcome.query is None else "answer"
            self.count("skipped", f"no_{missing}")
            self.warn_once(f"shape:{missing}", f"Veralith could not find the {missing} of a {source} call; not logged")
            return
        kwargs: dict[str, Any] = {"knowledge_base": options.knowledge_base, "metadata": outcome.metadata,
                                  "latency_ms": outcome.latency_ms}
        if options.run is not None:
            kwargs["run"] = options.run
        try:
            # Looked up at call time so the module, not a copy of the function, is what gets called.
            importlib.import_module("veralith.sdk.log").log(outcome.query, outcome.context, outcome.answer, **kwargs)
        except Exception as exc:
            self.count("skipped", "log_failed")
            self.warn_once(f"log:{type(exc).__name__}", f"Veralith could not log a {source} call: {exc}")
            return
        self.count("logged")
