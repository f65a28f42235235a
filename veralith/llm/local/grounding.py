"""Local faithfulness: is each claim grounded in the chunks, and in which ones?

Per claim, in order:

1. Alignment (veralith/llm/local/align.py): the context sentence that best covers the claim's
   content words, and the second sentence (any chunk) that adds most of what it lacks.
2. Contradiction checks on the best-aligned sentences: same statement, another number, polarity,
   name/date or direction; none against a sentence when its chunk states the claim's names and
   figures elsewhere, with more of the claim (the claim was aligned to the wrong slot). A
   comparison of two things the context gives figures for is settled by those figures instead.
   A claim a sentence contradicts is `contradicted`, or `conflicting` when a sentence in another
   chunk states it as claimed.
3. Otherwise the shipped logistic model gives p(unsupported) from the features in FEATURES.
   A claim whose number or name occurs nowhere in the context is never `supported`.

Every verdict comes with a confidence, the probability that it is right, from the model's p
calibrated on out-of-fold scores (model.Logistic.calibrated): 1 - p for `supported`, p for
`unsupported`, and for a verdict a rule takes (a contradiction, a name or figure found nowhere) at
least that rule's precision measured in training (coefficients.json, "rules"). A pass that rests
only on word overlap, with no sentence that states the claim whole, is low-confidence: at most
OVERLAP_ONLY, below the pipeline's review threshold, so a trace whose gate it decides is flagged.
`decide` is the one place the verdict is taken; the benchmark runs this module, with its
cross-validated coefficients swapped in (model.override).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from veralith.llm.local.align import (
    Claim,
    Context,
    Sentence,
    claim_of,
    clauses_of,
    context_of,
    coverage,
    order_coverage,
    personal,
    subjective,
)
from veralith.llm.local.comparison import comparison
from veralith.llm.local.contradiction import contradiction
from veralith.llm.local.lexicon import FIRST_PERSON, MONTHS, PREFIX, PREFIX_CREDIT
from veralith.llm.local.model import Logistic, load
from veralith.llm.local.polarity import negated_opposite
from veralith.llm.local.synonyms import direction
from veralith.llm.tasks import ClaimIn, Evidence, FaithfulnessInput, FaithfulnessItem, FaithfulnessOutput
from veralith.llm.text import clip_quote

__all__ = ["FEATURES", "OVERLAP_ONLY", "Analysis", "analyse", "claim_features", "decide", "faithfulness", "rule_of"]

FEATURES = ["cov_sent", "cov_pair", "cov_ctx", "cov_new", "miss_w", "miss_new", "miss_name", "order", "num_absent",
            "ent_absent", "contra", "personal", "subjective", "n_terms", "ctx_size", "anchor", "bare"]
_YES_NO = re.compile(r"^\W*(?:yes|no)\W*$", re.I)
_QUOTE_CHARS = 300
_BARE_TERMS = 4      # a claim this short answering a query is read against the query (a bare answer)
_FULL = 0.95         # coverage at which one sentence states the whole claim
_CANDIDATES = 3      # best-aligned sentences checked for a contradiction
_SECOND = 0.05       # coverage a second sentence must add to be cited too
OVERLAP_ONLY = 0.6   # the most confidence a pass gets when no sentence states the claim whole
_POOL = 8            # best-aligned sentences a claim's evidence is chosen from
_ANCHOR_SENTENCES = 5  # sentences stating a bare answer that are read for the question around it
_STATES = 0.99       # coverage at which a sentence states a bare answer


@dataclass
class Analysis:
    """What the judge found for one claim: features, where it aligns, and what argues against it."""

    features: dict[str, float]
    grounding: list[int] = field(default_factory=list)            # sentence indices, best first
    supporting: list[int] = field(default_factory=list)           # sentences stating the whole claim
    contradicting: list[tuple[int, str]] = field(default_factory=list)  # (sentence index, why)
    absent: list[str] = field(default_factory=list)               # numbers and names found nowhere
    missing: list[str] = field(default_factory=list)              # claim words its evidence lacks


@dataclass
class Decision:
    relation: str        # supported | unsupported | contradicted (conflicting is decided by the chunks)
    p_unsupported: float
    confidence: float    # probability that `relation` is right


# A short claim with a verb of its own ("The gallery is open on Mondays") states its fact whole; only
# a verbless one ("Agnes Tollard", "six euros", "in 1783") is an answer to be read inside its question.
_FINITE = re.compile(r"\b(?:is|are|was|were|has|have|had|does|do|did|can|could|will|would|may|might|must|should|"
                     r"isn't|aren't|wasn't|weren't|hasn't|haven't|doesn't|don't|didn't|can't|won't)\b", re.I)


def _bare(claim: ClaimIn, query: str) -> bool:
    if not query.strip():
        return False
    if _YES_NO.match(claim.text):
        return True
    return len(claim_of(claim.text).terms) <= _BARE_TERMS and not _FINITE.search(claim.text)


def analyse(claim: ClaimIn, query: str, ctx: Context) -> Analysis:
    """Align one claim to the context and compute the model's features."""
    bare = _bare(claim, query)
    yes_no = bool(_YES_NO.match(claim.text)) and bool(query.strip())
    own = claim_of(query if yes_no else claim.text)
    terms = own.terms
    sents = ctx.sentences
    ranked = ctx.ranked(terms, limit=_POOL)
    # found[k][j]: how well sentence ranked[j] holds term k (1, 0.7 for a shared word stem, 0).
    # (Sentence.has inlined: this matrix is the judge's innermost loop.)
    rows = [(sents[i].norms, sents[i].prefixes) for i in ranked]
    found = [[1.0 if t.norm in norms else PREFIX_CREDIT if key in prefixes else 0.0 for norms, prefixes in rows]
             for t in terms for key in (t.norm[:PREFIX] if not t.number and len(t.norm) >= PREFIX else None,)]
    # "closed" is held by "not open": a direction word stated as its negated opposite (rare: only
    # words with a direction are looked at).
    for k, t in enumerate(terms):
        if direction(t.low) is not None:
            for j, i in enumerate(ranked):
                if found[k][j] < 1.0 and negated_opposite(sents[i], t.low):
                    found[k][j] = 1.0
    weights = [t.weight for t in terms]
    total = sum(weights)

    def cov(cols: list[int], keep: list[bool] | None = None) -> float:
        num = den = 0.0
        for k, w in enumerate(weights):
            if keep is None or keep[k]:
                den += w
                num += w * max([found[k][j] for j in cols], default=0.0)
        return num / den if den else 1.0

    cov_sent = cov([0]) if ranked else (1.0 if not terms else 0.0)
    cols, cov_pair = [0], cov_sent
    if len(ranked) > 1:
        # The partner that adds most to the best sentence (earlier wins ties): one pass over the terms.
        first = [w * row[0] for w, row in zip(weights, found, strict=False)]
        gains = [sum(w * row[j] - f for w, row, f in zip(weights, found, first, strict=False) if row[j] * w > f)
                 for j in range(1, len(ranked))]
        second = 1 + max(range(len(gains)), key=lambda j: (gains[j], -j))
        paired = cov([0, second])
        if paired > cov_sent + _SECOND:
            cols, cov_pair = [0, second], paired
    grounding = [ranked[j] for j in cols] if ranked else []
    evidence = [sents[i] for i in grounding]
    held = [max((found[k][j] for j in cols), default=0.0) if ranked else 0.0 for k in range(len(terms))]
    # The claim's own content beyond the question's words: what the answer adds and must ground.
    asked = claim_of(query).norms if query.strip() else frozenset()
    new = [t.norm not in asked for t in terms]
    new_weight = sum(w for w, n in zip(weights, new, strict=False) if n)
    strong = [t for t in own.toks if t.number and t.strong]
    capitals = [t for t in terms if t.capital]
    # A name or figure the context never mentions is not grounded, even when the question brought it.
    absent_numbers = [t for t in strong if t.norm not in ctx.norms]
    absent_names = [t for t in capitals if ctx.has(t) == 0.0]
    cap_weight = sum(t.weight for t in capitals)
    words_first = {t.low for t in evidence[0].toks} if evidence else set()

    # Contradiction: the claim as stated (a bare answer is read inside its question).
    stated = claim_of(f"{query.strip().rstrip('?')} {claim.text}") if bare and not yes_no else own
    candidates = ctx.ranked(stated.terms, limit=_CANDIDATES) if stated is not own else ranked[:_CANDIDATES]
    pool = ctx.ranked(stated.terms, limit=_POOL) if stated is not own else ranked
    against: list[tuple[int, str]] = []
    # A comparison of two things the context gives figures for is settled by those figures. Its two
    # names would otherwise read as swaps against each other's sentence, so no slot check follows.
    compared = comparison(own, claim_of(query) if query.strip() else None, ctx) if not yes_no else None
    if compared is not None:
        against = [(compared[0], compared[1])] if compared[1] else []
    elif not yes_no:
        answer = own if stated is not own else None
        for i in candidates:
            # Where else the claim's values may stand: one well-aligned sentence, or its aligned pair.
            pair = [sents[j] for j in grounding if j != i]
            options = [[sents[j]] for j in pool if j != i] + ([pair] if len(pair) > 1 else [])
            why = _clash(stated, i, ctx, answer, options)
            if why:
                against.append((i, why))
    contra_ids = {i for i, _ in against}
    full = [ranked[j] for j in range(min(_CANDIDATES, len(ranked)))
            if cov([j]) >= _FULL and ranked[j] not in contra_ids]
    supported_chunks = {sents[i].chunk for i in full}
    # A chunk that states the claim outright is not contradicted by its own other sentences (a
    # document gives several figures); only another chunk's statement can conflict with it.
    against = [(i, why) for i, why in against if sents[i].chunk not in supported_chunks]

    features = {
        "cov_sent": cov_sent,
        "cov_pair": cov_pair,
        "cov_ctx": sum(w * ctx.has(t) for t, w in zip(terms, weights, strict=False)) / total if terms else 1.0,
        "cov_new": cov(cols, new) if ranked and new_weight else (1.0 if not new_weight else 0.0),
        "miss_w": math.log1p(sum(w * (1.0 - h) for w, h in zip(weights, held, strict=False))),
        "miss_new": math.log1p(sum(w * (1.0 - h) for w, h, n in zip(weights, held, new, strict=False) if n)),
        # Names and figures the evidence lacks: a paraphrase changes common words, rarely these.
        "miss_name": math.log1p(sum(1.0 - h for t, h in zip(terms, held, strict=False) if t.capital or t.number)),
        "order": order_coverage(terms, evidence) if evidence else 0.0,
        "num_absent": len(absent_numbers) / len(strong) if strong else 0.0,
        "ent_absent": sum(t.weight for t in absent_names) / cap_weight if capitals else 0.0,
        "contra": float(bool(against)),
        "personal": float(personal(own) and not words_first & FIRST_PERSON),
        "subjective": float(bool(subjective(own) - words_first)),
        "n_terms": math.log1p(len(terms)),
        # The more context there is, the more of any claim's words it holds by chance: coverage
        # means less in a long article than in one short passage.
        "ctx_size": math.log1p(ctx.size),
        "anchor": _anchor(own, query, ctx) if bare and not yes_no else 1.0,
        "bare": float(bare),
    }
    return Analysis(features=features, grounding=grounding, supporting=full, contradicting=against,
                    absent=[t.low for t in absent_numbers + absent_names],
                    missing=[t.low for t, h in zip(terms, held, strict=False) if h == 0.0])


