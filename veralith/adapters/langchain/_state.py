"""The adapter's process-wide state: what install() configured, the skip counters, one-time warnings."""

from __future__ import annotations

import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

INSTALL_HINT = 'LangChain is not installed; install the extra with: pip install "veralith-rag[langchain]"'


class VeralithAdapterWarning(UserWarning):
    """Something could not be logged; the chain itself ran normally."""


@dataclass(frozen=True)
class Options:
    """What every trace of a handler is logged with."""

    knowledge_base: str = "default"
    metadata: dict[str, Any] = field(default_factory=dict)   # merged under the adapter's own keys
    run: str | None = None                                   # passed to log() only when set


lock = threading.RLock()
installed = False
options = Options()                 # the global handler's, set by install()
_logged = 0
_skipped: Counter[str] = Counter()  # reason -> RAG runs seen and not logged
_ignored = 0                        # top-level runs during which no retriever ran: not RAG
_warned: set[str] = set()


def count(outcome: str, reason: str | None = None) -> int:
    """Count one run ("logged", "skipped" with a reason, or "ignored"); return the new total of that outcome."""
    global _logged, _ignored
    with lock:
        if outcome == "logged":
            _logged += 1
            return _logged
        if outcome == "ignored":
            _ignored += 1
            return _ignored
        _skipped[reason or "unknown"] += 1
        return sum(_skipped.values())


def stats() -> dict[str, Any]:
    """A snapshot of the counters (since the process started, across every handler)."""
    with lock:
        return {"logged": _logged, "skipped": sum(_skipped.values()), "skipped_by_reason": dict(_skipped),
                "ignored": _ignored}


def warn_once(key: str, message: str) -> None:
    """Warn once per kind of problem; the counters in stats() keep counting every later one."""
    with lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(f"{message} (veralith.adapters.langchain.stats() counts every skipped run; this warning "
                  "is shown once)", VeralithAdapterWarning, stacklevel=4)
