"""Local faithfulness: is each claim grounded in the chunks, and in which ones?

A claim is scored by the shipped logistic model over lexical features (weighted coverage by the
best one or two chunks, missing numbers and names, negation, first-person talk). Below the
threshold it is `supported`, grounded in the best one or two chunks. Otherwise it is
`contradicted` when a chunk states the same thing with a different number, name or polarity in
the same place, else `unsupported`. A supported claim that another chunk contradicts is
`conflicting` (seed 002's "contested").
"""

from __future__ import annotations

import math
import re

from veralith.llm.local.evidence import (ChunkIndex, Term, coverage, negated, pair_coverage, piece_of, sentences_of,
                                         terms_of)
from veralith.llm.local.lexicon import PERSONAL, SUBJECTIVE, tokens
from veralith.llm.local.model import load
from veralith.llm.tasks import ClaimIn, Evidence, FaithfulnessInput, FaithfulnessItem, FaithfulnessOutput

__all__ = ["FEATURES", "claim_features", "faithfulness"]

FEATURES = ["cov2", "covall", "cov_sent2", "pair1", "num_miss", "cap_miss", "personal", "subjective", "neg_mismatch",
            "slot", "n_terms", "miss_w", "gap_short", "scatter", "anchor"]
_YES_NO = re.compile(r"^\W*(?:yes|no)\W*$", re.I)
_QUOTE_CHARS = 300
_SHORT = 8  # content terms


def _claim_terms(claim: ClaimIn, query: str) -> list[Term]:
    # A bare "yes"/"no" asserts the query's own content; that is what the context must hold.
    if _YES_NO.match(claim.text) and query.strip():
        return terms_of(query)
    return terms_of(claim.text)


def claim_features(claim: ClaimIn, query: str, index: ChunkIndex) -> tuple[dict[str, float], list[int], str]:
    """Features of one claim, the indices of its best chunks, and the best-matching sentence."""
    terms = _claim_terms(claim, query)
    best = index.ranked(terms, limit=2)
    pieces = [index.pieces[i] for i in best]
    cov1 = coverage(terms, pieces[:1]) if pieces else 0.0
    cov2 = coverage(terms, pieces) if pieces else 0.0
    covall = coverage(terms, [index.union]) if index.pieces else 0.0
    numbers = [t for t in terms if t.is_number]
    capitals = [t for t in terms if t.is_capital]
    cap_weight = sum(t.weight for t in capitals)
    sentence = index.best_sentence(best[0], terms) if best else ""
    claim_words = {t.text.lower() for t in tokens(claim.text)}
    sentence_words = {t.text.lower() for t in tokens(sentence)}
    missing = sum(t.weight for t in terms if not any(p.has(t) for p in pieces)) if pieces else \
        sum(t.weight for t in terms)
    sent_scores = sorted(((coverage(terms, [piece_of(s)]), s) for i in best for s in sentences_of(index.texts[i])),
                         key=lambda x: -x[0])[:2]
    cov_sent = sent_scores[0][0] if sent_scores else 0.0
    cov_sent2 = coverage(terms, [piece_of(s) for _, s in sent_scores]) if sent_scores else 0.0
    features = {
        "cov1": cov1,
        "cov_sent": cov_sent,
        "cov_sent2": cov_sent2,
        "slot": float(bool(sentence) and _slot_conflict(terms, sentence, claim.text)),
        "cov2": cov2,
        "covall": covall,
        "pair1": pair_coverage(terms, pieces[0]) if pieces else 0.0,
        "num_miss": (sum(t.norm not in index.union.numbers for t in numbers) / len(numbers)) if numbers else 0.0,
        "cap_miss": (sum(t.weight * (index.union.has(t) == 0.0) for t in capitals) / cap_weight) if capitals else 0.0,
        "personal": float(bool(claim_words & PERSONAL) and not sentence_words & PERSONAL),
        "subjective": float(bool((claim_words & SUBJECTIVE) - sentence_words)),
        "neg_mismatch": float(bool(sentence) and negated(claim.text) != negated(sentence)),
        "n_terms": math.log1p(len(terms)),
        "miss_w": math.log1p(missing),
        # Short claims (an answer, one fact) are held to near-complete coverage; long paraphrased
        # sentences naturally leave some words unmatched. This lets one model serve both.
        "gap_short": (1.0 - cov_sent2) if len(terms) <= _SHORT else 0.0,
        # The claim's words are in the best chunk but never together in one sentence: facts
        # stitched from different places (a wrong entity paired with a right attribute).
        "scatter": max(0.0, cov1 - cov_sent),
        "anchor": _anchor(claim, query, index, terms),
    }
    return features, best, sentence


def _anchor(claim: ClaimIn, query: str, index: ChunkIndex, terms: list[Term]) -> float:
    """For a bare answer ("Walmart"): how much of the query surrounds the answer where the context names it.

    An entity that the context mentions only far from what was asked is a different answer
    that happens to appear in the context. 1.0 for ordinary claims, which carry their own content.
    """
    if not claim.context_note or not query.strip() or _YES_NO.match(claim.text) or not terms:
        return 1.0
    asked = [t for t in terms_of(query) if t.norm not in {x.norm for x in terms}]
    if not asked:
        return 1.0
    best = 0.0
    for i in index.ranked(terms, limit=3):
        sents = sentences_of(index.texts[i])
        for j, sent in enumerate(sents):
            if coverage(terms, [piece_of(sent)]) < 0.99:
                continue
            window = [piece_of(x) for x in sents[max(0, j - 1):j + 2]]
            best = max(best, coverage(asked, window))
    return best


