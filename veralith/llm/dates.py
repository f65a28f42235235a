"""Dates written in text and metadata, as periods: the one place Veralith reads a date.

A date is read as the period it names: "2019" is the whole year, "March 2019" the month, "Q3 2019"
the quarter, "2019-03-14" or "14 March 2019" the day, "2019-2021" the years from one to the other.
Only years 1900-2099 are read, and a bare number is a year only where it stands alone (not "$2019",
"2019%" or "3.2019"); an impossible date ("2019-02-30") is no date at all.

Three readings build on `periods`:

* `scope(sentence)`: the period a sentence's fact belongs to, when the sentence says so: a date at its
  start ("In 2019, ...", "As of March 2019 ...", "2019: ..."), at its end after a time preposition
  ("... was 1.5% in 2019."), or after "as of" / "as at" anywhere. "Since 2019" is not a scope (the
  fact runs on to the time of writing), nor is a date in the middle of a sentence ("founded in 1947,
  it has 500 staff"), which usually dates another fact.
* `written(text)`: when a chunk was written, from a dating line in it ("Updated: 2019-03-01", "last
  revised 4 May 2021", "Published March 2019"); the latest such line.
* `metadata_date(metadata)`: a chunk's date from its metadata (DATE_KEYS, first that reads).

Labels (`Period.label`, `parse_label`) are ISO at the period's precision: "2019", "2019-Q3",
"2019-03", "2019-03-14", and "2019..2021" for a span of years.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from veralith.llm.text import quote_span

__all__ = ["DATE_KEYS", "Period", "fresh_from", "metadata_date", "parse_label", "periods", "quoted_periods", "scope",
           "written"]

# Metadata keys read for a chunk's date, most telling first: a revision date beats a creation date.
DATE_KEYS = ("as_of", "last_updated", "updated", "updated_at", "last_modified", "modified", "date", "published",
             "published_at", "publication_date", "created", "created_at", "timestamp", "year")


@dataclass(frozen=True)
class Period:
    start: dt.date
    end: dt.date        # inclusive
    label: str          # ISO at the period's precision (see the module doc)
    at: int = 0         # where its text starts in the text it was read from
    until: int = 0      # where it ends (exclusive)

    def before(self, other: Period) -> bool:
        """Wholly before `other` begins."""
        return self.end < other.start

    def overlaps(self, other: Period) -> bool:
        return self.start <= other.end and other.start <= self.end


_MONTHS = {name: n for n, names in enumerate((
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
    ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
    ("december", "dec")), 1) for name in names}
_MONTH = r"(?P<{0}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<{0}>(?:19|20)\d\d)"
_DAY = r"(?P<{0}>[0-3]?\d)(?:st|nd|rd|th)?"
_ALONE = r"(?<![\w$€£#.,/-])"      # not glued to a word, a currency sign, a decimal or another date
_END = r"(?![\w%/]|[.,]\d|-\d)"   # not followed by a word, a percent sign, a decimal or a range
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4}

_PATTERNS = [
    ("day", re.compile(_ALONE + _YEAR.format("y") + r"[-/](?P<m>[01]\d)[-/]" + _DAY.format("d") + r"(?![\d/])"
                       + r"(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?")),
    ("day", re.compile(r"\b" + _DAY.format("d") + r"\s+" + _MONTH.format("mn") + r",?\s+" + _YEAR.format("y")
                       + _END, re.I)),
    ("day", re.compile(r"\b" + _MONTH.format("mn") + r"\s+" + _DAY.format("d") + r",?\s+" + _YEAR.format("y")
                       + _END, re.I)),
    ("quarter", re.compile(r"\b(?:Q(?P<q>[1-4])|(?P<qw>first|second|third|fourth) quarter(?: of)?),?\s*"
                           + _YEAR.format("y") + _END, re.I)),
    ("month", re.compile(r"\b" + _MONTH.format("mn") + r",?\s+(?:of\s+)?" + _YEAR.format("y") + _END, re.I)),
    ("month", re.compile(_ALONE + _YEAR.format("y") + r"-(?P<m>[01]\d)(?![\d-])")),
    ("span", re.compile(_ALONE + _YEAR.format("y") + r"\s*(?:-|–|—|to|until|through)\s*(?P<y2>(?:19|20)?\d\d)"
                        + _END, re.I)),
    ("year", re.compile(_ALONE + r"(?:(?:FY|fiscal(?:\s+year)?)\s*)?" + _YEAR.format("y") + _END, re.I)),
]


def _period(kind: str, m: re.Match[str]) -> Period | None:
    year = int(m.group("y"))
    try:
        if kind == "day":
            month = int(m.group("m")) if "m" in m.groupdict() and m.group("m") else _MONTHS[m.group("mn").lower()]
            day = dt.date(year, month, int(m.group("d")))
            return Period(day, day, day.isoformat(), m.start(), m.end())
        if kind == "month":
            month = int(m.group("m")) if "m" in m.groupdict() and m.group("m") else _MONTHS[m.group("mn").lower()]
            last = calendar.monthrange(year, month)[1]
            return Period(dt.date(year, month, 1), dt.date(year, month, last), f"{year}-{month:02d}", m.start(),
                          m.end())
        if kind == "quarter":
            q = int(m.group("q")) if m.group("q") else _ORDINALS[m.group("qw").lower()]
            first = 3 * q - 2
            last = calendar.monthrange(year, first + 2)[1]
            return Period(dt.date(year, first, 1), dt.date(year, first + 2, last), f"{year}-Q{q}", m.start(), m.end())
        if kind == "span":
            y2 = m.group("y2")
            to = int(y2) if len(y2) == 4 else year // 100 * 100 + int(y2)
            if to <= year:
                return None   # "2019-12" is a month, "2019-05" too: not a span
            return Period(dt.date(year, 1, 1), dt.date(to, 12, 31), f"{year}..{to}", m.start(), m.end())
        return Period(dt.date(year, 1, 1), dt.date(year, 12, 31), str(year), m.start(), m.end())
    except (ValueError, KeyError):   # 2019-02-30, month 13: not a date
        return None


@lru_cache(maxsize=8192)
def periods(text: str) -> tuple[Period, ...]:
    """Every date written in `text`, in order; where two readings overlap, the longer (more precise) one."""
    found: list[Period] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            if any(m.start() < b and a < m.end() for a, b in taken):
                continue
            p = _period(kind, m)
            if p is not None:
                found.append(p)
                taken.append((m.start(), m.end()))
    return tuple(sorted(found, key=lambda p: p.at))


def quoted_periods(quote: str, text: str) -> tuple[Period, ...] | None:
    """The dates `text` writes inside the span `quote` is of it (veralith.llm.text.quote_span), read in
    `text` itself: a year glued to a phone number there ("555-2031") is no date, whatever the quote
    alone would look like. None when `quote` is not one span of `text`."""
    span = quote_span(quote, text)
    if span is None:
        return None
    start, end = span
    return tuple(p for p in periods(text) if start <= p.at and p.until <= end)


_LABEL = re.compile(r"(?P<y>(?:19|20)\d\d)"
                    r"(?:-Q(?P<q>[1-4])|-(?P<m>[01]\d)(?:-(?P<d>[0-3]\d))?|\.\.(?P<y2>(?:19|20)\d\d))?")


def parse_label(label: str) -> Period | None:
    """The period of an ISO label ("2019", "2019-Q3", "2019-03", "2019-03-14", "2019..2021"), or None."""
    m = _LABEL.fullmatch(label.strip())
    if m is None:
        return None
    year = int(m.group("y"))
    try:
        if m.group("d"):
            day = dt.date(year, int(m.group("m")), int(m.group("d")))
            return Period(day, day, day.isoformat())
        if m.group("m"):
            month = int(m.group("m"))
            return Period(dt.date(year, month, 1), dt.date(year, month, calendar.monthrange(year, month)[1]),
                          f"{year}-{month:02d}")
        if m.group("q"):
            q = int(m.group("q"))
            end = 3 * q
            return Period(dt.date(year, end - 2, 1), dt.date(year, end, calendar.monthrange(year, end)[1]),
                          f"{year}-Q{q}")
        if m.group("y2"):
            to = int(m.group("y2"))
            return Period(dt.date(year, 1, 1), dt.date(to, 12, 31), f"{year}..{to}") if to > year else None
        return Period(dt.date(year, 1, 1), dt.date(year, 12, 31), str(year))
    except ValueError:
        return None


# A time preposition before a date that scopes the sentence it ends ("... in 2019.").
_BEFORE_END = re.compile(r"(?:\b(?:in|on|during|for|by|throughout|as of|as at|at the end of|by the end of|end of|"
                         r"in fiscal(?: year)?|for fiscal(?: year)?|of)\s*|\()$", re.I)
# What may stand before a date that opens a sentence: nothing, or a preposition ("In", "As of", ...).
_OPENING = re.compile(r"^[\W_]*(?:(?:in|on|during|by|throughout|for|as of|as at|at the end of|by the end of|"
                      r"end of|in fiscal(?: year)?|fiscal(?: year)?|from)\s+(?:the\s+)?)?$", re.I)
_AS_OF = re.compile(r"\bas (?:of|at)\s*$", re.I)
_CLOSING = re.compile(r"^[\s)\]\"'”’.!?;:]*$")


def scope(sentence: str) -> tuple[Period, str] | None:
    """The period the sentence's fact belongs to and the words that say so (verbatim), or None."""
    for p in periods(sentence):
        before, after = sentence[:p.at], sentence[p.until:]
        if _OPENING.match(before):
            start = len(before) - len(before.lstrip(" \t\"'“(["))
        else:
            window = max(0, p.at - 24)
            lead = _AS_OF.search(sentence, window, p.at)
            if lead is None and _CLOSING.match(after):
                lead = _BEFORE_END.search(sentence, window, p.at)
            if lead is None:
                continue
            start = lead.start()
        return p, sentence[start:p.until].strip()
    return None


