"""Reference answers: the team's reference split into facts, two verdicts per fact, the correctness layer.

The reference answer is split into facts by the claims task (the decomposer's claim splitting: the
word rules offline, one more extraction on the LLM path, sent in the decomposition's own batch, so no
new round trip). Each fact then gets two verdicts, asked in the judges' batch by the faithfulness
task's kind of call (again no new round trip):

* context recall: the fact judged as a claim against the retrieved chunks (RAGAS's definition: is it
  attributable to the context?); `supported` is `retrieved`, anything else `not_retrieved`;
* answer correctness: the fact judged against the response's own claims, each shown as a chunk;
  `supported` is `stated` (the claims that state it named), `contradicted`/`conflicting` is
  `contradicted` (the claims that say otherwise named and marked), anything else `missing`.

Expected chunks (`reference_contexts`) are matched in code against the retrieved chunks, by id or
by text. None of this moves a trace between the six cells; it only adds the correctness layer and
the first cause the reference reveals (see `assess`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from veralith.errors import JudgeCallError
from veralith.llm.base import CallResult, CallUsage
from veralith.llm.calls import Batch, Outcome, Steps
from veralith.llm.frames import chunks_in
from veralith.llm.tasks import (
    CLAIMS,
    FAITHFULNESS,
    ChunkIn,
    ClaimIn,
    ClaimsOutput,
    FaithfulnessInput,
    FaithfulnessItem,
    Task,
)
from veralith.models import (
    Claim,
    ContextChunk,
    Correctness,
    ExpectedContext,
    FactCorrectness,
    FactRecall,
    Reference,
    ReferenceAssessment,
    ReferenceFact,
)
from veralith.pipeline.decompose import claims_input

__all__ = ["Pending", "Riding", "assess", "extraction_calls", "facts_of", "reference_steps", "verdict_calls"]

Call = tuple[Task, BaseModel]
# A reference answer split into more facts than this is cut: a reference is an answer, not a document.
MAX_FACTS = 32


def extraction_calls(query: str, reference: Reference | None) -> list[Call]:
    """The claims call that splits the reference answer into facts (none without an answer)."""
    if reference is None or reference.answer is None:
        return []
    payload = claims_input(query, reference.answer)
    return [(CLAIMS, payload)] if payload.sentences else []


def facts_of(outcomes: Sequence[Outcome], answer: str | None = None
             ) -> tuple[list[ReferenceFact], str | None, CallUsage]:
    """The facts f1, f2, ... from the extraction call's outcome, with why there are none when it failed.

    A reference answer in which the splitter finds no claim and no gap statement is a bare answer
    ("1989", "Ruth Calder"): a reference is an answer by definition, so it is one fact, whole, and is
    judged as a short answer to the query."""
    usage = CallUsage()
    if not outcomes:
        return [], None, usage
    outcome = outcomes[0]
    if isinstance(outcome, Exception):
        spent = getattr(outcome, "usage", None)
        if isinstance(spent, CallUsage):
            usage.add(spent)
        return [], f"splitting the reference into facts failed: {_why(outcome)}", usage
    result: CallResult = outcome[0]
    usage.add(result.usage)
    out = result.output
    assert isinstance(out, ClaimsOutput)
    texts = [c.text.strip() for c in out.claims if c.text.strip()][:MAX_FACTS]
    if not texts and not out.gaps and answer is not None and answer.strip():
        texts = [answer.strip()]
    return [ReferenceFact(id=f"f{n}", text=t) for n, t in enumerate(texts, 1)], None, usage


class Pending:
    """The verdict calls of one trace's reference facts: how many of each, to read their outcomes back."""

    def __init__(self, query: str, chunks: list[ContextChunk], claims: list[Claim], facts: list[ReferenceFact],
                 as_of: str | None, batch_size: int) -> None:
        items = [ClaimIn(id=f.id, text=f.text) for f in facts]
        size = max(1, batch_size)
        batches = [items[i:i + size] for i in range(0, len(items), size)]
        # No chunks: nothing can be recalled; no claims: nothing is stated. Both decided without a call.
        recall_chunks = chunks_in(chunks)
        claim_chunks = [ChunkIn(id=c.id, text=c.text) for c in claims]
        self.recall = [FaithfulnessInput(query=query, claims=b, chunks=recall_chunks, as_of=as_of)
                       for b in batches] if recall_chunks else []
        self.correctness = [FaithfulnessInput(query=query, claims=b, chunks=claim_chunks)
                            for b in batches] if claim_chunks else []

    @property
    def calls(self) -> list[Call]:
        return [(FAITHFULNESS, p) for p in (*self.recall, *self.correctness)]

    def split(self, outcomes: Sequence[Outcome]) -> tuple[list[Outcome], list[Outcome]]:
        return list(outcomes[:len(self.recall)]), list(outcomes[len(self.recall):])


