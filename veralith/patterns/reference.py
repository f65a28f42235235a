"""What the retriever keeps missing, read off the team's references (issue 42): two sections of `veralith
patterns`, over every judged trace of the scope that carries a reference (a fact the retriever never
returns is a retrieval fault even when the answer passed the gate).

- `missed_chunk`: an expected chunk (`reference_contexts`) that was not among the retrieved chunks,
  grouped by what was given: an id as it is, a chunk text with case and spacing aside (the rule
  veralith.pipeline.reference matches texts by). Ids Veralith assigns by position (`c0`, `c1`, ...)
  name a different chunk in every trace, so they make no group (the documents' rule of
  veralith.store.patterns).
- `missed_fact`: a reference fact whose context-recall verdict is "not supported by the retrieved
  context", grouped by its text (case, spacing and final punctuation aside); the missed facts left
  over are clustered into topics by the words they share, with the judged facts as the baseline, by
  the topic section's own rule (veralith.patterns.topics).

A group needs `min_traces` traces, as every section's groups do; groups are ranked by the traces they
count, then by how often the miss shows, then by name. An empty section says why: no reference in
the scope, none of the kind, none missed, or each miss in fewer traces than a group needs.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from veralith.patterns import fixes
from veralith.patterns.topics import cluster
from veralith.store import ops

if TYPE_CHECKING:
    from veralith.patterns.core import Group, Section
    from veralith.store.patterns import PatternScope
    from veralith.store.protocol import Store
    from veralith.store.reference_patterns import ExpectedFigures, ReferenceCounts

__all__ = ["KINDS", "reference_sections"]

KINDS = ("missed_chunk", "missed_fact")
TITLES = {"missed_chunk": "Expected chunks the retriever keeps missing",
          "missed_fact": "Reference facts the retriever keeps missing"}
RULES = {
    "missed_chunk": "judged traces with a reference whose expected chunk (reference_contexts, by id or text) was "
                    "not among the retrieved chunks, failing or not",
    "missed_fact": "judged traces with a reference answer in which a reference fact is not supported by the "
                   "retrieved context (its context-recall verdict), failing or not; grouped by the fact's text, "
                   "the rest by the words they share (each trace in one topic)",
}
UNIT = "traces with a reference"
_POSITIONAL = re.compile(r"c\d+")
_SPACE = re.compile(r"\s+")
_KEY_WIDTH = 160   # an expected chunk given as a long text is named by its start
_LISTED = 3
_CORRECTNESS = {"stated": "the answer states it anyway (from outside the context)",
                "contradicted": "the answer contradicts it", "missing": "the answer leaves it out"}


def reference_sections(store: Store, scope: PatternScope, *, limit: int, examples: int, min_traces: int,
                       sample: int) -> list[Section]:
    """The two sections, each cut to `limit` ranked groups with up to `examples` examples per group."""
    from veralith.patterns.core import Example, Group, Section

    counts = store.read(ops.reference_counts, scope)
    sections = []
    for kind in KINDS:
        empty = _empty(kind, counts)
        drafts: list[tuple[Group, tuple[Any, ...], list[tuple[int, str]]]] = []
        below = None
        if empty is None and kind == "missed_chunk":
            drafts, below = _chunk_groups(store, scope, min_traces, Group)
        elif empty is None:
            missed, baseline = store.read(ops.missed_facts, scope, sample=sample)
            drafts, alone = _fact_groups(missed, baseline, min_traces, Group)
            below = (f"{alone} trace(s) with a missed fact are in no group: fewer than {min_traces} traces share "
                     "its text or a topic's words") if alone else None
        shown = sorted(drafts, key=lambda d: d[1])[:limit]
        if kind == "missed_chunk" and shown:
            found = _chunk_examples(store, scope, [g for g, _, _ in shown], per_group=examples)
            shown = [(g, rank, lines) for (g, rank, _), lines in zip(shown, found, strict=True)]
        groups = [replace(g, examples=[Example(t, why) for t, why in refs[:examples]]) for g, _, refs in shown]
        sections.append(Section(kind, TITLES[kind], RULES[kind], groups, len(drafts), min_traces=min_traces,
                                below=below, unit=UNIT, empty=empty))
    return sections


def _chunk_groups(store: Store, scope: PatternScope, min_traces: int, group: Any
                  ) -> tuple[list[Any], str | None]:
    merged, positional = _merge(store.read(ops.expected_figures, scope))
    drafts: list[Any] = []
    short: list[tuple[str, int]] = []
    for key, f in merged.items():
        if f["missed"] < min_traces:
            short.append((f["shown"], f["missed"]))
            continue
        fix = fixes.missed_chunk_fix(f["shown"], retrieved_sometimes=f["missed"] < f["expected"])
        drafts.append((group("missed_chunk", f["shown"], f["missed"], detail=_chunk_detail(f), fix=fix,
                             figures={k: v for k, v in f.items() if k != "shown"}),
                       (-f["missed"], -f["expected"], key), []))
    return drafts, _below(short, positional)


def _chunk_examples(store: Store, scope: PatternScope, shown: list[Group], *, per_group: int
                    ) -> list[list[tuple[int, str]]]:
    """Example lines for each expected-chunk group shown, in order: (trace id, why), newest first."""
    givens = [given for g in shown for given in g.figures["variants"]]
    found = store.read(ops.expected_examples, scope, givens, per_given=per_group)
    out = []
    for g in shown:
        rows = sorted({row for given in g.figures["variants"] for row in found.get(given, [])}, key=lambda r: -r[0])
        out.append([(trace_id, "expected chunk not retrieved; correctness against the reference: "
                     + (layer.replace("_", " ") if layer else "not judged"))
                    for trace_id, layer in rows[:per_group]])
    return out


# --- internals ----------------------------------------------------------------------------------


def _empty(kind: str, c: ReferenceCounts) -> str | None:
    """Why a reference section can hold nothing at all (None: it may)."""
    if c.traces == 0:
        return "no judged trace here has a reference (give reference / reference_contexts with the traces)"
    if kind == "missed_chunk":
        lacking = None if c.with_expected else "names expected chunks (reference_contexts)"
        clean = f"all {c.expected} expected chunk(s) of {c.with_expected} trace(s) were retrieved"
        missed = c.expected_missed
    else:
        lacking = None if c.with_facts else ("has a reference fact with a context-recall verdict (a reference "
                                             "answer, split into facts and judged)")
        clean = f"the retrieved context supported all {c.facts} reference fact(s) of {c.with_facts} trace(s)"
        missed = c.facts_missed
    if lacking is not None:
        return f"none of the {c.traces} judged trace(s) with a reference {lacking}"
    return None if missed else f"none missed: {clean}"


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


def _merge(rows: list[ExpectedFigures]) -> tuple[dict[str, dict[str, Any]], int]:
    """The expected chunks' figures merged by key (an id as given; a text normalised), and how many
    positional ids were left out."""
    merged: dict[str, dict[str, Any]] = {}
    positional = 0
    for row in rows:
        if _POSITIONAL.fullmatch(row.given):
            positional += 1
            continue
        key = _norm(row.given) if _SPACE.search(row.given.strip()) else row.given
        into = merged.setdefault(key, {"shown": _shown(row.given), "variants": [], "expected": 0, "missed": 0,
                                       "missed_failing": 0, "best_rank": None, "worst_rank": None})
        into["variants"].append(row.given)
        into["expected"] += row.expected
        into["missed"] += row.missed
        into["missed_failing"] += row.missed_failing
        ranks = [r for r in (row.best_rank, row.worst_rank, into["best_rank"], into["worst_rank"]) if r is not None]
        if ranks:
            into["best_rank"], into["worst_rank"] = min(ranks), max(ranks)
    return merged, positional


def _shown(given: str) -> str:
    flat = " ".join(given.split())
    return flat if len(flat) <= _KEY_WIDTH else flat[:_KEY_WIDTH - 1] + "…"


def _chunk_detail(f: dict[str, Any]) -> str:
    said = (f"expected by {f['expected']} trace(s), not retrieved in {f['missed']} "
            f"({f['missed_failing']} failing the gate)")
    retrieved = f["expected"] - f["missed"]
    if retrieved <= 0:
        return said + "; never retrieved"
    if f["best_rank"] is None:
        return said + f"; retrieved in {retrieved} (rank not known)"
    ranks = str(f["best_rank"]) if f["best_rank"] == f["worst_rank"] else f"{f['best_rank']}–{f['worst_rank']}"
    return said + f"; retrieved in {retrieved}, at rank {ranks}"


def _fact_groups(missed: list[tuple[int, str, str, bool, str | None]], baseline: list[tuple[bool, str]],
                 min_traces: int, group: Any) -> tuple[list[Any], int]:
    """Groups of missed facts: by text first, then the rest by topic; and how many traces with a missed
    fact are in no group."""
    by_text: dict[str, list[tuple[int, str, str, bool, str | None]]] = {}
    for row in missed:
        by_text.setdefault(_norm(row[2]).rstrip(".!;: "), []).append(row)
    out, rest, alone = [], [], 0
    for key, rows in by_text.items():
        traces = {r[0] for r in rows}
        if len(traces) < min_traces:
            rest += rows
            continue
        shown = Counter(r[2].strip() for r in rows).most_common(1)[0][0]
        out.append((group("missed_fact", _shown(shown), len(traces), detail=_fact_detail(rows, traces),
                          fix=fixes.missed_fact_fix(_shown(shown)), figures=_fact_figures(rows, traces)),
                    (-len(traces), -len(rows), key), _fact_examples(rows)))
    if rest:
        by_id = {(r[0], r[1]): r for r in rest}
        topics = cluster([(r[0], r[1], r[2]) for r in rest], baseline, min_traces=min_traces)
        alone = len({r[0] for r in rest} - {t for topic in topics for t in topic.trace_ids})
        for topic in topics:
            rows = [by_id[(t, topic.sub_questions[t])] for t in topic.trace_ids]
            members = set(topic.trace_ids)
            label = "about " + " · ".join(topic.words)
            out.append((group("missed_fact", label, len(members), detail=_fact_detail(rows, members),
                              fix=fixes.missed_fact_fix(label, words=topic.words), terms=topic.words,
                              figures={**_fact_figures(rows, members), "words": list(topic.words),
                                       "miss_rate": topic.miss_rate, "base_rate": topic.base_rate}),
                        (-len(members), -topic.n_sub_questions, label), _fact_examples(rows)))
    return out, alone


def _fact_figures(rows: list[tuple[int, str, str, bool, str | None]], traces: set[int]) -> dict[str, Any]:
    answered = Counter(r[4] or "not_judged" for r in rows)
    return {"traces": len(traces), "facts": len(rows), "failing": len({r[0] for r in rows if r[3]}),
            "answer": dict(sorted(answered.items()))}


def _fact_detail(rows: list[tuple[int, str, str, bool, str | None]], traces: set[int]) -> str:
    answered = Counter(r[4] for r in rows)
    how = ", ".join(f"{answered[k]} {k}" for k in ("stated", "contradicted", "missing") if answered[k])
    failing = len({r[0] for r in rows if r[3]})
    return (f"not supported by the retrieved context in {len(traces)} trace(s) ({failing} failing the gate)"
            + (f"; the answer: {how}" if how else ""))


def _fact_examples(rows: list[tuple[int, str, str, bool, str | None]]) -> list[tuple[int, str]]:
    seen, out = set(), []
    for trace_id, fact_id, text, _, correctness in sorted(rows, key=lambda r: -r[0]):
        if trace_id in seen:
            continue
        seen.add(trace_id)
        then = _CORRECTNESS.get(correctness or "", "the answer was not judged against it")
        out.append((trace_id, f"fact {fact_id} \"{' '.join(text.split())}\" is not in the retrieved context; {then}"))
    return out


def _below(short: list[tuple[str, int]], positional: int) -> str | None:
    parts = []
    if short:
        ranked = sorted(short, key=lambda item: (-item[1], item[0]))
        listed = ", ".join(f"{what} ({n})" for what, n in ranked[:_LISTED])
        more = f" and {len(ranked) - _LISTED} more" if len(ranked) > _LISTED else ""
        parts.append(f"{len(ranked)} expected chunk(s) were missed in fewer: {listed}{more}")
    if positional:
        parts.append(f"{positional} expected chunk id(s) are positions (c0, c1, …) that name a different chunk "
                     "in every trace")
    return "; ".join(parts) or None
