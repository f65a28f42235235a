"""Sufficiency: for each sub-question, could a careful reader answer it from the context alone?

Judged from the query and the context only, never the response, so it runs for empty responses and
refusals too (the gate needs it to tell a correct refusal from an unnecessary one).
"""

from __future__ import annotations

from veralith.llm.tasks import ChunkIn, SubQuestionIn, SufficiencyInput, SufficiencyOutput
from veralith.models import ContextChunk, SubQuestion, SufficiencyJudgment, Verdict

__all__ = ["assemble", "plan"]


def plan(query: str, sub_questions: list[SubQuestion], chunks: list[ContextChunk],
         batch_size: int) -> list[SufficiencyInput]:
    chunk_in = [ChunkIn(id=c.id, text=c.text, source=c.source) for c in chunks]
    items = [SubQuestionIn(id=q.id, text=q.text) for q in sub_questions]
    return [SufficiencyInput(query=query, sub_questions=items[i:i + batch_size], chunks=chunk_in)
            for i in range(0, len(items), batch_size)]


def assemble(outputs: list[SufficiencyOutput], sub_questions: list[SubQuestion]) -> list[SufficiencyJudgment]:
    by_id = {item.sub_question_id: item for out in outputs for item in out.items}
    return [SufficiencyJudgment(
        sub_question_id=q.id,
        verdict=Verdict.Y if by_id[q.id].sufficient == "yes" else Verdict.N,
        reasoning=_reasoning(by_id[q.id]),
        chunk_ids=list(by_id[q.id].supporting_chunk_ids),
    ) for q in sub_questions]


def _reasoning(item) -> str:
    if item.missing_facts and item.sufficient == "no":
        return f"{item.reasoning} Missing: {'; '.join(item.missing_facts)}".strip()
    return item.reasoning