class Riding:
    """The reference stage riding the pipeline's own batches: the facts read from the extraction call
    that rode the decomposition (`extra`), the verdict calls that ride the judges' batch, and their
    outcomes once sent (`outcomes`, set by the pipeline)."""

    def __init__(self, query: str, chunks: list[ContextChunk], claims: list[Claim], reference: Reference,
                 extra: Sequence[Outcome], as_of: str | None, batch_size: int) -> None:
        self.reference, self.chunks, self.claims = reference, chunks, claims
        self.facts, self.error, self.usage = facts_of(extra, reference.answer)
        self.pending = verdict_calls(query, chunks, claims, self.facts, as_of, batch_size)
        self.calls = self.pending.calls
        self.outcomes: list[Outcome] = []

    def assessment(self) -> tuple[ReferenceAssessment, CallUsage]:
        recall, correct = self.pending.split(self.outcomes)
        out, usage = assess(self.reference, self.chunks, self.claims, self.facts, recall, correct, self.error)
        usage.add(self.usage)
        return out, usage


def verdict_calls(query: str, chunks: list[ContextChunk], claims: list[Claim], facts: list[ReferenceFact],
                  as_of: str | None, batch_size: int) -> Pending:
    return Pending(query, chunks, claims, facts, as_of, batch_size)


def reference_steps(query: str, chunks: list[ContextChunk], claims: list[Claim], reference: Reference,
                    as_of: str | None, batch_size: int,
                    facts: tuple[list[ReferenceFact], str | None] | None = None
                    ) -> Steps[tuple[ReferenceAssessment, CallUsage]]:
    """The whole stage on its own (the single-call mode, which has no decomposition batch to ride):
    the extraction call unless `facts` are given, then the verdict calls in one batch."""
    usage = CallUsage()
    if facts is None:
        calls = extraction_calls(query, reference)
        found, error, spent = facts_of((yield Batch(calls)) if calls else [], reference.answer)
        usage.add(spent)
    else:
        found, error = facts
    pending = verdict_calls(query, chunks, claims, found, as_of, batch_size)
    outcomes = (yield Batch(pending.calls)) if pending.calls else []
    recall, correct = pending.split(outcomes)
    assessment, spent = assess(reference, chunks, claims, found, recall, correct, error)
    usage.add(spent)
    return assessment, usage


def assess(reference: Reference, chunks: list[ContextChunk], claims: list[Claim], facts: list[ReferenceFact],
           recall: Sequence[Outcome], correctness: Sequence[Outcome],
           error: str | None = None) -> tuple[ReferenceAssessment, CallUsage]:
    """The assessment from the verdict calls' outcomes (a failed call leaves its facts' verdict None)."""
    usage = CallUsage()
    errors = [error] if error else []
    recall_items = _items(recall, usage, errors, "context recall") if chunks else {}
    stated_items = _items(correctness, usage, errors, "answer correctness") if claims else {}
    judged = []
    for fact in facts:
        fact = fact.model_copy()
        if not chunks:
            fact.recall, fact.recall_reasoning = FactRecall.not_retrieved, "Nothing was retrieved."
        elif fact.id in recall_items:
            item = recall_items[fact.id]
            supported = item.relation == "supported"
            fact.recall = FactRecall.retrieved if supported else FactRecall.not_retrieved
            fact.recall_chunk_ids = list(item.grounding_chunk_ids) if supported else []
            fact.recall_reasoning = item.reasoning
        if not claims:
            fact.correctness, fact.correctness_reasoning = FactCorrectness.missing, "The response states no facts."
        elif fact.id in stated_items:
            item = stated_items[fact.id]
            fact.correctness, fact.claim_ids = _correctness(item.relation, item.grounding_chunk_ids,
                                                            item.contradicting_chunk_ids)
            fact.correctness_reasoning = item.reasoning
        judged.append(fact)
    expected = [_expected(given, chunks) for given in reference.contexts]
    out = ReferenceAssessment(answer=reference.answer, contexts=reference.contexts, facts=judged, expected=expected,
                              error="; ".join(errors) or None)
    _conclude(out, claims)
    return out, usage


def _items(outcomes: Sequence[Outcome], usage: CallUsage, errors: list[str],
           what: str) -> dict[str, FaithfulnessItem]:
    items: dict[str, FaithfulnessItem] = {}
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            spent = getattr(outcome, "usage", None)
            if isinstance(spent, CallUsage):
                usage.add(spent)
            errors.append(f"{what} failed: {_why(outcome)}")
            continue
        usage.add(outcome[0].usage)
        items.update((i.claim_id, i) for i in outcome[0].output.items)  # type: ignore[attr-defined]
        if outcome[0].missing:
            errors.append(f"{what}: no usable verdict for {', '.join(sorted(outcome[0].missing))}")
    return items


