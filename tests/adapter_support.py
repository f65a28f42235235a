"""What the adapter tests share: recording what reaches veralith.log(), the counters' changes, and
the one metadata shape every adapter's traces have (veralith.adapters._common)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Every adapter's trace metadata has these keys, plus `<source>_metadata` (see trace_metadata).
SHAPE = {"source", "chain", "run_id", "run_name", "tags", "partial"}


def shape(source: str) -> set[str]:
    return SHAPE | {f"{source}_metadata"}


def record_logs(monkeypatch: Any) -> list[dict[str, Any]]:
    """Make veralith.log() (as the adapters and @trace call it) record its arguments instead of
    storing and evaluating; return the list it appends to."""
    calls: list[dict[str, Any]] = []

    def fake_log(query, context, response, *, metadata=None, knowledge_base="default", **kwargs):
        calls.append({"query": query, "context": context, "response": response, "knowledge_base": knowledge_base,
                      "metadata": metadata or {}, **kwargs})
        return len(calls)

    import veralith.sdk.log as sdk_log
    import veralith.sdk.trace as sdk_trace

    monkeypatch.setattr(sdk_log, "log", fake_log)
    monkeypatch.setattr(sdk_trace, "log", fake_log)
    return calls


def counter_delta(stats: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """A function giving how an adapter's stats() changed since this was called."""
    before = stats()

    def delta() -> dict[str, Any]:
        now = stats()
        reasons = {k: v - before["skipped_by_reason"].get(k, 0) for k, v in now["skipped_by_reason"].items()}
        return {"logged": now["logged"] - before["logged"], "ignored": now["ignored"] - before["ignored"],
                "skipped": {k: v for k, v in reasons.items() if v}}

    return delta


def where_traced_calls_go(logged: list[dict[str, Any]], call: Callable[[str], Any], question: str) -> list[tuple]:
    """Run `call(question)` under a bare `@veralith.trace` and under one naming knowledge_base="kiosk";
    the (knowledge base, run) each of the two traces was logged under."""
    import veralith

    veralith.trace(call)(question)
    veralith.trace(knowledge_base="kiosk")(call)(question)
    return [(c["knowledge_base"], c.get("run")) for c in logged]
