"""What the CLI shows, as pure functions from models (and plain dicts from the store) to rich renderables.

Every piece of user text (query, response, chunks, reasoning, metadata, knowledge-base names) goes
through `literal()`: a rich `Text`, which is never parsed as markup, with control and bidi characters
made visible. So a response containing `[red]`, `[link=file:///etc/passwd]` or an ANSI escape shows
those characters instead of styling, linking or moving the terminal cursor.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from veralith.models import Coverage, EvaluationResult, Relation, Verdict
from veralith.pipeline.describe import RELATION_LABEL, Description, describe
from veralith.safe_text import json_safe, visible

__all__ = ["GATE_STYLE", "RELATION_LABEL", "fmt_fraction", "fmt_latency", "fmt_time", "fmt_usd", "literal",
           "one_line", "result_view", "stats_view", "summary_view", "terminal_safe"]

_RELATION_STYLE = {Relation.supported: "green", Relation.unsupported: "yellow",
                   Relation.contradicted: "bold red", Relation.conflicting: "magenta", Relation.stale: "cyan"}
# Each verdict its own mark, so they read apart without colour (a pipe, a log, a screen reader).
_RELATION_MARK = {Relation.supported: "✓", Relation.unsupported: "✗", Relation.contradicted: "⊘",
                  Relation.conflicting: "≠", Relation.stale: "⧖"}
# What each verdict means, in the legend: contradicted (the context says otherwise) is worse than
# unsupported (the context does not say), and a person must be able to tell them apart.
_RELATION_MEANS = {Relation.supported: "a chunk supports it", Relation.unsupported: "no chunk supports it",
                   Relation.contradicted: "a chunk says otherwise", Relation.conflicting: "chunks disagree",
                   Relation.stale: "its chunks are out of date"}
GATE_STYLE = {"pass": "green", "fail": "red", "indeterminate": "yellow"}
_CHUNK_PREVIEW = 240


def literal(value: Any, style: str = "") -> Text:
    """User text as an inert rich Text: never markup, never terminal control."""
    return Text(visible(value), style=style)


def terminal_safe(text: str) -> str:
    """Plain text for a terminal (export to a TTY): the same characters as `literal` escapes, as
    \\uNNNN, which is also a valid escape inside a JSON string, so a JSON line stays JSON."""
    return json_safe(text)


def fmt_usd(usd: float | None) -> str:
    return "unknown" if usd is None else f"${usd:.4f}"


def fmt_fraction(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _ids(ids: Iterable[str]) -> Text:
    joined = ", ".join(ids)
    return literal(joined or "—", "cyan" if joined else "dim")


def _section(title: str) -> Rule:
    return Rule(Text(title, style="bold"), align="left", style="dim")


def result_view(result: EvaluationResult, *, external_id: str | None = None, created_at: str | None = None,
                run: str | None = None, app_latency: Mapping[str, float] | None = None) -> RenderableType:
    """The whole diagnosis of one trace, top to bottom in the order a person reads it. The header
    shows, when given, the trace's `external_id` (the record's own id), `created_at` (the stored
    UTC ISO time), `run` (the label of the run that last judged it, e.g. "#3 main") and
    `app_latency` (the app's own time, {part: ms} as logged)."""
    # The headline, the sub-question rows, the Completeness lines and the fix: one description
    # (veralith.pipeline.describe), as the web view's trace page shows them.
    said = describe(result)
    parts: list[RenderableType] = [_header(result, said, external_id, created_at, run)]
    if app_latency:
        parts.insert(1, Text("app latency " + fmt_latency(app_latency)))
    parts += [_section("Query"), literal(result.query), _sub_questions(result, said)]
    parts += [_section("Response"), _response(result), _legend(result), _claims(result)]
    parts += [_section("Completeness"), _completeness(result, said)]
    parts += [_section("Context"), _context(result)]
    if result.reference is not None:
        from veralith.cli.render_reference import reference_view

        parts += [_section("Reference"), reference_view(result.reference)]
    if said.fix:
        actions = Table.grid(padding=(0, 1))  # a bullet list whose wrapped lines stay indented
        actions.add_column(justify="right", width=3)
        actions.add_column()
        for action in said.fix.actions:
            actions.add_row("•", literal(action))
        parts += [_section("Suggestion"), literal(said.fix.title, "bold"), literal(said.fix.summary), actions]
    if result.explanation:
        parts += [_section("Explanation (this trace)"), _explanation(result)]
    if result.errors:
        table = Table("phase", "kind", "attempts", "message", box=None, pad_edge=False)
        for err in result.errors:
            table.add_row(err.phase.value, literal(err.kind), str(err.attempts), literal(err.message, "red"))
        parts += [_section("Judge errors"), table]
    parts += [_section("Usage"), _usage(result)]
    return Group(*parts)


def _explanation(result: EvaluationResult) -> RenderableType:
    """The trace-specific explanation (`--explain`): its quotes, what went wrong, the change, its cost."""
    e = result.explanation
    assert e is not None
    u = e.usage
    cost = Text(f"{e.backend} {e.prompt_version} · model ", style="dim")
    cost.append_text(literal(e.model, "dim"))
    cost.append(f" · {u.calls} call(s), {u.cache_hits} cached, {u.input_tokens + u.output_tokens} tokens, "
                f"{fmt_usd(u.usd)}", style="dim")
    if e.dropped:
        return Group(literal(e.dropped, "yellow"), cost)
    lines: list[RenderableType] = []
    for q in e.quotes:
        where = f"chunk {q.chunk_id}" if q.source == "chunk" and q.chunk_id else "response"
        lines.append(Text.assemble(("  “", "dim"), literal(q.text), ("” ", "dim"), literal(where, "cyan")))
    if e.missing_fact:
        lines.append(Text.assemble(("missing: ", "bold"), literal(e.missing_fact)))
    lines += [Text.assemble(("what went wrong: ", "bold"), literal(e.what_went_wrong)),
              Text.assemble(("change to try: ", "bold"), literal(e.change_to_try)), cost]
    return Group(*lines)


def _header(result: EvaluationResult, said: Description, external_id: str | None, created_at: str | None,
            run: str | None) -> RenderableType:
    head = Text.assemble(("Trace ", "bold"), (str(result.trace_id) if result.trace_id is not None else "(unsaved)",
                                              "bold"))
    if external_id is not None:
        head.append_text(Text.assemble(" (", literal(external_id, "bold"), ")"))
    head.append_text(Text.assemble("  kb ", literal(result.knowledge_base, "cyan")))
    if run:
        head.append_text(Text.assemble("  run ", literal(run, "cyan")))
    if created_at:
        head.append(f"  created {fmt_time(created_at, now=dt.datetime.now(dt.timezone.utc), absolute=True)}")
    status = result.status
    gate = Text.assemble("gate ", (status.quality_gate.value, GATE_STYLE.get(status.quality_gate.value, "")),
                         f"  execution {status.execution.value}  availability {status.availability.value}  ",
                         literal(said.headline, "dim"))
    lines: list[RenderableType] = [head, gate]
    # metadata.id repeats the external id (kept there for older readers); the header already shows it.
    metadata = {k: v for k, v in result.metadata.items()
                if not (k == "id" and external_id is not None and str(v) == external_id)}
    if metadata:
        lines.append(_metadata(metadata))
    diag = result.diagnosis
    if diag is None:
        lines.append(Text("cell: not classified (a judge failed; see Judge errors)", style="yellow"))
    else:
        cell = diag.failure_cell.value if diag.failure_cell else "not classified"
        lines.append(Text.assemble("cell ", (cell, "bold " + ("green" if cell == "complete_grounded" else "red")),
                                   f"  faithfulness {fmt_fraction(diag.faithfulness_fraction)}"))
        if said.sufficiency:
            lines.append(Text(f"sufficiency {said.sufficiency}", style="dim"))
    if result.response_kind is not None and result.response_kind.value != "answer":
        lines.append(Text(f"the response is a {result.response_kind.value.replace('_', ' ')}", style="italic"))
    if diag is not None and diag.needs_review:
        lines.append(Text.assemble(("needs review", "bold yellow"), ": low-confidence verdicts decide the outcome (",
                                   _ids(diag.review_ids), ")"))
    if said.review_flag:
        lines.append(Text(f"review flag: {said.review_flag}", style="dim"))
    return Group(*lines)


# Keys that say where a trace came from, shown first; any other key follows in name order.
_METADATA_FIRST = ("id", "run_id", "run", "chain", "user_id", "user", "session_id", "source")
_METADATA_KEYS, _METADATA_VALUE = 12, 48


def _metadata(metadata: Mapping[str, Any]) -> Text:
    """`metadata  run_id=… chain=… user_id=…` on one line (wrapping if long): each value on one line,
    cut at _METADATA_VALUE characters; past _METADATA_KEYS keys, a count (`--json` shows them all)."""
    import json

    keys = [k for k in _METADATA_FIRST if k in metadata] + sorted(k for k in metadata if k not in _METADATA_FIRST)
    line = Text("metadata", style="bold")
    for key in keys[:_METADATA_KEYS]:
        value = metadata[key]
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True,
                                                                  default=str)
        line.append_text(Text.assemble("  ", literal(key, "cyan"), "=", literal(one_line(shown, _METADATA_VALUE))))
    if len(keys) > _METADATA_KEYS:
        line.append(f"  … {len(keys) - _METADATA_KEYS} more (see --json)", style="dim")
    return line


