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

from veralith.models import EvaluationResult, FaithfulnessJudgment
from veralith.pipeline.describe import ClaimLine
from veralith.store import ops

__all__ = ["CHUNK_SHOWN", "CLAIMS_SHOWN", "EVIDENCE_AROUND", "QUERY_SHOWN", "ClaimView", "Segment", "claim_views",
           "quote_in_chunk", "response_segments", "row_reasons"]

CLAIMS_SHOWN = 50       # claims a trace page details before it picks (`?claims=all`: every one)
EVIDENCE_AROUND = 240   # characters of a chunk shown either side of a quote
QUERY_SHOWN = 1200      # characters of a query shown before the rest folds away (the response is always whole)
CHUNK_SHOWN = 800       # characters of a context chunk shown before the rest folds away


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
    line: ClaimLine               # the claim in the one vocabulary (veralith.pipeline.describe)
    judgment: FaithfulnessJudgment | None
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.line.id

    @property
    def relation(self) -> str:
        return self.line.relation


def claim_views(result: EvaluationResult, lines: list[ClaimLine], *, limit: int | None = CLAIMS_SHOWN
                ) -> tuple[list[ClaimView], int]:
    """The claims a trace page details, in response order, and how many it leaves out.

    Past `limit` claims (None: no limit) the ungrounded ones come first, then grounded ones up to
    the limit: a long answer of hundreds of claims stays a page a person can read. Evidence shows
    each quote marked inside EVIDENCE_AROUND characters of its chunk either side, not the whole chunk.
    """
    judged = {j.claim_id: j for j in result.faithfulness}
    chunks = {c.id: c for c in result.context}
    chosen: list[int] = list(range(len(lines)))
    if limit is not None and len(lines) > limit:
        order = sorted(range(len(lines)), key=lambda i: (lines[i].grounded, i))
        chosen = sorted(order[:limit])
    out = []
    for i in chosen:
        line = lines[i]
        j = judged.get(line.id)
        evidence = []
        for q in j.evidence if j else []:
            chunk = chunks.get(q.chunk_id)
            cut = quote_in_chunk(chunk.text, q.quote) if chunk else None
            if cut:
                evidence.append(Evidence(q.chunk_id, q.quote, chunk.source if chunk else None, _tail(cut[0]),
                                         cut[1], _head(cut[2]), found=True))
            else:
                evidence.append(Evidence(q.chunk_id, q.quote, chunk.source if chunk else None,
                                         before=_head(chunk.text, 2 * EVIDENCE_AROUND) if chunk else ""))
        if j is not None and not evidence:
            # No quote recorded: still show the chunks the verdict rests on, unmarked.
            for chunk_id in [*j.grounding_chunk_ids, *j.contradicting_chunk_ids]:
                chunk = chunks.get(chunk_id)
                if chunk is not None:
                    evidence.append(Evidence(chunk_id, "", chunk.source, before=_head(chunk.text, 2 * EVIDENCE_AROUND)))
        out.append(ClaimView(i, line, j, evidence))
    return out, len(lines) - len(out)


def _head(text: str, n: int = EVIDENCE_AROUND) -> str:
    return text if len(text) <= n else text[:n].rstrip() + " …"


def _tail(text: str, n: int = EVIDENCE_AROUND) -> str:
    return text if len(text) <= n else "… " + text[-n:].lstrip()


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


def row_reasons(store: Any, rows: list[dict[str, Any]]) -> dict[int, str]:
    """Why each listed trace did not pass, in the one line `veralith compare` uses (its failing claim,
    its unanswered sub-question, its judge errors), or its failure message when it has no result."""
    from veralith.compare.reasons import failure_reason

    failing = [r["id"] for r in rows if r["quality_gate"] not in (None, "pass")]
    details = store.read(ops.failure_details, failing) if failing else {}
    out = {trace_id: failure_reason(detail) for trace_id, detail in details.items()}
    out.update({r["id"]: r["error"] for r in rows if r["quality_gate"] is None and r.get("error")})
    return out
