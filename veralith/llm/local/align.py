"""Alignment of a claim to the sentences of the context, and the checks that run after it.

The context is split into sentences that are verbatim slices of their chunks (so any of them can
be quoted as evidence). Words are compared as canonical stems: inflection stripped, synonyms of
general English folded to one form (veralith/llm/local/synonyms.py), numbers as values ("twenty",
"20" and "20th" are one value; "1,000" is 1000; "$5" is "5 dollars"). A claim is aligned to the
sentence whose words cover its content best, weighting each word by how specific it is (numbers
and names first, then IDF over the context's sentences), and to the second sentence, from any
chunk, that adds most of what the first one lacks.

Contradiction is looked for only once a claim is aligned: the sentence must share most of the
claim's other words, and then differ in one slot. Four slots are checked: a number (with its
unit or neighbour: "189 euros" against "219 euros", "model 3" against "model 4", a year against a
year), negation polarity, a name or month in the same place, and a direction word ("more" against
"less", "before" against "after").
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import NamedTuple

from veralith.llm.local.lexicon import FIRST_PERSON, GENERIC, MONTHS, NEGATIONS, STOPWORDS, SUBJECTIVE, fold, tokens
from veralith.llm.local.synonyms import canon, direction
from veralith.llm.text import sentence_spans

__all__ = ["Claim", "Context", "Sentence", "Tok", "claim_of", "comparison", "context_of", "contradiction", "coverage",
           "negated_opposite", "negations", "order_coverage", "personal", "sentence_slices", "strip_layout",
           "subjective", "toks_of"]

PREFIX = 6  # morphological variants ("radiology"/"radiologist") share their first six letters
PREFIX_CREDIT = 0.7
_CURRENCY = re.compile(r"([$€£¥])\s?(\d[\d,]*(?:\.\d+)?)")
_CURRENCY_WORD = {"$": " dollars", "€": " euros", "£": " pounds", "¥": " yen"}
_PERCENT = re.compile(r"(\d)\s?%")
_GLUED = re.compile(r"[a-z0-9)\]\"'][.!?](?=[A-Z])")
_TENS = {"20", "30", "40", "50", "60", "70", "80", "90"}
_UNITS = {str(i) for i in range(1, 10)}
_MULTIPLIERS = {"hundred": 100, "thousand": 1000}
# A list marker ("3.", "2)", "-") or an inline citation ("(Passage 1)", "[2]") is layout, not content.
_MARKER = re.compile(r"^\s*(?:[-*•]\s*|\(?\d{1,2}[.)]\s+|\d{1,2}\s+(?=[A-Z]))")
_CITATION = re.compile(r"\s*[(\[](?:(?:passages?|sources?|documents?|docs?|context|chunks?|refs?)\s*)?"
                       r"\d{1,2}(?:\s*(?:,|and|&|-)\s*\d{1,2})*[)\]]", re.I)
_LABEL = re.compile(r"^\s*(?:answer|summary|response|(?:passage|source|document)\s*\d{0,2})\s*:\s*", re.I)
# Words that organise an answer rather than state its facts ("Therefore, ...", "Lastly, ...", "the
# answer to the question"): never evidence, never missing. General English, not a corpus list.
_DISCOURSE = frozenset("""
therefore thus hence lastly firstly secondly thirdly finally furthermore moreover additionally importantly
overall basically essentially ultimately answer answers question questions passage passages summarize summarized
summarise summarised mention mentions mentioned provide provided context appears seems possible possibly likely
generally typically usually important note notes conclusion summary overview example examples instance
meanwhile conversely similarly likewise instead nevertheless nonetheless consequently accordingly subsequently
""".split())
_OPENING_NAME = re.compile(r"^\W*[A-Z][\w'’.-]*\s+[A-Z]")
# Number words that are mostly not figures ("one of", "one must", "once").
_NOT_FIGURES = frozenset({"one", "once"})
# A number after one of these words numbers a part of the text ("passage 3", "step 2", "sources 1 and 2"):
# it points into the answer's own layout and states no figure about the world.
_REFERENCES = frozenset("passage passages step steps source sources document documents doc docs chunk chunks "
                        "snippet snippets excerpt excerpts".split())
_JOINING = frozenset({"", "-", "'", "’", "&"})


# Month names and abbreviations to one form ("Jun", "June" -> "june"); "may" is too often a verb.
_MONTH_NAMES = {m: m for m in MONTHS if m != "may"} | {m[:3]: m for m in MONTHS if m != "may"} | {"sept": "september"}
_WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
_NOT_NEGATING = {("not", "only"), ("no", "doubt"), ("not", "just")}


def strip_layout(text: str) -> str:
    """`text` without a leading list marker or label and without inline citations."""
    if ":" in text[:24]:
        text = _LABEL.sub("", text)
    text = _MARKER.sub("", text, count=1)
    return _CITATION.sub("", text) if "(" in text or "[" in text else text



class Tok(NamedTuple):
    low: str        # lowercase, as written
    norm: str       # canonical stem; a number's value
    number: bool
    capital: bool   # capitalised inside its sentence (a name)
    content: bool   # not a stopword
    weight: float   # how much its absence counts: numbers and names most, generic words least
    strong: bool    # a stated figure: written in digits
    cased: bool     # written with a capital (also at the start of a sentence)
    joined: bool = True  # only space (or a hyphen, apostrophe, "&") separates it from the token before


def _weight(low: str, norm: str, number: bool, capital: bool) -> float:
    if number:
        return 2.0
    if capital:
        return 1.5
    if low in GENERIC or norm in GENERIC:
        return 0.35
    return 1.0


def _prepare(text: str) -> str:
    if any(c in text for c in "$€£¥"):
        text = _CURRENCY.sub(lambda m: m.group(2) + _CURRENCY_WORD[m.group(1)], text)
    return _PERCENT.sub(r"\1 percent", text) if "%" in text else text


def _number_value(norm: str) -> str:
    if norm[-2:] in ("st", "nd", "rd", "th") and norm[:-2].isdigit():
        return norm[:-2]
    return norm


@lru_cache(maxsize=65536)
def _word_tok(text: str, norm: str, capital: bool, joined: bool) -> Tok:
    """The Tok of a word (not a figure) as the tokenizer gave it (cached: a word recurs across texts)."""
    low = text.lower()
    stop = low in STOPWORDS or low in _DISCOURSE
    norm = _MONTH_NAMES.get(low) or canon(norm)
    content = not stop and len(norm) > 1
    capital = capital and content
    return Tok(low, norm, False, capital, content, _weight(low, norm, False, capital), False, text[0].isupper(),
               joined)


@lru_cache(maxsize=16384)
def toks_of(text: str) -> tuple[Tok, ...]:
    """All tokens of `text` with canonical norms (compound number words joined: "twenty-five" is 25)."""
    prepared = _prepare(text)
    raw = tokens(prepared)
    folded = fold(prepared)
    out: list[Tok] = []
    i = 0
    n = len(raw)
    reference = False  # inside "passages 1 and 2"
    while i < n:
        t = raw[i]
        text_ = t.text
        # Only names and figures form runs (_name_clash), so only theirs is looked up.
        joined = i == 0 or not (t.is_number or text_[0].isupper()) \
            or folded[raw[i - 1].start + len(raw[i - 1].text):t.start].strip() in _JOINING
        if not t.is_number:
            if reference:
                reference = text_.lower() in ("and", "or", "to")
            if text_ == "May" and i and (raw[i - 1].is_number or i + 1 < n and raw[i + 1].is_number):
                # "5 May", "May 2021": the month, not the modal verb.
                out.append(Tok("may", "may", False, True, True, 1.5, False, True, joined))
            else:
                out.append(_word_tok(text_, t.norm, t.is_capital, joined))
            i += 1
            continue
        low = text_.lower()
        if low in _NOT_FIGURES or reference or (i and raw[i - 1].text.lower() in _REFERENCES):
            out.append(Tok(low, low, False, False, False, 0.0, False, text_[0].isupper(), joined))
            reference = low not in _NOT_FIGURES
            i += 1
            continue
        norm = _number_value(t.norm)
        nxt = raw[i + 1] if i + 1 < n else None
        if nxt is not None and not low[0].isdigit() and norm in _TENS and nxt.is_number and nxt.norm in _UNITS \
                and not nxt.text[0].isdigit():
            norm, i = str(int(norm) + int(nxt.norm)), i + 1
        elif nxt is not None and nxt.text.lower() in _MULTIPLIERS and norm.isdigit():
            norm, i = str(int(norm) * _MULTIPLIERS[nxt.text.lower()]), i + 1
        out.append(Tok(low, norm, True, False, True, 2.0, low[0].isdigit(), False, joined))
        i += 1
    return tuple(out)


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

    def polar(self) -> bool:
        """Does it negate or exclude anything (computed once: a sentence is checked against many claims)?"""
        if self._polar is None:
            self._polar = bool(negations(self.toks)) or any(t.low in _EXCLUDING for t in self.toks)
        return self._polar

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
                    figures.add((t.norm, _number_unit(s.toks, i)))
                elif t.capital and t.norm not in MONTHS and t.low not in _WEEKDAYS:
                    names.add(t.norm)
        self._n = len(self.sentences)
        self.size = sum(len(s.norms) for s in self.sentences)  # content words, counted per sentence

    def idf(self, norm: str) -> float:
        return math.log(1.0 + (self._n + 1) / (len(self.index.get(norm, ())) + 0.5))

    def has(self, tok: Tok) -> float:
        return _has(self.norms, self.prefixes, tok)

    def ranked(self, terms: Sequence[Tok], limit: int = 3) -> list[int]:
        """Sentence indices by IDF-weighted coverage of `terms`, best first (earlier wins ties)."""
        scores: dict[int, float] = {}
        for t in terms:
            w = t.weight * self.idf(t.norm)
            hit = self.index.get(t.norm, ())
            for i in hit:
                scores[i] = scores.get(i, 0.0) + w
            if not t.number and len(t.norm) >= PREFIX:
                for i in self.pindex.get(t.norm[:PREFIX], ()):
                    if i not in hit:
                        scores[i] = scores.get(i, 0.0) + PREFIX_CREDIT * w
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
        toks = (toks[0]._replace(capital=True, weight=1.5),) + toks[1:]
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
    """Share of the claim's adjacent content-word pairs that stand within four words of each other in
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
                if m - k > 4:
                    break
                near.add((a, b))
                near.add((b, a))
    return sum(p in near for p in pairs) / len(pairs)