def _sub_questions(result: EvaluationResult, said: Description) -> RenderableType:
    if not said.questions:
        return Text("(no sub-questions)", style="dim")
    verdicts = {j.sub_question_id: j for j in result.sufficiency}
    table = Table("id", "sub-question", "sufficient", "answered", box=None, pad_edge=False)
    for q in said.questions:
        judged = verdicts.get(q.id)
        suff = (Text("not judged", "dim") if judged is None else
                Text.assemble(("yes" if judged.verdict is Verdict.Y else "no",
                               "green" if judged.verdict is Verdict.Y else "yellow"), " ",
                              _ids(judged.chunk_ids) if judged.chunk_ids else "", _sure(judged.confidence),
                              _why(judged.reasoning)))
        table.add_row(literal(q.id, "cyan"), literal(q.text), suff,
                      Text(q.label, _COVERAGE_STYLE.get(q.coverage, "red")))
        # Why, on a row of its own under the sub-question: beside the sufficiency reasoning its lines
        # would interleave with that cell's on the terminal.
        table.add_row("", Text.assemble(("↳ ", "dim"), literal(q.why, "dim")), "", "")
    return table


# A sub-question's label (veralith.pipeline.describe.QuestionLine), so it agrees with the cell.
_COVERAGE_STYLE = {Coverage.answered.value: "green", "unknown": "dim"}