def _said_elsewhere(claim: Claim, clash: Sentence, options: list[list[Sentence]]) -> bool:
    """Is the claim about other sentences than the clashing one?

    It is when one of `options` (other sentences of the same chunk, or the clauses of the same
    sentence) holds every name, figure and date of the claim that `clash` lacks, and more of the
    claim's words than it does: a list of items, the casts of two films, two events of one
    article. The chunk states the claim's values where they belong; the clash only means the claim
    was aligned to the wrong slot. Words are counted, not weighted, and a tie keeps the clash: a
    sentence that names the claim's subject ("... chose Ann Roe in 1953") is not about its predicate
    ("Ann Roe won the cup in 1952"). Another chunk is not enough: two documents that disagree are
    a conflict, and `analyse` reports it so.
    """
    values = [t for t in claim.terms if (t.capital or t.number or t.norm in MONTHS) and clash.has(t) < 1.0]
    if not values:
        return False  # a polarity or direction clash: no value to look for elsewhere
    mine = sum(clash.has(t) for t in claim.terms)
    for option in options:
        if not option or any(o.chunk != clash.chunk or o is clash for o in option):
            continue
        # "not open" holds "closed": a sentence that states the claim's direction by its negated
        # opposite is about the claim as much as one that repeats the word.
        held = [max(1.0 if negated_opposite(o, t.low) else o.has(t) for o in option) for t in claim.terms]
        if all(h == 1.0 for t, h in zip(claim.terms, held, strict=False) if t in values) and sum(held) > mine:
            return True
    return False


