"""What the CLI shows, as pure functions from models (and plain dicts from the store) to rich renderables.

Every piece of user text (query, response, chunks, reasoning, metadata, knowledge-base names) goes
through `literal()`: a rich `Text`, which is never parsed as markup, with control and bidi characters
made visible. So a response containing `[red]`, `[link=file:///etc/passwd]` or an ANSI escape shows
those characters instead of styling, linking or moving the terminal cursor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from veralith.models import Coverage, EvaluationResult, Relation, Verdict

__all__ = ["RELATION_LABEL", "fmt_fraction", "fmt_usd", "literal", "result_view", "stats_view", "summary_view",
           "terminal_safe", "traces_table"]

# C0/C1 controls (but newline and tab), DEL, the bidi overrides/isolates and the invisible bidi
# marks (U+061C ALM, U+200E LRM, U+200F RLM) that can reorder what a reader sees ("Trojan
# Source"), and the Unicode line/paragraph separators. Shown as \xNN / \uNNNN so the text stays
# literal and inert.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

RELATION_LABEL = {Relation.supported: "grounded", Relation.unsupported: "ungrounded",
                  Relation.contradicted: "contradicted", Relation.conflicting: "conflicting"}
_RELATION_STYLE = {Relation.supported: "green", Relation.unsupported: "yellow",
                   Relation.contradicted: "bold red", Relation.conflicting: "magenta"}
_RELATION_MARK = {Relation.supported: "✓", Relation.unsupported: "✗", Relation.contradicted: "✗",
                  Relation.conflicting: "≠"}
_GATE_STYLE = {"pass": "green", "fail": "red", "indeterminate": "yellow"}
_CHUNK_PREVIEW = 240


def literal(value: Any, style: str = "") -> Text:
    """User text as an inert rich Text: never markup, never terminal control."""
    text = value if isinstance(value, str) else str(value)
    escaped = _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                          else f"\\u{ord(m.group()):04x}", text)
    return Text(escaped, style=style)


def terminal_safe(text: str) -> str:
    """Plain text for a terminal (export to a TTY): the same characters as `literal` escapes, as
    \\uNNNN, which is also a valid escape inside a JSON string, so a JSON line stays JSON."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def fmt_usd(usd: float | None) -> str:
    return "unknown" if usd is None else f"${usd:.4f}"


