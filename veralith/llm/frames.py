"""What the judges are told about time: each chunk's date, and per claim and sub-question the cutoff
from which a chunk can state it as current. Written once, so sufficiency, faithfulness, explain and
the single call hold one standard of "current", and the checks and the stale-claim review
(veralith.llm.stale_check, veralith.llm.temporal) hold the judges to the very cutoffs they were shown.

A cutoff belongs to what asks about now, judged per item, never per query (docs/concepts.md, "Stale
claims"):

* a sub-question has one when its own words ask about the present (words/now_words.txt: "current",
  "latest", "still", "this year", ...);
* a claim has one when its own words or its note do, or, when it names no time of its own, when every
  sub-question asks about now (a single "Who is the current mayor?" makes its answer "X is the mayor"
  about now; "Who founded Orbit and what is its current price?" does not make "Orbit was founded by
  Ana Ruiz" so). A claim that names a past time of its own is judged at that time instead.

The cutoff is the trace's date less VERALITH_STALE_AFTER_DAYS for "now", January 1 for "this year",
the 1st for "this month"; of several, the latest.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from functools import cache

from veralith.llm.dates import fresh_from, metadata_date, parse_label, periods
from veralith.llm.local.lexicon import NOW_WORDS
from veralith.llm.schemas import ChunkIn
from veralith.models import ContextChunk

__all__ = ["asks_now", "chunks_in", "claim_cutoff", "cutoff", "cutoff_reason", "today"]


@cache
def _now_words() -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(r"\b" + r"\s+".join(map(re.escape, words)) + r"\b", re.I), kind)
                 for *words, kind in NOW_WORDS)


def asks_now(text: str) -> set[str]:
    """The periods the words of `text` ask about: "now", "year" (this year), "month" (this month)."""
    return {kind for pattern, kind in _now_words() if pattern.search(text)}


def today(as_of: str | None) -> dt.date | None:
    """The trace's date (its first ten characters as an ISO day), or None."""
    found = parse_label(as_of[:10]) if as_of else None
    return found.start if found is not None and len(found.label) == 10 else None


def cutoff(text: str, as_of: str | None, days: int) -> str | None:
    """The first day a chunk may be dated and still state `text` as current; None when its words ask
    nothing about now, or without a date for today."""
    day = today(as_of)
    kinds = asks_now(text)
    if day is None or not kinds:
        return None
    fresh = dt.date.fromisoformat(fresh_from(day.isoformat(), days) or day.isoformat())
    needs = {"now": fresh, "year": dt.date(day.year, 1, 1), "month": dt.date(day.year, day.month, 1)}
    return max(needs[k] for k in kinds).isoformat()


def claim_cutoff(text: str, note: str | None, sub_questions: Sequence[str], query: str, as_of: str | None,
                 days: int) -> str | None:
    """The claim's cutoff (see the module doc): its own words', else every sub-question's (the query's
    when there are none), unless it names a past time of its own."""
    day = today(as_of)
    if day is None or any(p.end <= day for p in periods(text)):
        return None
    own = cutoff(f"{text} {note or ''}", as_of, days)
    if own is not None:
        return own
    asked = [cutoff(q, as_of, days) for q in sub_questions] or [cutoff(query, as_of, days)]
    return min(c for c in asked if c is not None) if all(asked) else None


def cutoff_reason(cut: str, as_of: str | None) -> str:
    """What a cutoff stands for, in words: "this year", "this month" or "now"."""
    day = today(as_of)
    if day is not None and cut == dt.date(day.year, 1, 1).isoformat():
        return "it asks about this year"
    if day is not None and cut == dt.date(day.year, day.month, 1).isoformat():
        return "it asks about this month"
    return "it asks about now"


def chunks_in(chunks: Sequence[ContextChunk]) -> list[ChunkIn]:
    """The chunks as every judge is shown them: id, text, source and the date their metadata gives."""
    return [ChunkIn(id=c.id, text=c.text, source=c.source, date=_label(c)) for c in chunks]


def _label(chunk: ContextChunk) -> str | None:
    found = metadata_date(chunk.metadata)
    return found.label if found is not None else None