def negations(toks: tuple[Tok, ...] | list[Tok]) -> int:
    count = 0
    for i, t in enumerate(toks):
        if t.low in NEGATIONS or t.low.endswith("n't"):
            nxt = toks[i + 1].low if i + 1 < len(toks) else ""
            if (t.low, nxt) not in _NOT_NEGATING:
                count += 1
    return count


def negated_opposite(sent: Sentence, word: str) -> bool:
    """Does `sent` state `word` (a direction word such as "closed") as its opposite under a negation
    ("not open")? Two flips state the same fact, as `_direction_clash` also reads them."""
    return negations(sent.toks) % 2 == 1 and _opposite_only(word, sent.toks)


def _opposite_only(word: str, toks: tuple[Tok, ...]) -> bool:
    """Do `toks` use the opposite of direction word `word` ("open" for "closed"), and not `word`'s own side?"""
    found = direction(word)
    if found is None:
        return False
    sides = {d[1] for t in toks if (d := direction(t.low)) is not None and d[0] == found[0]}
    return sides == {1 - found[1]}


def personal(claim: Claim) -> bool:
    return any(t.low in FIRST_PERSON for t in claim.toks)


def subjective(claim: Claim) -> set[str]:
    return {t.low for t in claim.toks if t.low in SUBJECTIVE}


