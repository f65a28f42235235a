"""Local sufficiency: could the chunks answer each sub-question? (Never looks at the response.)

Evidence is the best chunk and its best sentence window for the sub-question's content terms.
Besides coverage, the answer type the question asks for must be present near the matched terms:
"who" needs a name, "when" a date, "how many/much" a number, "where" a place-like name that
the question itself does not contain. The shipped logistic model combines these signals.
"""

from __future__ import annotations

import math
import re

from veralith.llm.local.evidence import (ChunkIndex, Piece, Term, coverage, pair_coverage, piece_of, sentences_of,
                                         terms_of)
from veralith.llm.local.lexicon import MONTHS, tokens
from veralith.llm.local.model import load
from veralith.llm.tasks import Evidence, SubQuestionIn, SufficiencyInput, SufficiencyItem, SufficiencyOutput

__all__ = ["FEATURES", "question_features", "sufficiency"]

FEATURES = ["cov_sent", "cov_win", "cov_chunk", "cov_first", "idf_win", "idf_miss", "topic_only", "pair_win",
            "cap_miss", "num_miss", "type_ok", "typed", "n_terms"]
_CUES = [
    ("number", re.compile(r"\bhow (?:many|much|long|old|far|big|large|tall|often)\b|\bwhat (?:percentage|number|"
                          r"amount|year|age)\b", re.I)),
    ("date", re.compile(r"\bwhen\b|\bwhat (?:date|day|month|century|decade|time)\b|\bin which year\b", re.I)),
    ("name", re.compile(r"\bwho(?:m|se)?\b|\bwhich (?:person|company|team|player|actor|author)\b", re.I)),
    ("place", re.compile(r"\bwhere\b|\bwhich (?:city|country|state|place|town|region)\b", re.I)),
]


def _answer_type(question: str) -> str | None:
    for name, pattern in _CUES:
        if pattern.search(question):
            return name
    return None


def _has_type(kind: str, window: str, question_norms: set[str]) -> bool:
    for tok in tokens(window):
        if tok.norm in question_norms:
            continue
        if kind == "number" and tok.is_number:
            return True
        if kind == "date" and ((tok.is_number and len(tok.norm) == 4) or tok.norm in MONTHS):
            return True
        if kind in ("name", "place") and tok.is_capital:
            return True
    return False


def _window(index: ChunkIndex, chunk: int, terms: list[Term]) -> tuple[str, str]:
    """(best sentence, that sentence with its neighbours) of `chunk` for `terms`."""
    sents = sentences_of(index.texts[chunk])
    best_i = max(range(len(sents)), key=lambda i: (coverage(terms, [piece_of(sents[i])]), -i))
    return sents[best_i], " ".join(sents[max(0, best_i - 1):best_i + 2])


def _local_idf(index: ChunkIndex, best: list[int], terms: list[Term], window: Piece) -> tuple[float, float]:
    """Coverage of the window with terms weighted by IDF over the sentences of the best chunks.

    A passage retrieved for a topic repeats the topic's words in every sentence; what decides
    whether it answers the question are the question's *other* words, the rare ones here.
    Also returns the largest weight of a term the window lacks.
    """
    sents = [piece_of(s) for i in best for s in sentences_of(index.texts[i])]
    n = len(sents)
    weights = []
    for t in terms:
        df = sum(1 for p in sents if p.has(t))
        weights.append(t.weight * math.log((n + 1) / (df + 0.5)))
    total = sum(weights)
    if total <= 0:
        return 1.0, 0.0
    found = [w * window.has(t) for t, w in zip(terms, weights)]
    missing = [w for t, w in zip(terms, weights) if window.has(t) == 0.0]
    return sum(found) / total, max(missing, default=0.0)


