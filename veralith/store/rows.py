"""EvaluationResult <-> table rows, as pure functions (no SQL here).

The contract is exact round-tripping: `from_rows(to_rows(r)) == r`. Lists keep their order through
`position` columns; enums are stored by value; JSON is used only for free-form maps. Floats are
stored as REAL and JSON numbers, both of which reproduce a Python float bit for bit.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from veralith.models import ContextChunk, EvaluationResult, Explanation, FailureCell
from veralith.store.reference_rows import reference_from_rows, reference_rows

__all__ = ["APP_LATENCY_COLUMNS", "RESULT_COLUMNS", "app_latency", "app_latency_values", "chunk_from_row",
           "chunk_rows", "dumps", "from_rows", "now_iso", "result_columns", "to_rows"]


def now_iso() -> str:
    """UTC time as ISO-8601 text with microseconds: sorts the same as it compares."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)  # built once: log() is hot


def dumps(value: Any, *, what: str) -> str:
    if not value and isinstance(value, (dict, list)):
        return "{}" if isinstance(value, dict) else "[]"
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable to be stored: {exc}") from None


# traces columns a stored result writes (input columns and work state are handled by the repository).
RESULT_COLUMNS = (
    "schema_version", "failure_cell", "overall_verdict", "quality_gate", "execution", "availability",
    "status_reason", "status_summary", "refusal", "has_diagnosis", "sufficiency_level",
    "sufficiency_fraction", "faithfulness_fraction", "threshold", "threshold_source", "n_sub_questions",
    "n_claims", "n_uncovered_sub_questions", "n_extra_claims", "suggestion_title", "suggestion_summary",
    "suggestion_actions", "calls", "cache_hits", "input_tokens", "cached_input_tokens", "output_tokens",
    "usd", "backend", "judge_model", "latency_ms", "prompt_versions", "response_kind", "as_of", "needs_review",
    "review_ids", "coverage", "n_partial_sub_questions", "repairs", "mode", "threshold_labels",
    "review_cutoff", "review_cutoff_labels", "review_confidence",
)


def result_columns(result: EvaluationResult) -> dict[str, Any]:
    """The rolled-up traces columns of a result."""
    d, s, u, sug = result.diagnosis, result.status, result.usage, result.suggestion
    cell = d.failure_cell if d else None
    return {
        "schema_version": result.schema_version,
        "failure_cell": cell.value if cell else None,
        "overall_verdict": None if cell is None else ("Y" if cell is FailureCell.complete_grounded else "N"),
        "quality_gate": s.quality_gate.value,
        "execution": s.execution.value,
        "availability": s.availability.value,
        "status_reason": s.reason,
        "status_summary": s.summary,
        "refusal": int(result.refusal),
        "has_diagnosis": int(d is not None),
        "sufficiency_level": d.sufficiency_level.value if d else None,
        "sufficiency_fraction": d.sufficiency_fraction if d else None,
        "faithfulness_fraction": d.faithfulness_fraction if d else None,
        "threshold": d.threshold if d else None,
        "threshold_source": d.threshold_source.value if d else None,
        "threshold_labels": d.threshold_labels if d else None,
        "review_cutoff": d.review_cutoff if d else None,
        "review_cutoff_labels": d.review_cutoff_labels if d else None,
        "review_confidence": d.review_confidence if d else None,
        "n_sub_questions": d.n_sub_questions if d else None,
        "n_claims": d.n_claims if d else None,
        "n_uncovered_sub_questions": d.n_uncovered_sub_questions if d else None,
        "n_extra_claims": d.n_extra_claims if d else None,
        "suggestion_title": sug.title if sug else None,
        "suggestion_summary": sug.summary if sug else None,
        "suggestion_actions": dumps(sug.actions, what="suggestion") if sug else None,
        "calls": u.calls, "cache_hits": u.cache_hits, "input_tokens": u.input_tokens,
        "cached_input_tokens": u.cached_input_tokens, "output_tokens": u.output_tokens, "usd": u.usd,
        "backend": result.backend,
        "judge_model": result.judge_model,
        "latency_ms": dumps(result.latency_ms, what="latency_ms"),
        "prompt_versions": dumps(result.prompt_versions, what="prompt_versions"),
        "response_kind": result.response_kind.value if result.response_kind else None,
        "as_of": result.as_of,
        "needs_review": int(d.needs_review) if d else None,
        "review_ids": dumps(d.review_ids, what="review_ids") if d else None,
        "coverage": dumps({q: c.value for q, c in d.coverage.items()}, what="coverage") if d else None,
        "n_partial_sub_questions": d.n_partial_sub_questions if d else None,
        "repairs": dumps([r.model_dump(mode="json") for r in result.repairs], what="repairs"),
        "mode": result.mode,
    }


def chunk_rows(trace_id: int, chunks: list[ContextChunk]) -> list[tuple]:
    return [(trace_id, i, c.id, c.source, dumps(c.metadata, what=f"context[{i}].metadata"), c.text, c.rank, c.score)
            for i, c in enumerate(chunks)]


