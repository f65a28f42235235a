"""The offline judge's one-line self-description: one text, shown wherever its verdicts are, whose
figures are the ones docs/benchmarks.md reports and docs/backends.md repeats."""

from __future__ import annotations

import re

from conftest import REPO

from veralith.llm.local.about import ABOUT, about


def _figures(text: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?%|\d+ of \d+", text)


def test_the_text_is_one_line_with_its_figures():
    assert about() == ABOUT and "\n" not in ABOUT
    assert _figures(ABOUT), "the self-description gives the measured figures"
    assert "cannot" in ABOUT and "paraphrase" in ABOUT


def test_its_figures_are_the_documented_ones():
    benchmarks = " ".join((REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())
    backends = " ".join((REPO / "docs" / "backends.md").read_text(encoding="utf-8").split())
    for figure in _figures(ABOUT):
        assert figure in benchmarks, f"{figure!r} of the offline judge's description is not in docs/benchmarks.md"
        assert figure in backends, f"{figure!r} of the offline judge's description is not in docs/backends.md"
