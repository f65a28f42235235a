"""Word lists and the tokenizer the local judges share.

Everything here is hand-written English function-word knowledge, not data: the local backend must
work offline with nothing downloaded, so "informative word" is decided by these lists plus the
shape of a token (digits, capitals), not by a corpus frequency table.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import NamedTuple

__all__ = ["FIRST_PERSON", "GENERIC", "MONTHS", "NEGATIONS", "PERSONAL", "STOPWORDS", "SUBJECTIVE", "Token",
           "WH_WORDS", "content_terms",
           "fold", "stem", "tokens"]

STOPWORDS = frozenset("""
a an the and or but nor so yet if then else than as of at by for from in into onto on off out over under
up down to with within without about above below across after before behind between beyond during
through toward towards upon via per is am are was were be been being do does did doing done have has
had having will would shall should can could may might must ought it its it's this that these those
there here where when what which who whom whose why how whether while although though because since
until unless also too very just only even still both either neither each every all any some such
same other another own more most much many few less least not no yes i me my mine myself we us our
ours ourselves you your yours yourself yourselves he him his himself she her hers herself they them
their theirs themselves one ones s t d ll m re ve o y let lets get got gets getting make made makes
say said says etc e.g i.e ie eg vs however therefore thus hence whereas like well
""".split())

# Words that carry little of a claim's specific content: matching them proves little, missing
# them is no sign of fabrication. They weigh less in coverage.
GENERIC = frozenset("""
known called named including include includes included became become becomes located based several
various number time times year years first second third new old many large small great good best
well part parts people person way ways thing things lot lots often usually generally also really
actually indeed currently later early earlier recently already around approximately about nearly
almost mostly mainly typically total whole entire main major minor other another different similar
certain following follow follows used use uses using take takes took taken give gives gave given
go goes went gone come comes came place places area areas work works worked working member members
form forms formed type types kind kinds called refer refers referred term terms passage text article
summary mentions mentioned describes described discusses discussed states stated according report
reported reports note notes noted
""".split())

NEGATIONS = frozenset("""
not no never none nobody nothing neither nor cannot can't won't don't doesn't didn't isn't aren't
wasn't weren't hasn't haven't hadn't shouldn't wouldn't couldn't n't without lack lacks lacked
""".split())

FIRST_PERSON = frozenset("i i'm i've i'd i'll me my mine myself we we're we've our ours us ourselves".split())
# Talk about the speaker or the listener: a retrieved document rarely grounds it.
PERSONAL = FIRST_PERSON
# Opinion and feeling words: an answer that judges or enthuses says more than a source states.
SUBJECTIVE = frozenset("""
love loved loves like liked likes enjoy enjoyed enjoys favorite favourite favorites great awesome amazing cool
fun funny interesting best worst beautiful talented think thought believe guess feel felt hope wish
definitely probably really pretty wonderful fantastic terrible horrible lovely glad sad happy excited
exciting boring nice incredible incredibly super totally honestly personally
""".split())

WH_WORDS = frozenset("what which who whom whose when where why how".split())

_NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
    "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13",
    "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17", "eighteen": "18",
    "nineteen": "19", "twenty": "20", "thirty": "30", "forty": "40", "fifty": "50", "sixty": "60",
    "seventy": "70", "eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000",
    "first": "1st", "second": "2nd", "third": "3rd", "fourth": "4th", "fifth": "5th", "sixth": "6th",
    "seventh": "7th", "eighth": "8th", "ninth": "9th", "tenth": "10th", "once": "1x", "twice": "2x",
}
_MONTHS = {
    "jan": "january", "feb": "february", "mar": "march", "apr": "april", "jun": "june", "jul": "july",
    "aug": "august", "sep": "september", "sept": "september", "oct": "october", "nov": "november",
    "dec": "december",
}
MONTHS = frozenset(_MONTHS.values()) | {"may"}

# Numbers keep their inner separators ("1,000", "3.5", "14:00") so they compare as values.
# "P/E", "AT&T" and "U.S" stay one token; their letters alone would be dropped as too short.
_TOKEN = re.compile(r"\d+(?:[.,:]\d+)*(?:st|nd|rd|th|s)?"
                    r"|[^\W\d_]{1,3}(?:[/&][^\W\d_]{1,3})+(?![^\W\d_])"
                    r"|[^\W\d_](?:\.[^\W\d_])+(?![^\W\d_])"
                    r"|[^\W\d_]+(?:['’][^\W\d_]+)*", re.UNICODE)


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


@lru_cache(maxsize=65536)
def _word(raw: str) -> tuple[str, bool, bool]:
    """(norm, is_number, is_stopword) of one word as written."""
    if raw[0].isdigit():
        return _number_norm(raw), True, False
    lowered = raw.lower()
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
