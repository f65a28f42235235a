"""Rule-based suggestions: one text per (cell, sufficiency level), plus action lines for refusals,
conflicting sources and stale claims; a response whose only ungrounded claims are stale gets the stale
text instead of its cell's, and one whose ungrounded claims all rest on chunks that contradict each
other (stale ones aside) the conflicting-sources text. Sufficiency picks between the HIGH wording
(retrieval was fine, so the generator is at fault) and the LOW wording (retrieval fell short, so fix
that first). Every text holds for every trace its cell can hold, in the words of
veralith.pipeline.describe: an incomplete trace leaves part of the query "without a grounded answer"
(a wrong answer counts as none), never necessarily "unanswered"."""

from __future__ import annotations

from veralith.models import (
    FactCorrectness,
    FactRecall,
    FailureCell,
    FaithfulnessJudgment,
    ReferenceAssessment,
    Relation,
    SufficiencyLevel,
    Suggestion,
)

__all__ = ["CONFLICT", "STALE", "SUGGESTIONS", "suggest", "with_cause"]

H, L = SufficiencyLevel.high, SufficiencyLevel.low
C = FailureCell

SUGGESTIONS: dict[tuple[FailureCell, SufficiencyLevel], Suggestion] = {
    (C.complete_grounded, H): Suggestion(
        title="Healthy answer",
        summary="Retrieval held what was needed and every part of the query is answered from it.",
        actions=["Keep this trace as a regression example for the current retriever and prompt.",
                 "Sample traces like this one periodically to confirm the judges still agree with people."]),
    (C.complete_grounded, L): Suggestion(
        title="Healthy answer on thin retrieval",
        summary="The answer is complete and grounded, though retrieval looked weaker than this knowledge "
                "base usually needs.",
        actions=["Check that the answer did not lean on a single lucky chunk: raise retrieval-K or add a "
                 "reranker so the same question keeps working.",
                 "Let calibration learn this knowledge base's threshold: keep logging traces (20 healthy "
                 "ones are enough)."]),
    (C.complete_ungrounded, H): Suggestion(
        title="Intrinsic hallucination",
        summary="The context held the answer, yet the response states things the context does not support.",
        actions=["Lower the generator's temperature (0-0.3 for factual answers).",
                 "Instruct the generator to answer only from the provided context and to quote or cite "
                 "a chunk id for every sentence.",
                 "Add a post-generation check that drops or flags sentences without a supporting chunk."]),
    (C.complete_ungrounded, L): Suggestion(
        title="Gap-filling hallucination",
        summary="Retrieval missed facts the query needed, and the generator filled the gap from memory.",
        actions=["Raise retrieval-K, or add hybrid (keyword + vector) or multi-query retrieval so the "
                 "missing facts are found.",
                 "Instruct the generator to say what the context does not cover instead of guessing.",
                 "Lower the generator's temperature."]),
    (C.incomplete_grounded, H): Suggestion(
        title="Missed answer",
        summary="The context could answer every part, but the response left some of it out.",
        actions=["Instruct the generator to address every part of a multi-part question, e.g. by "
                 "answering each sub-question in turn.",
                 "Rerank so the chunks that answer each part sit near the top of the prompt.",
                 "Check that a max-token limit is not cutting the answer short."]),
    (C.incomplete_grounded, L): Suggestion(
        title="Retrieval gap",
        summary="What the response says is grounded, but retrieval did not return what the unanswered "
                "parts needed.",
        actions=["Raise retrieval-K or add multi-query retrieval (one query per sub-question).",
                 "Add hybrid (keyword + vector) search for names, numbers and codes that embeddings miss.",
                 "Check that the knowledge base holds documents for this topic at all; index what is missing."]),
    # With good retrieval an invented claim is the generator's doing (a generator hallucination); only
    # when retrieval also fell short is this the worst case: two stages failed at once.
    (C.incomplete_ungrounded, H): Suggestion(
        title="Generator hallucination",
        summary="The context held the answer, yet the response makes claims the context does not support and "
                "leaves part of the query without a grounded answer: the generator, not retrieval, is at fault.",
        actions=["Lower the generator's temperature.",
                 "Instruct the generator to answer only from the context, to cover every part of the "
                 "question, and to cite a chunk id per sentence.",
                 "Rerank so the answering chunks come first in the prompt."]),
    (C.incomplete_ungrounded, L): Suggestion(
        title="Worst-case failure",
        summary="Retrieval missed part of what the query needed, and the response invents claims instead "
                "of saying so.",
        actions=["Raise retrieval-K, or add hybrid or multi-query retrieval for the missing parts.",
                 "Instruct the generator to abstain on the parts the context does not cover "
                 "(\"The documents do not say ...\").",
                 "Lower the generator's temperature.",
                 "Cite a chunk id per sentence so unsupported sentences are visible."]),
    (C.extra_grounded, H): Suggestion(
        title="Padded answer",
        summary="The query is answered from the context, but the response adds material nobody asked for.",
        actions=["Instruct the generator to answer only the question asked, without background.",
                 "Cap the response length (max tokens or a sentence limit).",
                 "Retrieve fewer, more relevant chunks so off-topic material is not in the prompt."]),
    (C.extra_grounded, L): Suggestion(
        title="Padded answer on thin retrieval",
        summary="The response is grounded but drifts to neighbouring material, a sign retrieval returned "
                "more noise than answer.",
        actions=["Rerank and drop low-relevance chunks before generation.",
                 "Instruct the generator to answer only the question asked.",
                 "Cap the response length."]),
    (C.extra_ungrounded, H): Suggestion(
        title="Off-topic fabrication",
        summary="The response answers the query but adds unrequested claims the context does not support.",
        actions=["Instruct the generator to answer only the question asked and only from the context.",
                 "Lower the generator's temperature.",
                 "Cap the response length; padding is where unsupported claims creep in."]),
    (C.extra_ungrounded, L): Suggestion(
        title="Off-topic fabrication on thin retrieval",
        summary="Retrieval fell short and the response wandered into unrequested, unsupported claims.",
        actions=["Raise retrieval-K or add hybrid retrieval so the prompt holds what the query needs.",
                 "Instruct the generator to answer only the question asked, only from the context, and "
                 "to abstain otherwise.",
                 "Lower the generator's temperature and cap the response length."]),
}