def _why(reasoning: str | None) -> Text:
    """A verdict's reasoning on a line of its own under it ("why: ..."), or nothing."""
    if not reasoning or not reasoning.strip():
        return Text()
    return Text.assemble(("\nwhy: ", "dim"), literal(one_line(reasoning, 400), "italic"))


def _sure(confidence: float | None) -> Text:
    return Text("" if confidence is None else f" ({confidence:.0%} sure)", style="dim")


def _judgments(result: EvaluationResult) -> dict[str, Any]:
    return {j.claim_id: j for j in result.faithfulness}


# Which colour a stretch of the response takes when claims overlap: the worst verdict covering it.
_SEVERITY = {None: 0, Relation.supported: 1, Relation.stale: 2, Relation.unsupported: 3, Relation.conflicting: 4,
             Relation.contradicted: 5}
_UNJUDGED_STYLE, _GAP_STYLE = "dim underline", "blue italic"
_CLOSING = frozenset(".,;:!?)]}\"'”’»…")


class _Span(NamedTuple):
    start: int
    end: int
    style: str
    tag: Text       # shown after the span: "k2 ✗", "g1 gap"
    severity: int   # where spans overlap, the highest colours the overlap


def _span(start: int | None, end: int | None, length: int) -> tuple[int, int] | None:
    """(start, end) when they mark characters of a text `length` long, else None (not located)."""
    if start is not None and end is not None and 0 <= start < end <= length:
        return start, end
    return None