def chunk_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """A context_chunks row as ContextChunk fields."""
    return {"id": row["chunk_id"], "text": row["text"], "source": row["source"],
            "metadata": json.loads(row["metadata"]), "rank": row["rank"], "score": row["score"]}


# The app's own latency: {part: ms} (pipeline.inputs.LATENCY_PARTS) <-> the traces columns holding it.
APP_LATENCY_COLUMNS = {"total": "app_latency_ms", "retrieval": "app_retrieval_ms", "generation": "app_generation_ms"}


def app_latency_values(latency: dict[str, float]) -> list[float | None]:
    """The APP_LATENCY_COLUMNS values of a logged latency, in that order."""
    return [latency.get(part) for part in APP_LATENCY_COLUMNS]


def app_latency(values: Any) -> dict[str, float]:
    """{part: ms} from the APP_LATENCY_COLUMNS values (in order); parts not recorded are left out."""
    return {part: float(v) for part, v in zip(APP_LATENCY_COLUMNS, values, strict=True) if v is not None}


def to_rows(trace_id: int, result: EvaluationResult) -> dict[str, list[tuple]]:
    """Child-table rows of a result, keyed by table, as tuples in the tables' column order."""
    pv = result.prompt_versions
    rows: dict[str, list[tuple]] = {
        "context_chunks": chunk_rows(trace_id, result.context),
        "sub_questions": [(trace_id, i, q.id, q.text) for i, q in enumerate(result.sub_questions)],
        "claims": [(trace_id, i, c.id, c.text, c.char_start, c.char_end) for i, c in enumerate(result.claims)],
        "gaps": [(trace_id, i, g.id, g.text, g.char_start, g.char_end) for i, g in enumerate(result.gaps)],
        "remarks": [(trace_id, i, r.id, r.text, r.char_start, r.char_end) for i, r in enumerate(result.remarks)],
        "sufficiency_judgments": [
            (trace_id, i, j.sub_question_id, j.verdict.value, j.reasoning,
             dumps(j.chunk_ids, what="chunk_ids"), pv.get("sufficiency", pv.get("fast")), j.confidence)
            for i, j in enumerate(result.sufficiency)],
        "faithfulness_judgments": [
            (trace_id, i, j.claim_id, j.verdict.value, j.relation.value, j.reasoning,
             pv.get("faithfulness", pv.get("fast")), j.confidence,
             dumps([e.model_dump() for e in j.evidence], what="evidence"),
             dumps([d.model_dump() for d in j.dates], what="dates"))
            for i, j in enumerate(result.faithfulness)],
        "grounding": [
            (trace_id, i, kind, k, j.claim_id, chunk)
            for i, j in enumerate(result.faithfulness)
            for kind, chunks in (("supports", j.grounding_chunk_ids), ("contradicts", j.contradicting_chunk_ids))
            for k, chunk in enumerate(chunks)],
        "judge_errors": [(trace_id, i, e.phase.value, e.kind, e.message, e.attempts)
                         for i, e in enumerate(result.errors)],
        "completeness": [], "completeness_mappings": [], "completeness_extras": [],
        "explanations": explanation_rows(trace_id, result.explanation) if result.explanation else [],
        **reference_rows(trace_id, result.reference),
    }
    comp = result.completeness
    if comp is not None:
        rows["completeness"] = [(trace_id, comp.reasoning, dumps(comp.uncovered_sub_question_ids, what="uncovered"),
                                 pv.get("completeness", pv.get("fast")), dumps(comp.supports, what="supports"),
                                 dumps({q: s.value for q, s in comp.statuses.items()}, what="statuses"),
                                 dumps(comp.gaps, what="gap_links"), dumps(comp.confidence, what="confidence"))]
        for sq_pos, (sq_id, claim_ids) in enumerate(comp.mappings.items()):
            if not claim_ids:
                rows["completeness_mappings"].append((trace_id, sq_pos, 0, sq_id, None))
            rows["completeness_mappings"].extend(
                (trace_id, sq_pos, k, sq_id, claim_id) for k, claim_id in enumerate(claim_ids))
        rows["completeness_extras"] = [(trace_id, i, c) for i, c in enumerate(comp.extra_claim_ids)]
    return rows


def explanation_rows(trace_id: int, e: Explanation) -> list[tuple]:
    """The explanations row of a trace (see migration 0016)."""
    return [(trace_id, e.what_went_wrong, e.change_to_try, dumps([q.model_dump() for q in e.quotes], what="quotes"),
             e.missing_fact, e.dropped, e.backend, e.model, e.prompt_version,
             dumps(e.usage.model_dump(), what="explanation usage"))]