def _clash(claim: Claim, i: int, ctx: Context, answer: Claim | None, options: list[list[Sentence]]) -> str | None:
    """Why sentence i, or one of its clauses, contradicts the claim, unless the claim's values are
    stated elsewhere in its chunk (another sentence, or another clause of this one)."""
    sent = ctx.sentences[i]
    why = contradiction(claim, sent, ctx, answer)
    if why:
        return None if _said_elsewhere(claim, sent, options) else why
    parts = clauses_of(sent)
    for part in parts:
        why = contradiction(claim, part, ctx, answer)
        if why and not _said_elsewhere(claim, part, options + [[p] for p in parts if p is not part]):
            return why
    return None


def _anchor(answer: Claim, query: str, ctx: Context) -> float:
    """For a bare answer: how much of the question surrounds the answer where the context states it.

    An entity the context names only far from what was asked is a different answer that happens
    to appear in the context.
    """
    # Only question words the context uses can surround the answer ("summarize" never will).
    asked = [t for t in claim_of(query).terms if t.norm not in answer.norms and ctx.has(t)]
    if not asked or not answer.terms:
        return 1.0
    sents = ctx.sentences
    best = 0.0
    for i in ctx.ranked(answer.terms, limit=_ANCHOR_SENTENCES):
        if coverage(answer.terms, [sents[i]]) < _STATES:
            continue
        window = [s for s in sents[max(0, i - 1):i + 2] if s.chunk == sents[i].chunk]
        best = max(best, coverage(asked, window))
    return best


