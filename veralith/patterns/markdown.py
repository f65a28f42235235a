"""Patterns as GitHub-flavoured Markdown, for a report or an issue (`veralith patterns --format markdown`).

It carries the content of `Patterns.to_dict()` for the groups shown. Documents, topic words and
reasons come from the application's data: control and bidi characters are written out
(veralith.safe_text.visible) and the rest escaped (veralith.compare.markdown.escape), so that they
can neither break the tables nor turn into links, mentions or HTML, nor drive a terminal.
"""

from __future__ import annotations

from veralith.compare.markdown import escape as _escape
from veralith.patterns.core import Patterns, Section
from veralith.safe_text import visible

__all__ = ["scope_line", "scope_words", "to_markdown"]


def escape(text: object) -> str:
    # Control and bidi characters written out first: a report is also read with `cat` in a terminal.
    return _escape(visible(text))


def scope_line(p: Patterns) -> str:
    """Which traces were grouped and how many fail, in words (shared by the terminal and web views)."""
    return f"{p.failing} failing of {p.traces} judged traces ({scope_words(p)})"


def scope_words(p: Patterns) -> str:
    """Which traces were grouped: "knowledge base shop, run #2 after", "every stored trace"."""
    parts = []
    if p.scope.get("knowledge_base"):
        parts.append(f"knowledge base {p.scope['knowledge_base']}")
    if p.scope.get("run"):
        parts.append(f"run {p.scope['run']}")
    if p.scope.get("since"):
        parts.append(f"created since {p.scope['since']}")
    if p.scope.get("until"):
        parts.append(f"created before {p.scope['until']}")
    return ", ".join(parts) if parts else "every stored trace"


def to_markdown(p: Patterns) -> str:
    lines = ["## Veralith: failure patterns", "", escape(scope_line(p)), ""]
    lines += [f"> {escape(note)}" for note in p.notes]
    if p.notes:
        lines.append("")
    for section in p.sections:
        lines += _section(section)
    return "\n".join(lines).rstrip() + "\n"


def _section(s: Section) -> list[str]:
    shown = f"{len(s.groups)} of {s.total_groups}" if s.total_groups > len(s.groups) else str(s.total_groups)
    out = [f"### {s.title}: {shown}", "", f"*Counted: {escape(s.rule)}.*", ""]
    if s.note:
        out += [escape(s.note), ""]
    if not s.groups:
        said = s.none_found
        return [*out, escape(said[0].upper() + said[1:]) + ".", ""]
    out += [f"| # | group | {s.unit} | figures | fix |", "|---|---|---|---|---|"]
    for n, g in enumerate(s.groups, 1):
        out.append(f"| {n} | {escape(g.key)} | {g.traces} | {escape(g.detail)} | {escape(g.fix)} |")
    out.append("")
    for n, g in enumerate(s.groups, 1):
        if g.examples:
            out.append(f"Examples of {n} ({escape(g.key)}):")
            out += [f"- trace {e.trace_id}: {escape(e.reason)}" for e in g.examples]
            out.append("")
    return out
