"""Polarity: negations, exclusions and direction words stated by their negated opposite.

"The gallery is closed on Mondays" and "the gallery is not open on Mondays" state one fact; "is not
open" against "is open" states the opposite. These helpers count the cues and their scope; the
contradiction checks (contradiction.py) and the faithfulness features (grounding.py) use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veralith.llm.local.canonical import Tok
from veralith.llm.local.lexicon import NEGATIONS, STOPWORDS
from veralith.llm.local.synonyms import direction
from veralith.llm.local.wordlists import lines, words

if TYPE_CHECKING:
    from veralith.llm.local.align import Sentence

__all__ = ["EXCLUDING", "antonyms", "negated_opposite", "negations", "opposite_only", "scoped"]

# Cue pairs that negate nothing ("not only", "no doubt").
_NOT_NEGATING = frozenset(lines("not_negating"))
# "valid on all buses except the Airport Express": an exclusion denies what follows it.
EXCLUDING = words("excluding")
# A negation bears on a word among the tokens right after it ("is not open" negates "open").
_SCOPE = 3


def negations(toks: tuple[Tok, ...] | list[Tok]) -> int:
    """How many negation cues `toks` hold (a pair such as "not only" is none)."""
    count = 0
    for i, t in enumerate(toks):
        if t.low in NEGATIONS or t.low.endswith("n't"):
            nxt = toks[i + 1].low if i + 1 < len(toks) else ""
            if (t.low, nxt) not in _NOT_NEGATING:
                count += 1
    return count


def negated_opposite(sent: Sentence, word: str) -> bool:
    """Does `sent` state `word` (a direction word such as "closed") as its opposite under a negation
    ("not open")? Two flips state the same fact, as the direction check also reads them."""
    return sent.negations() % 2 == 1 and opposite_only(word, sent.toks)


def opposite_only(word: str, toks: tuple[Tok, ...]) -> bool:
    """Do `toks` use the opposite of direction word `word` ("open" for "closed"), and not `word`'s own side?"""
    found = direction(word)
    if found is None:
        return False
    sides = {d[1] for t in toks if (d := direction(t.low)) is not None and d[0] == found[0]}
    return sides == {1 - found[1]}


def scoped(toks: tuple[Tok, ...], shared: set[str]) -> int:
    """Negations that bear on a shared word: one of the three tokens after the cue is shared
    ("is not open" negates "open"; "aren't swayed and will seek" does not negate "seek")."""
    count = 0
    for i, t in enumerate(toks):
        cue = t.low in NEGATIONS or t.low.endswith("n't") or t.low in EXCLUDING
        if cue and (t.low, toks[i + 1].low if i + 1 < len(toks) else "") not in _NOT_NEGATING \
                and any(u.norm in shared for u in toks[i + 1:i + 1 + _SCOPE] if u.low not in STOPWORDS):
            count += 1
    return count


def antonyms(toks: tuple[Tok, ...], other: tuple[Tok, ...]) -> int:
    """How many of `toks`' direction words `other` states only by their opposite ("closed" / "open")."""
    return sum(1 for t in toks if opposite_only(t.low, other))


