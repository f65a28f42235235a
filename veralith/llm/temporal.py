"""Stale claims: a verdict of the faithfulness judge checked against the dates it rests on.

Deterministic and shared by both backends: veralith.pipeline.judges.faithfulness runs `review` on every
item the local judge or an LLM returns, so a model that missed the dates is corrected the same way the
offline judge is. An LLM may also answer `stale` itself: veralith.llm.stale_check holds that verdict
to the same cutoff and the same claim's own time before it is ever used, so no stale verdict passes
that these rules would not give.

A claim the judge found `supported` or `conflicting` is reviewed by three rules (docs/concepts.md,
"Stale claims"); a chunk's age is the period its evidence sentence is scoped to ("In 2019, ...";
for a chunk named without a quote, the one period all its scoped sentences agree on), else
the date the chunk says it was written ("Updated: 2019-03-01"), else its metadata date
(veralith.llm.dates). An undated chunk is never stale: unknown is not old.

1. About now. The claim has a cutoff (veralith.llm.frames: its own words or note ask about the present
   ("current", "latest", "still", "this year", ...), or every sub-question does, and it names no date of
   its own): the trace's date less VERALITH_STALE_AFTER_DAYS, "this year": January 1, "this month": the
   1st. Every chunk grounding it dated before its cutoff makes it `stale`. A claim about something else
   the same query asks ("Who founded Orbit and what is its current price?": its founder) has none.
2. A date of the claim's own (a past period). Every grounding chunk dated before that period began,
   none of which mentions the period, makes it `stale`: a chunk cannot report a time after it was
   written. (A chunk that mentions the period speaks of it, as a plan or a forecast does.)
3. Superseded. A `conflicting` claim (a chunk states it, another contradicts it) whose chunks are all
   dated: if the claim (or else the question) names a period its supporting chunks speak of and its
   contradicting ones do not, the two speak of different times and it is `supported`. Otherwise, if
   every supporting chunk predates every contradicting one, a later chunk changed it: `stale`; if every
   supporting chunk is later, it says what the latest chunk says: `supported`.

A changed verdict keeps the judge's evidence, gains the dates as `dates` evidence, and its reasoning
says which rule applied and with which dates.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from veralith.llm.dates import Period, parse_label, periods, scope, written
from veralith.llm.frames import asks_now, cutoff_reason
from veralith.llm.schemas import ChunkIn, ClaimIn, DateEvidence, FaithfulnessInput, FaithfulnessItem
from veralith.llm.text import quote_in, sentence_spans

__all__ = ["asks_now", "review"]


@dataclass(frozen=True)
class _Age:
    period: Period
    quote: str          # the chunk's words that give it; "" when its metadata date does


@lru_cache(maxsize=4096)
def _split(text: str) -> tuple[str, ...]:
    # Cached: a chunk is read again for every quote of every claim it grounds.
    return tuple(text[a:b] for a, b in sentence_spans(text))


def _sentences(text: str, quote: str) -> list[str]:
    """The sentences of `text` the quote is in: a judge may quote part of a sentence whose opening
    ("In 2019, ...") dates it. The quote itself when it spans sentences or is not found."""
    found = [s for s in _split(text) if quote_in(quote, s)]
    return found or [quote]


def _age(chunk: ChunkIn, quotes: list[str]) -> _Age | None:
    scoped = [found for q in quotes for s in _sentences(chunk.text, q) if (found := scope(s)) is not None]
    if not quotes:   # named without a quote: dated by its sentences' scope only when they all agree
        every = [found for s in _split(chunk.text) if (found := scope(s)) is not None]
        scoped = every if len({p.label for p, _ in every}) == 1 else []
    if scoped:
        period, words = max(scoped, key=lambda s: s[0].end)
        return _Age(period, words)
    dating = written(chunk.text)
    if dating is not None:
        return _Age(*dating)
    given = parse_label(chunk.date) if chunk.date else None
    return _Age(given, "") if given is not None else None


def _dated(ages: dict[str, _Age], ids: list[str], singular: str = "", plural: str = "") -> str:
    """"c0 (2019), c1 (2020)", then the verb that agrees with them, if given."""
    verb = (singular if len(ids) == 1 else plural) if singular else ""
    return ", ".join(f"{c} ({ages[c].period.label})" for c in ids) + (f" {verb}" if verb else "")


def review(item: FaithfulnessItem, claim: ClaimIn, payload: FaithfulnessInput) -> FaithfulnessItem | None:
    """The item as the dates decide it, or None when they change nothing (see the module doc)."""
    today = parse_label(payload.as_of[:10]) if payload.as_of else None
    if item.relation not in ("supported", "conflicting") or today is None:
        return None
    chunks = {c.id: c for c in payload.chunks}
    named = [c for c in dict.fromkeys(item.grounding_chunk_ids + item.contradicting_chunk_ids) if c in chunks]
    ages: dict[str, _Age] = {}
    for cid in named:
        age = _age(chunks[cid], [e.quote for e in item.evidence if e.chunk_id == cid])
        if age is not None:
            ages[cid] = age
    grounding = item.grounding_chunk_ids
    if not grounding or any(c not in ages for c in grounding):
        return None
    own = [p for p in periods(claim.text) if p.end <= today.end]   # a future period is a plan, not an age
    if item.relation == "conflicting":
        return _conflict(item, ages, own or list(periods(payload.query)))
    if own:
        start = min(p.start for p in own)
        if all(ages[c].period.end < start and not any(p.overlaps(o) for p in periods(chunks[c].text) for o in own)
               for c in grounding):
            return _changed(item, "stale", ages, grounding, f"Stale: {_dated(ages, grounding, 'predates', 'predate')} "
                            f"{', '.join(p.label for p in own)}, the time the claim speaks of.")
        return None
    need = parse_label(claim.cutoff) if claim.cutoff else None
    if need is None:
        return None
    if all(ages[c].period.end < need.start for c in grounding):
        return _changed(item, "stale", ages, grounding, f"Stale: {_dated(ages, grounding, 'is', 'are')} "
                        f"older than the question allows ({cutoff_reason(claim.cutoff or '', payload.as_of)}, as of "
                        f"{today.label}: chunks from {need.label} on).")
    return None


def _conflict(item: FaithfulnessItem, ages: dict[str, _Age], frame: list[Period]) -> FaithfulnessItem | None:
    grounding, against = item.grounding_chunk_ids, item.contradicting_chunk_ids
    if not against or any(c not in ages for c in against):
        return None
    if frame:
        speaks = all(any(ages[g].period.overlaps(f) for f in frame) for g in grounding)
        if speaks and not any(ages[x].period.overlaps(f) for x in against for f in frame):
            return _changed(item, "supported", ages, grounding + against, (
                f"Supported for {', '.join(f.label for f in frame)}: "
                f"{_dated(ages, grounding, 'speaks', 'speak')} of that time, "
                f"{_dated(ages, against)} of another, so they do not conflict."))
        return None
    if all(ages[g].period.before(ages[x].period) for g in grounding for x in against):
        return _changed(item, "stale", ages, grounding + against, (
            f"Stale: {_dated(ages, grounding, 'states', 'state')} it, but the later "
            f"{_dated(ages, against, 'says', 'say')} otherwise."))
    if all(ages[x].period.before(ages[g].period) for g in grounding for x in against):
        return _changed(item, "supported", ages, grounding + against, (
            f"Supported: {_dated(ages, grounding, 'is', 'are')} later than {_dated(ages, against)}, which said "
            "otherwise."))
    return None


def _changed(item: FaithfulnessItem, relation: str, ages: dict[str, _Age], ids: list[str],
             why: str) -> FaithfulnessItem:
    dates = [DateEvidence(chunk_id=c, date=ages[c].period.label, quote=ages[c].quote) for c in dict.fromkeys(ids)]
    against = item.contradicting_chunk_ids if relation == "stale" else []
    return item.model_copy(update={"relation": relation, "dates": dates, "contradicting_chunk_ids": list(against),
                                   "reasoning": f"{why} Read without the dates: {item.reasoning}"})
