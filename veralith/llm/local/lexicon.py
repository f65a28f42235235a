"""Word lists and the tokenizer the local judges share.

The lists are hand-written English function-word knowledge (veralith/llm/local/words/), not
statistics: the local backend must work offline with nothing downloaded, so "informative word" is
decided by these lists plus the shape of a token (digits, capitals), not by a corpus frequency table.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import NamedTuple

from veralith.llm.local.wordlists import lines, table, words

__all__ = ["FIRST_PERSON", "GENERIC", "GENERIC_WEIGHT", "MONTHS", "NAME_WEIGHT", "NEGATIONS", "NOW_WORDS",
           "NUMBER_WEIGHT", "PERSONAL", "PREFIX", "PREFIX_CREDIT", "STOPWORDS", "SUBJECTIVE", "Token", "WH_WORDS",
           "content_terms", "fold", "stem", "tokens"]

STOPWORDS = words("stopwords")
# Words that carry little of a claim's specific content: matching them proves little, missing
# them is no sign of fabrication. They weigh less in coverage.
GENERIC = words("generic")
NEGATIONS = words("negations")
FIRST_PERSON = words("first_person")
# Talk about the speaker or the listener: a retrieved document rarely grounds it.
PERSONAL = FIRST_PERSON
# Opinion and feeling words: an answer that judges or enthuses says more than a source states.
SUBJECTIVE = words("subjective")
WH_WORDS = words("wh_words")
# Words that ask about the present, each entry ending with the period it asks for (now, year, month):
# read by the stale-claim review both backends share (veralith.llm.temporal).
NOW_WORDS = lines("now_words")

_NUMBER_WORDS = table("number_words")
_MONTHS = table("month_abbreviations")
MONTHS = frozenset(_MONTHS.values()) | {"may"}

# How much a term's absence counts against a text (align.Tok.weight, evidence.Term.weight): a
# figure most, then a name, generic words least, every other content word 1.
NUMBER_WEIGHT = 2.0
NAME_WEIGHT = 1.5
GENERIC_WEIGHT = 0.35
# Morphological variants ("radiology"/"radiologist") share their first PREFIX letters; a word
# found only that way counts PREFIX_CREDIT of a match.
PREFIX = 6
PREFIX_CREDIT = 0.7

# Numbers keep their inner separators ("1,000", "3.5", "14:00") so they compare as values.
# A product code or model number ("X300", "A4", "CO2") is one word, a name: it starts with letters
# and holds digits, and is neither a figure nor a date.
# "P/E", "AT&T" and "U.S" stay one token; their letters alone would be dropped as too short.
_TOKEN = re.compile(r"\d+(?:[.,:]\d+)*(?:st|nd|rd|th|s)?"
                    r"|[^\W\d_]{1,3}(?:[/&][^\W\d_]{1,3})+(?![^\W\d_])"
                    r"|[^\W\d_](?:\.[^\W\d_])+(?![^\W\d_])"
                    r"|[^\W\d_]+(?:['’][^\W\d_]+)*(?:\d[^\W_]*)?", re.UNICODE)


class Token(NamedTuple):
    """One word or number (a NamedTuple: tokenising is the backend's hot loop)."""

    text: str        # as written (accents folded)
    norm: str        # lowercase, stemmed; numbers canonical
    is_number: bool
    is_capital: bool  # capitalised and not the first word of its sentence
    start: int


# Combining marks left by NFKD (accents, cedillas, dots): dropping them folds "Żelazowa" to "Zelazowa".
_COMBINING = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")


def fold(text: str) -> str:
    """Lowercase-independent accent folding so "Café" and "Cafe" match."""
    if text.isascii():
        return text
    return _COMBINING.sub("", unicodedata.normalize("NFKD", text)).replace("’", "'")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light suffix stripper: enough for plural/tense variation, conservative enough to keep names."""
    w = word.lower()
    if w in _NUMBER_WORDS:
        return _NUMBER_WORDS[w]
    if w in _MONTHS:
        return _MONTHS[w]
    if w.endswith("'s"):
        w = w[:-2]
    if len(w) <= 3:
        return w
    for suffix, repl in (("ies", "y"), ("ied", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", ""),
                         ("s", ""), ("ly", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            if suffix == "s" and w.endswith(("ss", "us", "is")):
                continue
            if suffix == "es" and not w.endswith(("ches", "shes", "xes", "zes", "sses", "oes")):
                w = w[:-1]
                break
            w = w[: len(w) - len(suffix)] + repl
            if suffix in ("ing", "ed") and len(w) >= 4 and w[-1] == w[-2] and w[-1] not in "aeiouls":
                w = w[:-1]  # "stopped" -> "stop"
            break
    # "hire"/"hired", "announce"/"announced": a final e is spelling, not meaning.
    if len(w) >= 4 and w.endswith("e") and not w.endswith("ee"):
        w = w[:-1]
    return w


_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th)")
_DECIMAL = re.compile(r"\d+\.\d+")


def _number_norm(raw: str) -> str:
    value = raw.replace(",", "")
    if _ORDINAL.fullmatch(value):
        return value
    value = value.rstrip("s")  # "1990s" names the decade by its first year
    if _DECIMAL.fullmatch(value):
        value = value.rstrip("0").rstrip(".")
    return value.lstrip("0") or "0"


_OPENERS = frozenset('.!?:"“')
_DIGIT = re.compile(r"\d")


@lru_cache(maxsize=65536)
def _word(raw: str) -> tuple[str, bool, bool]:
    """(norm, is_number, is_stopword) of one word as written."""
    if raw[0].isdigit():
        return _number_norm(raw), True, False
    lowered = raw.lower()
    if _DIGIT.search(raw):
        return lowered, False, False   # a code ("X300"): a name, never stemmed or read as a number
    norm = stem(lowered)
    return norm, norm[:1].isdigit(), lowered in STOPWORDS


_new_tuple = tuple.__new__  # builds a Token without the NamedTuple's Python-level __new__ (hot loop)


@lru_cache(maxsize=16384)
def _tokens_cached(text: str) -> tuple[Token, ...]:
    folded = fold(text)
    out: list[Token] = []
    previous_end = -1
    for match in _TOKEN.finditer(folded):
        raw = match.group(0)
        start = match.start()
        norm, is_number, is_stop = _word(raw)
        is_capital = False
        if raw[0].isupper() and not is_stop and previous_end >= 0:
            gap = folded[previous_end:start]
            is_capital = "\n" not in gap and gap.rstrip()[-1:] not in _OPENERS
        previous_end = start + len(raw)
        out.append(_new_tuple(Token, (raw, norm, is_number, is_capital, start)))
    return tuple(out)


def tokens(text: str) -> tuple[Token, ...]:
    """All word and number tokens of `text`, in order (cached: judges tokenise the same chunks often)."""
    return _tokens_cached(text)


def content_terms(text: str) -> tuple[Token, ...]:
    """Tokens that carry content: no stopwords, no one-letter words."""
    return _content_cached(text)


@lru_cache(maxsize=8192)
def _content_cached(text: str) -> tuple[Token, ...]:
    return tuple(t for t in tokens(text) if t.is_number or (not _word(t.text)[2] and len(t.norm) > 1))