_REFUSAL_CORRECT = ("The response declined to answer, and the context indeed lacks the answer: keep "
                    "the abstention behaviour and fix retrieval for this question.")
_REFUSAL_UNNEEDED = ("The response declined although the context holds the answer: relax an over-strict "
                     "\"answer only if certain\" instruction, or put the answering chunk earlier in the prompt.")
_CONFLICT = ("Some chunks contradict others on claims {ids}: deduplicate or date-filter the corpus, and "
             "instruct the generator to surface conflicting sources instead of picking one.")


# A stale claim is the corpus's doing, not the generator's: the chunk said it, once. When every
# ungrounded claim is stale this replaces the cell's text; beside other ungrounded claims it adds a line.
STALE = Suggestion(
    title="Stale answer",
    summary="The response repeats what the context once said: the chunks behind {ids} are older than the "
            "question allows, or a later chunk changed them.",
    actions=["Filter retrieval by date: keep documents dated within the period the question asks about (a "
             "metadata filter on the document date), or boost recent ones.",
             "Re-index the corpus: drop or mark superseded versions so the newest one wins, and store each "
             "chunk's date in its metadata.",
             "Give the generator today's date and each chunk's date, and instruct it to prefer the latest source "
             "and to say as of when a figure holds."])
_STALE = ("Claims {ids} rest on out-of-date chunks: filter retrieval by date or re-index the corpus so the "
          "newest version wins.")
