"""Decomposition: the query into sub-questions, the response into claims with their spans.

The response is pre-split into numbered sentences by code, so every claim cites the sentences it
came from and its span in the response can be located even when the claim was reworded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from veralith.llm.base import CallUsage, JudgeClient
from veralith.llm.tasks import DECOMPOSE, DecomposeInput, DecomposeOutput, Sentence
from veralith.llm.text import sentence_spans
from veralith.models import Claim, SubQuestion

__all__ = ["REFUSAL_KINDS", "Decomposition", "decompose"]

# A refusal, full or partial, is a deliberate answer about the context, not a missing answer.
REFUSAL_KINDS = frozenset({"full_refusal", "partial_refusal"})


@dataclass
class Decomposition:
    sub_questions: list[SubQuestion]
    claims: list[Claim]
    context_notes: dict[str, str | None]   # claim id -> disambiguating note, used by the judges only
    response_kind: str
    usage: CallUsage

    @property
    def refusal(self) -> bool:
        return self.response_kind in REFUSAL_KINDS


def decompose(client: JudgeClient, query: str, response: str) -> Decomposition:
    spans = sentence_spans(response)
    sentences = [Sentence(id=f"S{i + 1}", text=response[a:b]) for i, (a, b) in enumerate(spans)]
    call = client.run(DECOMPOSE, DecomposeInput(query=query, response=response, sentences=sentences))
    out: DecomposeOutput = call.output  # type: ignore[assignment]
    by_id = {s.id: span for s, span in zip(sentences, spans)}
    claims = [Claim(id=c.id, text=c.claim, **_locate(response, c.claim, [by_id[i] for i in c.source_sentence_ids]))
              for c in out.claims]
    return Decomposition(
        sub_questions=[SubQuestion(id=q.id, text=q.text) for q in out.sub_questions],
        claims=claims,
        context_notes={c.id: c.context_note for c in out.claims},
        response_kind=out.response_kind,
        usage=call.usage,
    )


def _locate(response: str, text: str, sentence_spans_: list[tuple[int, int]]) -> dict[str, int | None]:
    """The claim's span in the response: verbatim if it is there, else the sentences it came from."""
    stripped = text.strip().rstrip(".")
    if stripped:
        match = re.search(re.escape(stripped), response, flags=re.IGNORECASE)
        if match:
            return {"char_start": match.start(), "char_end": match.end()}
    if sentence_spans_:
        return {"char_start": min(a for a, _ in sentence_spans_), "char_end": max(b for _, b in sentence_spans_)}
    return {"char_start": None, "char_end": None}
