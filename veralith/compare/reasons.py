"""One line saying why a trace fails, built from its stored result (veralith.store.runs.failure_details).

The first thing that decides the cell is named, in the cell's own precedence: an ungrounded claim
(contradicted, with the chunk that contradicts it; unsupported; or resting on conflicting
chunks), then an uncovered sub-question (and whether the context could have answered it), then a
claim that answers nothing asked, then the gate's own summary (e.g. an unnecessary refusal), then
a judge error. Texts are quoted and clipped; they are untrusted and escaped by whoever shows them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["clip", "detail_of", "failure_reason", "reason_kind", "result_reason"]


_HOW = {"unanswered": "not answered", "partial": "answered only in part", "declined": "declined",
        "ungrounded_answer": "has no grounded answer"}   # veralith.pipeline.describe's words for a wrong answer


def clip(text: str, width: int = 60) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def detail_of(result: Any) -> dict[str, Any]:
    """The details of an EvaluationResult in the shape veralith.store.runs.failure_details reads."""
    claims = {c.id: c.text for c in result.claims}
    questions = {q.id: q.text for q in result.sub_questions}
    sufficient = {j.sub_question_id: j.verdict.value for j in result.sufficiency}
    comp = result.completeness

    return {
        "summary": result.status.summary, "reason": result.status.reason,
        "bad_claims": [{"id": j.claim_id, "text": claims.get(j.claim_id, ""), "relation": j.relation.value,
                        "contradicting_chunk_ids": list(j.contradicting_chunk_ids)}
                       for j in result.faithfulness if j.verdict.value == "N"],
        "uncovered": [{"id": q, "text": questions.get(q, ""), "sufficient": sufficient.get(q), "coverage": how}
                      for q, how in result.uncovered_sub_questions()],
        "extra": [{"id": c, "text": claims.get(c, "")} for c in (comp.extra_claim_ids if comp else [])],
        "errors": [{"phase": e.phase.value, "kind": e.kind, "message": e.message} for e in result.errors],
    }


def result_reason(result: Any) -> str | None:
    """The reason line of a result that did not pass; None for a pass."""
    if result.status.quality_gate.value == "pass":
        return None
    return failure_reason(detail_of(result))


def failure_reason(detail: Mapping[str, Any]) -> str:
    """The reason line for one trace's details."""
    bad = detail.get("bad_claims") or []
    more = f" (+{len(bad) - 1} more ungrounded)" if len(bad) > 1 else ""
    if bad:
        claim = bad[0]
        said = f"{claim['id']} '{clip(claim['text'])}'"
        if claim["relation"] == "contradicted":
            chunks = claim.get("contradicting_chunk_ids") or []
            by = f" by chunk {', '.join(chunks)}" if chunks else " by the context"
            return f"{said} contradicted{by}{more}"
        if claim["relation"] == "conflicting":
            return f"{said} rests on conflicting chunks{more}"
        if claim["relation"] == "stale":
            return f"{said} rests on out-of-date chunks{more}"
        return f"{said} not supported by any chunk{more}"
    uncovered = detail.get("uncovered") or []
    if uncovered:
        sq = uncovered[0]
        why = {"N": " (the context does not answer it)", "Y": " (the context does answer it)"}.get(
            sq.get("sufficient") or "", "")
        more = f" (+{len(uncovered) - 1} more)" if len(uncovered) > 1 else ""
        how = _HOW.get(sq.get("coverage") or "unanswered", "not answered")
        return f"{sq['id']} '{clip(sq['text'])}' {how}{why}{more}"
    extra = detail.get("extra") or []
    if extra:
        more = f" (+{len(extra) - 1} more)" if len(extra) > 1 else ""
        return f"{extra[0]['id']} '{clip(extra[0]['text'])}' answers nothing that was asked{more}"
    errors = detail.get("errors") or []
    if errors:
        e = errors[0]
        return f"{e['phase']} judge failed ({e['kind']}): {clip(e['message'])}"
    if detail.get("summary"):
        return clip(detail["summary"], 120)
    return "no stored detail explains it"


# What a reason line says went wrong, without the trace's own words (its ids, its quoted text): the
# key `veralith compare` and the web view group changes by. The line's shape is failure_reason's:
# "<id> '<text>' <predicate>[ (<why>)][ (+N more…)]", after an optional "fixed: " or "was: ".
_PREDICATES = {
    r"contradicted by .+": "a claim the context contradicts",
    r"not supported by any chunk": "a claim no chunk supports",
    r"rests on conflicting chunks": "a claim resting on chunks that contradict each other",
    r"rests on out-of-date chunks": "a claim resting on out-of-date chunks",
    r"answers nothing that was asked": "a claim that answers nothing asked",
    **{re.escape(how): f"a sub-question {how}" for how in _HOW.values()},
}
_SHAPE = re.compile(r"^(?:fixed: |was: )?\S+ '.*' (?P<predicate>" + "|".join(f"(?:{p})" for p in _PREDICATES)
                    + r")(?: \((?P<why>the context does(?: not)? answer it)\))?(?: \(\+\d+ more(?: ungrounded)?\))?$",
                    re.DOTALL)
_JUDGE = re.compile(r"^(?:fixed: |was: )?(\w+) judge failed \(([^)]*)\)")


def reason_kind(line: str | None) -> str:
    """The kind of failure a reason line names ("a claim the context contradicts", "a sub-question not
    answered (the context does not answer it)", "the faithfulness judge failed (timeout)"); a line
    of another shape (the gate's own summary) is its own kind."""
    if not line:
        return "no reason recorded"
    shape = _SHAPE.match(line)
    if shape is not None:
        predicate = shape.group("predicate")
        kind = next(k for p, k in _PREDICATES.items() if re.fullmatch(p, predicate, re.DOTALL))
        return kind + (f" ({shape.group('why')})" if shape.group("why") else "")
    judge = _JUDGE.match(line)
    if judge is not None:
        return f"the {judge.group(1)} judge failed ({judge.group(2)})"
    return line.removeprefix("fixed: ").removeprefix("was: ")
