"""The offline judge's word lists are data files: each says what it is and where it comes from,
every one is read by the code, and a table is well formed."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

from veralith.llm.local import wordlists

WORDS = REPO / "veralith" / "llm" / "local" / "words"
LOCAL = REPO / "veralith" / "llm" / "local"


def _files() -> list[str]:
    return sorted(p.stem for p in WORDS.glob("*.txt"))


def test_every_word_list_opens_with_its_source():
    for name in _files():
        text = (WORDS / f"{name}.txt").read_text(encoding="utf-8")
        header = [line for line in text.splitlines() if line.startswith("#")]
        assert text.startswith("# "), f"words/{name}.txt does not open with a comment"
        said = " ".join(header).lower()
        assert re.search(r"hand-written|english|from english", said), f"words/{name}.txt does not say its source"
        assert wordlists.lines(name), f"words/{name}.txt is empty"


def test_every_word_list_is_used_and_every_used_list_exists():
    source = "\n".join(p.read_text(encoding="utf-8") for p in LOCAL.glob("*.py"))
    used = set(re.findall(r"""\b(?:words|lines|table)\("([a-z_]+)"\)""", source))
    assert used == set(_files())


def test_a_table_entry_must_be_a_pair(monkeypatch):
    monkeypatch.setattr(wordlists, "lines", lambda name: (("one", "1", "extra"),))
    with pytest.raises(ValueError, match="expected 'key value'"):
        wordlists.table("number_words")


def test_lists_are_read_once():
    assert wordlists.lines("stopwords") is wordlists.lines("stopwords")
