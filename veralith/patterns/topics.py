"""Topics retrieval keeps failing: the sub-questions of failing traces whose context did not suffice,
clustered by the salient words they share. Deterministic: the same rows give the same topics.

A sub-question's *terms* are its content words as the offline judge reads them (its tokenizer,
stems and stop words, veralith.llm.local.lexicon), without figures and without the generic words
of its word lists ("way", "use", "thing"). A term is *salient* when retrieval misses sub-questions
that use it clearly more often than it misses sub-questions in general: among the judged
sub-questions sampled from the same scope, at least LIFT times the overall miss rate (and at least
MIN_RATE), or it is too rare in the sample (fewer than MIN_SEEN uses) to tell. A term used by more
than 1/LIFT of the sampled sub-questions is never salient: its miss rate cannot reach LIFT times the
overall one (the overall rate counts its own misses), and in a sample too small to measure rates
such a word is no rarity either. So words every question uses ("account", "order", "case") make no
topic, however often they occur, and they do not complete a topic's label either.

Clustering is greedy: the salient term shared by the most failing traces seeds a topic, which takes
every remaining trace that has a missed sub-question with that term; the words most of those
sub-questions share (COMPANION_SHARE of them) complete the topic's label. Then the next term, over
the traces left, until no salient term is shared by `min_traces` traces. Each trace belongs to one
topic at most, so topics never count a trace twice.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from veralith.llm.local.lexicon import GENERIC, WH_WORDS, content_terms

__all__ = ["Topic", "cluster", "terms"]

LIFT = 2.0
MIN_RATE = 0.2
MIN_SEEN = 5
COMPANION_SHARE = 0.6
MAX_COMPANIONS = 3


@dataclass(frozen=True)
class Topic:
    words: tuple[str, ...]           # the seed first, then its companions, as most often written
    trace_ids: tuple[int, ...]       # the failing traces it explains, newest (highest id) first
    sub_questions: dict[int, str]    # trace id -> the id of its missed sub-question with the seed
    n_sub_questions: int             # missed sub-questions of those traces that use the seed
    miss_rate: float | None          # of the seed among the sampled sub-questions (None: too rare there)
    base_rate: float | None          # of all sampled sub-questions (None: no sample)


@lru_cache(maxsize=65536)
def terms(text: str) -> dict[str, str]:
    """The terms of a sub-question: {stem: the word as written, lower-cased}."""
    out: dict[str, str] = {}
    for t in content_terms(text):
        word = t.text.lower()
        if t.is_number or len(t.norm) < 3 or word in GENERIC or t.norm in GENERIC or word in WH_WORDS:
            continue
        out.setdefault(t.norm, word)
    return out


def cluster(missed: Sequence[tuple[int, str, str]], judged: Iterable[tuple[bool, str]], *,
            min_traces: int = 2) -> list[Topic]:
    """Topics over `missed` (trace id, sub-question id, text: missed sub-questions of failing
    traces), with `judged` (sufficient, text: a sample of the scope's sub-questions) as the
    baseline; largest first (ties: by word)."""
    seen, misses, total, total_misses = Counter[str](), Counter[str](), 0, 0
    for sufficient, text in judged:
        total += 1
        total_misses += not sufficient
        for term in terms(text):
            seen[term] += 1
            misses[term] += not sufficient
    base = total_misses / total if total else None
    bar = max(MIN_RATE, min(0.9, LIFT * base)) if base is not None else 0.0

    def common(term: str) -> bool:
        return total > 0 and seen[term] * LIFT > total

    def salient(term: str) -> bool:
        return not common(term) and (seen[term] < MIN_SEEN or misses[term] / seen[term] >= bar)

    by_trace: dict[int, list[tuple[str, dict[str, str]]]] = {}
    for trace_id, sq_id, text in missed:
        by_trace.setdefault(trace_id, []).append((sq_id, terms(text)))
    having: dict[str, set[int]] = {}
    for trace_id, questions in by_trace.items():
        for term in {term for _, found in questions for term in found}:
            having.setdefault(term, set()).add(trace_id)
    # Largest first; a term whose count went down since it was pushed is pushed again with its count.
    heap = [(-len(ids), term) for term, ids in having.items() if len(ids) >= min_traces and salient(term)]
    heapq.heapify(heap)
    left = set(by_trace)
    topics: list[Topic] = []
    while heap:
        count, seed = heapq.heappop(heap)
        members = having[seed] & left
        if len(members) < min_traces:
            continue
        if len(members) < -count:
            heapq.heappush(heap, (-len(members), seed))
            continue
        topics.append(_topic(seed, members, by_trace, seen, misses, base, common))
        left -= members
    return topics


def _topic(seed: str, members: set[int], by_trace: dict[int, list[tuple[str, dict[str, str]]]],
           seen: Counter[str], misses: Counter[str], base: float | None, common: Callable[[str], bool]) -> Topic:
    written: dict[str, Counter[str]] = {}
    shared: Counter[str] = Counter()
    chosen: dict[int, str] = {}
    n_questions = 0
    for trace_id in members:
        for sq_id, found in by_trace[trace_id]:
            if seed not in found:
                continue
            n_questions += 1
            chosen.setdefault(trace_id, sq_id)
            shared.update(found.keys())
            for term, word in found.items():
                written.setdefault(term, Counter())[word] += 1
    companions = sorted((t for t, n in shared.items()
                         if t != seed and n >= COMPANION_SHARE * n_questions and not common(t)),
                        key=lambda t: (-shared[t], t))[:MAX_COMPANIONS]

    def spelt(term: str) -> str:
        return min(written[term].items(), key=lambda kv: (-kv[1], kv[0]))[0]

    rate = misses[seed] / seen[seed] if seen[seed] >= MIN_SEEN else None
    return Topic(words=tuple(spelt(t) for t in (seed, *companions)), trace_ids=tuple(sorted(members, reverse=True)),
                 sub_questions=chosen, n_sub_questions=n_questions, miss_rate=rate, base_rate=base)
