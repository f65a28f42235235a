"""A small hand-made table of general English equivalences for matching a claim to its source.

Paraphrase keeps meaning while changing words: "bought" for "purchased", "begin" for "start",
"physician" for "doctor", "colour" for "color". Each group (a line of words/synonyms.txt) is one
meaning; every word in it is matched as its first word. The table is general knowledge of English
(irregular verb forms, British/American spelling, everyday synonyms), chosen to be safe: no group
joins words that a careful reader would call different facts (so no "large"/"huge", no "city"/"town").

Also here: direction words whose swap reverses a comparison ("more"/"less", "before"/"after"),
used by the contradiction checks.
"""

from __future__ import annotations

from functools import lru_cache

from veralith.llm.local.lexicon import stem
from veralith.llm.local.wordlists import lines

__all__ = ["DIRECTIONS", "canon", "direction"]


@lru_cache(maxsize=1)
def _table() -> dict[str, str]:
    """Stem -> canonical stem. Each line of words/synonyms.txt is one meaning, its first word the
    canonical form; a word listed twice keeps its first group, and a line whose first word is
    already listed joins that word's group."""
    table: dict[str, str] = {}
    for line in lines("synonyms"):
        words = [w.replace("_", " ") for w in line]
        if len(words) < 2:
            continue
        head = table.get(stem(words[0]), stem(words[0]))
        for word in words:
            if " " in word:
                continue  # multi-word forms are listed for the reader; matching is per word
            table.setdefault(stem(word), head)
    return table


_CANON = _table()


def canon(norm: str) -> str:
    """The canonical stem of a stemmed word (itself when it has no listed synonym)."""
    return _CANON.get(norm, norm)


@lru_cache(maxsize=1)
def _directions() -> dict[str, tuple[int, int]]:
    """Word -> (pair id, side), from words/directions.txt. A claim that says one side where its
    source, in the same place, says the other reverses the fact."""
    table: dict[str, tuple[int, int]] = {}
    for pair_id, words in enumerate(lines("directions")):
        # The first word is one side; every other word on the line is the opposite side.
        table.setdefault(words[0], (pair_id, 0))
        for word in words[1:]:
            table.setdefault(word, (pair_id, 1))
    return table


DIRECTIONS = frozenset(_directions())


def direction(word: str) -> tuple[int, int] | None:
    """(pair id, side) of a lowercase word that states a direction or comparison, else None."""
    return _directions().get(word)