def _response(result: EvaluationResult) -> Text:
    """The response as written, each located claim coloured by its verdict and tagged after its span
    with its id and mark (`… liquid spills. [k2 ✗]`), so the failing sentence shows without colour
    too; gap statements are tagged as gaps. Each stretch is escaped on its own (`literal`), so an
    escaped control character never shifts a span onto the wrong characters."""
    response = result.response
    judgments = _judgments(result)
    spans: list[_Span] = []
    for claim in result.claims:
        located = _span(claim.char_start, claim.char_end, len(response))
        if located is not None:
            judged = judgments.get(claim.id)
            relation = judged.relation if judged is not None else None
            style = _UNJUDGED_STYLE if relation is None else _RELATION_STYLE[relation]
            mark = "?" if relation is None else _RELATION_MARK[relation]
            spans.append(_Span(*located, style, literal(f"{claim.id} {mark}", style), _SEVERITY[relation]))
    for gap in result.gaps:
        located = _span(gap.char_start, gap.char_end, len(response))
        if located is not None:
            spans.append(_Span(*located, _GAP_STYLE, literal(f"{gap.id} gap", _GAP_STYLE), 0))
    # A tag goes after the punctuation that closes its span ("spills. [k2 ✗]", not "spills [k2 ✗].").
    tag_at = []
    for span in spans:
        at = span.end
        while at < len(response) and response[at] in _CLOSING and not any(s.start <= at < s.end for s in spans):
            at += 1
        tag_at.append(at)
    cuts = sorted({0, len(response), *(s.start for s in spans), *(s.end for s in spans), *tag_at})
    text = Text()
    for start, end in zip(cuts, cuts[1:], strict=False):
        worst = max((s for s in spans if s.start <= start and end <= s.end), key=lambda s: s.severity, default=None)
        text.append_text(literal(response[start:end], worst.style if worst else ""))
        ending = [s.tag for s, at in zip(spans, tag_at, strict=True) if at == end]
        if ending:
            text.append(" [", style="dim")
            text.append_text(Text(" ").join(ending))
            text.append("]", style="dim")
    return text


def _shown_relations(result: EvaluationResult) -> list[Relation]:
    """Every verdict, but `stale` only where a claim is stale: most traces carry no dates, and the
    legend must fit one line."""
    present = {j.relation for j in result.faithfulness}
    return [r for r in Relation if r is not Relation.stale or r in present]


def _legend(result: EvaluationResult) -> Text:
    """What the colours and marks of the response mean, and which claims could not be placed in it."""
    entries = [Text.assemble((f"{_RELATION_MARK[r]} {RELATION_LABEL[r]}", _RELATION_STYLE[r]),
                             (f" ({_RELATION_MEANS[r]})", "dim")) for r in _shown_relations(result)]
    judged = _judgments(result)
    if any(c.id not in judged for c in result.claims):
        entries.append(Text("? not judged", style=_UNJUDGED_STYLE))
    if result.gaps:
        entries.append(Text("gap: says the documents lack something", style=_GAP_STYLE))
    legend = Text.assemble(("legend ", "dim"), Text("  ").join(entries))
    unplaced = [c.id for c in result.claims if _span(c.char_start, c.char_end, len(result.response)) is None]
    if unplaced:
        legend.append_text(Text.assemble(("\nnot located in the response (reworded by the judge): ", "dim"),
                                         _ids(unplaced)))
    return legend


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
            unsupported = judged.relation is Relation.unsupported
            evidence = (Text("no chunk supports it", style="dim") if unsupported and not judged.grounding_chunk_ids
                        else Text.assemble(_ids(judged.grounding_chunk_ids)))
            if judged.contradicting_chunk_ids:
                by = " changed later by " if judged.relation is Relation.stale else " contradicted by "
                evidence = Text.assemble(evidence, by, _ids(judged.contradicting_chunk_ids))
            for dated in judged.dates:
                said = f" “{one_line(dated.quote, 60)}”" if dated.quote else " (its metadata)"
                evidence = Text.assemble(evidence, "\n", ("dated ", "dim"), literal(dated.chunk_id, "cyan"), " ",
                                         literal(dated.date), literal(said, "dim"))
            evidence.append_text(_why(judged.reasoning))
            for quote in judged.evidence[:2]:
                # For an unsupported claim a quote is the nearest passage the judge found, not support.
                evidence = Text.assemble(evidence, "\n", ("nearest " if unsupported else ""),
                                         literal(quote.chunk_id, "cyan"), ": “",
                                         literal(one_line(quote.quote, 100), "italic"), "”")
            table.add_row(literal(claim.id, "cyan"), verdict, literal(claim.text), evidence)
        parts.append(table)
    for gap in result.gaps:
        parts.append(Text.assemble(literal(gap.id, "cyan"), " gap: ", literal(gap.text, "italic")))
    for remark in result.remarks:
        parts.append(Text.assemble(literal(remark.id, "cyan"), " remark (not graded): ",
                                   literal(remark.text, "italic")))
    return Group(*parts)