def _explanation(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not rows:
        return None
    row = rows[0]
    return {"what_went_wrong": row["what_went_wrong"], "change_to_try": row["change_to_try"],
            "quotes": json.loads(row["quotes"]), "missing_fact": row["missing_fact"], "dropped": row["dropped"],
            "backend": row["backend"], "model": row["model"], "prompt_version": row["prompt_version"],
            "usage": json.loads(row["call_usage"])}


def from_rows(trace: dict[str, Any], children: dict[str, list[dict[str, Any]]]) -> EvaluationResult:
    """Rebuild a result from its traces row and child rows (each list ordered by position)."""
    grounding: dict[int, dict[str, list[str]]] = {}
    for g in children["grounding"]:
        grounding.setdefault(g["judgment_position"], {"supports": [], "contradicts": []})[g["kind"]].append(
            g["chunk_id"])
    completeness = None
    if children["completeness"]:
        comp = children["completeness"][0]
        mappings: dict[str, list[str]] = {}
        for m in children["completeness_mappings"]:
            claims = mappings.setdefault(m["sub_question_id"], [])
            if m["claim_id"] is not None:
                claims.append(m["claim_id"])
        completeness = {"mappings": mappings, "reasoning": comp["reasoning"],
                        "uncovered_sub_question_ids": json.loads(comp["uncovered_sub_question_ids"]),
                        "extra_claim_ids": [e["claim_id"] for e in children["completeness_extras"]],
                        "supports": json.loads(comp["supports"]), "statuses": json.loads(comp["statuses"]),
                        "gaps": json.loads(comp["gap_links"]), "confidence": json.loads(comp["confidence"])}
    diagnosis = None
    if trace["has_diagnosis"]:
        diagnosis = {k: trace[k] for k in (
            "failure_cell", "sufficiency_level", "sufficiency_fraction", "faithfulness_fraction", "threshold",
            "threshold_source", "n_sub_questions", "n_claims", "n_uncovered_sub_questions", "n_extra_claims",
            "n_partial_sub_questions", "threshold_labels", "review_cutoff", "review_cutoff_labels",
            "review_confidence")}
        diagnosis.update(needs_review=bool(trace["needs_review"]), review_ids=json.loads(trace["review_ids"] or "[]"),
                         coverage=json.loads(trace["coverage"] or "{}"))
    suggestion = None
    if trace["suggestion_title"] is not None:
        suggestion = {"title": trace["suggestion_title"], "summary": trace["suggestion_summary"],
                      "actions": json.loads(trace["suggestion_actions"])}
    empty: dict[str, list[str]] = {"supports": [], "contradicts": []}
    return EvaluationResult.model_validate({
        "schema_version": trace["schema_version"],
        "trace_id": trace["id"],
        "knowledge_base": trace["knowledge_base"],
        "metadata": json.loads(trace["metadata"]),
        "query": trace["query"],
        "context": [chunk_from_row(c) for c in children["context_chunks"]],
        "response": trace["response"],
        "sub_questions": [{"id": q["sub_question_id"], "text": q["text"]} for q in children["sub_questions"]],
        "claims": [{"id": c["claim_id"], "text": c["text"], "char_start": c["char_start"],
                    "char_end": c["char_end"]} for c in children["claims"]],
        "gaps": [{"id": g["gap_id"], "text": g["text"], "char_start": g["char_start"], "char_end": g["char_end"]}
                 for g in children["gaps"]],
        "remarks": [{"id": r["remark_id"], "text": r["text"], "char_start": r["char_start"], "char_end": r["char_end"]}
                    for r in children["remarks"]],
        "response_kind": trace["response_kind"],
        "refusal": bool(trace["refusal"]),
        "as_of": trace["as_of"],
        "sufficiency": [{"sub_question_id": j["sub_question_id"], "verdict": j["verdict"], "reasoning": j["reasoning"],
                         "chunk_ids": json.loads(j["chunk_ids"]), "confidence": j["confidence"]}
                        for j in children["sufficiency_judgments"]],
        "faithfulness": [{"claim_id": j["claim_id"], "verdict": j["verdict"], "relation": j["relation"],
                          "reasoning": j["reasoning"], "confidence": j["confidence"],
                          "evidence": json.loads(j["evidence"]), "dates": json.loads(j.get("dates") or "[]"),
                          "grounding_chunk_ids": grounding.get(j["position"], empty)["supports"],
                          "contradicting_chunk_ids": grounding.get(j["position"], empty)["contradicts"]}
                         for j in children["faithfulness_judgments"]],
        "completeness": completeness,
        "diagnosis": diagnosis,
        "suggestion": suggestion,
        "explanation": _explanation(children.get("explanations", [])),
        "status": {"execution": trace["execution"], "availability": trace["availability"],
                   "quality_gate": trace["quality_gate"], "reason": trace["status_reason"],
                   "summary": trace["status_summary"]},
        "errors": [{"phase": e["phase"], "kind": e["kind"], "message": e["message"], "attempts": e["attempts"]}
                   for e in children["judge_errors"]],
        "repairs": json.loads(trace.get("repairs") or "[]"),
        "latency_ms": json.loads(trace["latency_ms"]),
        "usage": {k: trace[k] for k in ("calls", "cache_hits", "input_tokens", "cached_input_tokens",
                                        "output_tokens", "usd")},
        "backend": trace["backend"],
        "judge_model": trace["judge_model"],
        "prompt_versions": json.loads(trace["prompt_versions"]),
        "mode": trace.get("mode") or "full",
        "reference": reference_from_rows(children),
    })