# ---------------------------------------------------------------- contradiction after alignment

_REST_MIN = 0.75      # share of the claim's other words the sentence must hold to be "the same statement"
_NEGATION_MIN = 0.8   # a polarity flip needs the whole statement aligned, not a clause of it
_MIN_SHARED = 2       # content words both must share besides the slot
_MARGIN = 5           # tokens around the shared words where the other value may stand
_SAME_STATEMENT = 0.9  # rest coverage at which another chunk's sentence is the same statement
_CLAUSES = re.compile(r",?\s+(?:while|whereas|but|although|though|however|yet)\s+|,\s+which\s+|;\s*", re.I)


def _region(claim: Claim, sent: Sentence) -> tuple[Tok, ...]:
    """The part of the sentence that aligns with the claim (first to last shared word, and a margin)."""
    norms = {t.norm for t in claim.terms}
    hits = [i for i, t in enumerate(sent.toks) if t.content and t.norm in norms]
    if not hits:
        return ()
    return sent.toks[max(0, hits[0] - _MARGIN):hits[-1] + _MARGIN + 1]


def _rest(claim: Claim, sent: Sentence, slot: set[str], ctx: Context | None = None) -> tuple[float, int]:
    rest = [t for t in claim.terms if t.norm not in slot]
    shared = sum(1 for t in rest if sent.has(t) == 1.0)
    return (coverage(rest, [sent]) if ctx is None else topic_coverage(rest, sent, ctx)), shared


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
                          and "," in sent.text[max(0, m.start() - 30):m.start()])
                  ] + [len(sent.text)]
    if len(cuts) < 3:
        return []
    out = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        text = sent.text[a:b].lstrip(",; ").strip()
        if text:
            out.append(Sentence(sent.chunk, text, toks_of(strip_layout(text))))
    return out