def _completeness(result: EvaluationResult, said: Description) -> RenderableType:
    comp = result.completeness
    if comp is None:
        return Text("not judged", style="dim")
    lines: list[RenderableType] = [literal(line) for line in said.completeness]
    if comp.reasoning:
        # The judge's own words come before grounding is checked: said so, so they cannot read as a contradiction.
        lines.append(Text.assemble(("judge's notes (before grounding is checked): ", "dim"),
                                   literal(comp.reasoning, "dim")))
    return Group(*lines)


def _context(result: EvaluationResult) -> RenderableType:
    if not result.context:
        return Text("(empty: retrieval returned nothing)", style="dim")
    # The retriever's rank and score, when any chunk has them: what a RAG engineer checks first.
    ranked = any(c.rank is not None or c.score is not None for c in result.context)
    table = Table("id", *(("rank", "score") if ranked else ()), "source", "text", box=None, pad_edge=False)
    for chunk in result.context:
        preview = chunk.text if len(chunk.text) <= _CHUNK_PREVIEW else chunk.text[:_CHUNK_PREVIEW] + "…"
        retrieval = (str(chunk.rank) if chunk.rank is not None else "—",
                     f"{chunk.score:.3g}" if chunk.score is not None else "—") if ranked else ()
        table.add_row(literal(chunk.id, "cyan"), *retrieval, literal(chunk.source or "—", "dim"), literal(preview))
    return table


def fmt_latency(latency: Mapping[str, float]) -> str:
    """`812 ms (retrieval 120 ms, generation 690 ms)` from {part: ms}; parts not recorded are left out."""
    total = latency.get("total")
    parts = ", ".join(f"{part} {latency[part]:,.0f} ms" for part in ("retrieval", "generation") if part in latency)
    if total is None:
        return parts or "—"
    return f"{total:,.0f} ms" + (f" ({parts})" if parts else "")


