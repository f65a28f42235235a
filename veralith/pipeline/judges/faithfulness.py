"""Faithfulness: is each claim grounded in the context, and in which chunks?

Claims go to the judge in batches of `batch_size` (5-8 per call measured best, PROMPTS.md §5.1;
1 for small local models); every batch sees all chunks, so support that spans two chunks can be
found. With no context there is nothing to ground a claim in, so no call is made.

Each chunk goes with the date its metadata gives, each claim that is about now with its cutoff, and
each call with the trace's date (veralith.llm.frames), so either backend can tell a stale claim; every
verdict is then reviewed against those dates by the same deterministic rules whichever backend gave it
(veralith.llm.temporal, docs/concepts.md).
"""

from __future__ import annotations

from veralith.config import settings
from veralith.llm import temporal
from veralith.llm.base import CallResult
from veralith.llm.frames import chunks_in, claim_cutoff
from veralith.llm.tasks import ClaimIn, FaithfulnessInput
from veralith.models import ChunkDate, Claim, ContextChunk, FaithfulnessJudgment, Quote, Relation, SubQuestion, Verdict

__all__ = ["assemble", "plan", "without_call"]


def plan(query: str, claims: list[Claim], notes: dict[str, str | None], chunks: list[ContextChunk],
         batch_size: int, as_of: str | None = None,
         sub_questions: list[SubQuestion] | None = None) -> list[FaithfulnessInput]:
    if not chunks:
        return []  # decided without a model: see without_call
    chunk_in = chunks_in(chunks)
    asked = [q.text for q in sub_questions or []]
    items = [ClaimIn(id=c.id, text=c.text, context_note=notes.get(c.id),
                     cutoff=claim_cutoff(c.text, notes.get(c.id), asked, query, as_of, settings.stale_after_days))
             for c in claims]
    return [FaithfulnessInput(query=query, claims=items[i:i + batch_size], chunks=chunk_in, as_of=as_of)
            for i in range(0, len(items), batch_size)]


def without_call(claims: list[Claim]) -> list[FaithfulnessJudgment]:
    """An empty context grounds nothing: every claim is unsupported, with certainty."""
    return [FaithfulnessJudgment(claim_id=c.id, verdict=Verdict.N, relation=Relation.unsupported, confidence=1.0,
                                 reasoning="The context is empty, so nothing can ground this claim.")
            for c in claims]


def assemble(calls: list[CallResult], claims: list[Claim],
             payloads: list[FaithfulnessInput] | None = None) -> list[FaithfulnessJudgment]:
    """The judgments of `claims` from the calls' items, each reviewed against the dates of its chunks
    (veralith.llm.temporal) when the payloads it was asked with are given."""
    items = {item.claim_id: (item, call.confidence.get(item.claim_id))
             for call in calls for item in call.output.items}  # type: ignore[attr-defined]
    asked = {c.id: (c, p) for p in payloads or [] for c in p.claims}
    for cid, (item, _) in list(items.items()):
        if cid in asked:
            timed = temporal.review(item, *asked[cid])
            if timed is not None:   # a verdict the dates changed has no measured confidence: unknown
                items[cid] = (timed, None)
    judgments = []
    for claim in claims:
        if claim.id not in items:
            continue   # no usable verdict even after the re-ask: the pipeline decides around it
        item, confidence = items[claim.id]
        relation = Relation(item.relation)
        judgments.append(FaithfulnessJudgment(
            claim_id=claim.id,
            verdict=Verdict.Y if relation is Relation.supported else Verdict.N,
            relation=relation,
            reasoning=item.reasoning,
            grounding_chunk_ids=list(item.grounding_chunk_ids),
            contradicting_chunk_ids=list(item.contradicting_chunk_ids),
            evidence=[Quote(chunk_id=e.chunk_id, quote=e.quote) for e in item.evidence],
            dates=[ChunkDate(chunk_id=d.chunk_id, date=d.date, quote=d.quote) for d in item.dates],
            confidence=confidence,
        ))
    return judgments