def _neighbours(toks: tuple[Tok, ...], i: int, j: int) -> set[tuple[str, str]]:
    """Slot keys of the run toks[i:j]: the word before it and the content word after it."""
    keys = set()
    if i > 0:
        keys.add(("before", toks[i - 1].norm))
    if j < len(toks):
        keys.add(("after", toks[j].norm))
    return keys


def _year(tok: Tok) -> bool:
    return tok.number and len(tok.norm) == 4 and tok.norm.isdigit() and 1000 <= int(tok.norm) <= 2199


def _ordinal(tok: Tok) -> bool:
    return tok.low[-2:] in ("st", "nd", "rd", "th")


def _number_unit(toks: tuple[Tok, ...], i: int) -> str | None:
    if _year(toks[i]):
        return "<year>"
    nxt = toks[i + 1] if i + 1 < len(toks) else None
    if nxt is not None and nxt.content and not nxt.number:
        return nxt.norm
    return None


def _number_clash(claim: Claim, sent: Sentence, ctx: Context, own: set[str] | None) -> str | None:
    claim_numbers = {t.norm for t in claim.toks if t.number}
    if not claim_numbers or claim_numbers <= sent.norms:
        return None
    region = _region(claim, sent)
    rest, shared = _rest(claim, sent, claim_numbers, ctx if own is None else None)
    if rest < _REST_MIN or shared < _MIN_SHARED:
        return None
    # A figure the context states elsewhere with the same unit: the claim may be about that place,
    # not this one, unless this sentence makes the very same statement around it.
    unmatched = []
    for i, t in enumerate(claim.toks):
        if not t.number or t.norm in sent.norms or (own is not None and t.norm not in own):
            continue
        figure = (t.norm, _number_unit(claim.toks, i))
        if rest < _SAME_STATEMENT and any(figure in f for f in ctx.chunk_figures):
            continue
        unmatched.append(i)
    if not unmatched:
        return None
    rivals = [i for i, t in enumerate(region) if t.number and t.norm not in claim_numbers]
    if not rivals:
        return None
    for i in unmatched:
        mine = claim.toks[i]
        unit = _number_unit(claim.toks, i)
        keys = _neighbours(claim.toks, i, i + 1)
        for j in rivals:
            other = region[j]
            if _year(mine) != _year(other) or _ordinal(mine) != _ordinal(other):
                continue  # a year stands against a year, a rank ("second") against a rank, not a count
            other_unit = _number_unit(region, j)
            same = (unit is not None and unit == other_unit) or bool(keys & _neighbours(region, j, j + 1))
            if same or (len(unmatched) == 1 and len(rivals) == 1 and unit is None and other_unit is None):
                return f'the source says "{_show(region, j, other_unit)}" where the claim says ' \
                       f'"{_show(claim.toks, i, unit)}"'
    return None


def _show(toks: tuple[Tok, ...], i: int, unit: str | None) -> str:
    if unit and unit != "<year>" and i + 1 < len(toks):
        return f"{toks[i].low} {toks[i + 1].low}"
    return toks[i].low


