"""A trace's reference and its verdicts <-> the rows of migration 0024 (PostgreSQL 0016), as pure functions (no SQL).

`trace_references` holds what was given (written when the trace is logged) and, once judged, the
correctness layer; `reference_facts` and `expected_contexts` the per-item verdicts. A result without a
reference has no rows, and reads back with `reference` None.
"""

from __future__ import annotations

import json
from typing import Any

from veralith.models import Reference, ReferenceAssessment


def dumps(ids: list[str], *, what: str) -> str:
    """A list of strings as stored JSON (its items were checked as text when the trace was logged)."""
    del what
    return json.dumps(ids, ensure_ascii=False, separators=(",", ":"))


__all__ = ["REFERENCE_TABLES", "given_reference", "given_row", "reference_from_rows", "reference_rows"]

# table -> its columns in insert order
REFERENCE_TABLES: dict[str, tuple[str, ...]] = {
    "trace_references": ("trace_id", "answer", "contexts", "correctness", "cause", "context_recall",
                         "answer_correctness", "expected_recall", "contradicted_claim_ids", "summary", "error"),
    "reference_facts": ("trace_id", "position", "fact_id", "text", "recall", "recall_chunk_ids", "recall_reasoning",
                        "correctness", "claim_ids", "correctness_reasoning"),
    "expected_contexts": ("trace_id", "position", "given", "chunk_id", "rank"),
}


def given_row(trace_id: int, reference: Reference) -> tuple:
    """The trace_references row of a logged trace, before it is judged."""
    return (trace_id, reference.answer, dumps(reference.contexts, what="reference_contexts"),
            None, None, None, None, None, None, None, None)


def reference_rows(trace_id: int, ref: ReferenceAssessment | None) -> dict[str, list[tuple]]:
    """The rows of a judged result's reference (none without one), keyed by table."""
    if ref is None:
        return {table: [] for table in REFERENCE_TABLES}
    return {
        "trace_references": [(trace_id, ref.answer, dumps(ref.contexts, what="reference_contexts"),
                              ref.correctness.value, ref.cause, ref.context_recall, ref.answer_correctness,
                              ref.expected_recall, dumps(ref.contradicted_claim_ids, what="contradicted_claim_ids"),
                              ref.summary, ref.error)],
        "reference_facts": [(trace_id, i, f.id, f.text, f.recall.value if f.recall else None,
                             dumps(f.recall_chunk_ids, what="recall_chunk_ids"), f.recall_reasoning,
                             f.correctness.value if f.correctness else None, dumps(f.claim_ids, what="claim_ids"),
                             f.correctness_reasoning) for i, f in enumerate(ref.facts)],
        "expected_contexts": [(trace_id, i, e.given, e.chunk_id, e.rank) for i, e in enumerate(ref.expected)],
    }


def reference_from_rows(children: dict[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """ReferenceAssessment fields from the rows (None when the trace has no reference)."""
    rows = children.get("trace_references") or []
    if not rows:
        return None
    row = rows[0]
    return {
        "answer": row["answer"], "contexts": json.loads(row["contexts"]),
        "correctness": row["correctness"] or "not_assessed", "cause": row["cause"],
        "context_recall": row["context_recall"], "answer_correctness": row["answer_correctness"],
        "expected_recall": row["expected_recall"],
        "contradicted_claim_ids": json.loads(row["contradicted_claim_ids"] or "[]"),
        "summary": row["summary"] or "", "error": row["error"],
        "facts": [{"id": f["fact_id"], "text": f["text"], "recall": f["recall"],
                   "recall_chunk_ids": json.loads(f["recall_chunk_ids"]), "recall_reasoning": f["recall_reasoning"],
                   "correctness": f["correctness"], "claim_ids": json.loads(f["claim_ids"]),
                   "correctness_reasoning": f["correctness_reasoning"]}
                  for f in children.get("reference_facts") or []],
        "expected": [{"given": e["given"], "chunk_id": e["chunk_id"], "rank": e["rank"]}
                     for e in children.get("expected_contexts") or []],
    }


def given_reference(row: dict[str, Any] | None) -> Reference | None:
    """What was given with a logged trace, from its trace_references row (None: no row)."""
    if row is None:
        return None
    return Reference(answer=row["answer"], contexts=json.loads(row["contexts"]))
