"""The dates in a faithfulness item, checked: what a `stale` verdict must show to be used.

A claim is stale when a chunk states it but only a chunk too old for the question (the question or
claim asks about now, or the claim names a period the chunk predates), or a later chunk changed it
(docs/concepts.md, "Stale claims"). The judge names, in `dates`, the date of every chunk it relies on,
each with the chunk's words that give it (or none, when the chunk's `date` attribute gives it).

Checked here, for any item: each date is a real ISO label, its chunk exists, and its quote is in the
chunk and names that date. For a `stale` item also: every chunk it names (grounding: the old ones that
state it; contradicting: the later ones that change it) is dated, each changing chunk is later than
each old one, and without a changing chunk the old ones end before the trace's date. Whether a chunk is
old *enough* is the judge's call: the window it was given (`fresh_from`) is not enforced here, since a
"this year" question moves it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veralith.llm.dates import Period, parse_label, periods
from veralith.llm.text import quote_in

if TYPE_CHECKING:
    from veralith.llm.tasks import FaithfulnessInput, FaithfulnessItem

__all__ = ["stale_problems"]


def stale_problems(owner: str, item: FaithfulnessItem, inp: FaithfulnessInput) -> list[tuple[str | None, str]]:
    """The problems of the item's dates (and, for `stale`, of the verdict they must support), each owned by it."""
    chunks = {c.id: c for c in inp.chunks}
    problems: list[tuple[str | None, str]] = []
    dated: dict[str, Period] = {}
    for d in item.dates:
        chunk = chunks.get(d.chunk_id)
        period = parse_label(d.date)
        if chunk is None:
            problems.append((owner, f"dates of {owner} name chunk {d.chunk_id!r}, which does not exist; use only the "
                                    "ids given"))
            continue
        if period is None:
            problems.append((owner, f"date {d.date!r} of {owner} is not an ISO date (YYYY, YYYY-Qn, YYYY-MM or "
                                    "YYYY-MM-DD)"))
            continue
        if d.quote.strip():
            if not quote_in(d.quote, chunk.text):
                problems.append((owner, f"the date quote of {owner} is not in chunk {d.chunk_id}; copy it verbatim"))
                continue
            if not any(p.overlaps(period) for p in periods(d.quote)):
                problems.append((owner, f"the date quote of {owner} for chunk {d.chunk_id} does not name {d.date}"))
                continue
        else:
            given = parse_label(chunk.date) if chunk.date else None
            if given is None or not given.overlaps(period):
                problems.append((owner, f"date {d.date} of {owner} for chunk {d.chunk_id} has no quote, and the "
                                        "chunk's date attribute does not give it; quote the words that date it"))
                continue
        if d.chunk_id not in dated or dated[d.chunk_id].end < period.end:
            dated[d.chunk_id] = period
    if item.relation != "stale":
        return problems
    old, newer = list(item.grounding_chunk_ids), list(item.contradicting_chunk_ids)
    undated = [c for c in dict.fromkeys(old + newer) if c in chunks and c not in dated]
    if undated:
        problems.append((owner, f"{owner} is 'stale' but gives no date for chunk(s) {', '.join(undated)}; date "
                                "every chunk it names"))
        return problems
    if newer:
        if not all(dated[g].before(dated[n]) for g in old if g in dated for n in newer if n in dated):
            problems.append((owner, f"{owner} is 'stale' but not every contradicting chunk is later than every "
                                    "grounding chunk; a claim is stale when a later chunk changes it"))
        return problems
    day = inp.as_of[:10] if inp.as_of else ""
    today = parse_label(day) if day else None
    if today is None:
        problems.append((owner, f"{owner} is 'stale' with no later chunk and no date for today; judge it "
                                "'supported' or 'unsupported'"))
    elif not all(dated[g].end < today.start for g in old if g in dated):
        problems.append((owner, f"{owner} is 'stale' but a grounding chunk is not older than today ({day})"))
    return problems
