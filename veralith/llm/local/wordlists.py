"""The offline judges' word lists, read from the data files in `words/` (shipped as package data).

A file opens with comment lines (`#`) that say what the list is, where it comes from and, for a
table, how an entry is written. The rest is words separated by white space (`words`), or one entry
per line (`lines`, `table`). Every list is general English, written by hand; none comes from a
dataset. Files are read once per process.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["lines", "table", "words"]


@cache
def lines(name: str) -> tuple[tuple[str, ...], ...]:
    """The entries of `words/<name>.txt`, one tuple of words per non-comment line, in file order."""
    text = resources.files(__package__).joinpath("words").joinpath(f"{name}.txt").read_text(encoding="utf-8")
    return tuple(tuple(line.split()) for line in text.splitlines() if line.strip() and not line.startswith("#"))


def words(name: str) -> frozenset[str]:
    """Every word of `words/<name>.txt`."""
    return frozenset(word for line in lines(name) for word in line)


def table(name: str) -> dict[str, str]:
    """`words/<name>.txt` as a mapping: the first word of each line to its second, in file order."""
    out: dict[str, str] = {}
    for line in lines(name):
        if len(line) != 2:
            raise ValueError(f"words/{name}.txt: expected 'key value', got {' '.join(line)!r}")
        out[line[0]] = line[1]
    return out