def question_features(question: str, index: ChunkIndex) -> tuple[dict[str, float], list[int], str, list[Term]]:
    terms = terms_of(question)
    best = index.ranked(terms, limit=2)
    kind = _answer_type(question)
    if not best:
        values = {name: 0.0 for name in FEATURES}
        values.update(typed=float(kind is not None), n_terms=math.log1p(len(terms)))
        return values, [], "", terms
    sentence, window = _window(index, best[0], terms)
    win_piece = piece_of(window)
    capitals = [t for t in terms if t.is_capital]
    numbers = [t for t in terms if t.is_number]
    chunk = index.pieces[best[0]]
    idf_win, idf_miss = _local_idf(index, best, terms, win_piece)
    values = {
        # A passage that opens on the question's subject is about it, not merely mentioning it.
        "cov_first": coverage(terms, [piece_of(sentences_of(index.texts[best[0]])[0])]),
        "idf_win": idf_win,
        "idf_miss": idf_miss,
        # The window matches the question only on words the whole passage repeats (its topic),
        # not on the words that make this question specific.
        "topic_only": max(0.0, coverage(terms, [win_piece]) - idf_win),
        "cov_sent": coverage(terms, [piece_of(sentence)]),
        "cov_win": coverage(terms, [win_piece]),
        "cov_chunk": coverage(terms, [index.pieces[i] for i in best]),
        "pair_win": pair_coverage(terms, win_piece),
        "cap_miss": sum(chunk.has(t) == 0.0 for t in capitals) / len(capitals) if capitals else 0.0,
        "num_miss": sum(t.norm not in chunk.numbers for t in numbers) / len(numbers) if numbers else 0.0,
        "type_ok": float(kind is None or _has_type(kind, window, {t.norm for t in terms})),
        "typed": float(kind is not None),
        "n_terms": math.log1p(len(terms)),
    }
    return values, best, window, terms


def judge_question(sq: SubQuestionIn, index: ChunkIndex) -> SufficiencyItem:
    terms = terms_of(sq.text)
    required = [t.text for t in terms][:8]
    if not index.pieces:
        return SufficiencyItem(sub_question_id=sq.id, required_facts=required, evidence=[], missing_facts=required,
                               reasoning="The context is empty, so nothing can answer this.", sufficient="no",
                               supporting_chunk_ids=[])
    model = load()["sufficiency"]
    values, best, window, terms = question_features(sq.text, index)
    p_insufficient = model.probability(values)
    missing = [t.text for t in terms if not any(index.pieces[i].has(t) for i in best)][:8]
    kind = _answer_type(sq.text)
    if kind and not values["type_ok"]:
        missing.append(f"a {kind} near the matched terms")
    summary = (f"best chunk window covers {values['cov_win']:.0%} of the question's weighted terms"
               + (f"; missing: {', '.join(missing)}" if missing else "")
               + f" (score {p_insufficient:.2f}, threshold {model.threshold:.2f}).")
    evidence = [Evidence(chunk_id=index.ids[best[0]], quote=window[:300])] if best else []
    if p_insufficient < model.threshold and best:
        ids = [index.ids[i] for i in best[:1]]
        if len(best) > 1 and values["cov_chunk"] > coverage(terms, [index.pieces[best[0]]]) + 0.05:
            ids = [index.ids[i] for i in best]
        return SufficiencyItem(sub_question_id=sq.id, required_facts=required, evidence=evidence,
                               missing_facts=missing, reasoning="Sufficient: " + summary, sufficient="yes",
                               supporting_chunk_ids=ids)
    return SufficiencyItem(sub_question_id=sq.id, required_facts=required, evidence=evidence, missing_facts=missing,
                           reasoning="Insufficient: " + summary, sufficient="no", supporting_chunk_ids=[])


def sufficiency(payload: SufficiencyInput) -> SufficiencyOutput:
    index = ChunkIndex([c.id for c in payload.chunks], [c.text for c in payload.chunks])
    return SufficiencyOutput(items=[judge_question(sq, index) for sq in payload.sub_questions])