def fmt_fraction(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _ids(ids: Iterable[str]) -> Text:
    joined = ", ".join(ids)
    return literal(joined or "—", "cyan" if joined else "dim")


def _section(title: str) -> Rule:
    return Rule(Text(title, style="bold"), align="left", style="dim")


def result_view(result: EvaluationResult) -> RenderableType:
    """The whole diagnosis of one trace, top to bottom in the order a person reads it."""
    parts: list[RenderableType] = [_header(result)]
    parts += [_section("Query"), literal(result.query), _sub_questions(result)]
    parts += [_section("Response"), _response(result), _claims(result)]
    parts += [_section("Completeness"), _completeness(result)]
    parts += [_section("Context"), _context(result)]
    if result.suggestion:
        actions = [literal(f"  • {a}") for a in result.suggestion.actions]
        parts += [_section("Suggestion"), literal(result.suggestion.title, "bold"),
                  literal(result.suggestion.summary), *actions]
    if result.errors:
        table = Table("phase", "kind", "attempts", "message", box=None, pad_edge=False)
        for err in result.errors:
            table.add_row(err.phase.value, literal(err.kind), str(err.attempts), literal(err.message, "red"))
        parts += [_section("Judge errors"), table]
    parts += [_section("Usage"), _usage(result)]
    return Group(*parts)


def _header(result: EvaluationResult) -> RenderableType:
    head = Text.assemble(("Trace ", "bold"), (str(result.trace_id) if result.trace_id is not None else "(unsaved)",
                                              "bold"), "  kb ", literal(result.knowledge_base, "cyan"),
                         "  backend ", literal(f"{result.backend} ({result.judge_model})"))
    status = result.status
    gate = Text.assemble("gate ", (status.quality_gate.value, _GATE_STYLE.get(status.quality_gate.value, "")),
                         f"  execution {status.execution.value}  availability {status.availability.value}  ",
                         literal(status.summary, "dim"))
    lines: list[RenderableType] = [head, gate]
    diag = result.diagnosis
    if diag is None:
        lines.append(Text("cell: not classified (a judge failed; see Judge errors)", style="yellow"))
    else:
        cell = diag.failure_cell.value if diag.failure_cell else "not classified"
        lines.append(Text.assemble("cell ", (cell, "bold " + ("green" if cell == "complete_grounded" else "red")),
                                   f"  sufficiency {diag.sufficiency_level.value.upper()} "
                                   f"({fmt_fraction(diag.sufficiency_fraction)} vs threshold "
                                   f"{diag.threshold:.2f}, {diag.threshold_source.value})"
                                   f"  faithfulness {fmt_fraction(diag.faithfulness_fraction)}"))
    if result.response_kind is not None and result.response_kind.value != "answer":
        lines.append(Text(f"the response is a {result.response_kind.value.replace('_', ' ')}", style="italic"))
    if diag is not None and diag.needs_review:
        lines.append(Text.assemble(("needs review", "bold yellow"), ": low-confidence verdicts decide the outcome (",
                                   _ids(diag.review_ids), ")"))
    return Group(*lines)


def _sub_questions(result: EvaluationResult) -> RenderableType:
    if not result.sub_questions:
        return Text("(no sub-questions)", style="dim")
    verdicts = {j.sub_question_id: j for j in result.sufficiency}
    table = Table("id", "sub-question", "sufficient", "covered", box=None, pad_edge=False)
    for q in result.sub_questions:
        judged = verdicts.get(q.id)
        suff = (Text("not judged", "dim") if judged is None else
                Text.assemble(("yes" if judged.verdict is Verdict.Y else "no",
                               "green" if judged.verdict is Verdict.Y else "yellow"), " ",
                              _ids(judged.chunk_ids) if judged.chunk_ids else "", _sure(judged.confidence)))
        table.add_row(literal(q.id, "cyan"), literal(q.text), suff, _coverage(result, q.id))
    return table


def _coverage(result: EvaluationResult, question_id: str) -> Text:
    """Whether the sub-question is covered and why not, from the diagnosis (so it agrees with the cell)."""
    comp = result.completeness
    coverage = result.diagnosis.coverage.get(question_id) if result.diagnosis else None
    if coverage is None and comp is not None and (result.faithfulness or not result.claims):
        # A result stored before coverage was recorded: apply the library's own rule to it.
        from veralith.pipeline.classify import coverage as coverage_of

        grounded = {j.claim_id for j in result.faithfulness if j.verdict is Verdict.Y}
        asked = [q for q in result.sub_questions if q.id == question_id]
        coverage = coverage_of(asked, grounded, comp).get(question_id)
    if coverage is None or comp is None:
        return Text("unknown", style="dim")
    answering = comp.mappings.get(question_id, [])
    if coverage is Coverage.answered:
        return Text.assemble(("yes", "green"), " ", _ids(answering))
    why = {
        Coverage.partial: Text.assemble(" answered only in part by ", _ids(answering)),
        Coverage.ungrounded_answer: Text.assemble(" answered only by ", _ids(answering), ", not grounded"),
        Coverage.declined: Text(" declined: the response says the documents lack it", style="dim"),
        Coverage.unanswered: Text(" no claim answers it", style="dim"),
    }[coverage]
    return Text.assemble(("no", "red"), why)


def _sure(confidence: float | None) -> Text:
    return Text("" if confidence is None else f" ({confidence:.0%} sure)", style="dim")


def _judgments(result: EvaluationResult) -> dict[str, Any]:
    return {j.claim_id: j for j in result.faithfulness}


def _response(result: EvaluationResult) -> Text:
    text = literal(result.response)
    if text.plain != result.response:
        return text   # escaping shifted offsets; colouring by span would mark the wrong characters
    judgments = _judgments(result)
    for claim in result.claims:
        judged = judgments.get(claim.id)
        if judged is not None and claim.char_start is not None and claim.char_end is not None:
            text.stylize(_RELATION_STYLE[judged.relation], claim.char_start, claim.char_end)
    return text


def _claims(result: EvaluationResult) -> RenderableType:
    parts: list[RenderableType] = []
    if not result.claims:
        parts.append(Text("(no claims)" + (" — refusal" if result.refusal else ""), style="dim"))
    else:
        judgments = _judgments(result)
        table = Table("id", "verdict", "claim", "evidence", box=None, pad_edge=False)
        for claim in result.claims:
            judged = judgments.get(claim.id)
            if judged is None:
                table.add_row(literal(claim.id, "cyan"), Text("? not judged", style="dim"), literal(claim.text),
                              Text("—", style="dim"))
                continue
            style = _RELATION_STYLE[judged.relation]
            verdict = Text.assemble((f"{_RELATION_MARK[judged.relation]} {RELATION_LABEL[judged.relation]}", style),
                                    _sure(judged.confidence))
            evidence = Text.assemble(_ids(judged.grounding_chunk_ids))
            if judged.contradicting_chunk_ids:
                evidence = Text.assemble(evidence, " contradicted by ", _ids(judged.contradicting_chunk_ids))
            for quote in judged.evidence[:2]:
                evidence = Text.assemble(evidence, "\n", literal(quote.chunk_id, "cyan"), ": “",
                                         literal(_one_line(quote.quote, 100), "italic"), "”")
            table.add_row(literal(claim.id, "cyan"), verdict, literal(claim.text), evidence)
        parts.append(table)
    for gap in result.gaps:
        parts.append(Text.assemble(literal(gap.id, "cyan"), " gap: ", literal(gap.text, "italic")))
    return Group(*parts)


def _completeness(result: EvaluationResult) -> RenderableType:
    comp = result.completeness
    if comp is None:
        return Text("not judged", style="dim")
    lines: list[RenderableType] = []
    for q in result.sub_questions:
        status = comp.statuses.get(q.id)
        line = Text.assemble(literal(q.id, "cyan"), " answered by ", _ids(comp.mappings.get(q.id, [])))
        if comp.supports.get(q.id):
            line.append_text(Text.assemble("  supported by ", _ids(comp.supports[q.id])))
        if status is not None:
            line.append_text(Text(f"  judged {status.value}", style="dim"))
        lines.append(line)
    for gap_id, linked in comp.gaps.items():
        lines.append(Text.assemble(literal(gap_id, "cyan"), " declines ", _ids(linked)))
    lines.append(Text.assemble("extra claims: ", _ids(comp.extra_claim_ids)))
    if comp.reasoning:
        lines.append(literal(comp.reasoning, "dim"))
    return Group(*lines)


def _context(result: EvaluationResult) -> RenderableType:
    if not result.context:
        return Text("(empty: retrieval returned nothing)", style="dim")
    table = Table("id", "source", "text", box=None, pad_edge=False)
    for chunk in result.context:
        preview = chunk.text if len(chunk.text) <= _CHUNK_PREVIEW else chunk.text[:_CHUNK_PREVIEW] + "…"
        table.add_row(literal(chunk.id, "cyan"), literal(chunk.source or "—", "dim"), literal(preview))
    return table


def _usage(result: EvaluationResult) -> Text:
    u = result.usage
    phases = "  ".join(f"{phase} {ms:.0f} ms" for phase, ms in result.latency_ms.items())
    return Text(f"calls {u.calls}  cache hits {u.cache_hits}  tokens {u.input_tokens} in "
                f"({u.cached_input_tokens} cached) / {u.output_tokens} out  cost {fmt_usd(u.usd)}"
                + (f"\nlatency {phases}" if phases else ""))


def summary_view(tally: Any, *, title: str = "Summary") -> RenderableType:
    """The end-of-run table of `veralith eval` / `resume` (a batch.Tally)."""
    table = Table(title=title, show_header=False, box=None, pad_edge=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    stored = ""
    if tally.stored and tally.ids:
        low, high = tally.ids
        stored = f" ({tally.stored} stored as trace {low}" + (f" … {high}" if high != low else "") + \
            "; see `veralith inspect ID`)"
    table.add_row("evaluated", f"{tally.evaluated}{stored}")
    for cell, n in sorted(tally.cells.items()):
        table.add_row(f"  {cell}", str(n))
    table.add_row("gate", "  ".join(f"{gate} {n}" for gate, n in sorted(tally.gates.items())) or "—")
    table.add_row("errors", f"{tally.errors} (bad lines {tally.bad_lines}, failed {tally.failed}, "
                  f"with judge errors {tally.with_judge_errors})")
    table.add_row("calls", f"{tally.calls} ({tally.cache_hits} cache hits)")
    table.add_row("tokens", f"{tally.input_tokens} in / {tally.output_tokens} out")
    table.add_row("cost", fmt_usd(tally.usd))
    rate = tally.evaluated / tally.wall_s if tally.wall_s > 0 else 0.0
    table.add_row("wall time", f"{tally.wall_s:.1f} s ({rate:.1f} traces/s)")
    if tally.interrupted:
        left = f"{tally.left_pending} pending" + (f", {tally.left_running} abandoned mid-run" if tally.left_running
                                                   else "")
        table.add_row(Text("interrupted", style="bold yellow"),
                      f"finished traces are stored; {left}; run `veralith resume` to finish them"
                      + (f"; input read up to line {tally.last_line}" if tally.unread else ""))
    return table


def traces_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """`veralith list`: one row per stored trace, newest first (rows as store.list_traces returns them)."""
    # Narrow on purpose: cell names must stay whole on an 80-column terminal; the query preview
    # takes what is left. `veralith inspect ID` shows the rest.
    table = Table(box=None, pad_edge=False, header_style="bold", expand=True)
    for name in ("id", "status", "kb", "cell", "gate", "suff", "faith", "cost"):
        table.add_column(name, no_wrap=True)
    table.add_column("query", no_wrap=True, overflow="ellipsis", ratio=1)
    for row in rows:
        gate = row["quality_gate"] or "—"
        done = row["status"] == "done"
        status = literal(row["status"], "red" if row["status"] == "error" else "" if done else "yellow")
        query = literal(_one_line(row["query_preview"] or ""), "dim")
        if row["error_message"]:
            query = Text.assemble(query, "\n", literal(_one_line(row["error_message"]), "red"))
        table.add_row(str(row["id"]), status,
                      literal(row["knowledge_base"]), literal(row["failure_cell"] or "—"),
                      Text(gate, style=_GATE_STYLE.get(gate, "")), fmt_fraction(row["sufficiency_fraction"]),
                      fmt_fraction(row["faithfulness_fraction"]), fmt_usd(row["usd"]) if done else "—", query)
    return table


def _one_line(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def stats_view(stats: Mapping[str, Any]) -> RenderableType:
    """`veralith stats`: cell distribution with bars, gates, mean fractions, cost, thresholds per KB."""
    cells: Mapping[str, int] = stats["by_cell"]
    total = sum(cells.values())
    dist = Table("cell", "traces", "share", "", box=None, pad_edge=False,
                 title=f"{stats['results']} evaluated of {stats['traces']} traces", title_justify="left")
    for cell, n in sorted(cells.items(), key=lambda kv: (-kv[1], kv[0])):
        share = n / total if total else 0.0
        dist.add_row(literal(cell), str(n), f"{share:6.1%}", Text("█" * max(1, round(share * 30)), "cyan"))
    status = "  ".join(f"{s} {n}" for s, n in stats["by_status"].items() if n)
    gates = "  ".join(f"{g} {n}" for g, n in stats["by_gate"].items())
    usd = fmt_usd(stats["usd"]) + (f" + {stats['usd_unknown']} trace(s) of unknown price" if stats["usd_unknown"]
                                   else "")
    lines = Text(f"status  {status or '—'}\ngate    {gates or '—'}\n"
                 f"mean sufficiency {fmt_fraction(stats['mean_sufficiency_fraction'])}  "
                 f"mean faithfulness {fmt_fraction(stats['mean_faithfulness_fraction'])}\n"
                 f"calls {stats['calls']}  tokens {stats['input_tokens']} in / {stats['output_tokens']} out  "
                 f"cost {usd}")
    thresholds = Table("knowledge base", "threshold", "source", "complete_grounded traces", box=None,
                       pad_edge=False, title="Sufficiency threshold", title_justify="left")
    for kb, info in stats["thresholds"].items():
        thresholds.add_row(literal(kb), f"{info['threshold']:.2f}", info["source"], str(info["calibration_traces"]))
    return Group(dist, lines, thresholds)
