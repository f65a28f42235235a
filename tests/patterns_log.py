"""A generated log of judged traces with planted causes, for tests/test_patterns.py and
benchmarks/patterns_scale.py.

Each trace is a help-centre question about one topic (two, now and then), answered from two to four
retrieved chunks, with its judgments written out and the rest (cell, coverage, suggestion, gate) decided
by the pipeline's own rules (veralith.pipeline.classify, veralith.pipeline.suggest, veralith.policy),
so the stored results look like judged ones. Background failures are spread over every topic and every
document; on top of them two causes are planted:

- BAD_SOURCE, an outdated price list, is retrieved for `bad_rate` of the traces and contradicts the
  price the answer gives (when `stale_prices` is on: the "before" state of the scale benchmark has
  it off, so the traces it touches move from complete_grounded to complete_ungrounded between runs);
- MISSED_TOPIC: questions about exporting data (`missed_rate` of the traces) for which retrieval
  returns nothing on the topic, and the answer fills the gap.

IDLE_SOURCE is retrieved for `idle_rate` of the traces and never grounds a claim. With
`reference_rate`, that share of the traces carries a reference (issue 42), derived from the trace as
a golden set would have it: one fact per sub-question (the text of the document that answers it), not
retrieved exactly where its sub-question's context did not suffice, and the document's chunk id as
the expected chunk; the missed topic's reference is always MISSED_FACT with MISSED_CHUNK expected, a
fact and a chunk the retriever never returns. A reference never moves a trace's cell or gate here
(no fact is contradicted), and it draws on a random stream of its own, so the rest of a trace is the
same with or without it. The texts were
written for these tests; every trace is derived from (seed, index) alone, so two logs with the same
seed differ only where their options differ.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from work_support import claim, save_result

from veralith.models import (
    Claim,
    CompletenessJudgment,
    CompletenessStatus,
    ContextChunk,
    Diagnosis,
    EvaluationResult,
    FaithfulnessJudgment,
    Gap,
    Relation,
    ResponseKind,
    SubQuestion,
    SufficiencyJudgment,
    ThresholdSource,
    Usage,
    Verdict,
)
from veralith.pipeline.classify import classify, response_kind, sufficiency_level
from veralith.pipeline.suggest import suggest
from veralith.policy import status
from veralith.store import ops

__all__ = ["BAD_SOURCE", "IDLE_SOURCE", "MISSED_CHUNK", "MISSED_FACT", "MISSED_TERM", "TOPICS", "fill_two_runs",
           "planted_log"]

BAD_SOURCE = "help/billing/price-list-2019.md"
IDLE_SOURCE = "help/legal/terms-of-service.md"
MISSED_TERM = "export"   # the term every question of the missed topic shares
MISSED_FACT = "Exports are made from the Data page, as a CSV file."   # the missed topic's reference fact
MISSED_CHUNK = "data-export-1"   # ... and its expected chunk, never retrieved

# topic -> ways to ask about it (what follows "How do I ..."). Words such as "account", "order" and
# "plan" recur across topics on purpose: a topic is what retrieval misses, not what is merely common.
TOPICS: dict[str, tuple[str, ...]] = {
    "password": ("reset my account password", "change the password of my account", "recover a forgotten password"),
    "invoice": ("download an invoice for my order", "find the invoice of my last order", "get a copy of an invoice"),
    "shipping": ("track the shipping of my order", "change the shipping address of an order",
                 "speed up the shipping of an order"),
    "refund": ("ask for a refund on my order", "check the status of a refund", "get a refund for a damaged item"),
    "plan": ("upgrade my plan", "downgrade to a cheaper plan", "switch my plan to yearly billing"),
    "login": ("turn on two-step login", "log in with a security key", "sign out of every device"),
    "team": ("invite a colleague to my team", "remove someone from the team", "give a teammate admin rights"),
    "notifications": ("mute email notifications", "get notifications on my phone", "change notification sounds"),
    "storage": ("free up storage in my account", "see how much storage I use", "buy extra storage"),
    "integration": ("connect the calendar integration", "disconnect an integration", "set up the chat integration"),
    "privacy": ("delete my personal data", "see which data is kept about me", "opt out of analytics tracking"),
    "language": ("change the interface language", "translate a shared page", "set my preferred language"),
}
MISSED: tuple[str, ...] = ("export my invoices to a spreadsheet", "export the order history as a file",
                           "schedule a weekly export of my data", "export my contacts list")
_OPENERS = ("How do I", "How can I", "What is the way to", "Where can I", "Is it possible to")
_STEPS = ("open Settings", "go to the Account page", "open the menu at the top right", "choose Manage",
          "click the gear icon", "select Preferences")
_DOCS_PER_TOPIC = 6
_PRICE = "The Pro plan costs {price} per month."
_FIGURES = ("within 30 days", "in 3 to 5 business days", "for up to 12 months", "at 2 GB per user",
            "after 14 days", "for 25 % of the price")
_DATES = ("since 12 March 2024", "until 31 January 2026", "from 1 July 2025", "every Monday",
          "since the 2023 update", "before 15 October 2025")
_NAMES = ("through Northwind Payments", "with the Harbor app", "via the Atlas connector", "at Brightline Support",
          "in the Quillbox dashboard", "by Meridian Couriers")


def _doc(topic: str, k: int) -> tuple[str, str]:
    """(source, text) of document k of a topic."""
    phrase = TOPICS[topic][k % len(TOPICS[topic])]
    step = _STEPS[k % len(_STEPS)]
    return f"help/{topic}/{k}.md", f"To {phrase}, {step}, then follow the steps on the {topic} page."


def planted_log(n: int, *, seed: int = 0, start: int = 0, kb: str = "shop", bad_rate: float = 0.02,
                missed_rate: float = 0.03, idle_rate: float = 0.05, noise: float = 0.15,
                stale_prices: bool = True, long_texts: bool = False,
                reference_rate: float = 0.0) -> Iterator[EvaluationResult]:
    """`n` judged traces (indices `start` .. `start + n - 1`), each with its index as "id" in its
    metadata. `long_texts`: chunks and judge reasoning as long as real ones (a few hundred
    characters), for measuring scans. `reference_rate`: the share of traces with a reference."""
    for i in range(start, start + n):
        result = _trace(random.Random(seed * 1_000_003 + i), i, kb=kb, bad_rate=bad_rate, missed_rate=missed_rate,
                        idle_rate=idle_rate, noise=noise, stale_prices=stale_prices)
        own = random.Random(seed * 1_000_003 + i + 500_000_000)   # the reference's own stream
        if own.random() < reference_rate:
            result = _with_reference(result, own)
        yield _lengthened(result) if long_texts else result


def _with_reference(result: EvaluationResult, rng: random.Random) -> EvaluationResult:
    from veralith.models import ExpectedContext, FactCorrectness, FactRecall, ReferenceAssessment, ReferenceFact
    from veralith.pipeline.reference import _conclude

    sufficient = {j.sub_question_id: j.verdict is Verdict.Y for j in result.sufficiency}
    relation = {j.claim_id: j.relation for j in result.faithfulness}
    mappings = result.completeness.mappings if result.completeness else {}
    facts, expected = [], []
    for n, sq in enumerate(result.sub_questions):
        chunk = result.context[n] if n < len(result.context) else result.context[0]
        stated = any(relation.get(k) is Relation.supported for k in mappings.get(sq.id, []))
        correctness = FactCorrectness.stated if stated else FactCorrectness.missing
        fact_id = f"f{n + 1}"
        if MISSED_TERM in sq.text:
            text, given = MISSED_FACT, MISSED_CHUNK
        elif sufficient.get(sq.id):
            text, given = chunk.text, chunk.id
        else:   # the document that answers it, which the retriever did not return
            topic = chunk.id.rsplit("-", 1)[0]
            k = rng.randrange(_DOCS_PER_TOPIC)
            text, given = _doc(topic, k)[1], f"{topic}-{k}-expected"
        found = sufficient.get(sq.id) and MISSED_TERM not in sq.text
        facts.append(ReferenceFact(id=fact_id, text=text, recall=FactRecall.retrieved if found else FactRecall.not_retrieved,
                                   recall_chunk_ids=[chunk.id] if found else [], recall_reasoning="generated",
                                   correctness=correctness, correctness_reasoning="generated"))
        expected.append(ExpectedContext(given=given, chunk_id=chunk.id if found else None, rank=n + 1 if found else None))
    answer = " ".join(f.text for f in facts)
    out = ReferenceAssessment(answer=answer, contexts=[e.given for e in expected], facts=facts, expected=expected)
    _conclude(out, result.claims)
    return result.model_copy(update={"reference": out})


_FILLER = (" Screens and menu names may differ slightly between the web app, the desktop app and the mobile"
           " apps; where they do, the steps above still apply in the same order. If a step is not available,"
           " your administrator may have turned the feature off for your organisation, or your plan may not"
           " include it. Changes take effect at once and are recorded in the activity log of the account.")
_REASONING = ("The chunk states the steps for this task in the same order as the claim, and no other chunk"
              " disagrees with it; the wording differs but the facts are the same.")


def _lengthened(result: EvaluationResult) -> EvaluationResult:
    return result.model_copy(update={
        "context": [c.model_copy(update={"text": c.text + _FILLER}) for c in result.context],
        "sufficiency": [j.model_copy(update={"reasoning": _REASONING}) for j in result.sufficiency],
        "faithfulness": [j.model_copy(update={"reasoning": _REASONING}) for j in result.faithfulness]})


def _trace(rng: random.Random, i: int, *, kb: str, bad_rate: float, missed_rate: float, idle_rate: float,
           noise: float, stale_prices: bool) -> EvaluationResult:
    names = sorted(TOPICS)
    topics = [rng.choice(names)]
    if rng.random() < 0.25:
        topics.append(rng.choice([t for t in names if t != topics[0]]))
    missed = rng.random() < missed_rate
    # Documents are retrieved with a skewed popularity (a few of each topic's documents come up far
    # more often), so background failures pile up on some documents more than on others.
    chunks: list[ContextChunk] = []
    for topic in topics:
        k = min(int(rng.paretovariate(1.2)) - 1, _DOCS_PER_TOPIC - 1)
        source, text = _doc(topic, k)
        chunks.append(ContextChunk(id=f"{topic}-{k}", text=text, source=source))
    distractor = rng.choice(names)
    k = rng.randrange(_DOCS_PER_TOPIC)
    source, text = _doc(distractor, k)
    if all(c.source != source for c in chunks):
        chunks.append(ContextChunk(id=f"{distractor}-{k}", text=text, source=source))
    bad = rng.random() < bad_rate
    if bad:
        chunks.append(ContextChunk(id="prices-2019", source=BAD_SOURCE,
                                   text="Price list (2019): the Pro plan costs $9 per month."))
    if rng.random() < idle_rate:
        chunks.append(ContextChunk(id="tos-1", source=IDLE_SOURCE,
                                   text="These terms govern your use of the service and may change."))

    opener = rng.choice(_OPENERS)
    asked = [rng.choice(TOPICS[t]) for t in topics]
    if missed:
        asked[0] = rng.choice(MISSED)
    sub_questions = [SubQuestion(id=f"q{n}", text=f"{opener} {what}?") for n, what in enumerate(asked, 1)]
    query = f"{opener} {' and '.join(asked)}?"

    claims: list[Claim] = []
    suff: list[SufficiencyJudgment] = []
    faith: list[FaithfulnessJudgment] = []
    mappings: dict[str, list[str]] = {}
    statuses: dict[str, CompletenessStatus] = {}
    gaps: list[Gap] = []
    gap_links: dict[str, list[str]] = {}
    sentences: list[str] = []

    def claim(text: str, relation: Relation, *, grounds: str | None = None, against: str | None = None) -> str:
        cid = f"k{len(claims) + 1}"
        claims.append(Claim(id=cid, text=text))
        sentences.append(text)
        faith.append(FaithfulnessJudgment(
            claim_id=cid, verdict=Verdict.Y if relation is Relation.supported else Verdict.N, relation=relation,
            reasoning="generated", grounding_chunk_ids=[grounds] if grounds else [],
            contradicting_chunk_ids=[against] if against else [], confidence=0.9))
        return cid

    for n, sq in enumerate(sub_questions):
        own = chunks[n] if n < len(chunks) else chunks[0]
        retrieval_missed = (missed and n == 0) or rng.random() < noise / 3
        suff.append(SufficiencyJudgment(sub_question_id=sq.id, verdict=Verdict.N if retrieval_missed else Verdict.Y,
                                        reasoning="generated", chunk_ids=[] if retrieval_missed else [own.id],
                                        confidence=0.9))
        step = rng.choice(_STEPS)
        if retrieval_missed and (missed or rng.random() < 0.6):
            # Gap filling: an answer the context does not hold.
            detail = rng.choice((*_FIGURES, *_DATES, *_NAMES, "from the Reports page"))
            mappings[sq.id] = [claim(f"You can do it {detail}.", Relation.unsupported)]
            statuses[sq.id] = CompletenessStatus.answered
        elif retrieval_missed:
            gid = f"g{len(gaps) + 1}"
            gaps.append(Gap(id=gid, text="The documents don't say how to do that."))
            sentences.append(gaps[-1].text)
            gap_links[gid] = [sq.id]
            mappings[sq.id] = []
            statuses[sq.id] = CompletenessStatus.unanswered
        else:
            relation = Relation.supported
            if rng.random() < noise / 3:
                relation = Relation.unsupported
            elif rng.random() < noise / 6:
                relation = Relation.contradicted
            text = f"To do that, {step} and then {rng.choice(('confirm', 'save', 'apply'))} the change."
            if relation is not Relation.supported and rng.random() < 0.6:
                text = f"You can do it {rng.choice((*_FIGURES, *_DATES, *_NAMES))}."
            mappings[sq.id] = [claim(text, relation, grounds=own.id if relation is Relation.supported else None,
                                     against=own.id if relation is Relation.contradicted else None)]
            statuses[sq.id] = CompletenessStatus.answered
    if bad:
        # The answer quotes today's price; the outdated price list in the context says otherwise.
        price = _PRICE.format(price="$12")
        if stale_prices:
            claim(price, Relation.contradicted, against="prices-2019")
        else:
            claim(price, Relation.supported, grounds="prices-2019")
        mappings.setdefault(sub_questions[0].id, []).append(claims[-1].id)

    completeness = CompletenessJudgment(
        mappings=mappings, statuses=statuses, gaps=gap_links,
        uncovered_sub_question_ids=[q for q, s in statuses.items() if s is not CompletenessStatus.answered],
        reasoning="generated")
    cls = classify(sub_questions, claims, faith, completeness)
    kind = response_kind(claims, gaps, completeness, asks_clarification=False)
    level, fraction = sufficiency_level(suff, len(sub_questions), 1.0)
    refusal = kind in (ResponseKind.full_refusal, ResponseKind.partial_refusal)
    assert cls.failure_cell is not None
    st = status(errors=[], failure_cell=cls.failure_cell, response_kind=kind, n_claims=len(claims),
                coverage=cls.coverage, sufficient={j.sub_question_id: j.verdict is Verdict.Y for j in suff},
                n_extra_claims=cls.n_extra_claims or 0)
    return EvaluationResult(
        knowledge_base=kb, metadata={"id": f"t{i}"}, query=query, context=chunks, response=" ".join(sentences),
        sub_questions=sub_questions, claims=claims, gaps=gaps, response_kind=kind, refusal=refusal,
        sufficiency=suff, faithfulness=faith, completeness=completeness,
        diagnosis=Diagnosis(failure_cell=cls.failure_cell, sufficiency_level=level, sufficiency_fraction=fraction,
                            faithfulness_fraction=cls.faithfulness_fraction, threshold=1.0,
                            threshold_source=ThresholdSource.fallback, n_sub_questions=len(sub_questions),
                            n_claims=len(claims), n_uncovered_sub_questions=cls.n_uncovered_sub_questions,
                            n_extra_claims=cls.n_extra_claims, n_partial_sub_questions=cls.n_partial_sub_questions,
                            coverage=cls.coverage),
        suggestion=suggest(cls.failure_cell, level, refusal=refusal, faithfulness=faith), status=st,
        usage=Usage(calls=0), backend="local", judge_model="local")


def fill_two_runs(store: Any, n: int, *, kb: str = "shop") -> list[int]:
    """The two-run log: run "before" (the price list agrees), then run "after" in which the traces
    retrieving it are judged again in place and now contradict it. The trace ids, by index."""
    ids: list[int] = []
    touched: set[int] = set()
    run = store.write(ops.start_run, name="before", backend="local", model="local", prompt_versions={})
    for i, result in enumerate(planted_log(n, kb=kb, stale_prices=False)):
        ids.append(save_result(store, result))
        store.write(ops.record_result, run, ids[-1])
        if any(c.source == BAD_SOURCE for c in result.context):
            touched.add(i)
    store.write(ops.finish_run, run)
    run = store.write(ops.start_run, name="after", backend="local", model="local", prompt_versions={})
    for i, trace_id in enumerate(ids):
        if i in touched:
            [again] = planted_log(1, start=i, kb=kb, stale_prices=True)
            assert claim(store, trace_id, again=True)
            save_result(store, again.model_copy(update={"trace_id": trace_id}))
        store.write(ops.record_result, run, trace_id)
    store.write(ops.finish_run, run)
    return ids
