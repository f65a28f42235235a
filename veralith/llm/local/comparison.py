"""Comparisons the context's figures settle: "A is lighter than B" against the weights it gives A and B."""

from __future__ import annotations

from veralith.llm.local.align import Claim, Context
from veralith.llm.local.canonical import Tok, number_unit, runs
from veralith.llm.local.wordlists import words

__all__ = ["comparison"]

# Comparatives whose truth two stated figures settle: the claim's side (greater or lesser) against
# the figures the context gives each compared thing in one unit.
_GREATER = words("greater")
_LESSER = words("lesser")
_BETWEEN = 4   # words that may stand between a comparative and its "than" or its compared name
_FIGURE_WITHIN = 8  # words after a name within which its figure must stand


def _names(toks: tuple[Tok, ...]) -> list[tuple[int, int]]:
    """Name runs: a capitalised word and what is joined to it that is capitalised or a figure
    ("Tarn 3", "Vesta C2", "Fixed Saver")."""
    return runs(toks, lambda i: toks[i].capital and not toks[i].number,
                lambda j: toks[j].joined and (toks[j].cased or toks[j].number))


def _value(toks: tuple[Tok, ...], start: int) -> tuple[float, str] | None:
    """The first figure with a unit at or after `start`, before another name begins: (value, unit)."""
    for k in range(start, min(len(toks), start + _FIGURE_WITHIN)):
        t = toks[k]
        if t.capital and k > start:
            return None
        unit = number_unit(toks, k) if t.number and t.strong else None
        if unit and unit != "<year>":
            try:
                return float(t.norm.replace(",", "")), unit
            except ValueError:
                return None
    return None


def _stated(run: tuple[str, ...], ctx: Context) -> tuple[int, float, str] | None:
    """The sentence that names `run` (as one run of words) with a figure after it: (index, value, unit).

    Only sentences that hold the run's first word as a content word are read (the context's index),
    so a claim costs the sentences naming its thing, not the whole context."""
    n = len(run)
    for i in ctx.index.get(run[0], ()) if run else ():
        sent = ctx.sentences[i]
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
