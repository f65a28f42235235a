"""`veralith compare A B`: what a change did, run against run.

The comparison itself is veralith.compare (shared with the web view); this module chooses the
output (a rich view, `--json`, `--format markdown`) and the exit code. Heavy modules load inside
the commands so `veralith --help` stays instant.

Exit codes (veralith.cli.exits): 0 no more regressions than allowed; 3 (CHECK_FAILED) more
regressions than `--max-regressions`; 1 (NOT_FOUND) an unknown run or no database.
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

from veralith.cli.exits import ExitCode, fail
from veralith.cli.render import literal
from veralith.cli.runs import existing_db, pct
from veralith.safe_text import json_safe

__all__ = ["EXIT_REGRESSIONS", "compare_command", "comparison_view"]

EXIT_REGRESSIONS = ExitCode.CHECK_FAILED


class CompareFormat(str, Enum):
    text = "text"
    markdown = "markdown"
    json = "json"


def compare_command(
    run_a: Annotated[str, typer.Argument(metavar="A", help="The earlier run: id or name (see `veralith runs`).")],
    run_b: Annotated[str, typer.Argument(metavar="B", help="The later run: id or name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON (same as --format json).")]
    = False,
    fmt: Annotated[CompareFormat, typer.Option(
        "--format", help="text (terminal), markdown (a pull-request comment) or json; all carry the same content.")]
    = CompareFormat.text,
    max_regressions: Annotated[int, typer.Option(
        "--max-regressions", min=0, metavar="N",
        help="Exit 3 when more than N traces went from pass to fail.")] = 0,
    limit: Annotated[int, typer.Option(
        "--limit", min=0, metavar="N", help="Traces shown per list in text and markdown (0: all); counts are "
        "always complete and --json lists every trace.")] = 50,
    allow_mixed_modes: Annotated[bool, typer.Option(
        "--allow-mixed-modes", help="Compare runs judged in different modes (full, fast: VERALITH_MODE); the output "
        "says so. Without it such a comparison is refused.")] = False,
) -> None:
    """Compare two runs: cell transitions, pass rates with a paired test, regressions with reasons.

    With references, also the correctness layer's transitions and the same paired test on it."""
    from veralith.compare import compare_runs, to_markdown

    db = existing_db()
    if db is None:
        raise fail("no database yet: run `veralith eval FILE --run-name NAME` first", ExitCode.NOT_FOUND)
    from veralith.compare import MixedModes

    try:  # an unknown run: RunNotFound, exit 1 (VeralithGroup)
        comparison = compare_runs(db, run_a, run_b, allow_mixed_modes=allow_mixed_modes)
    except MixedModes as exc:
        raise fail(str(exc), ExitCode.ERROR) from None
    if as_json or fmt is CompareFormat.json:
        # Control and bidi characters as \uNNNN escapes: still the same JSON, harmless in a terminal.
        typer.echo(json_safe(json.dumps(comparison.to_dict(), indent=2, ensure_ascii=False)))
    elif fmt is CompareFormat.markdown:
        typer.echo(to_markdown(comparison, limit=limit or None), nl=False)
    else:
        Console(highlight=False).print(comparison_view(comparison, limit=limit or None))
    if len(comparison.regressions) > max_regressions:
        raise typer.Exit(EXIT_REGRESSIONS)


# --- views (pure functions of the data) ---------------------------------------------------------

_GATE_STYLE = {"pass": "green", "fail": "red", "indeterminate": "yellow"}
# Cell names short enough for the 7 x 7 matrix to fit 80 columns.
_SHORT = {"incomplete_ungrounded": "incompl.\nungrnd.", "complete_ungrounded": "complete\nungrnd.",
          "extra_ungrounded": "extra\nungrnd.", "incomplete_grounded": "incompl.\ngrounded",
          "extra_grounded": "extra\ngrounded", "complete_grounded": "complete\ngrounded", "indeterminate": "indet."}