def _usage(result: EvaluationResult) -> Text:
    u = result.usage
    phases = "  ".join(f"{phase} {ms:.0f} ms" for phase, ms in result.latency_ms.items())
    from veralith.llm.local.about import about

    return Text.assemble("judge ", literal(f"{result.backend} ({result.judge_model})"),
                         (f"\n{about()}" if result.backend == "local" else "", "dim"),
                         # Only the opt-in mode is named: a full-mode screen stays as it was.
                         ("\nmode fast: one call decomposed and judged at once (screening)"
                          if result.mode == "fast" else "", "yellow"),
                         f"\ncalls {u.calls}  cache hits {u.cache_hits}  tokens {u.input_tokens} in "
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
    if getattr(tally, "unchanged", 0):
        table.add_row("skipped", f"{tally.unchanged} already evaluated (same id, inputs and judges; "
                                 "--rejudge evaluates them again)")
    if getattr(tally, "without_id", 0):  # a re-run of the file would store (and pay for) them again
        table.add_row("no id", f"{tally.without_id} stored as new traces; give each record an `id` and a re-run "
                               "skips or re-judges it instead of adding it again")
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


def fmt_time(stored: str | None, *, now: dt.datetime, absolute: bool = False) -> str:
    """A stored UTC ISO time, compactly and the same in every time zone: `just now`, `12m ago`,
    `5h ago`, `6d ago`, then the date (`2026-10-03`); `absolute` gives `2026-10-03 14:05 UTC`."""
    if not stored:
        return "—"
    try:
        when = dt.datetime.fromisoformat(stored)
    except ValueError:
        return stored
    when = when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
    age = (now - when).total_seconds()
    if absolute or age < 0 or age >= 7 * 86400:  # a future time (clock skew) is shown as it is
        return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC" if absolute else "%Y-%m-%d")
    if age < 60:
        return "just now"
    unit, seconds = next((u, n) for u, n in (("d", 86400), ("h", 3600), ("m", 60)) if age >= n)
    return f"{int(age // seconds)}{unit} ago"


def one_line(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def fmt_age(seconds: float | None) -> str:
    """A duration the way a person reads a queue's age: 45 s, 12 min, 3.5 h, 2.0 d; — for none."""
    if seconds is None:
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def queue_view(queue: Mapping[str, Any]) -> Text:
    """`veralith stats`' queue line (veralith.store.queue.QueueFigures.as_dict): what waits and how old
    it is, what runs (and is stuck), what was set aside, and the pace and failures of the last 5 min."""
    stuck = f", {queue['stuck_running']:,} stuck past the lease timeout" if queue["stuck_running"] else ""
    oldest = f" (oldest {fmt_age(queue['oldest_pending_age_s'])})" if queue["pending"] else ""
    return Text(f"queue   pending {queue['pending']:,}{oldest}  running {queue['running']:,}{stuck}  "
                f"dead-lettered {queue['dead_lettered']:,}  failed {queue['failed']:,}\n"
                f"pace    {queue['judged_per_minute']:,.1f} judged/min, {queue['judge_errors_last_5m']:,} with judge "
                "errors (last 5 min; all knowledge bases)")


def stats_view(stats: Mapping[str, Any], judge: str = "") -> RenderableType:
    """`veralith stats`: cell distribution with bars, gates, mean fractions, cost, thresholds per KB;
    `judge` (one line about the configured judge) last."""
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
    review = stats.get("needs_review")  # a store that does not count them leaves the line out
    review_line = (f"review  {review} result(s) decided by a low-confidence verdict (`veralith list` marks "
                   "them; `inspect` shows which)\n" if review else "")
    aside = stats.get("dead_letters")
    if aside:
        review_line += (f"set aside  {aside} record(s) the store refused, in the dead-letter place "
                        "(`veralith dead-letters` lists them)\n")
    lines = Text(f"status  {status or '—'}\ngate    {gates or '—'}\n{review_line}"
                 f"mean sufficiency {fmt_fraction(stats['mean_sufficiency_fraction'])}  "
                 f"mean faithfulness {fmt_fraction(stats['mean_faithfulness_fraction'])}\n"
                 f"calls {stats['calls']}  tokens {stats['input_tokens']} in / {stats['output_tokens']} out  "
                 f"cost {usd}")
    ref = stats.get("reference")   # traces judged against a reference answer, when there are any
    if ref:
        lines.append("\nreference  " + "  ".join(f"{name} {n}" for name, n in ref["by_correctness"].items())
                     + f"  (of {ref['traces']} with a reference answer)  mean context recall "
                     f"{fmt_fraction(ref['mean_context_recall'])}  answer correctness "
                     f"{fmt_fraction(ref['mean_answer_correctness'])}")
    thresholds = Table("knowledge base", "threshold", "source", "complete_grounded traces", "review cut-off",
                       box=None, pad_edge=False, title="Sufficiency threshold and review flag", title_justify="left")
    for kb, info in stats["thresholds"].items():
        cutoff = info.get("review_cutoff")   # the cut-off the review flag uses (veralith.store.review_cutoff)
        flag = "–" if cutoff is None else (f"{cutoff:.2f} labels ({info['review_labels']})" if info.get("review_labels")
                                           else f"{cutoff:.2f} default")
        thresholds.add_row(literal(kb), f"{info['threshold']:.2f}", info["source"], str(info["calibration_traces"]),
                           flag)
    parts: list[RenderableType] = [dist, lines]
    if stats.get("queue"):   # veralith.store.queue, added by the CLI
        parts.append(queue_view(stats["queue"]))
    parts.append(thresholds)
    if stats.get("app_latency"):
        # The percentiles come from a histogram (veralith.store.histogram): say they are approximate, and how.
        bound = max(figures["relative_error"] for figures in stats["app_latency"].values())
        latency = Table("knowledge base", "p50 ≈", "p95 ≈", "traces", box=None, pad_edge=False,
                        title=f"App latency (the app's own time per call; p50/p95 from a histogram, within "
                              f"{bound:.0%})", title_justify="left")
        for kb, figures in stats["app_latency"].items():
            latency.add_row(literal(kb), f"{figures['p50']:,.0f} ms", f"{figures['p95']:,.0f} ms", str(figures["n"]))
        parts.append(latency)
    if judge:
        parts.append(Text(judge, "dim"))
    return Group(*parts)