def _slot_conflict(terms: list[Term], sentence: str, claim_text: str, names: bool = True,
                   own: list[Term] | None = None) -> bool:
    """True when `sentence` says the same thing as the claim but with another number, name or polarity.

    `names=False` ignores name swaps: sentences on one topic name other people and places all the
    time, so a name alone is too weak to call a *supported* claim conflicting. `own` are the terms
    the claim itself asserts (a bare answer's words, not the query's); only they can be swapped.
    """
    piece = piece_of(sentence)
    own_norms = {t.norm for t in (own if own is not None else terms)}
    if own is not None and all(piece.has(t) for t in own):
        return False
    slots = [t for t in terms if t.norm in own_norms and (t.is_number or t.is_capital or own is not None)
             and not piece.has(t)]
    rest = [t for t in terms if t not in slots]
    if len(rest) < 2 or coverage(rest, [piece]) < (0.8 if names else 0.9):
        return False
    if not slots:
        return negated(claim_text) != negated(sentence)
    own = {t.norm for t in terms}
    for slot in slots:
        if slot.is_number:
            # Same kind of number: a year stands against a year, a count against a count.
            rivals = [n for n in piece.numbers - own if (len(n) == 4) == (len(slot.norm) == 4)]
            if rivals:
                return True
        elif names and piece.capitals - own:
            return True
    return False


def _contradicting(claim: ClaimIn, query: str, index: ChunkIndex, exclude: set[int], names: bool) -> list[int]:
    terms = own = _claim_terms(claim, query)
    text = claim.text
    if claim.context_note and query.strip() and not _YES_NO.match(claim.text):
        # A bare answer fills the query's slot: compare "query + answer" with what the chunk says.
        terms = terms + [t for t in terms_of(query) if t.norm not in {x.norm for x in terms}]
        text = f"{query} {claim.text}"
    found = []
    for i in index.ranked(terms, limit=4):
        if i in exclude:
            continue
        sentence = index.best_sentence(i, terms)
        if _slot_conflict(terms, sentence, text, names=names, own=own if own is not terms else None):
            found.append(i)
    return found


def _quote(text: str) -> str:
    return text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS - 1] + "…"


def judge_claim(claim: ClaimIn, query: str, index: ChunkIndex) -> FaithfulnessItem:
    if not index.pieces:
        return FaithfulnessItem(claim_id=claim.id, evidence=[], reasoning="The context is empty, so nothing can "
                                "ground this claim.", relation="unsupported", grounding_chunk_ids=[],
                                contradicting_chunk_ids=[])
    model = load()["faithfulness"]
    features, best, sentence = claim_features(claim, query, index)
    p_unsupported = model.probability(features)
    terms = _claim_terms(claim, query)
    grounding = best[:1]
    if len(best) > 1 and features["cov2"] > features["cov1"] + 0.05:
        grounding = best[:2]
    missing = [t.text for t in terms if not any(index.pieces[i].has(t) for i in grounding)][:5]
    summary = (f"{features['cov2']:.0%} of the claim's weighted terms appear in its best chunks"
               + (f"; not found: {', '.join(missing)}" if missing else "") + f" (score {p_unsupported:.2f}, "
               f"threshold {model.threshold:.2f}).")
    evidence = [Evidence(chunk_id=index.ids[best[0]], quote=_quote(sentence))] if best else []
    if p_unsupported < model.threshold and grounding:
        against = _contradicting(claim, query, index, exclude=set(grounding), names=False)
        ids = [index.ids[i] for i in grounding]
        if against:
            return FaithfulnessItem(
                claim_id=claim.id, evidence=evidence, relation="conflicting", grounding_chunk_ids=ids,
                contradicting_chunk_ids=[index.ids[i] for i in against],
                reasoning=summary + " Another chunk states a different value for the same fact.")
        return FaithfulnessItem(claim_id=claim.id, evidence=evidence, reasoning="Supported: " + summary,
                                relation="supported", grounding_chunk_ids=ids, contradicting_chunk_ids=[])
    against = _contradicting(claim, query, index, exclude=set(), names=True)
    if against:
        return FaithfulnessItem(
            claim_id=claim.id, evidence=[Evidence(chunk_id=index.ids[against[0]], quote=_quote(
                index.best_sentence(against[0], terms)))], relation="contradicted", grounding_chunk_ids=[],
            contradicting_chunk_ids=[index.ids[i] for i in against],
            reasoning="Contradicted: a chunk states a different number, name or polarity for this fact. " + summary)
    return FaithfulnessItem(claim_id=claim.id, evidence=evidence, reasoning="Not supported: " + summary,
                            relation="unsupported", grounding_chunk_ids=[], contradicting_chunk_ids=[])


def faithfulness(payload: FaithfulnessInput) -> FaithfulnessOutput:
    index = ChunkIndex([c.id for c in payload.chunks], [c.text for c in payload.chunks])
    return FaithfulnessOutput(items=[judge_claim(c, payload.query, index) for c in payload.claims])
