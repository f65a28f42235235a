"""What the pages show, as pure functions from models and store rows to plain data for the templates.

Nothing here produces HTML: the templates escape every value (Jinja2 autoescape), so user text is
handed over as plain strings and can never become markup. Offsets into the response are taken
from the stored claim spans; a span that does not fit the response (or overlaps an earlier one)
is not highlighted rather than highlighted in the wrong place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from veralith.models import Coverage, EvaluationResult, FaithfulnessJudgment, Relation, Verdict

__all__ = ["ClaimView", "Segment", "claim_views", "coverage_reason", "quote_in_chunk", "response_segments",
           "row_reasons"]

RELATION_LABEL = {Relation.supported: "grounded", Relation.unsupported: "ungrounded",
                  Relation.contradicted: "contradicted", Relation.conflicting: "conflicting", Relation.stale: "stale"}


@dataclass(frozen=True)
class Segment:
    """A run of the response: plain, a claim (`index` into the result's claims) or a gap statement."""

    text: str
    kind: str = "text"            # text | claim | gap
    index: int = -1
    relation: str = ""            # for a claim: a Relation value (supported, ..., stale) or unjudged


def response_segments(result: EvaluationResult) -> list[Segment]:
    """The response cut into plain runs and highlighted spans, in order; joined they give the response."""
    text = result.response
    judged = {j.claim_id: j for j in result.faithfulness}
    spans: list[tuple[int, int, str, int, str]] = []
    for i, claim in enumerate(result.claims):
        if claim.char_start is not None and claim.char_end is not None:
            j = judged.get(claim.id)
            spans.append((claim.char_start, claim.char_end, "claim", i, j.relation.value if j else "unjudged"))
    for i, gap in enumerate(result.gaps):
        if gap.char_start is not None and gap.char_end is not None:
            spans.append((gap.char_start, gap.char_end, "gap", i, ""))
    out: list[Segment] = []
    at = 0
    for start, end, kind, index, relation in sorted(spans):
        if not (at <= start < end <= len(text)):
            continue  # out of range or overlapping what is already marked
        if start > at:
            out.append(Segment(text[at:start]))
        out.append(Segment(text[start:end], kind, index, relation))
        at = end
    if at < len(text):
        out.append(Segment(text[at:]))
    return out


@dataclass(frozen=True)
class Evidence:
    chunk_id: str
    quote: str
    source: str | None
    before: str = ""              # the chunk cut around the quote; `found` False when it is not in it
    marked: str = ""
    after: str = ""
    found: bool = False


@dataclass(frozen=True)
class ClaimView:
    index: int
    id: str
    text: str
    relation: str                 # as in Segment
    label: str
    judgment: FaithfulnessJudgment | None
    evidence: list[Evidence] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)    # sub-question ids this claim answers
    extra: bool = False


def claim_views(result: EvaluationResult) -> list[ClaimView]:
    judged = {j.claim_id: j for j in result.faithfulness}
    chunks = {c.id: c for c in result.context}
    comp = result.completeness
    out = []
    for i, claim in enumerate(result.claims):
        j = judged.get(claim.id)
        evidence = []
        for q in j.evidence if j else []:
            chunk = chunks.get(q.chunk_id)
            cut = quote_in_chunk(chunk.text, q.quote) if chunk else None
            evidence.append(Evidence(q.chunk_id, q.quote, chunk.source if chunk else None, *cut, found=True)
                            if cut else Evidence(q.chunk_id, q.quote, chunk.source if chunk else None,
                                                 before=chunk.text if chunk else ""))
        if j is not None and not evidence:
            # No quote recorded: still show the chunks the verdict rests on, unmarked.
            for chunk_id in [*j.grounding_chunk_ids, *j.contradicting_chunk_ids]:
                chunk = chunks.get(chunk_id)
                if chunk is not None:
                    evidence.append(Evidence(chunk_id, "", chunk.source, before=chunk.text))
        answers = [sq for sq, ids in comp.mappings.items() if claim.id in ids] if comp else []
        out.append(ClaimView(i, claim.id, claim.text, j.relation.value if j else "unjudged",
                             RELATION_LABEL[j.relation] if j else "not judged", j, evidence, answers,
                             bool(comp and claim.id in comp.extra_claim_ids)))
    return out


def quote_in_chunk(chunk: str, quote: str) -> tuple[str, str, str] | None:
    """(before, quote as it appears, after) for the first place `quote` occurs in `chunk`, with
    whitespace allowed to differ and, failing that, case too; None when it is not there."""
    words = quote.split()
    if not words:
        return None
    pattern = r"\s+".join(re.escape(w) for w in words)
    for flags in (0, re.IGNORECASE):
        m = re.search(pattern, chunk, flags)
        if m:
            return chunk[:m.start()], m.group(), chunk[m.end():]
    return None


def coverage_reason(result: EvaluationResult, question_id: str) -> tuple[str, str]:
    """(coverage value or "unknown", why in words) for one sub-question, from the stored diagnosis."""
    coverage = result.diagnosis.coverage.get(question_id) if result.diagnosis else None
    comp = result.completeness
    if coverage is None and comp is not None and (result.faithfulness or not result.claims):
        # A result stored before coverage was recorded: apply the library's own rule to it.
        from veralith.pipeline.classify import coverage as coverage_of

        grounded = {j.claim_id for j in result.faithfulness if j.verdict is Verdict.Y}
        asked = [q for q in result.sub_questions if q.id == question_id]
        coverage = coverage_of(asked, grounded, comp).get(question_id)
    if coverage is None or comp is None:
        return "unknown", "not judged"
    answering = ", ".join(comp.mappings.get(question_id, []))
    why = {
        Coverage.answered: f"answered by {answering}",
        Coverage.partial: f"answered only in part by {answering}",
        Coverage.ungrounded_answer: f"answered only by {answering}, which is not grounded",
        Coverage.declined: "declined: the response says the documents lack it",
        Coverage.unanswered: "no claim answers it",
    }[coverage]
    return coverage.value, why


def row_reasons(store: Any, rows: list[dict[str, Any]]) -> dict[int, str]:
    """Why each listed trace did not pass, in the one line `veralith compare` uses (its failing claim,
    its unanswered sub-question, its judge errors), or its failure message when it has no result."""
    from veralith.compare.reasons import failure_reason

    failing = [r["id"] for r in rows if r["quality_gate"] not in (None, "pass")]
    details = store.failure_details(failing) if failing else {}
    out = {trace_id: failure_reason(detail) for trace_id, detail in details.items()}
    out.update({r["id"]: r["error"] for r in rows if r["quality_gate"] is None and r.get("error")})
    return out
