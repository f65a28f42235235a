"""Lexical evidence for the local judges (the sufficiency judge; the faithfulness judge aligns
claims with its own sentence index, veralith/llm/local/align.py).

A text is seen as weighted content terms. A term's weight says how much its absence from the
context should count against a claim: numbers and names weigh most, generic words least, and
terms that are rare among the chunks (IDF over the chunk set) rank chunks above common ones.
Coverage is the weighted share of a text's terms a piece of context contains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from veralith.llm.local.align import sentence_slices
from veralith.llm.local.lexicon import (
    FIRST_PERSON,
    GENERIC,
    GENERIC_WEIGHT,
    NAME_WEIGHT,
    NUMBER_WEIGHT,
    PREFIX,
    PREFIX_CREDIT,
    Token,
    content_terms,
)

__all__ = ["ChunkIndex", "Term", "coverage", "terms_of", "weight"]


class Term(NamedTuple):
    """A content term (a NamedTuple: built for every word of every question and chunk)."""

    norm: str
    text: str
    weight: float
    is_number: bool
    is_capital: bool


def weight(token: Token) -> float:
    """How much the token's absence counts against a text (see lexicon.NUMBER_WEIGHT)."""
    if token.is_number:
        return NUMBER_WEIGHT
    if token.is_capital:
        return NAME_WEIGHT
    if token.text.lower() in GENERIC or token.norm in GENERIC:
        return GENERIC_WEIGHT
    return 1.0


def terms_of(text: str) -> list[Term]:
    """Distinct content terms of `text`, first occurrence wins."""
    seen: dict[str, Term] = {}
    for tok in content_terms(text):
        # "I'm", "I've": pronouns whose capital is not a name's, and nothing a chunk must mention.
        if tok.norm not in seen and tok.text.lower().replace("’", "'") not in FIRST_PERSON:
            seen[tok.norm] = Term(tok.norm, tok.text, weight(tok), tok.is_number, tok.is_capital)
    return list(seen.values())


@dataclass
class Piece:
    """One chunk (or sentence) as sets for fast membership tests."""

    norms: frozenset[str]
    prefixes: frozenset[str]

    def has(self, term: Term) -> float:
        if term.norm in self.norms:
            return 1.0
        if not term.is_number and len(term.norm) >= PREFIX and term.norm[:PREFIX] in self.prefixes:
            return PREFIX_CREDIT
        return 0.0


@lru_cache(maxsize=4096)
def piece_of(text: str) -> Piece:
    norms = frozenset(t.norm for t in content_terms(text))
    return Piece(norms, frozenset(n[:PREFIX] for n in norms if len(n) >= PREFIX))


@lru_cache(maxsize=2048)
def sentences_of(text: str) -> tuple[str, ...]:
    """The chunk's sentences as verbatim slices, cut exactly where the faithfulness judge cuts them
    (align.sentence_slices: also at bullets, line-end stops and stops glued to a capital, "hits.Bryan"),
    so both judges tokenise each sentence once between them (lexicon.tokens is cached by text)."""
    return tuple(text[a:b] for a, b in sentence_slices(text)) or (text,)


def coverage(terms: list[Term], pieces: list[Piece]) -> float:
    """Weighted share of `terms` found in any of `pieces` (1.0 when there is nothing to find)."""
    total = found = 0.0
    for t in terms:
        total += t.weight
        best = 0.0
        for p in pieces:
            if t.norm in p.norms:
                best = 1.0
                break
            if not t.is_number and len(t.norm) >= PREFIX and t.norm[:PREFIX] in p.prefixes:
                best = PREFIX_CREDIT  # same test as Piece.has, inlined: this is the backend's innermost loop
        found += t.weight * best
    return found / total if total else 1.0


@lru_cache(maxsize=4096)
def chunk_piece(text: str) -> Piece:
    """A chunk as the union of its sentences' pieces: each sentence is tokenised once, and reused."""
    parts = [piece_of(s) for s in sentences_of(text)]
    if len(parts) == 1:
        return parts[0]
    return Piece(frozenset().union(*(p.norms for p in parts)), frozenset().union(*(p.prefixes for p in parts)))


class ChunkIndex:
    """The chunks of one judge call, with IDF over chunks for ranking them against a text."""

    def __init__(self, ids: list[str], texts: list[str]) -> None:
        self.ids = ids
        self.texts = texts
        self.pieces = [chunk_piece(t) for t in texts]
        df: dict[str, int] = {}
        for piece in self.pieces:
            for norm in piece.norms:
                df[norm] = df.get(norm, 0) + 1
        self._df = df
        self._n = len(texts)

    def idf(self, norm: str) -> float:
        return math.log(1.0 + (self._n + 1) / (self._df.get(norm, 0) + 0.5))

    def ranked(self, terms: list[Term], limit: int = 2) -> list[int]:
        """Indices of the chunks that best cover `terms` (IDF x weight), best first."""
        weighted = [(t, t.weight * self.idf(t.norm)) for t in terms]
        scores = []
        for i, piece in enumerate(self.pieces):
            score = sum(w * piece.has(t) for t, w in weighted)
            if score > 0:
                scores.append((-score, i))
        scores.sort()
        return [i for _, i in scores[:limit]]