def _name_clash(claim: Claim, sent: Sentence, ctx: Context, own: set[str] | None) -> str | None:
    if all(sent.has(t) for t in claim.toks if t.capital or t.norm in MONTHS):
        return None  # no name of the claim (if it has any) is missing from the sentence
    region = _region(claim, sent)
    claim_norms = {t.norm for t in claim.toks if t.content}

    def name(t: Tok) -> bool:
        return (t.capital and t.norm not in ctx.common and t.low not in GENERIC) or t.norm in MONTHS

    def runs(toks: tuple[Tok, ...]) -> list[tuple[int, int]]:
        # A name with the figure that follows it is one name: "Orbitra 3", "Model 5". Punctuation ends
        # a name: "Jonny May, Marshall, Mark Atkinson" lists three names, each tested on its own.
        out, i = [], 0
        while i < len(toks):
            if name(toks[i]) and (toks[i].low != "may" or toks[i].capital):
                j = i + 1
                while j < len(toks) and toks[j].joined and (name(toks[j]) or toks[j].number and name(toks[j - 1])):
                    j += 1
                out.append((i, j))
                i = j
            else:
                i += 1
        return out

    # The claim's names the sentence lacks in whole or in part ("Orbitra Pro" against "Orbitra 3").
    # Each is tested alone: the rest of the claim, its other names included, must be in the sentence.
    kept = []
    # A word both write with a capital is the same name even where it is also a function word
    # ("Jonny May"; "may" is a stopword, so a content-word lookup misses it).
    written = {t.low for t in sent.toks if t.cased}
    for i, j in runs(claim.toks):
        lacking = [t for t in claim.toks[i:j] if name(t) and not sent.has(t) and t.low not in written]
        if not lacking or (own is not None and not any(t.norm in own for t in claim.toks[i:j])):
            continue
        # Coreference credit (topic_coverage) only for a claim that states its fact whole: a bare
        # answer's "rest" is the question's wording, too loose to vouch for a name swap.
        rest, shared = _rest(claim, sent, {t.norm for t in lacking}, ctx if own is None else None)
        if rest < _REST_MIN or shared < _MIN_SHARED:
            continue
        # A name the context uses elsewhere is no swap here (the claim may be about that other
        # place), unless this sentence makes the very same statement around it.
        if rest < _SAME_STATEMENT and any(all(t.norm in norms for t in lacking) for norms in ctx.chunk_norms):
            continue
        kept.append((i, j, lacking, rest))
    if not kept:
        return None
    # The other name must differ in a word, not only in a figure after it ("Twin Peaks (2017)"): a
    # figure is the number check's business.
    claim_written = {t.low for t in claim.toks if t.cased}
    theirs = [(a, b, [t for t in region[a:b] if t.norm not in claim_norms and not t.number
                      and not (t.cased and t.low in claim_written)]) for a, b in runs(region)]
    theirs = [(a, b, extra) for a, b, extra in theirs if extra]
    if not theirs:
        return None
    for i, j, lacking, rest in kept:
        kind = _kind(lacking)
        keys = _neighbours(claim.toks, i, j)
        for a, b, extra in theirs:
            if kind != _kind(extra):
                continue  # a month stands against a month, a weekday against a weekday, a name against a name
            if _acronym(claim.toks[i:j], region[a:b]):
                continue   # "UK" and "United Kingdom" name one thing
            alone = len(kept) == 1 and len(theirs) == 1 and rest >= _SAME_STATEMENT
            if kind == "month" or keys & _neighbours(region, a, b) or alone:
                said = " ".join(t.low for t in claim.toks[i:j])
                source = " ".join(t.low for t in region[a:b])
                return f'the source names "{source}" where the claim names "{said}"'
    return None


# "valid on all buses except the Airport Express": an exclusion denies what follows it.
_EXCLUDING = frozenset("except excluding excepting".split())


def _acronym(one: tuple[Tok, ...], other: tuple[Tok, ...]) -> bool:
    """Is one run the initials of the other ("UK" / "United Kingdom", "NASA" / "National ... Administration")?"""
    def initials(run: tuple[Tok, ...]) -> str:
        return "".join(t.low[0] for t in run if t.low and t.low not in STOPWORDS)

    def letters(run: tuple[Tok, ...]) -> str:
        return "".join(t.low for t in run).replace(".", "")

    return any(len(letters(x)) >= 2 and letters(x) == initials(y) for x, y in ((one, other), (other, one)))


def _scoped(toks: tuple[Tok, ...], shared: set[str]) -> int:
    """Negations that bear on a shared word: one of the three tokens after the cue is shared
    ("is not open" negates "open"; "aren't swayed and will seek" does not negate "seek")."""
    count = 0
    for i, t in enumerate(toks):
        cue = t.low in NEGATIONS or t.low.endswith("n't") or t.low in _EXCLUDING
        if cue and (t.low, toks[i + 1].low if i + 1 < len(toks) else "") not in _NOT_NEGATING \
                and any(u.norm in shared for u in toks[i + 1:i + 4] if u.low not in STOPWORDS):
            count += 1
    return count


