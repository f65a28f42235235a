"""Sufficiency: for each sub-question, could a careful reader answer it from the context alone?

Judged from the query and the context only, never the response, so it runs for empty responses and
refusals too (the gate needs it to tell a correct refusal from an unnecessary one). With no
context nothing is sufficient, so no call is made.

The judge is shown what faithfulness is shown about time (veralith.llm.frames): each chunk's date and,
for a sub-question that asks about now, its cutoff, so the two judges hold one standard of "current".
A verdict's reasoning carries what it rests on: the quotes of a "yes", the missing facts of a "no".
"""

from __future__ import annotations

from veralith.config import settings
from veralith.llm.base import CallResult
from veralith.llm.frames import chunks_in, cutoff
from veralith.llm.tasks import SubQuestionIn, SufficiencyInput, SufficiencyItem
from veralith.models import ContextChunk, SubQuestion, SufficiencyJudgment, Verdict

__all__ = ["assemble", "plan", "without_call"]


def plan(query: str, sub_questions: list[SubQuestion], chunks: list[ContextChunk],
         batch_size: int, as_of: str | None = None) -> list[SufficiencyInput]:
    if not chunks:
        return []  # decided without a model: see without_call
    chunk_in = chunks_in(chunks)
    days = settings.stale_after_days
    items = [SubQuestionIn(id=q.id, text=q.text, cutoff=cutoff(q.text, as_of, days)) for q in sub_questions]
    return [SufficiencyInput(query=query, sub_questions=items[i:i + batch_size], chunks=chunk_in, as_of=as_of)
            for i in range(0, len(items), batch_size)]


def without_call(sub_questions: list[SubQuestion]) -> list[SufficiencyJudgment]:
    """An empty context answers nothing, with certainty."""
    return [SufficiencyJudgment(sub_question_id=q.id, verdict=Verdict.N, confidence=1.0,
                                reasoning="The context is empty, so nothing can answer this.")
            for q in sub_questions]


def assemble(calls: list[CallResult], sub_questions: list[SubQuestion]) -> list[SufficiencyJudgment]:
    by_id = {item.sub_question_id: (item, call.confidence.get(item.sub_question_id))
             for call in calls for item in call.output.items}  # type: ignore[attr-defined]
    judgments = []
    for q in sub_questions:
        if q.id not in by_id:
            continue   # no usable verdict even after the re-ask: the pipeline decides around it
        item, confidence = by_id[q.id]
        judgments.append(SufficiencyJudgment(
            sub_question_id=q.id, verdict=Verdict.Y if item.sufficient == "yes" else Verdict.N,
            reasoning=_reasoning(item), chunk_ids=list(item.supporting_chunk_ids), confidence=confidence))
    return judgments


def _reasoning(item: SufficiencyItem) -> str:
    """The judge's reasoning with what the verdict rests on: the quotes of a "yes", the gaps of a "no"."""
    if item.missing_facts and item.sufficient == "no":
        return f"{item.reasoning} Missing: {'; '.join(item.missing_facts)}".strip()
    if item.evidence and item.sufficient == "yes":
        quoted = "; ".join(f'{e.chunk_id} "{e.quote}"' for e in item.evidence)
        return f"{item.reasoning} Found: {quoted}".strip()
    return item.reasoning
