"""Contradiction after alignment: the claim's statement, with another value in one slot.

Contradiction is looked for only once a claim is aligned (align.py): the sentence must share most
of the claim's other words, and then differ in one slot. Four slots are checked: a number (with its
unit or neighbour: "189 euros" against "219 euros", "model 3" against "model 4", a year against a
year), negation polarity, a name or month in the same place, and a direction word ("more" against
"less", "before" against "after").
"""

from __future__ import annotations

import re

from veralith.llm.local.align import Claim, Context, Sentence, claim_of, coverage, topic_coverage
from veralith.llm.local.canonical import WEEKDAYS, Tok, is_ordinal, is_year, number_unit, runs
from veralith.llm.local.lexicon import GENERIC, MONTHS, NEGATIONS, STOPWORDS
from veralith.llm.local.polarity import antonyms, negations, scoped
from veralith.llm.local.synonyms import direction

__all__ = ["contradiction"]

_REST_MIN = 0.75      # share of the claim's other words the sentence must hold to be "the same statement"
_NEGATION_MIN = 0.8   # a polarity flip needs the whole statement aligned, not a clause of it
_MIN_SHARED = 2       # content words both must share besides the slot
_MARGIN = 5           # tokens around the shared words where the other value may stand
_SAME_STATEMENT = 0.9  # rest coverage at which another chunk's sentence is the same statement
_NEGATION_WORDS = 3   # content words a clause, and what it shares with the sentence, needs for a polarity check
_INITIALS = 2         # letters an acronym needs ("UK")
_CLAUSES = re.compile(r",?\s+(?:while|whereas|but|although|though|however|yet)\s+|,\s+which\s+|;\s*", re.I)


def _region(claim: Claim, sent: Sentence) -> tuple[Tok, ...]:
    """The part of the sentence that aligns with the claim (first to last shared word, and a margin)."""
    norms = {t.norm for t in claim.terms}
    hits = [i for i, t in enumerate(sent.toks) if t.content and t.norm in norms]
    if not hits:
        return ()
    return sent.toks[max(0, hits[0] - _MARGIN):hits[-1] + _MARGIN + 1]


def _rest(claim: Claim, sent: Sentence, slot: set[str], ctx: Context | None = None) -> tuple[float, int]:
    """(coverage of the claim's words outside `slot` by `sent`, how many of them it holds in full);
    with `ctx`, a name the sentence's chunk states counts as held (topic_coverage)."""
    rest = [t for t in claim.terms if t.norm not in slot]
    shared = sum(1 for t in rest if sent.has(t) == 1.0)
    return (coverage(rest, [sent]) if ctx is None else topic_coverage(rest, sent, ctx)), shared


class _Rests:
    """`_rest` for many slots of one claim against one sentence, each in time of the slot's size.

    The first slot is summed as `_rest` sums it (most claims have one name); from the second on,
    the claim's words are summed once and a slot's rest is the whole minus the slot. A sum taken that
    way can differ from `_rest`'s in the last bits, so a rest within _EXACT of a threshold it is
    compared with is recomputed by `_rest` itself: the outcome is always `_rest`'s, and a claim with
    many names costs linear, not quadratic, time.
    """

    _EXACT = 1e-9

    def __init__(self, claim: Claim, sent: Sentence, ctx: Context | None) -> None:
        self.claim, self.sent, self.ctx = claim, sent, ctx
        self.parts: dict[str, tuple[float, float, int]] | None = None   # summed on the second slot
        self.first = False
        self.total = self.found = 0.0
        self.shared = 0

    def _sum(self) -> dict[str, tuple[float, float, int]]:
        claim, sent, ctx = self.claim, self.sent, self.ctx
        names = ctx.chunk_names[sent.chunk] if ctx is not None else frozenset()
        parts: dict[str, tuple[float, float, int]] = {}
        for t in claim.terms:
            held = sent.has(t)
            credit = 1.0 if ctx is not None and not held and not t.number and t.norm in names else held
            parts[t.norm] = (t.weight, t.weight * credit, int(held == 1.0))
        self.total = sum(w for w, _, _ in parts.values())
        self.found = sum(c for _, c, _ in parts.values())
        self.shared = sum(f for _, _, f in parts.values())
        return parts

    def of(self, slot: set[str]) -> tuple[float, int]:
        if self.parts is None:
            if not self.first:   # one name (the common case): the plain sum
                self.first = True
                return _rest(self.claim, self.sent, slot, self.ctx)
            self.parts = self._sum()
        total, found, shared = self.total, self.found, self.shared
        for norm in slot:
            part = self.parts.get(norm)
            if part is not None:
                total, found, shared = total - part[0], found - part[1], shared - part[2]
        rest = found / total if total > self._EXACT else 1.0
        if any(abs(rest - limit) <= self._EXACT for limit in (_REST_MIN, _SAME_STATEMENT)) or total <= self._EXACT:
            return _rest(self.claim, self.sent, slot, self.ctx)
        return rest, shared


