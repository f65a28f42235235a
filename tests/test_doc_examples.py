"""Worked examples that cannot drift: every block of the docs that shows what a command prints is
produced by running it (scripts/doc_examples.py), and differs from a fresh run only in its times.

The commands run in this process on the offline judge and a temporary database (about two seconds).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("doc_examples", REPO / "scripts" / "doc_examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


doc_examples = _load()


@pytest.fixture(scope="module")
def fresh():
    return doc_examples.generate()


def test_every_example_shows_what_its_commands_print(fresh):
    documented = {}
    for page in doc_examples.PAGES:
        text = page.read_text(encoding="utf-8")
        for name in doc_examples.marked(text):
            assert name not in documented, f"example {name!r} is in {documented.get(name)} and {page.name}"
            documented[name] = page.name
        assert doc_examples.stale(text, fresh) == [], (
            f"{page.name}: an example differs from what the commands print now; "
            "rewrite it with `python scripts/doc_examples.py`")
    assert set(documented) == set(doc_examples.EXAMPLES), "an example is defined but shown nowhere, or the reverse"


def test_an_example_edited_by_hand_fails_the_check(fresh):
    page = REPO / "docs" / "compare.md"
    text = page.read_text(encoding="utf-8")
    assert doc_examples.stale(text, fresh) == []
    body = doc_examples.marked(text)["compare-text"]
    edited = text.replace(body, body.replace("sufficiency rate      │ 0.773", "sufficiency rate      │ 0.591"), 1)
    assert edited != text and doc_examples.stale(edited, fresh) == ["compare-text"]
    # ... and the rewrite puts back what the commands print, leaving the rest of the page as it was.
    assert doc_examples.rewritten(edited, fresh) == doc_examples.rewritten(text, fresh) == text
    moved = text.replace("│ 0.700 │ 0.800 │", "│ 0.800 │ 0.700 │", 1)
    assert doc_examples.stale(moved, fresh) == ["compare-text"]


def test_only_times_are_ignored():
    a = "wall time                0.3 s (42.9 traces/s)\n 2 candidate 12-02 06:21 local\nlatency total 4 ms"
    b = "wall time                1.7 s (7.1 traces/s)\n 2 candidate 11-30 23:59 local\nlatency total\n12 ms"
    assert doc_examples.comparable(a) == doc_examples.comparable(b)
    assert doc_examples.comparable(a) != doc_examples.comparable(a.replace("candidate", "baseline"))
    assert doc_examples.comparable("fail 8  pass 4") != doc_examples.comparable("fail 4  pass 8")


def test_an_unknown_example_name_is_stale():
    page = "<!-- example: no-such-example -->\n```text\nanything\n```\n"
    assert doc_examples.stale(page, {}) == ["no-such-example"]


# A block that shows a command being run: a prompt line `$ veralith ...`.
_SHOWN_COMMAND = re.compile(r"^(?P<before>[^\n]*)\n`{3,}(?:text|console|shell)?\n\$ veralith ", re.M)


def test_every_block_that_shows_a_command_running_is_generated():
    unmarked = []
    for page in doc_examples.PAGES:
        for m in _SHOWN_COMMAND.finditer(page.read_text(encoding="utf-8")):
            if not m.group("before").startswith("<!-- example: "):
                unmarked.append(f"{page.name}: {m.group(0).splitlines()[-1]}")
    assert unmarked == []