def _kind(toks: list[Tok]) -> str:
    if any(t.norm in MONTHS for t in toks):
        return "month"
    if any(t.low in _WEEKDAYS for t in toks):
        return "weekday"
    return "name"


def _span(toks: tuple[Tok, ...], shared: set[str]) -> tuple[Tok, ...]:
    hits = [i for i, t in enumerate(toks) if t.content and t.norm in shared]
    return toks[hits[0]:hits[-1] + 1] if hits else ()


def _negation_clash(claim: Claim, sent: Sentence, ctx: Context, own: set[str] | None) -> str | None:
    if own is not None:
        return None  # a bare answer carries no polarity of its own
    if not claim.negated and not sent.polar():
        return None
    # Each clause of a contrast ("A, while B is not") is checked on its own, and only between the
    # words both texts share, on both sides: "Don't hurry to plant" and "Do not plant" match there.
    for clause in _CLAUSES.split(claim.text):
        part = claim_of(clause)
        if len(part.terms) < 3 or topic_coverage(part.terms, sent, ctx) < _NEGATION_MIN:
            continue
        shared = {t.norm for t in part.terms if sent.has(t) == 1.0}
        if len(shared) < 3:
            continue
        # A negation may bear on a word both say that carries little content ("not *possible*").
        scope = shared | ({t.norm for t in part.toks if t.low not in STOPWORDS and t.low not in NEGATIONS}
                          & {t.norm for t in sent.toks})
        # An antonym is a flip too: "closed" states what "not open" does.
        flips = _antonyms(part.toks, sent.toks)
        if (_scoped(_span(part.toks, shared), scope) + flips) % 2 != _scoped(_span(sent.toks, shared), scope) % 2:
            return "the source states the same thing with the opposite polarity (a negation differs)"
    return None


def _antonyms(toks: tuple[Tok, ...], other: tuple[Tok, ...]) -> int:
    """How many of `toks`' direction words `other` states only by their opposite ("closed" / "open")."""
    return sum(1 for t in toks if _opposite_only(t.low, other))


def _direction_clash(claim: Claim, sent: Sentence, ctx: Context, own: set[str] | None) -> str | None:
    said: dict[int, tuple[int, str]] = {}
    both: set[int] = set()  # pairs the claim uses on both sides ("over 600 ... under control"): no slot to swap
    for t, d in claim.directions:
        if own is None or t.norm in own:
            if d[0] in said and said[d[0]][0] != d[1]:
                both.add(d[0])
            said[d[0]] = (d[1], t.low)
    for pair in both:
        del said[pair]
    if not said:
        return None
    region = _region(claim, sent)
    rest, shared = _rest(claim, sent, {t.norm for t, _ in claim.directions}, ctx)
    if rest < _REST_MIN or shared < _MIN_SHARED:
        return None
    source: dict[int, set[tuple[int, str]]] = {}
    for t in region:
        found = direction(t.low)
        if found is not None:
            source.setdefault(found[0], set()).add((found[1], t.low))
    if negations(claim.toks) % 2 != negations(region) % 2:
        return None  # "is not open" against "is closed": two flips state the same fact
    for pair, (side, word) in said.items():
        sides = {s for s, _ in source.get(pair, ())}
        if sides and side not in sides:
            other = next(w for s, w in source[pair] if s != side)
            return f'the source says "{other}" where the claim says "{word}"'
    return None


def contradiction(claim: Claim, sent: Sentence, ctx: Context, own: Claim | None = None) -> str | None:
    """Why `sent` states the claim's fact with another value, or None. Call only on aligned sentences.

    `own`: for a bare answer read inside its question (`claim` = question + answer), the answer
    alone; only its words can be the swapped slot, and an answer the sentence states is no clash.
    """
    if sum(1 for t in claim.terms if t.norm in sent.norms) < _MIN_SHARED:
        return None
    slot = None
    if own is not None:
        if all(sent.has(t) for t in own.terms):
            return None
        slot = {t.norm for t in own.terms}
    for check in (_number_clash, _name_clash, _negation_clash, _direction_clash):
        why = check(claim, sent, ctx, slot)
        if why:
            return why
    return None


