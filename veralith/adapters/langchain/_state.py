"""The adapter's process-wide state: what install() configured, the skip counters, one-time warnings."""

from __future__ import annotations

import threading
from typing import Any

from veralith.adapters._common import Counters, Options, VeralithAdapterWarning

__all__ = ["INSTALL_HINT", "Options", "VeralithAdapterWarning", "count", "counters", "stats", "warn_once"]

INSTALL_HINT = 'LangChain is not installed; install the extra with: pip install "veralith-rag[langchain]"'

lock = threading.RLock()
installed = False
options = Options()                 # the global handler's, set by install()
counters = Counters("veralith.adapters.langchain")


def count(outcome: str, reason: str | None = None) -> None:
    """Count one run ("logged", "skipped" with a reason, or "ignored")."""
    counters.count(outcome, reason)


def stats() -> dict[str, Any]:
    """A snapshot of the counters (since the process started, across every handler)."""
    return counters.stats()


def warn_once(key: str, message: str) -> None:
    """Warn once per kind of problem; the counters in stats() keep counting every later one."""
    counters.warn_once(key, message)