def comparison_view(c: Any, *, limit: int | None = None) -> RenderableType:
    """The comparison for a terminal; `limit` caps each list of traces (None: all)."""
    from veralith.compare import CELLS

    t = c.test
    parts: list[RenderableType] = []
    head = Text("A ")
    head.append_text(literal(_label(c.run_a), "bold"))
    head.append("  →  B ")
    head.append_text(literal(_label(c.run_b), "bold"))
    parts.append(head)
    from veralith.compare import mixed_modes_note

    note = mixed_modes_note(c)
    if note is not None:
        parts.append(Text(note, "yellow"))
    if c.run_a.get("id") == c.run_b.get("id"):
        parts.append(Text("A and B are the same run: a run compared with itself cannot change; name two runs "
                          "(see `veralith runs`)", "yellow"))
    summary = Text()
    summary.append(f"{len(c.regressions)} regression(s)", "bold red" if c.regressions else "green")
    summary.append(f", {len(c.improvements)} improvement(s), {len(c.indeterminate_changes)} indeterminate "
                   f"change(s); {c.matched} matched ({c.matched_by_external_id} by external id)")
    parts.append(summary)
    rates = Text(f"pass rate A {pct(c.pass_rate_a)}, B {pct(c.pass_rate_b)} (all traces with a result)\n")
    from veralith.compare import left_out_note

    left_out = left_out_note(c)
    if left_out is not None:
        rates.append(left_out + "\n", "yellow")
    if t.difference is not None and t.ci95 is not None:
        rates.append(_paired(t, f"paired ({t.n} pairs)", "pass"))
        rates.append(t.method, "dim")
    else:
        rates.append("no pairs judged pass or fail in both runs: nothing to test" if c.matched
                     else "no matched pairs: the runs share no trace, nothing to test", "yellow")
    parts.append(rates)
    for title, changes, style in (("Regressions (pass → fail)", c.regressions, "red"),
                                  ("Improvements (fail → pass)", c.improvements, "green"),
                                  ("Indeterminate changes", c.indeterminate_changes, "yellow"),
                                  ("Not judged in A or B (left out of the paired statistics)", c.not_judged, "yellow")):
        if not changes and title.startswith("Not judged"):
            continue
        parts.append(Rule(f"{title}: {len(changes)}", align="left", style=style))
        if changes:
            parts.append(_changes_table(changes[:limit]))
            parts += _more(len(changes), limit)
    parts.append(Rule("Per-judge shifts (matched pairs)", align="left"))
    shifts = Table(show_edge=False, pad_edge=False)
    for name in ("judge", "A", "B", "Δ"):
        shifts.add_column(name, justify="left" if name == "judge" else "right")
    for name, s in c.shifts.items():
        shifts.add_row(name.replace("_", " "), _num(s["a"]), _num(s["b"]), _num(s["delta"], signed=True))
    parts.append(shifts)
    parts.append(Rule("Cell transitions (rows: A, columns: B)", align="left"))
    from rich import box

    matrix = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0)
    matrix.add_column("A \\ B", no_wrap=True)
    for cell in CELLS:
        matrix.add_column(_SHORT[cell], justify="right", no_wrap=True)
    for old in CELLS:
        matrix.add_row(_SHORT[old].replace("\n", " "),
                       *[_count(c.matrix[old][new], diagonal=old == new) for new in CELLS])
    parts.append(matrix)
    if c.correctness is not None:
        parts += _correctness_parts(c.correctness, limit)
    for title, rows in (("Only in A", c.only_in_a), ("Only in B", c.only_in_b)):
        parts.append(Rule(f"{title}: {len(rows)}", align="left"))
        for o in rows[:limit]:
            line = literal(f"#{o.trace_id} ")
            line.append_text(literal(_one_line(o.key), "bold"))
            line.append_text(literal(f" ({o.knowledge_base}) {o.cell}, {o.gate}"))
            parts.append(line)
        parts += _more(len(rows), limit)
    return Group(*parts)


_LAYER_STYLE = {"correct": "green", "partly_correct": "yellow", "incorrect": "red"}


