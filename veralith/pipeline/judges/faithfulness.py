"""Faithfulness: is each claim grounded in the context, and in which chunks?

Claims go to the judge in batches of `batch_size` (5-8 per call measured best, PROMPTS.md §5.1);
every batch sees all chunks, so support that spans two chunks can be found.
"""

from __future__ import annotations

from veralith.llm.tasks import ChunkIn, ClaimIn, FaithfulnessInput, FaithfulnessOutput
from veralith.models import Claim, ContextChunk, FaithfulnessJudgment, Relation, Verdict

__all__ = ["assemble", "plan"]


def plan(query: str, claims: list[Claim], notes: dict[str, str | None], chunks: list[ContextChunk],
         batch_size: int) -> list[FaithfulnessInput]:
    chunk_in = [ChunkIn(id=c.id, text=c.text, source=c.source) for c in chunks]
    items = [ClaimIn(id=c.id, text=c.text, context_note=notes.get(c.id)) for c in claims]
    return [FaithfulnessInput(query=query, claims=items[i:i + batch_size], chunks=chunk_in)
            for i in range(0, len(items), batch_size)]


def assemble(outputs: list[FaithfulnessOutput], claims: list[Claim]) -> list[FaithfulnessJudgment]:
    by_id = {item.claim_id: item for out in outputs for item in out.items}
    judgments = []
    for claim in claims:
        item = by_id[claim.id]
        relation = Relation(item.relation)
        judgments.append(FaithfulnessJudgment(
            claim_id=claim.id,
            verdict=Verdict.Y if relation is Relation.supported else Verdict.N,
            relation=relation,
            reasoning=item.reasoning,
            grounding_chunk_ids=list(item.grounding_chunk_ids),
            contradicting_chunk_ids=list(item.contradicting_chunk_ids),
        ))
    return judgments
