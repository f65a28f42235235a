"""Plain-text helpers shared by the pipeline and the backends (no model, no network)."""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["QUOTE_MAX_WORDS", "clip_quote", "quote_in", "quote_span", "sentence_spans", "word_count"]

# A sentence ends at . ! ? (optionally followed by quotes/brackets) before whitespace and an
# uppercase letter, digit or quote, or at a newline. Abbreviations and decimals ("e.g.", "3.5",
# "U.S.") are protected by requiring whitespace after the stop.
_ABBREV = {"e.g", "i.e", "mr", "mrs", "ms", "dr", "prof", "st", "vs", "etc", "inc", "ltd", "co", "jr", "sr",
           "no", "fig", "approx", "u.s", "u.k", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
           "sept", "oct", "nov", "dec"}
_BOUNDARY = re.compile(r"([.!?]+[\"')\]]*)(\s+)(?=[\"'(\[]?[A-Z0-9])|\n\s*\n|\n(?=\s*(?:[-*•]|\d+[.)])\s)")


_LAST_WORD = re.compile(r"(\S+)$")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans [start, end) of the sentences of `text`, whitespace trimmed, in order."""
    return list(_spans(text))


@lru_cache(maxsize=4096)
def _spans(text: str) -> tuple[tuple[int, int], ...]:
    # Cached: the pipeline splits the response more than once, and the stale-claim review splits a
    # chunk again for every quote of every claim it grounds.
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        if match.group(1):
            end = match.end(1)
            word = _LAST_WORD.search(text[start:match.start(1)])
            abbrev = word.group(1).lower().rstrip(".") if word else ""
            # "No. 5" is an abbreviation; "No. The museum is closed." is an answer and a sentence.
            if abbrev in _ABBREV and not (abbrev == "no" and not text[match.end():match.end() + 1].isdigit()):
                continue
            if word and len(word.group(1)) == 1 and word.group(1).isupper():  # an initial: "J. Smith"
                continue
            if word and word.group(1).isdigit() and not text[start:match.start(1) - len(word.group(1))].strip():
                continue  # a list marker ("1. Francis ..."): the item is the sentence, not the number
        else:
            end = match.start()
        _append(text, start, end, spans)
        start = match.end()
    _append(text, start, len(text), spans)
    return tuple(spans)


def _append(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        spans.append((start, end))


_SPACE = re.compile(r"\s+")
_TYPOGRAPHY = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"', "–": "-", "—": "-", "\u00a0": " "})
_WORD = re.compile(r"\S+")
QUOTE_MAX_WORDS = 25   # the bound every judge prompt states for a quote, and every quote check applies


@lru_cache(maxsize=4096)
def _normal(text: str) -> tuple[str, tuple[int, ...]]:
    """`text` with every run of whitespace one space (trimmed) and typographic quotes and dashes plain,
    and for each of its characters the offset it came from in `text`."""
    out: list[str] = []
    where: list[int] = []
    plain = text.translate(_TYPOGRAPHY)
    for match in re.finditer(r"\S+", plain):
        if out:
            out.append(" ")
            where.append(match.start())
        out.append(match.group())
        where.extend(range(match.start(), match.end()))
    return "".join(out), tuple(where)


def quote_span(quote: str, text: str) -> tuple[int, int] | None:
    """Where `quote` is in `text`: [start, end) of the first occurrence of it as one contiguous span,
    up to whitespace (any run is one space) and typographic quotes and dashes; None when it is not
    there. The one test of "is this a quote of that source" every check of a quote uses.

    Nothing is spliced: an ellipsis in a quote is text like any other, so "A ... B" is a quote only
    where the source itself says "A ... B".
    """
    needle = _normal(quote)[0]
    if not needle:
        return None
    haystack, where = _normal(text)
    found = haystack.find(needle)
    if found < 0:
        return None
    return where[found], where[found + len(needle) - 1] + 1


def quote_in(quote: str, text: str) -> bool:
    """True when `quote` is one contiguous span of `text` (see quote_span)."""
    return quote_span(quote, text) is not None


def word_count(text: str) -> int:
    """Words as a quote bound counts them: runs of non-space characters."""
    return len(_WORD.findall(text))


def clip_quote(text: str) -> str:
    """The first QUOTE_MAX_WORDS words of `text`, single-spaced: still one span of it (up to whitespace),
    and short enough for any quote check."""
    return " ".join(_WORD.findall(text)[:QUOTE_MAX_WORDS])