def _neighbours(toks: tuple[Tok, ...], i: int, j: int) -> set[tuple[str, str]]:
    """Slot keys of the run toks[i:j]: the word before it and the content word after it."""
    keys = set()
    if i > 0:
        keys.add(("before", toks[i - 1].norm))
    if j < len(toks):
        keys.add(("after", toks[j].norm))
    return keys


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
        figure = (t.norm, number_unit(claim.toks, i))
        if rest < _SAME_STATEMENT and figure in ctx.figures:
            continue
        unmatched.append(i)
    if not unmatched:
        return None
    rivals = [i for i, t in enumerate(region) if t.number and t.norm not in claim_numbers]
    if not rivals:
        return None
    # The first rival (in order) for each unmatched figure: one of the same kind (year, rank, count)
    # with the same unit or a shared neighbour, found by key rather than by trying every pair.
    first: dict[tuple, int] = {}
    for j in rivals:
        other = region[j]
        kind = (is_year(other), is_ordinal(other))
        other_unit = number_unit(region, j)
        for key in ([("unit", other_unit)] if other_unit is not None else []) + sorted(_neighbours(region, j, j + 1)):
            first.setdefault((kind, key), j)
    for i in unmatched:
        mine = claim.toks[i]
        unit = number_unit(claim.toks, i)
        kind = (is_year(mine), is_ordinal(mine))  # a year stands against a year, a rank against a rank
        keys = ([("unit", unit)] if unit is not None else []) + sorted(_neighbours(claim.toks, i, i + 1))
        found = [first[(kind, key)] for key in keys if (kind, key) in first]
        if not found and len(unmatched) == 1 and len(rivals) == 1 and unit is None:
            j = rivals[0]
            if (is_year(region[j]), is_ordinal(region[j])) == kind and number_unit(region, j) is None:
                found = [j]
        if found:
            j = min(found)
            return f'the source says "{_show(region, j, number_unit(region, j))}" where the claim says ' \
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

    def name_runs(toks: tuple[Tok, ...]) -> list[tuple[int, int]]:
        # A name with the figure that follows it is one name: "Orbitra 3", "Model 5". Punctuation ends
        # a name: "Jonny May, Marshall, Mark Atkinson" lists three names, each tested on its own.
        return runs(toks, lambda i: name(toks[i]) and (toks[i].low != "may" or toks[i].capital),
                    lambda j: toks[j].joined and (name(toks[j]) or toks[j].number and name(toks[j - 1])))

    # The claim's names the sentence lacks in whole or in part ("Orbitra Pro" against "Orbitra 3").
    # Each is tested alone: the rest of the claim, its other names included, must be in the sentence.
    kept = []
    # A word both write with a capital is the same name even where it is also a function word
    # ("Jonny May"; "may" is a stopword, so a content-word lookup misses it).
    written = {t.low for t in sent.toks if t.cased}
    rests = _Rests(claim, sent, ctx if own is None else None)
    for i, j in name_runs(claim.toks):
        lacking = [t for t in claim.toks[i:j] if name(t) and not sent.has(t) and t.low not in written]
        if not lacking or (own is not None and not any(t.norm in own for t in claim.toks[i:j])):
            continue
        # Coreference credit (topic_coverage) only for a claim that states its fact whole: a bare
        # answer's "rest" is the question's wording, too loose to vouch for a name swap.
        rest, shared = rests.of({t.norm for t in lacking})
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
                      and not (t.cased and t.low in claim_written)]) for a, b in name_runs(region)]
    theirs = [(a, b, extra) for a, b, extra in theirs if extra]
    if not theirs:
        return None
    # Each kept name against the other names (in order) of its kind that share a neighbour with it
    # (a month against any month), found by key rather than by trying every pair.
    by_key: dict[tuple[str, tuple[str, str] | None], list[int]] = {}
    for n, (a, b, extra) in enumerate(theirs):
        kind = _kind(extra)
        for key in [None] + sorted(_neighbours(region, a, b)):
            by_key.setdefault((kind, key), []).append(n)
    for i, j, lacking, rest in kept:
        kind = _kind(lacking)
        alone = len(kept) == 1 and len(theirs) == 1 and rest >= _SAME_STATEMENT
        keys = [None] if kind == "month" or alone else sorted(_neighbours(claim.toks, i, j))
        candidates = sorted({n for key in keys for n in by_key.get((kind, key), ())})
        for n in candidates:
            a, b, _ = theirs[n]
            if _acronym(claim.toks[i:j], region[a:b]):
                continue   # "UK" and "United Kingdom" name one thing
            said = " ".join(t.low for t in claim.toks[i:j])
            source = " ".join(t.low for t in region[a:b])
            return f'the source names "{source}" where the claim names "{said}"'
    return None


def _acronym(one: tuple[Tok, ...], other: tuple[Tok, ...]) -> bool:
    """Is one run the initials of the other ("UK" / "United Kingdom", "NASA" / "National ... Administration")?"""
    def initials(run: tuple[Tok, ...]) -> str:
        return "".join(t.low[0] for t in run if t.low and t.low not in STOPWORDS)

    def letters(run: tuple[Tok, ...]) -> str:
        return "".join(t.low for t in run).replace(".", "")

    return any(len(letters(x)) >= _INITIALS and letters(x) == initials(y) for x, y in ((one, other), (other, one)))


def _kind(toks: list[Tok]) -> str:
    if any(t.norm in MONTHS for t in toks):
        return "month"
    if any(t.low in WEEKDAYS for t in toks):
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
        if len(part.terms) < _NEGATION_WORDS or topic_coverage(part.terms, sent, ctx) < _NEGATION_MIN:
            continue
        shared = {t.norm for t in part.terms if sent.has(t) == 1.0}
        if len(shared) < _NEGATION_WORDS:
            continue
        # A negation may bear on a word both say that carries little content ("not *possible*").
        scope = shared | ({t.norm for t in part.toks if t.low not in STOPWORDS and t.low not in NEGATIONS}
                          & {t.norm for t in sent.toks})
        # An antonym is a flip too: "closed" states what "not open" does.
        flips = antonyms(part.toks, sent.toks)
        if (scoped(_span(part.toks, shared), scope) + flips) % 2 != scoped(_span(sent.toks, shared), scope) % 2:
            return "the source states the same thing with the opposite polarity (a negation differs)"
    return None


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