def _correctness_parts(k: Any, limit: int | None) -> list[RenderableType]:
    """The correctness layer against the reference answers (veralith.compare.correctness): its paired
    test, its transitions and the pairs whose layer changed."""
    from rich import box

    from veralith.compare.correctness import LAYERS, correctness_note

    t = k.test
    parts: list[RenderableType] = [
        Rule(f"Correctness against the reference ({k.pairs} pair(s) with a reference in A or B)", align="left")]
    said = Text()
    note = correctness_note(k)
    if note is not None:
        said.append(note + "\n", "yellow")
    if t.difference is not None and t.ci95 is not None:
        said.append(_paired(t, f"correct ({t.n} pairs assessed in both)", "correct"))
        said.append("the pass rate's test, with correct read as pass", "dim")
    else:
        said.append("no pair was assessed against a reference in both runs: nothing to test", "yellow")
    parts.append(said)
    matrix = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    matrix.add_column("A \\ B", no_wrap=True)
    for layer in LAYERS:
        matrix.add_column(layer.replace("_", " "), justify="right", no_wrap=True)
    for old in LAYERS:
        matrix.add_row(old.replace("_", " "), *[_count(k.matrix[old][new], diagonal=old == new) for new in LAYERS])
    parts.append(matrix)
    parts.append(Text(f"correctness changes (assessed in both): {len(k.changes) or 'none'}", "bold"))
    for ch in k.changes[:limit]:
        line = literal(f"#{ch.old_trace_id} → #{ch.new_trace_id} " if ch.old_trace_id != ch.new_trace_id
                       else f"#{ch.new_trace_id} ")
        line.append_text(literal(_one_line(ch.key), "bold"))
        line.append_text(literal(f" ({ch.knowledge_base}) "))
        line.append(ch.old, _LAYER_STYLE.get(ch.old, ""))
        line.append(" → ")
        line.append(ch.new, _LAYER_STYLE.get(ch.new, ""))
        parts.append(line)
    return parts + _more(len(k.changes), limit)


def _paired(t: Any, what: str, yes: str) -> str:
    """A paired test in two lines: the two rates with their difference and interval, then McNemar's p
    with the discordant pairs (`yes`: what the rates count, pass or correct)."""
    assert t.difference is not None and t.ci95 is not None
    return (f"{what}: {pct(t.rate_a)} → {pct(t.rate_b)}, difference {t.difference * 100:+.1f} pts, 95 % CI "
            f"[{t.ci95[0] * 100:+.1f}, {t.ci95[1] * 100:+.1f}]\n"
            f"McNemar exact p = {t.p_value:.3g} ({t.pass_to_not} {yes} → not, {t.not_to_pass} not → {yes})\n")


def _more(total: int, limit: int | None) -> list[RenderableType]:
    if limit is None or total <= limit:
        return []
    return [Text(f"… and {total - limit} more (--limit 0 shows all; --json lists every one)", "dim")]


def _changes_table(changes: list[Any]) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for name in ("trace", "kb", "A → B", "reason"):
        table.add_column(name, overflow="fold")
    for ch in changes:
        who = literal(_one_line(ch.key, 40), "bold")
        who.append(f"\n#{ch.old_trace_id} → #{ch.new_trace_id}", "dim")
        moved = Text()
        moved.append(ch.old_cell, _GATE_STYLE.get(ch.old_gate, ""))
        moved.append(" → ")
        moved.append(ch.new_cell, _GATE_STYLE.get(ch.new_gate, ""))
        table.add_row(who, literal(ch.knowledge_base), moved, literal(ch.reason or ""))
    return table


def _label(run: dict[str, Any]) -> str:
    return f"#{run.get('id', '?')}" + (f" {run['name']}" if run.get("name") else "")


def _num(value: float | None, signed: bool = False) -> str:
    return "n/a" if value is None else (f"{value:+.3f}" if signed else f"{value:.3f}")


def _count(n: int, *, diagonal: bool) -> Text:
    return Text(str(n) if n else "·", style="bold" if diagonal and n else ("" if n else "dim"))


def _one_line(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
