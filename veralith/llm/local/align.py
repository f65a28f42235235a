"""Alignment of a claim to the sentences of the context.

The context is split into sentences that are verbatim slices of their chunks (so any of them can
be quoted as evidence), each read as canonical tokens (canonical.py). A claim is aligned to the
sentence whose words cover its content best, weighting each word by how specific it is (numbers
and names first, then IDF over the context's sentences), and to the second sentence, from any
chunk, that adds most of what the first one lacks (grounding.py). What is checked once a claim is
aligned lives beside this module: contradiction.py (the same statement with another value) and
comparison.py (a comparison the context's figures settle).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from veralith.llm.local.canonical import WEEKDAYS, Tok, number_unit, strip_layout, toks_of
from veralith.llm.local.lexicon import FIRST_PERSON, GENERIC, MONTHS, NAME_WEIGHT, PREFIX, PREFIX_CREDIT, SUBJECTIVE
from veralith.llm.local.polarity import EXCLUDING, negations
from veralith.llm.local.synonyms import direction
from veralith.llm.text import sentence_spans

__all__ = ["Claim", "Context", "Sentence", "claim_of", "clauses_of", "context_of", "coverage", "order_coverage",
           "personal", "sentence_slices", "subjective", "topic_coverage"]

_RANKED = 3   # sentences `Context.ranked` returns unless asked for more
_NEAR = 4     # content words apart at which two words of a claim still stand together in a sentence
_LIST_REACH = 30  # characters before ", and" in which a comma makes it the close of a list
_COMMON = 256  # sentences a word may be in and still locate a claim by itself (see Context.ranked)
_GLUED = re.compile(r"[a-z0-9)\]\"'][.!?](?=[A-Z])")
_OPENING_NAME = re.compile(r"^\W*[A-Z][\w'’.-]*\s+[A-Z]")


def _has(norms: frozenset[str], prefixes: frozenset[str], tok: Tok) -> float:
    if tok.norm in norms:
        return 1.0
    if not tok.number and len(tok.norm) >= PREFIX and tok.norm[:PREFIX] in prefixes:
        return PREFIX_CREDIT
    return 0.0


@dataclass
class Sentence:
    chunk: int
    text: str                      # a verbatim slice of the chunk's text
    toks: tuple[Tok, ...]
    order: tuple[str, ...] = field(init=False)  # content norms, in order
    norms: frozenset[str] = field(init=False)
    prefixes: frozenset[str] = field(init=False)
    clauses: list[Sentence] | None = field(default=None, init=False, repr=False, compare=False)  # see clauses_of
    _polar: bool | None = field(default=None, init=False, repr=False, compare=False)
    _negations: int = field(default=-1, init=False, repr=False, compare=False)

    def polar(self) -> bool:
        """Does it negate or exclude anything (computed once: a sentence is checked against many claims)?"""
        if self._polar is None:
            self._polar = bool(self.negations()) or any(t.low in EXCLUDING for t in self.toks)
        return self._polar

    def negations(self) -> int:
        """How many negation cues it holds (polarity.negations, computed once)."""
        if self._negations < 0:
            self._negations = negations(self.toks)
        return self._negations

    def __post_init__(self) -> None:
        self.order = tuple(t.norm for t in self.toks if t.content)
        self.norms = frozenset(self.order)
        self.prefixes = frozenset(n[:PREFIX] for n in self.norms if len(n) >= PREFIX and not n[0].isdigit())

    def has(self, tok: Tok) -> float:
        return _has(self.norms, self.prefixes, tok)


# Further sentence ends the general splitter leaves alone: a bullet, a stop at the end of a line,
# a stop standing alone between spaces (tokenised, lower-cased text: "... in 2004 . the ..."), and a
# stop glued to the next capital ("hits.Bryan").
_CUTS = re.compile(r"\s•\s|[.!?][\"')\]]*[ \t]*\n|\s[.!?](?=\s)|" + _GLUED.pattern)


@lru_cache(maxsize=4096)
def sentence_slices(text: str) -> tuple[tuple[int, int], ...]:
    """Sentence spans of a chunk (verbatim slices), cut where `sentence_spans` and _CUTS say (cached:
    both judges read a chunk's sentences)."""
    out = []
    for start, end in sentence_spans(text):
        cuts = [start]
        for m in _CUTS.finditer(text, start, end):
            cuts.append(m.end())
        cuts.append(end)
        for a, b in zip(cuts, cuts[1:], strict=False):
            while a < b and text[a].isspace():
                a += 1
            while b > a and text[b - 1].isspace():
                b -= 1
            if b > a:
                out.append((a, b))
    return tuple(out)


class Context:
    """The chunks of one judge call as sentences, with an inverted index and IDF over sentences."""

    def __init__(self, texts: tuple[str, ...]) -> None:
        self.texts = texts
        self.sentences: list[Sentence] = []
        for c, text in enumerate(texts):
            for a, b in sentence_slices(text):
                self.sentences.append(Sentence(c, text[a:b], toks_of(strip_layout(text[a:b]))))
        index: dict[str, list[int]] = {}
        pindex: dict[str, list[int]] = {}
        for i, s in enumerate(self.sentences):
            for n in s.norms:
                index.setdefault(n, []).append(i)
            for p in s.prefixes:
                pindex.setdefault(p, []).append(i)
        self.index, self.pindex = index, pindex
        self.norms = frozenset(index)
        self.prefixes = frozenset(pindex)
        # Words the context writes in lower case are common nouns here, whatever a claim capitalises.
        self.common = frozenset(t.norm for s in self.sentences for t in s.toks if t.content and not t.cased)
        # Per chunk: its words, and each number with its unit ("189 euros", a year).
        self.chunk_norms: list[set[str]] = [set() for _ in texts]
        self.chunk_figures: list[set[tuple[str, str | None]]] = [set() for _ in texts]
        # Per chunk: the words it writes as part of a name ("Guild" in "the Marrowby Weavers' Guild"),
        # which later sentences refer back to as "the guild" or "it" (see topic_coverage).
        self.chunk_names: list[set[str]] = [set() for _ in texts]
        for s in self.sentences:
            self.chunk_norms[s.chunk] |= s.norms
            names, figures = self.chunk_names[s.chunk], self.chunk_figures[s.chunk]
            for i, t in enumerate(s.toks):  # one pass: the context's tokens are many
                if t.number:
                    figures.add((t.norm, number_unit(s.toks, i)))
                elif t.capital and t.norm not in MONTHS and t.low not in WEEKDAYS:
                    names.add(t.norm)
        self.figures = frozenset().union(*self.chunk_figures)   # every (figure, unit) the context states
        self._n = len(self.sentences)
        self.size = sum(len(s.norms) for s in self.sentences)  # content words, counted per sentence

    def idf(self, norm: str) -> float:
        return math.log(1.0 + (self._n + 1) / (len(self.index.get(norm, ())) + 0.5))

    def has(self, tok: Tok) -> float:
        return _has(self.norms, self.prefixes, tok)

    def ranked(self, terms: Sequence[Tok], limit: int = _RANKED) -> list[int]:
        """Sentence indices by IDF-weighted coverage of `terms`, best first (earlier wins ties).

        A word found in more than _COMMON sentences (only a long context has one) adds its weight
        to the sentences its claim's rarer words found rather than to every sentence it is in, so
        ranking costs at most _COMMON sentences per word whatever the size of the context.
        """
        scores: dict[int, float] = {}
        common = []
        for t in terms:
            w = t.weight * self.idf(t.norm)
            hit = self.index.get(t.norm, ())
            near = self.pindex.get(t.norm[:PREFIX], ()) if not t.number and len(t.norm) >= PREFIX else ()
            if len(hit) + len(near) > _COMMON:
                common.append((len(hit), t, w))
                continue
            for i in hit:
                scores[i] = scores.get(i, 0.0) + w
            if near:
                held = set(hit)
                for i in near:
                    if i not in held:
                        scores[i] = scores.get(i, 0.0) + PREFIX_CREDIT * w
        if common:
            if not scores:   # every word is common: the sentences of the least common one, in order
                seed = min(common, key=lambda c: c[0])[1]
                scores = dict.fromkeys((self.index.get(seed.norm) or self.pindex[seed.norm[:PREFIX]])[:_COMMON], 0.0)
            for _, t, w in common:
                for i in scores:
                    scores[i] += w * self.sentences[i].has(t)
        return sorted(scores, key=lambda i: (-scores[i], i))[:limit]


@lru_cache(maxsize=64)
def context_of(texts: tuple[str, ...]) -> Context:
    """The Context of these chunk texts (cached: a judge call's batches share their chunks)."""
    return Context(texts)


@dataclass(frozen=True)
class Claim:
    text: str
    toks: tuple[Tok, ...]
    terms: tuple[Tok, ...]         # distinct content tokens, first occurrence wins
    norms: frozenset[str]

    @cached_property
    def negated(self) -> bool:
        return bool(negations(self.toks))

    @cached_property
    def directions(self) -> tuple[tuple[Tok, tuple[int, int]], ...]:
        """Its direction and comparison words with (pair id, side) (synonyms.direction); most claims have none."""
        return tuple((t, d) for t in self.toks if (d := direction(t.low)) is not None)


@lru_cache(maxsize=8192)
def claim_of(text: str) -> Claim:
    """A claim (or question) as tokens and distinct content terms (cached; treat as read-only)."""
    plain = strip_layout(text)
    toks = toks_of(plain)
    if toks and toks[0].content and not toks[0].number and toks[0].low not in GENERIC and _OPENING_NAME.match(plain):
        # A name that opens the claim ("Larry Tanenbaum is ...") is a name, though sentence-initial.
        toks = (toks[0]._replace(capital=True, weight=NAME_WEIGHT),) + toks[1:]
    seen: dict[str, Tok] = {}
    for t in toks:
        if t.content and t.norm not in seen:
            seen[t.norm] = t
    return Claim(text, toks, tuple(seen.values()), frozenset(seen))


def coverage(terms: Sequence[Tok], sentences: list[Sentence]) -> float:
    """Weighted share of `terms` found in any of `sentences` (1.0 when there is nothing to find)."""
    total = found = 0.0
    for t in terms:
        total += t.weight
        found += t.weight * max((s.has(t) for s in sentences), default=0.0)
    return found / total if total else 1.0


def order_coverage(terms: Sequence[Tok], sentences: list[Sentence]) -> float:
    """Share of the claim's adjacent content-word pairs that stand within _NEAR words of each other in
    one of `sentences`: the same words in the same relations, not merely the same vocabulary."""
    pairs = [(a.norm, b.norm) for a, b in zip(terms, terms[1:], strict=False)]
    if not pairs:
        return 1.0
    wanted = {t.norm for t in terms}
    near: set[tuple[str, str]] = set()
    for s in sentences:
        spots = [(k, n) for k, n in enumerate(s.order) if n in wanted]
        for x, (k, a) in enumerate(spots):
            for m, b in spots[x + 1:]:
                if m - k > _NEAR:
                    break
                near.add((a, b))
                near.add((b, a))
    return sum(p in near for p in pairs) / len(pairs)


def personal(claim: Claim) -> bool:
    return any(t.low in FIRST_PERSON for t in claim.toks)


def subjective(claim: Claim) -> set[str]:
    return {t.low for t in claim.toks if t.low in SUBJECTIVE}


def topic_coverage(terms: Sequence[Tok], sent: Sentence, ctx: Context) -> float:
    """Coverage of `terms` by `sent`, where a name its chunk states counts as present.

    A passage names its subject once and then says "the gallery" or "it": "The gallery is not open
    on Mondays" speaks of the Ardent Gallery its chunk opened with.
    """
    names = ctx.chunk_names[sent.chunk]
    total = found = 0.0
    for t in terms:
        total += t.weight
        held = sent.has(t)
        found += t.weight * (1.0 if not held and not t.number and t.norm in names else held)
    return found / total if total else 1.0


# Where a source sentence joins two statements: ", and moved to its own hall in 1810", ", with
# regional offices in ...". Each clause is checked on its own, so a value the sentence gives for
# the other statement does not hide a clash in this one.
_SOURCE_CLAUSES = re.compile(r",\s+(?:and|with|while|whereas|but|although|though|however|yet|which|before|after)\s+"
                             r"|;\s*", re.I)


def clauses_of(sent: Sentence) -> list[Sentence]:
    """The sentence's clauses as sentences (verbatim slices), or [] when it has only one (kept on the
    sentence: a context's sentences are checked against many claims)."""
    if sent.clauses is None:
        sent.clauses = _clauses(sent)
    return sent.clauses


def _clauses(sent: Sentence) -> list[Sentence]:
    # ", and" closing a list ("directed, written, and co-edited by") joins items, not statements.
    cuts = [0] + [m.start() for m in _SOURCE_CLAUSES.finditer(sent.text)
                  if not (m.group(0).strip(", ").lower() == "and"
                          and "," in sent.text[max(0, m.start() - _LIST_REACH):m.start()])
                  ] + [len(sent.text)]
    if len(cuts) < 3:
        return []
    out = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        text = sent.text[a:b].lstrip(",; ").strip()
        if text:
            out.append(Sentence(sent.chunk, text, toks_of(strip_layout(text))))
    return out


