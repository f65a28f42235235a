"""Cross-trace patterns (`veralith patterns`, the web view's Patterns page): the failing traces of a
knowledge base, run or time window grouped by shared cause, with counts, examples and a fix per group.

`find_patterns(store, kb=..., run=..., since=..., against=...)` returns a `Patterns`; `to_markdown`
renders it as a report, `Patterns.to_dict()` is the JSON form. Deterministic: no model is called.
"""

from __future__ import annotations

from veralith.patterns.core import SECTIONS, Example, Group, Patterns, Section, find_patterns
from veralith.patterns.markdown import to_markdown

__all__ = ["SECTIONS", "Example", "Group", "Patterns", "Section", "find_patterns", "to_markdown"]
