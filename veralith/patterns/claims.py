"""What kind of fact a claim states: a figure, a date, a name. Deterministic, from the words alone.

- **date**: a calendar date written out (`2024-03-12`, `12/03/2024`), a month or weekday name, or a
  year (a four-digit number from 1000 to 2199 standing alone). A number beside a month name is part
  of the date ("12 March").
- **number**: any other figure: digits ("30 days", "$49", "4.5 %"), or a number word ("two").
- **name**: a capitalised word inside the sentence (not its first word, which every sentence
  capitalises), or a product code that mixes letters and digits ("X200"). Month and weekday names
  are dates, not names.

A claim may be several kinds at once ("Northwind raised prices by 5 % in 2024" is all three); one
with none of them is `other`. The words are the offline judge's tokenizer and word lists
(veralith.llm.local.lexicon), so both read a text the same way.
"""

from __future__ import annotations

import re
from functools import lru_cache

from veralith.llm.local.lexicon import MONTHS, STOPWORDS, tokens
from veralith.llm.local.wordlists import words

__all__ = ["KINDS", "claim_kinds"]

KINDS = ("number", "date", "name")   # the order groups of equal size are listed in
_WEEKDAYS = words("weekdays")
_WRITTEN_DATE = re.compile(r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}[/.]\d{1,2}[/.]\d{2,4}\b")
_YEAR = re.compile(r"1\d{3}|2[01]\d{2}")
_CODE = re.compile(r"[^\W\d_]+\d[^\W_]*")


@lru_cache(maxsize=65536)
def claim_kinds(text: str) -> frozenset[str]:
    """The kinds of fact `text` states (a subset of KINDS), empty for none."""
    found: set[str] = set()
    if _WRITTEN_DATE.search(text):
        found.add("date")
        text = _WRITTEN_DATE.sub(" ", text)
    toks = tokens(text)
    months = {i for i, t in enumerate(toks) if _is_month(t.text, t.norm) or t.norm in _WEEKDAYS}
    if months:
        found.add("date")
    for i, t in enumerate(toks):
        if i in months:
            continue
        if t.is_number:
            if t.text[0].isdigit() and _YEAR.fullmatch(t.text) or i - 1 in months or i + 1 in months:
                found.add("date")
            elif t.text.lower() not in STOPWORDS:   # "one of the plans" states no figure
                found.add("number")
        elif _CODE.fullmatch(t.text) or t.is_capital:
            found.add("name")
    return frozenset(found)


def _is_month(raw: str, norm: str) -> bool:
    # "may" is also a verb; only the capitalised word inside a sentence is the month.
    return norm in MONTHS and (norm != "may" or raw[0].isupper())