_DATING = re.compile(r"\b(?:last\s+)?(?:updated|revised|published|posted|dated|released|modified|reviewed|"
                     r"issued|effective)(?:\s+(?:on|in|as of))?\s*[:\-–]?\s*$", re.I)


@lru_cache(maxsize=4096)
def written(text: str) -> tuple[Period, str] | None:
    """When the text says it was written or revised (the latest such line), with its words, or None."""
    best: tuple[Period, str] | None = None
    for p in periods(text):
        window = max(0, p.at - 40)
        lead = _DATING.search(text, window, p.at)
        if lead is not None and (best is None or best[0].end < p.end):
            best = (p, text[lead.start():p.until].strip())
    return best


def metadata_date(metadata: Mapping[str, Any]) -> Period | None:
    """A chunk's date from its metadata: the first of DATE_KEYS holding one date (ISO text, a
    datetime's ISO text, or a year as a number)."""
    for key in DATE_KEYS:
        value = metadata.get(key)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (dt.date, dt.datetime)):
            value = value.isoformat()
        if isinstance(value, int):
            value = str(value)
        if not isinstance(value, str):
            continue
        found = periods(value.strip())
        if len(found) == 1:
            return Period(found[0].start, found[0].end, found[0].label)
    return None


def fresh_from(as_of: str | None, days: int) -> str | None:
    """The oldest date a chunk may carry and still answer a question about now: `as_of` less `days`
    (VERALITH_STALE_AFTER_DAYS); None without a date."""
    if not as_of:
        return None
    try:
        today = dt.date.fromisoformat(as_of[:10])
    except ValueError:
        return None
    return (today - dt.timedelta(days=days)).isoformat()
