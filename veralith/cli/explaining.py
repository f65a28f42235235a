"""`inspect --explain`: explain a stored failing trace (veralith.pipeline.explain) and keep it beside its
suggestion. The explanation is asked of the configured judge, within the per-trace budget (what the
trace already cost plus this call); the trace's judgments and its stored usage stay as they were."""

from __future__ import annotations

from typing import Any

from veralith.models import EvaluationResult
from veralith.store import ops
from veralith.store.protocol import Store

__all__ = ["explain_stored"]


def explain_stored(store: Store, result: EvaluationResult, err: Any = None, *, client: Any = None
                   ) -> EvaluationResult:
    """`result` with its explanation: the stored one when it has a kept one, else a new one (stored).

    `err`: where to say that a trace that is not failing gets none (inspect); `client`: the judge
    (default: the configured one). Also used by `eval --explain` for a record left unchanged."""
    from veralith.pipeline.explain import explain, wanted

    if not wanted(result):
        if err is not None:
            err.print(f"trace {result.trace_id}: nothing to explain (gate {result.status.quality_gate.value}); only "
                      "a failing trace gets an explanation, so no call was made", highlight=False)
        return result
    if result.explanation is not None and result.explanation.dropped is None:
        return result   # explained already: shown as stored, no call
    from veralith.llm import get_client
    from veralith.pipeline.budget import enforce_explain_budget

    client = client or get_client()
    enforce_explain_budget(result, client=client)   # BudgetExceeded: one line, nothing called or stored
    explanation = explain(client, result)
    assert result.trace_id is not None
    store.write(ops.save_explanation, result.trace_id, explanation)
    return result.model_copy(update={"explanation": explanation})
