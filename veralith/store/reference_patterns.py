"""The aggregates behind `veralith patterns`' reference sections: expected chunks and reference facts the
retriever keeps missing (issue 42), over the judged traces of a scope (veralith.store.patterns.PatternScope)
that carry a reference.

Unlike the other sections these look at every judged trace with a reference, not only the failing
ones: a fact the retriever never returns is a retrieval fault even when the answer passed the gate
(it may have passed by saying something else). The expected chunks are counted in SQL, grouped by what
was given (an id or a text, exactly as stored: a golden set repeats it verbatim); the facts whose
context-recall verdict is `not_retrieved` come back as rows, because grouping their texts needs the
word rules (veralith.patterns), and those rows are only the missed ones, with a bounded sample of the
judged facts as the baseline the topics need. Examples are read for the groups shown only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from veralith.store.patterns import PatternScope
from veralith.store.sql import Db

__all__ = ["ExpectedFigures", "ReferenceCounts", "expected_examples", "expected_figures", "missed_facts",
           "reference_counts"]


@dataclass(frozen=True)
class ReferenceCounts:
    """What the scope holds to judge retrieval against: why a reference section may be empty."""

    traces: int                # judged traces with a reference (an answer, expected chunks, or both)
    with_facts: int            # ... whose reference answer was split into facts with a recall verdict
    with_expected: int         # ... that name expected chunks
    facts: int                 # facts with a recall verdict
    facts_missed: int          # ... not supported by the retrieved context
    expected: int              # expected chunks
    expected_missed: int       # ... never retrieved


@dataclass(frozen=True)
class ExpectedFigures:
    """One expected chunk (as given) in a scope."""

    given: str
    expected: int              # traces that expect it
    missed: int                # ... in which it was not retrieved
    missed_failing: int        # ... of which failing the gate
    best_rank: int | None      # the best and worst rank it was retrieved at (None: never, or no rank known)
    worst_rank: int | None


def reference_counts(db: Db, scope: PatternScope) -> ReferenceCounts:
    """The scope's reference figures, in one query driven by the traces with a reference (each one's
    facts and expected chunks counted once per trace, the scope checked once per trace); nothing is
    read when the store holds no reference at all, the common case, so then it costs a scope nothing."""
    scoped, params = scope.traces(db, failing=False)
    with db.read():
        if db.execute("SELECT 1 FROM trace_references LIMIT 1").fetchone() is None:
            return ReferenceCounts(0, 0, 0, 0, 0, 0, 0)
        row = db.execute(
            "SELECT COUNT(*), SUM(CASE WHEN f.n > 0 THEN 1 ELSE 0 END), SUM(CASE WHEN e.n > 0 THEN 1 ELSE 0 END),"
            " SUM(f.n), SUM(f.missed), SUM(e.n), SUM(e.missed) FROM trace_references r"
            " LEFT JOIN (SELECT trace_id, COUNT(*) AS n, SUM(CASE WHEN recall = 'not_retrieved' THEN 1 ELSE 0 END)"
            " AS missed FROM reference_facts WHERE recall IS NOT NULL GROUP BY trace_id) AS f"
            " ON f.trace_id = r.trace_id"
            " LEFT JOIN (SELECT trace_id, COUNT(*) AS n, SUM(CASE WHEN chunk_id IS NULL THEN 1 ELSE 0 END) AS missed"
            " FROM expected_contexts GROUP BY trace_id) AS e ON e.trace_id = r.trace_id"
            f" WHERE r.trace_id IN ({scoped})", params).fetchone()
    return ReferenceCounts(*(int(v or 0) for v in row))


def expected_figures(db: Db, scope: PatternScope) -> list[ExpectedFigures]:
    """Every expected chunk given in the scope and missed at least once, with its figures (one scan)."""
    judged, params = scope.judged(db)
    rows = db.execute(
        "SELECT e.given, COUNT(DISTINCT e.trace_id),"
        " COUNT(DISTINCT CASE WHEN e.chunk_id IS NULL THEN e.trace_id END),"
        " COUNT(DISTINCT CASE WHEN e.chunk_id IS NULL AND t.failing = 1 THEN e.trace_id END),"
        " MIN(e.rank), MAX(e.rank)"
        f" FROM ({judged}) AS t JOIN expected_contexts e ON e.trace_id = t.id GROUP BY e.given"
        " HAVING SUM(CASE WHEN e.chunk_id IS NULL THEN 1 ELSE 0 END) > 0", params).fetchall()
    return [ExpectedFigures(given, int(n), int(missed), int(failing or 0),
                            None if best is None else int(best), None if worst is None else int(worst))
            for given, n, missed, failing, best, worst in rows]


def expected_examples(db: Db, scope: PatternScope, givens: Sequence[str], *, per_given: int
                      ) -> dict[str, list[tuple[int, str | None]]]:
    """For each of `givens`, up to `per_given` traces that missed it, newest first, as (trace id, the
    trace's correctness layer or None)."""
    if not givens:
        return {}
    judged, params = scope.judged(db)
    marks = ",".join("?" * len(givens))
    sql = ("SELECT given, trace_id, correctness FROM (SELECT e.given, e.trace_id, r.correctness,"
           " ROW_NUMBER() OVER (PARTITION BY e.given ORDER BY e.trace_id DESC) AS n"
           f" FROM ({judged}) AS t JOIN expected_contexts e ON e.trace_id = t.id"
           " LEFT JOIN trace_references r ON r.trace_id = e.trace_id"
           f" WHERE e.chunk_id IS NULL AND e.given IN ({marks})) AS ranked WHERE n <= ? ORDER BY given, trace_id DESC")
    out: dict[str, list[tuple[int, str | None]]] = {given: [] for given in givens}
    for given, trace_id, correctness in db.execute(sql, [*params, *givens, per_given]):
        out[given].append((int(trace_id), correctness))
    return out


def missed_facts(db: Db, scope: PatternScope, *, sample: int
                 ) -> tuple[list[tuple[int, str, str, bool, str | None]], list[tuple[bool, str]]]:
    """The reference facts the retrieved context did not support, as (trace id, fact id, text, the trace
    fails the gate, the fact's answer-correctness verdict), newest trace first; and, as the baseline of
    their topics, the newest `sample` facts with a recall verdict as (retrieved, text)."""
    judged, params = scope.judged(db)
    join = f"FROM ({judged}) AS t JOIN reference_facts f ON f.trace_id = t.id"
    with db.read():
        missed: list[tuple[int, str, str, bool, Any]] = [
            (int(trace_id), fact_id, text, bool(failing), correctness)
            for trace_id, fact_id, text, failing, correctness in db.execute(
                f"SELECT f.trace_id, f.fact_id, f.text, t.failing, f.correctness {join}"
                " WHERE f.recall = 'not_retrieved' ORDER BY f.trace_id DESC, f.position", params)]
        baseline = [(recall == "retrieved", text) for recall, text in db.execute(
            f"SELECT f.recall, f.text {join} WHERE f.recall IS NOT NULL"
            " ORDER BY f.trace_id DESC, f.position DESC LIMIT ?", [*params, sample])]
    return missed, baseline
