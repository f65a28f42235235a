"""The aggregates behind `veralith patterns`: failing traces grouped by what they share.

Every function reads a few aggregate queries over a *scope* (a knowledge base, a run, a time
window: `PatternScope`), in the SQL both stores share, so the grouping costs a handful of scans
however many traces there are (benchmarks/patterns_scale.py). What cannot be decided in SQL the
same way on both stores (the words of a sub-question, the kind of a claim) is returned as rows for
veralith.patterns to work on, and those rows are only the failing ones. Examples are read for the
few groups that are shown, never for all of them.

A *document* is a chunk's `source`, else its chunk id when the caller gave one: the ids Veralith
assigns by position (`c0`, `c1`, ... for chunk 0, 1, ...) name no document, so such a chunk
without a source belongs to none. A trace is *failing* when its stored result's gate is `fail`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from veralith.store.browse import TraceFilter
from veralith.store.sql import Db

__all__ = ["DocumentFigures", "PatternScope", "bad_claims", "common_suggestions", "document_examples",
           "document_figures", "question_rows", "scope_counts"]

# The document a chunk row `c` belongs to (see the module docstring); NULL for none.
DOCUMENT = ("CASE WHEN c.source IS NOT NULL AND c.source <> '' THEN c.source"
            " WHEN c.chunk_id <> 'c' || CAST(c.position AS TEXT) THEN c.chunk_id END")


@dataclass(frozen=True)
class PatternScope:
    """Which traces are looked at: all with a stored result, or only those of a knowledge base, of a
    run (the traces it judged or logged, veralith.store.browse.TraceFilter's rule), created at or
    after `since` and before `until` (UTC ISO text as stored)."""

    knowledge_base: str | None = None
    run_id: int | None = None
    since: str | None = None
    until: str | None = None

    def traces(self, db: Db, *, failing: bool) -> tuple[str, list[Any]]:
        """`SELECT id FROM traces WHERE ...` for the scope (only failing traces when `failing`) and
        its parameters."""
        clauses, params = TraceFilter(kb=self.knowledge_base, run=self.run_id,
                                      gate="fail" if failing else None).where(db.dialect)
        if not failing:
            clauses.append("quality_gate IS NOT NULL")
        if self.since is not None:
            clauses.append("created_at >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append("created_at < ?")
            params.append(self.until)
        return "SELECT id FROM traces WHERE " + " AND ".join(clauses), params

    def judged(self, db: Db) -> tuple[str, list[Any]]:
        """`SELECT id, failing FROM traces WHERE ...`: the scope's traces with a result, `failing` 1
        for a failing one, else 0. Joined to (not filtered by an IN list of) the rows of a trace, it
        decides scope and failure in one pass: half the time of two IN lists on 100,000 traces."""
        sql, params = self.traces(db, failing=False)
        return sql.replace("SELECT id FROM", "SELECT id, CASE WHEN quality_gate = 'fail' THEN 1 ELSE 0 END AS failing"
                           " FROM", 1), params


@dataclass(frozen=True)
class DocumentFigures:
    """One document's figures in a scope."""

    document: str
    retrieved: int             # traces that retrieved it
    retrieved_failing: int     # ... of which failing
    grounding: int             # traces where it supports a claim
    contradicting: int         # failing traces where it contradicts a claim
    contradictions: int        # claim links behind those (a chunk that contradicts two claims counts twice)


def scope_counts(db: Db, scope: PatternScope) -> dict[str, int]:
    """Traces with a result and failing traces in the scope; for a run, also how many of its traces
    a later run has judged again (their stored result is that later one)."""
    out: dict[str, int] = {}
    with db.read():
        for name, failing in (("traces", False), ("failing", True)):
            sql, params = scope.traces(db, failing=failing)
            out[name] = int(db.execute(f"SELECT COUNT(*) FROM ({sql}) AS scoped", params).fetchone()[0])
        if scope.run_id is not None:
            out["judged_since"] = int(db.execute(
                "SELECT COUNT(*) FROM run_traces r JOIN traces t ON t.id = r.trace_id"
                " WHERE r.run_id = ? AND (t.run_id IS NULL OR t.run_id <> ?)", [scope.run_id, scope.run_id]
            ).fetchone()[0])
    return out


def document_figures(db: Db, scope: PatternScope) -> list[DocumentFigures]:
    """Every document retrieved in the scope with its figures (two scans: the chunks, the links)."""
    judged, params = scope.judged(db)
    figures: dict[str, list[int]] = {}
    with db.read():
        for doc, retrieved, retrieved_failing in db.execute(
                "SELECT doc, COUNT(*), SUM(failing) FROM"
                f" (SELECT DISTINCT {DOCUMENT} AS doc, c.trace_id, t.failing FROM ({judged}) AS t"
                " JOIN context_chunks c ON c.trace_id = t.id) AS retrieved WHERE doc IS NOT NULL GROUP BY doc",
                params):
            figures[doc] = [int(retrieved), int(retrieved_failing or 0), 0, 0, 0]
        for doc, grounding, contradicting, contradictions in db.execute(
                "SELECT doc, COUNT(DISTINCT CASE WHEN kind = 'supports' THEN trace_id END),"
                " COUNT(DISTINCT CASE WHEN kind = 'contradicts' AND failing = 1 THEN trace_id END),"
                " SUM(CASE WHEN kind = 'contradicts' AND failing = 1 THEN 1 ELSE 0 END) FROM"
                f" (SELECT {DOCUMENT} AS doc, g.trace_id, g.kind, t.failing FROM ({judged}) AS t"
                " JOIN grounding g ON g.trace_id = t.id"
                " JOIN context_chunks c ON c.trace_id = g.trace_id AND c.chunk_id = g.chunk_id) AS links"
                " WHERE doc IS NOT NULL GROUP BY doc", params):
            row = figures.setdefault(doc, [0, 0, 0, 0, 0])
            row[2:] = [int(grounding or 0), int(contradicting or 0), int(contradictions or 0)]
    return [DocumentFigures(doc, *row) for doc, row in figures.items()]


def document_examples(db: Db, scope: PatternScope, documents: Sequence[str], *, contradicting: bool,
                      per_document: int) -> dict[str, list[tuple[int, str]]]:
    """For each of `documents`, up to `per_document` failing traces, newest first, as (trace id,
    chunk id): traces where its chunk contradicts a claim (`contradicting`), else traces that
    retrieved it."""
    if not documents:
        return {}
    failing, params = scope.traces(db, failing=True)
    marks = ",".join("?" * len(documents))
    if contradicting:
        rows = ("SELECT DISTINCT {doc} AS doc, g.trace_id, g.chunk_id FROM grounding g JOIN context_chunks c"
                " ON c.trace_id = g.trace_id AND c.chunk_id = g.chunk_id"
                " WHERE g.kind = 'contradicts' AND g.trace_id IN ({failing})")
    else:
        rows = ("SELECT DISTINCT {doc} AS doc, c.trace_id, c.chunk_id FROM context_chunks c"
                " WHERE c.trace_id IN ({failing})")
    sql = (f"SELECT doc, trace_id, chunk_id FROM (SELECT doc, trace_id, chunk_id,"
           " ROW_NUMBER() OVER (PARTITION BY doc ORDER BY trace_id DESC, chunk_id) AS n"
           f" FROM ({rows.format(doc=DOCUMENT, failing=failing)}) AS found WHERE doc IN ({marks})) AS ranked"
           " WHERE n <= ? ORDER BY doc, trace_id DESC, chunk_id")
    out: dict[str, list[tuple[int, str]]] = {doc: [] for doc in documents}
    for doc, trace_id, chunk_id in db.execute(sql, [*params, *documents, per_document]):
        if not out[doc] or out[doc][-1][0] != trace_id:  # one example per trace
            out[doc].append((int(trace_id), chunk_id))
    return out


def question_rows(db: Db, scope: PatternScope, *, sample: int) -> tuple[list[tuple[int, str, str]],
                                                                           list[tuple[bool, str]]]:
    """The sub-questions of failing traces whose context did not suffice, as (trace id, sub-question
    id, text); and, to tell a topic retrieval misses from one that is merely common, the newest
    `sample` judged sub-questions of the whole scope as (sufficient, text)."""
    failing, failing_params = scope.traces(db, failing=True)
    every, every_params = scope.traces(db, failing=False)
    join = ("FROM sufficiency_judgments j JOIN sub_questions s"
            " ON s.trace_id = j.trace_id AND s.sub_question_id = j.sub_question_id")
    with db.read():
        missed = [(int(t), q, text) for t, q, text in db.execute(
            f"SELECT s.trace_id, s.sub_question_id, s.text {join}"
            f" WHERE j.verdict = 'N' AND j.trace_id IN ({failing}) ORDER BY s.trace_id, s.position", failing_params)]
        judged = [(verdict == "Y", text) for verdict, text in db.execute(
            f"SELECT j.verdict, s.text {join} WHERE j.trace_id IN ({every})"
            " ORDER BY j.trace_id DESC, j.position DESC LIMIT ?", [*every_params, sample])]
    return missed, judged


def bad_claims(db: Db, scope: PatternScope) -> list[tuple[int, str, str, str]]:
    """The claims of failing traces that are not grounded, as (trace id, claim id, relation, text)."""
    failing, params = scope.traces(db, failing=True)
    return [(int(t), k, relation, text or "") for t, k, relation, text in db.execute(
        "SELECT f.trace_id, f.claim_id, f.relation, c.text FROM faithfulness_judgments f"
        " LEFT JOIN claims c ON c.trace_id = f.trace_id AND c.claim_id = f.claim_id"
        f" WHERE f.verdict = 'N' AND f.trace_id IN ({failing}) ORDER BY f.trace_id, f.position", params)]


def common_suggestions(db: Db, trace_ids: Iterable[int]) -> list[tuple[str, str, int]]:
    """The stored suggestions of these traces, most common first, as (title, summary, traces)."""
    ids = sorted(set(trace_ids))
    counts: dict[tuple[str, str], int] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for title, summary, n in db.execute(
                "SELECT suggestion_title, suggestion_summary, COUNT(*) FROM traces"
                f" WHERE id IN ({','.join('?' * len(chunk))}) AND suggestion_title IS NOT NULL"
                " GROUP BY suggestion_title, suggestion_summary", chunk):
            counts[(title, summary or "")] = counts.get((title, summary or ""), 0) + int(n)
    return [(t, s, n) for (t, s), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