def _correctness(relation: str, stating: Sequence[str], contradicting: Sequence[str]
                 ) -> tuple[FactCorrectness, list[str]]:
    if relation == "supported":
        return FactCorrectness.stated, list(stating)
    if relation in ("contradicted", "conflicting"):
        return FactCorrectness.contradicted, list(contradicting)
    return FactCorrectness.missing, []


_SPACE = re.compile(r"\s+")
_MIN_CONTAINED = 40   # an expected text this long found inside a chunk (or a chunk inside it) is that chunk


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


def _expected(given: str, chunks: list[ContextChunk]) -> ExpectedContext:
    """The retrieved chunk an expected one names: by id, else by the same text (case and spacing aside),
    else by one containing the other when the shorter is long enough to be that chunk."""
    match = next((c for c in chunks if c.id == given), None)
    if match is None:
        want = _norm(given)
        match = next((c for c in chunks if _norm(c.text) == want), None)
        if match is None:
            match = next((c for c in chunks if min(len(want), len(_norm(c.text))) >= _MIN_CONTAINED
                          and (want in _norm(c.text) or _norm(c.text) in want)), None)
    if match is None:
        return ExpectedContext(given=given)
    return ExpectedContext(given=given, chunk_id=match.id, rank=match.rank)


def _fraction(hits: int, total: int) -> float | None:
    return hits / total if total else None


def _conclude(out: ReferenceAssessment, claims: list[Claim]) -> None:
    """The fractions, the layer, the first cause and the summary, from the per-fact verdicts."""
    facts = out.facts
    recalled = [f for f in facts if f.recall is not None]
    answered = [f for f in facts if f.correctness is not None]
    out.context_recall = _fraction(sum(f.recall is FactRecall.retrieved for f in recalled), len(recalled))
    out.answer_correctness = _fraction(sum(f.correctness is FactCorrectness.stated for f in answered), len(answered))
    out.expected_recall = _fraction(sum(e.chunk_id is not None for e in out.expected), len(out.expected))
    known = {c.id for c in claims}
    out.contradicted_claim_ids = sorted({k for f in facts if f.correctness is FactCorrectness.contradicted
                                         for k in f.claim_ids if k in known}, key=_claim_order)
    out.correctness, why = _layer(out)
    out.cause = _cause(facts) if out.correctness in (Correctness.incorrect, Correctness.partly_correct) else None
    out.summary = why


def _claim_order(claim_id: str) -> tuple[int, str]:
    digits = claim_id.lstrip("k")
    return (int(digits) if digits.isdecimal() else 0, claim_id)


def _layer(out: ReferenceAssessment) -> tuple[Correctness, str]:
    facts = out.facts
    if out.answer is None:
        return Correctness.not_assessed, "No reference answer was given (only expected chunks)."
    if not facts:
        why = out.error or "the reference answer states no fact that could be checked"
        return Correctness.not_assessed, f"Not assessed: {why}."
    wrong = [f.id for f in facts if f.correctness is FactCorrectness.contradicted]
    if wrong:
        return Correctness.incorrect, f"The response contradicts reference fact(s) {', '.join(wrong)}."
    unknown = [f.id for f in facts if f.correctness is None]
    if unknown:
        return Correctness.not_assessed, (f"Not assessed: no answer-correctness verdict for {', '.join(unknown)}"
                                          f" ({out.error or 'not judged'}).")
    stated = sum(f.correctness is FactCorrectness.stated for f in facts)
    if stated == len(facts):
        return Correctness.correct, f"The response states all {len(facts)} reference fact(s)."
    if stated == 0:
        return Correctness.incorrect, f"The response states none of the {len(facts)} reference fact(s)."
    return Correctness.partly_correct, f"The response states {stated} of {len(facts)} reference facts."


# The first cause the reference reveals, in the order a RAG pipeline runs: retrieval, then generation.
Cause = Literal["never_retrieved", "retrieved_unused", "stated_wrongly"]
_CAUSES: tuple[Cause, ...] = ("never_retrieved", "stated_wrongly", "retrieved_unused")


def _cause(facts: list[ReferenceFact]) -> Cause | None:
    found: set[Cause] = set()
    for f in facts:
        if f.correctness in (None, FactCorrectness.stated) or f.recall is None:
            continue
        if f.recall is FactRecall.not_retrieved:
            found.add("never_retrieved")
        elif f.correctness is FactCorrectness.contradicted:
            found.add("stated_wrongly")
        else:
            found.add("retrieved_unused")
    return next((c for c in _CAUSES if c in found), None)


def _why(exc: BaseException) -> str:
    if isinstance(exc, JudgeCallError):
        return f"{exc.kind}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"

