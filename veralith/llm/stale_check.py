"""The dates in a faithfulness item, checked: what a `stale` verdict must show to be used.

A claim is stale when a chunk states it but only chunks too old for it state it, or a later chunk
changed it (docs/concepts.md, "Stale claims"). The judge names, in `dates`, the date of every chunk a
stale verdict relies on, each with the chunk's words that give it (or none, when the chunk's `date`
attribute gives it); any other verdict lists no dates.

Checked here, per claim, against what the judge was shown (veralith.llm.frames): each date is an ISO
label, its chunk exists, and its quote is one span of the chunk that writes exactly that date inside
it (veralith.llm.dates.quoted_periods), or the chunk's date attribute gives it. A stale item dates
every chunk it names; each changing chunk is wholly later than each old one; without a changing chunk
every old one ends before the claim's cutoff, or before the time the claim names, and a claim with
neither (a timeless one) is never stale without a changing chunk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veralith.llm import rules as r
from veralith.llm.dates import Period, parse_label, periods, quoted_periods
from veralith.llm.frames import today
from veralith.llm.rules import Problem
from veralith.llm.text import QUOTE_MAX_WORDS, word_count

if TYPE_CHECKING:
    from veralith.llm.schemas import ChunkIn, ClaimIn, DateEvidence, FaithfulnessInput, FaithfulnessItem

__all__ = ["stale_problems"]


def stale_problems(owner: str, item: FaithfulnessItem, claim: ClaimIn | None,
                   inp: FaithfulnessInput) -> list[Problem]:
    """The problems of the item's dates and, for `stale`, of the verdict they must support."""
    if item.relation != "stale":
        return [r.DATES_ONLY_STALE(owner, relation=item.relation)] if item.dates else []
    chunks = {c.id: c for c in inp.chunks}
    problems: list[Problem] = []
    dated: dict[str, Period] = {}
    for d in item.dates:
        found = _date_of(owner, d, chunks.get(d.chunk_id), problems)
        if found is not None and (d.chunk_id not in dated or dated[d.chunk_id].end < found.end):
            dated[d.chunk_id] = found
    if problems:
        return problems
    old, newer = list(item.grounding_chunk_ids), list(item.contradicting_chunk_ids)
    undated = [c for c in dict.fromkeys(old + newer) if c in chunks and c not in dated]
    if undated:
        return [r.STALE_UNDATED(owner, chunks=undated)]
    if newer:
        return [r.STALE_NOT_LATER(owner, newer=n, newer_date=dated[n].label, older=g, older_date=dated[g].label)
                for g in old if g in dated for n in newer if n in dated and not dated[g].before(dated[n])][:1]
    return _old_enough(owner, [(g, dated[g]) for g in old if g in dated], claim, inp)


def _date_of(owner: str, d: DateEvidence, chunk: ChunkIn | None, problems: list[Problem]) -> Period | None:
    """The period one date names, or None with its problem added."""
    if chunk is None:
        problems.append(r.KNOWN_IDS(owner, what="dates", ids=[d.chunk_id]))
        return None
    period = parse_label(d.date)
    if period is None:
        problems.append(r.DATE_ISO(owner, date=d.date))
        return None
    quote = d.quote.strip()
    given = parse_label(chunk.date) if chunk.date else None
    if quote and given is not None and quote == (chunk.date or "").strip():
        quote = ""   # the date attribute's own value: the attribute gives it
    if not quote:
        if given is None or given.label != period.label:
            problems.append(r.DATE_ATTRIBUTE(owner, date=d.date, chunk=d.chunk_id, given=given.label if given else
                                             "absent"))
            return None
        return period
    n = word_count(quote)
    if n > QUOTE_MAX_WORDS:
        problems.append(r.QUOTE_LONG(owner, what=f"the date quote of {owner}", n=n))
        return None
    found = quoted_periods(quote, chunk.text)
    if found is None:
        problems.append(r.QUOTE_SPAN(owner, what=f"the date quote of {owner}", source=f"chunk {d.chunk_id}"))
        return None
    if not any(p.label == period.label for p in found):
        says = f"writes {', '.join(p.label for p in found)}" if found else "holds no date"
        problems.append(r.DATE_IN_QUOTE(owner, chunk=d.chunk_id, says=says, date=d.date))
        return None
    return period


def _old_enough(owner: str, old: list[tuple[str, Period]], claim: ClaimIn | None,
                inp: FaithfulnessInput) -> list[Problem]:
    """A stale item with no changing chunk: every old chunk before the claim's cutoff or its own time."""
    day = today(inp.as_of)
    own = [p for p in periods(claim.text) if day is None or p.end <= day] if claim is not None else []
    if own:
        start = min(p.start for p in own)
        late = [(c, p) for c, p in old if p.end >= start]
        return [r.STALE_NOT_BEFORE_TIME(owner, chunk=c, date=p.label, period=", ".join(o.label for o in own))
                for c, p in late[:1]]
    cut = parse_label(claim.cutoff) if claim is not None and claim.cutoff else None
    if cut is None:
        return [r.STALE_TIMELESS(owner)]
    return [r.STALE_NOT_BEFORE_CUTOFF(owner, chunk=c, date=p.label, cutoff=cut.label)
            for c, p in old if p.end >= cut.start][:1]
