"""A comparison as GitHub-flavoured Markdown, for a pull-request comment (`--format markdown`).

It carries the same content as `Comparison.to_dict()`. Trace texts (keys, reasons) come from the
application's data: they are escaped so that they can neither break the tables nor turn into
links, mentions or HTML in the comment.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from veralith.compare.core import CELLS, Change, Comparison, Only, left_out_note, mixed_modes_note, paired_label
from veralith.compare.correctness import LAYERS, CorrectnessComparison, correctness_note
from veralith.safe_text import visible

__all__ = ["escape", "to_markdown"]

_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+!|~&])")


def escape(text: object) -> str:
    """Markdown-inert text on one line. A backslash does not stop GitHub from turning `@name` into
    a mention or `#12` into a link, so those get a zero-width space after the sign. Control and bidi
    characters are written out first (veralith.safe_text.visible): a comment is also read with `cat`."""
    flat = _SPECIAL.sub(r"\\\1", " ".join(visible(text).split()))
    return flat.replace("@", "@\u200b").replace("\\#", "#\u200b")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f} %"


def _num(value: float | None, signed: bool = False) -> str:
    return "n/a" if value is None else (f"{value:+.3f}" if signed else f"{value:.3f}")


def _run(run: dict) -> str:
    label = f"run {run.get('id', '?')}" + (f" {run['name']}" if run.get("name") else "")
    return escape(label)


def to_markdown(c: Comparison, *, limit: int | None = None) -> str:
    """The comparison as Markdown. `limit` caps each list of traces (a GitHub comment holds at most
    65,536 characters); the counts stay complete and a capped list says how many it left out."""
    t = c.test
    lines = [f"## Veralith: {_run(c.run_a)} → {_run(c.run_b)}", ""]
    note = mixed_modes_note(c)
    if note is not None:
        lines += [f"> **Note:** {escape(note)}", ""]
    verdict = (f"**{len(c.regressions)} regression(s)**, {len(c.improvements)} improvement(s)"
               f", {len(c.indeterminate_changes)} indeterminate change(s)")
    lines += [verdict, "",
              "| | A | B | difference (B − A) |", "|---|---|---|---|",
              f"| pass rate (all traces with a result) | {_pct(c.pass_rate_a)} | {_pct(c.pass_rate_b)} | |",
              f"| pass rate ({paired_label(c)}) | {_pct(t.rate_a)} | {_pct(t.rate_b)} | "
              + ("n/a" if t.difference is None or t.ci95 is None else
                 f"{t.difference * 100:+.1f} pts, 95 % CI [{t.ci95[0] * 100:+.1f}, {t.ci95[1] * 100:+.1f}]")
              + " |", ""]
    if t.p_value is not None:
        lines += [f"McNemar exact p = {t.p_value:.3g} ({t.pass_to_not} pass → not, {t.not_to_pass} not → pass); "
                  f"{t.method}. Matched {c.matched} traces ({c.matched_by_external_id} by external id, "
                  "the rest by knowledge base + query).", ""]
    left_out = left_out_note(c)
    if left_out is not None:
        lines += [f"**Note:** {escape(left_out[0].upper() + left_out[1:])}.", ""]
    lines += _changes("Regressions (pass → fail)", c.regressions, limit)
    lines += _changes("Improvements (fail → pass)", c.improvements, limit)
    lines += _changes("Indeterminate changes", c.indeterminate_changes, limit)
    if c.not_judged:
        lines += _changes("Not judged in A or B (left out of the paired statistics)", c.not_judged, limit)
    lines += ["### Per-judge shifts (matched pairs)", "", "| judge | A | B | Δ |", "|---|---|---|---|"]
    for name, s in c.shifts.items():
        lines.append(f"| {name.replace('_', ' ')} | {_num(s['a'])} | {_num(s['b'])} | {_num(s['delta'], True)} |")
    lines += ["", "### Cell transitions (rows: A, columns: B)", "",
              "| A \\ B | " + " | ".join(_short(x) for x in CELLS) + " |", "|---" * (len(CELLS) + 1) + "|"]
    for old in CELLS:
        lines.append(f"| {_short(old)} | " + " | ".join(str(c.matrix[old][new]) for new in CELLS) + " |")
    lines.append("")
    if c.correctness is not None:
        lines += _correctness(c.correctness, limit)
    lines += _only("Only in A", c.only_in_a, limit) + _only("Only in B", c.only_in_b, limit)
    return "\n".join(lines).rstrip() + "\n"


def _correctness(k: CorrectnessComparison, limit: int | None) -> list[str]:
    """The correctness layer against the reference answers: its paired test, its transitions, the
    pairs whose layer changed."""
    t = k.test
    lines = [f"### Correctness against the reference ({k.pairs} pair(s) with a reference in A or B)", ""]
    if t.n:
        lines += ["| | A | B | difference (B − A) |", "|---|---|---|---|",
                  f"| correct ({t.n} pair(s) assessed in both) | {_pct(t.rate_a)} | {_pct(t.rate_b)} | "
                  + ("n/a" if t.difference is None or t.ci95 is None else
                     f"{t.difference * 100:+.1f} pts, 95 % CI [{t.ci95[0] * 100:+.1f}, {t.ci95[1] * 100:+.1f}]")
                  + " |", "",
                  f"McNemar exact p = {t.p_value:.3g} ({t.pass_to_not} correct → not, {t.not_to_pass} not → correct); "
                  "the same test as the pass rate's, with correct read as pass.", ""]
    else:
        lines += ["No pair was assessed against a reference in both runs: nothing to test.", ""]
    note = correctness_note(k)
    if note is not None:
        lines += [f"**Note:** {escape(note[0].upper() + note[1:])}.", ""]
    lines += ["| A \\ B | " + " | ".join(_short(x) for x in LAYERS) + " |", "|---" * (len(LAYERS) + 1) + "|"]
    for old in LAYERS:
        lines.append(f"| {_short(old)} | " + " | ".join(str(k.matrix[old][new]) for new in LAYERS) + " |")
    lines.append("")
    if not k.changes:
        return [*lines, "#### Correctness changes: none", ""]
    lines += [f"#### Correctness changes: {len(k.changes)}", "", "| trace | kb | A → B |", "|---|---|---|"]
    for ch in k.changes[:limit]:
        lines.append(f"| {escape(ch.key)} (trace {ch.old_trace_id} → {ch.new_trace_id}) | "
                     f"{escape(ch.knowledge_base)} | {_short(ch.old)} → {_short(ch.new)} |")
    return lines + [""] + _more(len(k.changes), limit)


def _short(cell: str) -> str:
    return cell.replace("_", " ")


def _more(total: int, limit: int | None) -> list[str]:
    if limit is None or total <= limit:
        return []
    return [f"… and {total - limit} more (`veralith compare --json` lists every one)", ""]


def _changes(title: str, changes: Sequence[Change], limit: int | None) -> list[str]:
    if not changes:
        return [f"### {title}: none", ""]
    out = [f"### {title}: {len(changes)}", "", "| trace | kb | A → B | reason |", "|---|---|---|---|"]
    for ch in changes[:limit]:
        out.append(f"| {escape(ch.key)} (trace {ch.old_trace_id} → {ch.new_trace_id}) | {escape(ch.knowledge_base)} | "
                   f"{_short(ch.old_cell)} → {_short(ch.new_cell)} | {escape(ch.reason or '')} |")
    return out + [""] + _more(len(changes), limit)


def _only(title: str, rows: Sequence[Only], limit: int | None) -> list[str]:
    if not rows:
        return [f"### {title}: none", ""]
    out = [f"### {title}: {len(rows)}", ""]
    out += [f"- {escape(o.key)} (trace {o.trace_id}, {escape(o.knowledge_base)}): {_short(o.cell)}, {o.gate}"
            for o in rows[:limit]]
    return out + [""] + _more(len(rows), limit)