# Chunks that contradict each other are the corpus's doing too: when they are behind every ungrounded
# claim (stale ones aside), this replaces the cell's text, which would blame the generator for inventing.
CONFLICT = Suggestion(
    title="Conflicting sources",
    summary="The context contradicts itself on {ids}: some chunks support what the response says and others "
            "say otherwise, and the response repeats one side as settled.",
    actions=["Deduplicate the corpus: keep one current version of each document and drop or mark the ones it "
             "replaces.",
             "Date-filter or rerank retrieval so the newest, most authoritative source comes first.",
             "Instruct the generator to say when its sources disagree and to name both, instead of picking one."])


def suggest(cell: FailureCell, level: SufficiencyLevel, *, refusal: bool,
            faithfulness: list[FaithfulnessJudgment]) -> Suggestion:
    base = SUGGESTIONS[(cell, level)]
    extra: list[str] = []
    stale = [j.claim_id for j in faithfulness if j.relation is Relation.stale]
    conflicting = [j.claim_id for j in faithfulness if j.relation is Relation.conflicting]
    corpus = all(j.relation in (Relation.supported, Relation.stale, Relation.conflicting) for j in faithfulness)
    if stale and not conflicting and corpus:
        base = STALE.model_copy(update={"summary": STALE.summary.format(ids=", ".join(stale))})
    elif conflicting and corpus:
        base = CONFLICT.model_copy(update={"summary": CONFLICT.summary.format(ids=", ".join(conflicting))})
        conflicting = []   # its own text says it; no action line repeats it
    if stale and base.title != STALE.title:
        extra.append(_STALE.format(ids=", ".join(stale)))
    if refusal:
        extra.append(_REFUSAL_CORRECT if level is L else _REFUSAL_UNNEEDED)
    if conflicting:
        extra.append(_CONFLICT.format(ids=", ".join(conflicting)))
    return base.model_copy(update={"actions": [*base.actions, *extra]})


# The first cause the team's reference reveals (veralith.pipeline.reference), as the first action line:
# the six cells' texts stay reference-free; this line names the stage to fix first.
_CAUSE = {
    "never_retrieved": "Reference check (retrieval): the reference's fact {ids} was never retrieved. Check that "
                       "the document holding it is indexed, then raise retrieval-K or add hybrid / multi-query "
                       "retrieval and a reranker so it reaches the context.",
    "stated_wrongly": "Reference check (generation): the context holds the reference's fact {ids}, but the response "
                      "states it otherwise. Instruct the generator to quote figures and names from the context and "
                      "to cite a chunk per sentence.",
    "retrieved_unused": "Reference check (generation): the context holds the reference's fact {ids}, but the "
                        "response leaves it out. Instruct the generator to cover every part of the question from "
                        "the context, and check the context is not truncated before it reaches the model.",
}


def with_cause(suggestion: Suggestion | None, reference: ReferenceAssessment | None) -> Suggestion | None:
    """The suggestion with the reference's first cause as its first action (unchanged without one)."""
    if suggestion is None or reference is None or reference.cause is None:
        return suggestion
    ids = _cause_facts(reference)
    line = _CAUSE[reference.cause].format(ids=", ".join(ids) if ids else "")
    return suggestion.model_copy(update={"actions": [line, *suggestion.actions]})


def _cause_facts(reference: ReferenceAssessment) -> list[str]:
    cause = reference.cause
    out = []
    for f in reference.facts:
        if f.correctness in (None, FactCorrectness.stated) or f.recall is None:
            continue
        if cause == "never_retrieved":
            wanted = f.recall is FactRecall.not_retrieved
        else:   # a generation cause: the fact was retrieved, then contradicted (stated_wrongly) or left out
            wanted = f.recall is FactRecall.retrieved and (
                (f.correctness is FactCorrectness.contradicted) == (cause == "stated_wrongly"))
        if wanted:
            out.append(f.id)
    return out
