"""Canonical tokens: the words and figures of a text as the faithfulness judge compares them.

Words are compared as canonical stems: inflection stripped, synonyms of general English folded to
one form (veralith/llm/local/synonyms.py), numbers as values ("twenty", "20" and "20th" are one
value; "1,000" is 1000; "$5" is "5 dollars"). Layout (list markers, labels, inline citations) is
stripped first, and words that only organise an answer ("therefore", "the passage") never count.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

from veralith.llm.local.lexicon import (
    GENERIC,
    GENERIC_WEIGHT,
    MONTHS,
    NAME_WEIGHT,
    NUMBER_WEIGHT,
    STOPWORDS,
    fold,
    tokens,
)
from veralith.llm.local.synonyms import canon
from veralith.llm.local.wordlists import table, words

__all__ = ["WEEKDAYS", "Tok", "is_ordinal", "is_year", "number_unit", "runs", "strip_layout", "toks_of"]

# A four-digit number in this range reads as a year ("in 1952"), not a count.
_FIRST_YEAR, _LAST_YEAR = 1000, 2199
_CURRENCY = re.compile(r"([$€£¥])\s?(\d[\d,]*(?:\.\d+)?)")
_CURRENCY_WORD = {"$": " dollars", "€": " euros", "£": " pounds", "¥": " yen"}
_PERCENT = re.compile(r"(\d)\s?%")
_TENS = {"20", "30", "40", "50", "60", "70", "80", "90"}
_UNITS = {str(i) for i in range(1, 10)}
_MULTIPLIERS = {word: int(factor) for word, factor in table("multipliers").items()}
# A list marker ("3.", "2)", "-") or an inline citation ("(Passage 1)", "[2]") is layout, not content.
_MARKER = re.compile(r"^\s*(?:[-*•]\s*|\(?\d{1,2}[.)]\s+|\d{1,2}\s+(?=[A-Z]))")
_CITATION = re.compile(r"\s*[(\[](?:(?:passages?|sources?|documents?|docs?|context|chunks?|refs?)\s*)?"
                       r"\d{1,2}(?:\s*(?:,|and|&|-)\s*\d{1,2})*[)\]]", re.I)
_LABEL = re.compile(r"^\s*(?:answer|summary|response|(?:passage|source|document)\s*\d{0,2})\s*:\s*", re.I)
# Words that organise an answer rather than state its facts ("Therefore, ...", "the answer to the
# question"): never evidence, never missing.
_DISCOURSE = words("discourse")
# Number words that are mostly not figures ("one of", "one must", "once").
_NOT_FIGURES = words("not_figures")
# A number after one of these words numbers a part of the text ("passage 3", "step 2", "sources 1 and 2"):
# it points into the answer's own layout and states no figure about the world.
_REFERENCES = words("references")
_JOINING = frozenset({"", "-", "'", "’", "&"})


# Month names and abbreviations to one form ("Jun", "June" -> "june"); "may" is too often a verb.
_MONTH_NAMES = {m: m for m in MONTHS if m != "may"} | {m[:3]: m for m in MONTHS if m != "may"} | {"sept": "september"}
WEEKDAYS = words("weekdays")


# A label ("Answer:", "Passage 2:") stands at the very start of a text; only there is it looked for.
_LABEL_WITHIN = 24


def strip_layout(text: str) -> str:
    """`text` without a leading list marker or label and without inline citations."""
    if ":" in text[:_LABEL_WITHIN]:
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
        return NUMBER_WEIGHT
    if capital:
        return NAME_WEIGHT
    if low in GENERIC or norm in GENERIC:
        return GENERIC_WEIGHT
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
                out.append(Tok("may", "may", False, True, True, NAME_WEIGHT, False, True, joined))
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
        out.append(Tok(low, norm, True, False, True, NUMBER_WEIGHT, low[0].isdigit(), False, joined))
        i += 1
    return tuple(out)


def runs(toks: tuple[Tok, ...], starts: Callable[[int], bool], joins: Callable[[int], bool]) -> list[tuple[int, int]]:
    """Spans [i, j) of `toks` that open where `starts(i)` and go on while `joins(j)`: the name runs
    of the contradiction and comparison checks."""
    out, i = [], 0
    while i < len(toks):
        if starts(i):
            j = i + 1
            while j < len(toks) and joins(j):
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def is_year(tok: Tok) -> bool:
    """A four-digit figure in the range of years."""
    return tok.number and len(tok.norm) == 4 and tok.norm.isdigit() and _FIRST_YEAR <= int(tok.norm) <= _LAST_YEAR


def is_ordinal(tok: Tok) -> bool:
    """A rank ("2nd", "second"), never comparable with a count."""
    return tok.low[-2:] in ("st", "nd", "rd", "th")


def number_unit(toks: tuple[Tok, ...], i: int) -> str | None:
    """What the figure toks[i] counts: "<year>" for a year, else the content word after it, else None."""
    if is_year(toks[i]):
        return "<year>"
    nxt = toks[i + 1] if i + 1 < len(toks) else None
    if nxt is not None and nxt.content and not nxt.number:
        return nxt.norm
    return None

