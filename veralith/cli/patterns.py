"""`veralith patterns`: the failing traces of a knowledge base, run or time window grouped by shared
cause, with counts, examples and a fix per group.

The grouping is veralith.patterns (shared with the web view's Patterns page); this module reads the
options, chooses the output (a rich view, `--json`, `--markdown`) and the exit code. Every document
name, topic word and reason comes from the application's data, so the terminal view shows it
through `literal()` (never rich markup, never terminal control).

Exit codes (veralith.cli.exits): 0 the patterns were shown (none found is an answer too); 1
(NOT_FOUND) no database yet, an unknown run, or no judged trace in the scope; 2 a bad option value.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any

import typer
from rich.console import Console, Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from veralith.cli import filters
from veralith.cli.exits import ExitCode, fail
from veralith.cli.render import literal
from veralith.cli.runs import existing_db
from veralith.safe_text import json_safe
from veralith.store import ops

__all__ = ["patterns_command", "patterns_view"]

_WHEN = ("an ISO date/time (UTC unless it names a zone) or a time ago: 30m, 24h, 7d, 2w")


class PatternsFormat(str, Enum):
    text = "text"
    markdown = "markdown"
    json = "json"


def patterns_command(
    kb: Annotated[str | None, typer.Option("--kb", metavar="NAME", help="Only this knowledge base.")] = None,
    run: Annotated[str | None, typer.Option(
        "--run", metavar="RUN", help="Only the traces of this run (id or name, see `veralith runs`); its "
        "transitions are counted against the run before it.")] = None,
    against: Annotated[str | None, typer.Option(
        "--against", metavar="RUN", help="The earlier run the transitions are counted from (default: the run "
        "before --run, else the second newest).")] = None,
    since: Annotated[str | None, typer.Option(
        metavar="WHEN", help=f"Only traces created at or after WHEN: {_WHEN}.")] = None,
    until: Annotated[str | None, typer.Option(
        metavar="WHEN", help=f"Only traces created before WHEN: {_WHEN}.")] = None,
    limit: Annotated[int, typer.Option(
        "--limit", min=1, max=1000, metavar="N", help="Groups shown per kind of cause (ranked).")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the patterns as JSON (same as --format json).")]
    = False,
    as_markdown: Annotated[bool, typer.Option(
        "--markdown", help="Print the patterns as Markdown for a report (same as --format markdown).")] = False,
    fmt: Annotated[PatternsFormat, typer.Option(
        "--format", help="text (terminal), markdown (a report) or json; all carry the same content.")]
    = PatternsFormat.text,
) -> None:
    """Group failing traces by shared cause: a document, a question topic, a kind of fact, a run-to-run move.

    With references, also the expected chunks and reference facts the retriever keeps missing. Deterministic,
    no model is called. Groups are ranked by how many traces each explains."""
    from veralith.patterns import find_patterns, to_markdown
    from veralith.patterns.markdown import scope_words

    try:
        start, end = filters.since(since), filters.since(until, option="--until")
    except filters.BadOption as exc:
        raise fail(str(exc), ExitCode.ERROR) from None
    if start is not None and end is not None and start >= end:
        raise fail(f"--since {since!r} is not before --until {until!r}: no trace can be in between", ExitCode.ERROR)
    store = existing_db()
    if store is None:
        raise fail("no database yet: run `veralith eval FILE` first", ExitCode.NOT_FOUND)
    try:
        kb = filters.knowledge_base(kb, lambda: store.read(ops.knowledge_bases))
    except filters.BadOption as exc:
        raise fail(str(exc), ExitCode.ERROR) from None
    found = find_patterns(store, kb=kb, run=run, since=start, until=end, against=against, limit=limit)
    if found.traces == 0:   # an unknown run raised RunNotFound above (exit 1, VeralithGroup)
        raise fail(f"no judged traces ({scope_words(found)}): nothing to group (judge some with "
                   "`veralith eval` or `veralith worker`)", ExitCode.NOT_FOUND)
    if as_json or fmt is PatternsFormat.json:
        # Control and bidi characters as \uNNNN escapes: still the same JSON, harmless in a terminal.
        typer.echo(json_safe(json.dumps(found.to_dict(), indent=2, ensure_ascii=False)))
    elif as_markdown or fmt is PatternsFormat.markdown:
        typer.echo(to_markdown(found), nl=False)
    else:
        Console(highlight=False).print(patterns_view(found))


# --- view (a pure function of the data) ---------------------------------------------------------


def patterns_view(p: Any) -> RenderableType:
    """The patterns for a terminal: per kind of cause, its ranked groups with fix and examples."""
    from veralith.patterns.markdown import scope_line

    parts: list[RenderableType] = [literal(scope_line(p), "bold")]
    if p.failing == 0:
        parts.append(Text("no failing traces: nothing to group", "green"))
    parts += [literal(note, "dim") for note in p.notes]
    for section in p.sections:
        shown = f"{len(section.groups)} of {section.total_groups}" if section.total_groups > len(section.groups) \
            else str(section.total_groups)
        parts.append(Rule(f"{section.title}: {shown}", align="left"))
        parts.append(literal(f"counted: {section.rule}", "dim"))
        if section.note:
            parts.append(literal(section.note, "dim"))
        if not section.groups:
            parts.append(literal(section.none_found, "dim"))
            continue
        parts.append(_groups_table(section.groups))
    return Group(*parts)


def _groups_table(groups: list[Any]) -> Table:
    table = Table(show_edge=False, pad_edge=False, show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("group", overflow="fold", ratio=1)
    table.add_column("traces", justify="right")
    table.add_column("figures, fix and examples", overflow="fold", ratio=3)
    for n, g in enumerate(groups, 1):
        body = literal(g.detail)
        body.append("\nfix: ", "bold")
        body.append_text(literal(g.fix))
        for e in g.examples:
            body.append(f"\n#{e.trace_id} ", "dim")
            body.append_text(literal(e.reason))
        table.add_row(str(n), literal(g.key, "bold"), str(g.traces), body)
    return table