def claim_features(claim: ClaimIn, query: str, chunks: Sequence[str]) -> dict[str, float]:
    """The model's features for one claim against these chunk texts (what training fits on)."""
    return analyse(claim, query, context_of(tuple(chunks))).features


def rule_of(features: dict[str, float]) -> str | None:
    """Which rule, if any, makes a claim not supported whatever its score (see `decide`)."""
    if features["contra"]:
        return "contradiction"
    if features["num_absent"] or features["ent_absent"]:
        return "absent"
    return None


def decide(analysis: Analysis, model: Logistic) -> Decision:
    """The verdict for one analysed claim: the single rule both the judge and the benchmark run.

    Confidence is the probability that the verdict is right: from the score, and for a verdict a
    rule takes, at least that rule's precision measured on the training data.
    """
    p = model.probability(analysis.features)
    q = model.calibrated(p)
    rule = rule_of(analysis.features)
    if rule is None and (not analysis.grounding or p >= model.threshold):
        return Decision("unsupported", p, q)
    if rule is None:
        # Word overlap spread over sentences is weak evidence that any of them says the claim.
        return Decision("supported", p, 1.0 - q if analysis.supporting else min(1.0 - q, OVERLAP_ONLY))
    confidence = max(q, model.rules.get(rule, q))
    return Decision("contradicted" if analysis.contradicting else "unsupported", p, confidence)


