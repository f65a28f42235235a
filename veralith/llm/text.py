"""Plain-text helpers shared by the pipeline and the backends (no model, no network)."""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["quote_in", "sentence_spans"]

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
_ELLIPSIS = re.compile(r"\s*(?:\.\.\.|…)\s*")
_TYPOGRAPHY = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"', "–": "-", "—": "-", "\u00a0": " "})


@lru_cache(maxsize=4096)
def _normal(text: str) -> str:
    # Cached: every quote of a call is checked against the same few chunks.
    return _SPACE.sub(" ", text.translate(_TYPOGRAPHY)).strip()


def quote_in(quote: str, text: str) -> bool:
    """True when `quote` is verbatim in `text`, up to whitespace and typographic quotes and dashes.

    An ellipsis marks an elision: each piece must occur, in order.
    """
    haystack = _normal(text)
    position = 0
    for piece in _pieces(quote):
        found = haystack.find(piece, position)
        if found < 0:
            return False
        position = found + len(piece)
    return True


@lru_cache(maxsize=4096)
def _pieces(quote: str) -> tuple[str, ...]:
    # Cached: the stale-claim review looks for one quote in every sentence of its chunk.
    return tuple(_normal(p) for p in _ELLIPSIS.split(quote.strip()) if p.strip())
