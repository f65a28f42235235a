"""Decomposition: the query into sub-questions, the response into claims and gap statements.

Two calls that run at once. The question is decomposed without the response (so an answer can
neither narrow nor multiply what was asked); the response is pre-split into numbered sentences
by code, so every claim and gap cites the sentences it came from and its span in the response
can be located even when it was reworded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel

from veralith.llm.base import CallResult, CallUsage, JudgeClient
from veralith.llm.calls import Batch, Outcome, Steps, drive, settled
from veralith.llm.tasks import (
    CLAIMS,
    QUESTIONS,
    ClaimsInput,
    ClaimsOutput,
    QuestionsInput,
    QuestionsOutput,
    Sentence,
    Task,
)
from veralith.llm.text import sentence_spans
from veralith.models import Claim, Gap, Remark, SubQuestion, claim_id

__all__ = ["Decomposition", "claims_input", "decompose", "decompose_steps", "decomposition_of"]


@dataclass
class Decomposition:
    sub_questions: list[SubQuestion]
    claims: list[Claim]
    gaps: list[Gap]
    context_notes: dict[str, str | None]   # claim id -> interpreting note, used by the judges only
    asks_clarification: bool
    usage: CallUsage = field(default_factory=CallUsage)
    repairs: list[tuple[str, str]] = field(default_factory=list)   # (kind, message), see veralith.llm.salvage
    remarks: list[Remark] = field(default_factory=list)   # conversational sentences: shown, not graded
    by_task: list[tuple[str, CallUsage]] = field(default_factory=list)   # each call's usage, by task name
    # The outcomes of the calls that rode the decomposition's batch (`extra`), in order; none made: [].
    extra: list[Outcome] = field(default_factory=list)


def claims_input(query: str, response: str) -> ClaimsInput:
    """The claims task's input: the response split into numbered sentences S1, S2, ..."""
    spans = sentence_spans(response)
    return ClaimsInput(query=query, response=response,
                       sentences=[Sentence(id=f"S{i + 1}", text=response[a:b]) for i, (a, b) in enumerate(spans)])


def decompose(client: JudgeClient, query: str, response: str) -> Decomposition:
    """Both decomposition calls (concurrently on an I/O-bound client); raises what a call raises.

    An empty response has nothing to extract, so it makes no claims call.
    """
    return drive(decompose_steps(query, response, concurrent=client.concurrent), client)


def decompose_steps(query: str, response: str, *, concurrent: bool,
                    extra: Sequence[tuple[Task, BaseModel]] = ()) -> Steps[Decomposition]:
    """`decompose` as pipeline steps (veralith.llm.calls): the calls are yielded, the parts returned.
    `extra` calls ride the same batch (the reference's facts): their outcomes, failed or not, are
    handed back in `Decomposition.extra` and never fail the decomposition."""
    claims_in = claims_input(query, response)
    calls: list[tuple[Task, BaseModel]] = [(QUESTIONS, QuestionsInput(query=query))]
    if claims_in.sentences:
        calls.append((CLAIMS, claims_in))
    # One after the other on a client that is not concurrent: the second is not made once the first failed.
    outcomes = (yield Batch([*calls, *extra], stop_at_failure=not concurrent))
    results = settled(outcomes[:len(calls)])
    q_call = results[0]
    c_call = results[1] if claims_in.sentences else CallResult(ClaimsOutput(claims=[], gaps=[],
                                                                             asks_clarification=False))
    usage = CallUsage()
    usage.add(q_call.usage)
    usage.add(c_call.usage)
    parts = decomposition_of(response, claims_in, q_call.output, c_call.output,  # type: ignore[arg-type]
                             usage=usage, repairs=[*q_call.repairs, *c_call.repairs])
    parts.by_task = [(QUESTIONS.name, q_call.usage)] + ([(CLAIMS.name, c_call.usage)] if claims_in.sentences else [])
    parts.extra = list(outcomes[len(calls):])
    return parts


def decomposition_of(response: str, claims_in: ClaimsInput, questions: QuestionsOutput, out: ClaimsOutput, *,
                     usage: CallUsage, repairs: list[tuple[str, str]]) -> Decomposition:
    """The decomposition read off the two extraction outputs (from their own calls, or the single-call
    mode's one reply): items located in the response, claims renumbered k1, k2, ... in reply order."""
    by_id = {s.id: (s, span) for s, span in zip(claims_in.sentences, sentence_spans(response), strict=True)}

    def spans_of(ids: list[str]) -> list[tuple[int, int]]:
        return [by_id[i][1] for i in ids if i in by_id]

    # Claims are renumbered k1, k2, ... whatever ids the backend chose: chunk ids default to
    # c0, c1, ..., and a claim id must never read like a chunk id on any screen or in any prompt.
    claim_ids = [claim_id(n) for n in range(1, len(out.claims) + 1)]
    return Decomposition(
        sub_questions=[SubQuestion(id=q.id, text=q.text) for q in questions.sub_questions],
        claims=[Claim(id=k, text=c.text, **_locate(response, c.text, spans_of(c.source_sentence_ids)))
                for k, c in zip(claim_ids, out.claims, strict=True)],
        gaps=[Gap(id=g.id, text=g.text, **_locate(response, g.text, spans_of(g.source_sentence_ids)))
              for g in out.gaps],
        context_notes={k: c.note or None for k, c in zip(claim_ids, out.claims, strict=True)},
        asks_clarification=out.asks_clarification,
        usage=usage,
        repairs=repairs,
        remarks=[Remark(id=r.id, text=r.text, **_locate(response, r.text, spans_of(r.source_sentence_ids)))
                 for r in out.remarks],
    )


def _locate(response: str, text: str, sentence_spans_: list[tuple[int, int]]) -> dict[str, int | None]:
    """The item's span in the response: verbatim if it is there, else the sentences it came from."""
    stripped = text.strip().rstrip(".")
    if stripped:
        lowered = response.lower()
        if len(lowered) == len(response):   # lowercasing kept every offset (true but for a few scripts)
            at = lowered.find(stripped.lower())
            if at >= 0:
                return {"char_start": at, "char_end": at + len(stripped)}
        else:
            match = re.search(re.escape(stripped), response, flags=re.IGNORECASE)
            if match:
                return {"char_start": match.start(), "char_end": match.end()}
    if sentence_spans_:
        return {"char_start": min(a for a, _ in sentence_spans_), "char_end": max(b for _, b in sentence_spans_)}
    return {"char_start": None, "char_end": None}