# Comparatives whose truth two stated figures settle: the claim's side (greater or lesser) against
# the figures the context gives each compared thing in one unit.
_GREATER = frozenset("more higher greater larger bigger older longer faster heavier hotter warmer wider stronger "
                     "louder noisier dearer costlier".split())
_LESSER = frozenset("less fewer lower smaller younger shorter slower lighter colder cooler narrower weaker "
                    "quieter cheaper".split())
_BETWEEN = 4   # words that may stand between a comparative and its "than" or its compared name


def _names(toks: tuple[Tok, ...]) -> list[tuple[int, int]]:
    """Name runs: a capitalised word and what is joined to it that is capitalised or a figure
    ("Tarn 3", "Vesta C2", "Fixed Saver")."""
    out, i = [], 0
    while i < len(toks):
        if toks[i].capital and not toks[i].number:
            j = i + 1
            while j < len(toks) and toks[j].joined and (toks[j].cased or toks[j].number):
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def _value(toks: tuple[Tok, ...], start: int) -> tuple[float, str] | None:
    """The first figure with a unit at or after `start`, before another name begins: (value, unit)."""
    for k in range(start, min(len(toks), start + 8)):
        t = toks[k]
        if t.capital and k > start:
            return None
        unit = _number_unit(toks, k) if t.number and t.strong else None
        if unit and unit != "<year>":
            try:
                return float(t.norm.replace(",", "")), unit
            except ValueError:
                return None
    return None


def _stated(run: tuple[str, ...], ctx: Context) -> tuple[int, float, str] | None:
    """The sentence that names `run` (as one run of words) with a figure after it: (index, value, unit)."""
    n = len(run)
    for i, sent in enumerate(ctx.sentences):
        norms = [t.norm for t in sent.toks]
        for a in range(len(norms) - n + 1):
            if tuple(norms[a:a + n]) == run and (a + n == len(norms) or not sent.toks[a + n].number):
                found = _value(sent.toks, a + n)
                if found:
                    return i, found[0], found[1]
    return None


def comparison(claim: Claim, query: Claim | None, ctx: Context) -> tuple[int, str | None] | None:
    """For a claim that compares two things ("A is lighter than B", "A is the lighter of the two")
    whose figures the context states in one unit: (index of B's sentence, why) when the figures go
    the other way, (index, None) when they agree; None when the figures do not settle it.

    A is the claim's name before the comparative, or, where the claim names none ("It runs at 42 dB,
    which makes it louder than B"), the figure the claim itself gives; B is the name after "than",
    or the question's other name for "of the two"."""
    toks = claim.toks
    for k, t in enumerate(toks):
        side = 1 if t.low in _GREATER else -1 if t.low in _LESSER else 0
        if not side:
            continue
        after = [u.low for u in toks[k + 1:k + 1 + _BETWEEN]]
        names = _names(toks)
        mine = [(a, b) for a, b in names if b <= k]
        theirs: list[tuple[Tok, ...]] = []
        if after[:1] == ["than"]:
            theirs = [toks[a:b] for a, b in names if k + 1 < a <= k + 1 + _BETWEEN][:1]
        elif after[:3] == ["of", "the", "two"] and query is not None and mine:
            own = tuple(u.norm for u in toks[mine[-1][0]:mine[-1][1]])
            theirs = [query.toks[a:b] for a, b in _names(query.toks)
                      if tuple(u.norm for u in query.toks[a:b]) != own][:1]
        if not theirs:
            continue
        other = _stated(tuple(u.norm for u in theirs[0]), ctx)
        if other is None:
            continue
        if mine:
            first = _stated(tuple(u.norm for u in toks[mine[-1][0]:mine[-1][1]]), ctx)
            value = (first[1], first[2]) if first else None
        else:
            value = next((v for s in range(k) if (v := _value(toks[:k], s)) is not None), None)
        if value is None or value[1] != other[2] or value[0] == other[1]:
            continue
        if (value[0] > other[1]) == (side > 0):
            return other[0], None
        said = " ".join(u.low for u in theirs[0])
        return other[0], (f'the source gives {said} {other[1]:g} {other[2]} against {value[0]:g} {value[1]}, '
                          f'so the claim\'s "{t.low}" is the wrong way round')
    return None