def _quote(text: str) -> str:
    # Verbatim: the contract checks each quote is one span of its chunk, so a cut quote gets no ellipsis.
    return clip_quote(text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS].rstrip())


def judge_claim(claim: ClaimIn, query: str, ctx: Context, ids: list[str]) -> tuple[FaithfulnessItem, float]:
    if not ctx.sentences:
        return FaithfulnessItem(claim_id=claim.id, evidence=[], reasoning="The context is empty, so nothing can "
                                "ground this claim.", relation="unsupported", grounding_chunk_ids=[],
                                contradicting_chunk_ids=[]), 1.0
    a = analyse(claim, query, ctx)
    d = decide(a, load()["faithfulness"])
    sents = ctx.sentences
    f = a.features
    summary = (f"{f['cov_pair']:.0%} of the claim's weighted words are in its best-aligned sentence"
               f"{'s' if len(a.grounding) > 1 else ''}"
               + (f"; not found: {', '.join(a.missing[:5])}" if a.missing else "")
               + f" (p unsupported {d.p_unsupported:.2f}).")

    def cite(indices: list[int]) -> list[Evidence]:
        return [Evidence(chunk_id=ids[sents[i].chunk], quote=_quote(sents[i].text)) for i in indices]

    def chunk_ids(indices: list[int]) -> list[str]:
        return list(dict.fromkeys(ids[sents[i].chunk] for i in indices))

    if d.relation == "contradicted":
        first, why = a.contradicting[0]
        against = chunk_ids([i for i, _ in a.contradicting])
        if a.supporting:
            return FaithfulnessItem(
                claim_id=claim.id, evidence=cite([a.supporting[0], first]), relation="conflicting",
                grounding_chunk_ids=chunk_ids(a.supporting), contradicting_chunk_ids=against,
                reasoning=f"Conflicting: one chunk states the claim, another contradicts it: {why}."), d.confidence
        return FaithfulnessItem(
            claim_id=claim.id, evidence=cite([first]), relation="contradicted", grounding_chunk_ids=[],
            contradicting_chunk_ids=against, reasoning=f"Contradicted: {why}. " + summary), d.confidence
    if d.relation == "unsupported":
        why = (f"Not supported: the context never mentions {', '.join(a.absent[:4])}; " if a.absent
               else "Not supported: ")
        return FaithfulnessItem(claim_id=claim.id, evidence=cite(a.grounding[:1]), relation="unsupported",
                                grounding_chunk_ids=[], contradicting_chunk_ids=[], reasoning=why + summary), \
            d.confidence
    return FaithfulnessItem(claim_id=claim.id, evidence=cite(a.grounding), relation="supported",
                            grounding_chunk_ids=chunk_ids(a.grounding), contradicting_chunk_ids=[],
                            reasoning="Supported: " + summary), d.confidence


def faithfulness(payload: FaithfulnessInput) -> tuple[FaithfulnessOutput, dict[str, float]]:
    """Verdicts for the payload's claims, and claim id -> confidence that the verdict is right."""
    ctx = context_of(tuple(c.text for c in payload.chunks))
    ids = [c.id for c in payload.chunks]
    items, confidence = [], {}
    for claim in payload.claims:
        item, conf = judge_claim(claim, payload.query, ctx, ids)
        items.append(item)
        confidence[claim.id] = round(conf, 4)
    return FaithfulnessOutput(items=items), confidence
