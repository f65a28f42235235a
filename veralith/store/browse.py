"""Read-only queries behind `veralith serve`: a read-only connection, filtered keyset pages of traces,
a trace's neighbours in the same filter, and the per-knowledge-base and per-day figures of the overview.

Every function here only reads, on any store's connection (veralith.store.sql); the web view
opens its connections read-only.

Cost at a million traces (benchmarks/web_scale.py): a page walks one index newest-first
(`id` order; a cell filter walks `traces_failure_cell`, whose last column is the row id) and stops
after `limit + 1` matching rows, so it costs what the page holds, not what the table holds; a
position is the id of the last row shown (`before`/`after`), never an OFFSET. The per-day figures
read `trace_daily`, running totals kept by triggers (migrations/0008).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, fields, replace
from typing import Any

from veralith.models import CELLS, CELLS_BY_SEVERITY, NO_CELL, cell_name
from veralith.store.sql import Db, Dialect

__all__ = ["CELLS", "GATES", "SCAN_WINDOW", "SORTS", "Neighbours", "SortedPage", "TraceFilter", "TracePage",
           "count_traces", "daily_figures", "kb_figures", "knowledge_bases", "neighbours", "page_sorted", "page_traces",
           "run_cells", "run_labels", "trace_row"]

GATES = ("pass", "fail", "indeterminate")
_LIST_COLUMNS = ("id, created_at, status, knowledge_base, failure_cell, quality_gate, sufficiency_fraction,"
                 " faithfulness_fraction, usd, needs_review, external_id, substr(error_message, 1, 300) AS error,"
                 " substr(query, 1, 160) AS query_preview")


@dataclass(frozen=True)
class TraceFilter:
    """What the traces page and a trace's neighbour links select. Empty fields select everything.

    `since`/`until` are UTC dates (inclusive), `text` a case-insensitive (ASCII) substring of the
    query, the response, the external id or the metadata (as stored JSON). Values are validated by
    the caller (the web layer) before they get here.
    """

    cell: str | None = None       # a failure cell, or NO_CELL (a result without one)
    gate: str | None = None
    kb: str | None = None
    since: dt.date | None = None
    until: dt.date | None = None
    text: str | None = None
    run: int | None = None        # a run id: the traces it judged (eval) or logged (SDK)

    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    def without(self, name: str) -> TraceFilter:
        return replace(self, **{name: None})

    def totals_where(self) -> tuple[list[str], list[Any]] | None:
        """The same conditions on the running totals (trace_rollup, migrations/0002), or None when the
        filter needs what they do not keep (dates, a run, text)."""
        if self.since is not None or self.until is not None or self.run is not None or self.text:
            return None
        return self._columns(totals=True)

    def _columns(self, *, totals: bool) -> tuple[list[str], list[Any]]:
        """Cell, gate and knowledge base: columns of the traces and of their running totals alike,
        where the totals write '' for none."""
        clauses: list[str] = []
        params: list[Any] = []
        if self.cell == NO_CELL:  # a stored result without a cell
            clauses.append("failure_cell = '' AND quality_gate <> ''" if totals else
                           "failure_cell IS NULL AND quality_gate IS NOT NULL")
        elif self.cell is not None:
            clauses.append("failure_cell = ?")
            params.append(self.cell)
        if self.gate is not None:
            clauses.append("quality_gate = ?")
            params.append(self.gate)
        if self.kb is not None:
            clauses.append("knowledge_base = ?")
            params.append(self.kb)
        return clauses, params

    def where(self, dialect: Dialect) -> tuple[list[str], list[Any]]:
        """SQL conditions (ANDed) and their parameters; values are always bound, never spliced."""
        clauses, params = self._columns(totals=False)
        if self.since is not None:
            clauses.append("created_at >= ?")
            params.append(self.since.isoformat())
        if self.until is not None:
            clauses.append("created_at < ?")  # the day after: timestamps carry a time part
            params.append((self.until + dt.timedelta(days=1)).isoformat())
        if self.run is not None:
            # An eval run's own list (run_traces) and the traces that name the run (SDK runs, and
            # eval traces not re-judged since); as `rowid IN (...)` the page walks that list by id.
            clauses.append("id IN (SELECT trace_id FROM run_traces WHERE run_id = ? UNION"
                           " SELECT id FROM traces WHERE run_id = ?)")
            params += [self.run, self.run]
        if self.text:
            pattern = "%" + self.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            like = dialect.ilike
            clauses.append(f"(query {like} ? ESCAPE '\\' OR response {like} ? ESCAPE '\\' OR external_id {like} ?"
                           f" ESCAPE '\\' OR metadata {like} ? ESCAPE '\\')")
            params += [pattern] * 4
        return clauses, params


@dataclass(frozen=True)
class TracePage:
    rows: list[dict[str, Any]]     # newest first
    newer: int | None              # `after=` for the page of newer traces, None on the first page
    older: int | None              # `before=` for the page of older traces, None on the last page
    searched_to: int | None = None  # a text search stopped at this id (see SCAN_WINDOW); `older` goes on from it


# A text filter has no index to walk: each page (and each neighbour lookup) examines at most this
# many ids, then offers to go on, so a word that occurs nowhere costs one window, not the table.
SCAN_WINDOW = 50_000


# How the traces page may be ordered: the default walks ids newest first (see page_traces); "worst"
# walks WORST_CLASSES in turn (see _page_worst); the others walk (key, id) ascending, a missing
# fraction (no result yet) sorting after every value.
SORTS = {"oldest": "id", "worst": "", "faith": "COALESCE(faithfulness_fraction, 2.0)",
         "suff": "COALESCE(sufficiency_fraction, 2.0)"}
# "Worst first": failing traces, then indeterminate, then passing, and last those without a result;
# within a gate the worst cell first (veralith.models.CELLS_BY_SEVERITY); within a class, newest
# first. Each class is walked on the failure-cell index, so a page costs what it holds at any size.
WORST_CLASSES: tuple[tuple[str | None, str | None], ...] = (
    *((gate, cell) for gate in ("fail", "indeterminate", "pass") for cell in CELLS_BY_SEVERITY), (None, None))


@dataclass(frozen=True)
class SortedPage:
    rows: list[dict[str, Any]]
    next: tuple[float, int] | None   # the cursor of the next page, None on the last
    searched_to: int | None = None   # with a text filter: only ids from here up were searched


def page_sorted(db: Db, flt: TraceFilter, *, sort: str, limit: int = 50,
                cursor: tuple[float, int] | None = None) -> SortedPage:
    """One page of traces matching `flt` in `sort` order (a key of SORTS), from just after `cursor`
    (the (key, id) of the last row shown; None: the first page). Keyset, never OFFSET. With a text
    filter only the newest SCAN_WINDOW ids are searched (`searched_to` says from where)."""
    clauses, params = flt.where(db.dialect)
    searched_to = None
    if flt.text:
        high = db.execute("SELECT max(id) FROM traces").fetchone()[0] or 0
        low = db.execute("SELECT min(id) FROM traces").fetchone()[0] or 0
        floor = int(high) + 1 - SCAN_WINDOW
        if low < floor:
            clauses.append(f"id >= {floor}")
            searched_to = floor
    if sort == "worst":
        rows, after = _page_worst(db, clauses, params, limit, cursor)
        return SortedPage(rows, after, searched_to)
    key = SORTS[sort]
    if cursor is not None:
        clauses.append(f"({key}, id) > (?, ?)")
        params += [cursor[0], cursor[1]]
    sql = f"SELECT {_LIST_COLUMNS}, {key} AS sort_key FROM traces"
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    rows = list(db.query(sql + f" ORDER BY {key}, id LIMIT ?", [*params, limit + 1]))
    more = len(rows) > limit
    rows = rows[:limit]
    return SortedPage(rows, (rows[-1]["sort_key"], rows[-1]["id"]) if more else None, searched_to)


def _page_worst(db: Db, clauses: list[str], params: list[Any], limit: int,
                cursor: tuple[float, int] | None) -> tuple[list[dict[str, Any]], tuple[float, int] | None]:
    """Up to `limit` rows in WORST_CLASSES order from just after `cursor` (class index, last id shown),
    and the cursor of the next page (None on the last): one newest-first index walk per class."""
    rows: list[dict[str, Any]] = []
    start = 0 if cursor is None else int(cursor[0])
    for index in range(start, len(WORST_CLASSES)):
        gate, cell = WORST_CLASSES[index]
        where, args = list(clauses), list(params)
        if gate is None:   # no result: a done trace always has one, so the status index narrows it
            where += ["quality_gate IS NULL", "status IN ('pending', 'running', 'error')"]
        else:
            where += ["quality_gate = ?", "failure_cell IS NULL" if cell == NO_CELL else "failure_cell = ?"]
            args += [gate] if cell == NO_CELL else [gate, cell]
        if cursor is not None and index == start:
            where.append(f"id < {int(cursor[1])}")
        found = list(db.query(f"SELECT {_LIST_COLUMNS} FROM traces WHERE {' AND '.join(where)}"
                              " ORDER BY id DESC LIMIT ?", [*args, limit + 1 - len(rows)]))
        for row in found:
            row["sort_key"] = float(index)
        rows += found
        if len(rows) > limit:
            rows = rows[:limit]
            return rows, (rows[-1]["sort_key"], rows[-1]["id"])
    return rows, None


def count_traces(db: Db, flt: TraceFilter) -> int | None:
    """How many traces match `flt`; None with a text filter (it has no index: counting would read
    every trace, see SCAN_WINDOW). Unfiltered, or filtered by knowledge base, cell and gate only,
    the running totals answer at once; dates or a run count the matching traces."""
    if flt.text:
        return None
    totals = flt.totals_where()
    if totals is not None:
        # A sum over a few dozen rows of running totals instead of counting up to every trace's index entry.
        clauses, params = totals
        where = " WHERE " + " AND ".join(clauses) if clauses else ""
        return int(db.execute(f"SELECT COALESCE(SUM(n), 0) FROM trace_rollup{where}", params).fetchone()[0])
    clauses, params = flt.where(db.dialect)
    return int(db.execute("SELECT COUNT(*) FROM traces WHERE " + " AND ".join(clauses), params).fetchone()[0])


def page_traces(db: Db, flt: TraceFilter, *, limit: int = 50, before: int | None = None,
                after: int | None = None) -> TracePage:
    """One page of traces matching `flt`, newest (highest id) first.

    `before=ID` gives the traces just older than ID, `after=ID` those just newer (still shown
    newest first); neither gives the newest page. One extra row is read to know whether a
    further page exists, so a page costs `limit + 1` matches whatever the table's size. With a
    text filter a page examines at most SCAN_WINDOW ids: it may then hold fewer rows than `limit`
    and `searched_to` says where the search stopped (`older` continues from there).
    """
    if before is not None and after is not None:
        raise ValueError("give before or after, not both")
    clauses, params = flt.where(db.dialect)
    window = SCAN_WINDOW if flt.text else None
    if after is not None:
        rows, cut = _walk(db, clauses, params, after, "ASC", limit + 1, window)
        more_newer = len(rows) > limit or cut is not None
        rows = rows[:limit][::-1]
        newer = (rows[0]["id"] if rows else cut) if more_newer else None
        if not rows:
            return TracePage(rows, newer, after + 1)
        # Walking back towards the newest: an older page exists iff something older than its last row
        # matches (or the bounded search could not tell).
        found, cut = _walk(db, clauses, params, rows[-1]["id"], "DESC", 1, window)
        return TracePage(rows, newer, rows[-1]["id"] if found or cut is not None else None)
    rows, cut = _walk(db, clauses, params, before, "DESC", limit + 1, window)
    newer = (rows[0]["id"] if rows else before - 1) if before is not None else None
    if len(rows) > limit:
        return TracePage(rows[:limit], newer, rows[limit - 1]["id"])
    return TracePage(rows, newer, cut, searched_to=cut)


def _walk(db: Db, clauses: list[str], params: list[Any], start: int | None, order: str, limit: int,
          window: int | None) -> tuple[list[dict[str, Any]], int | None]:
    """Up to `limit` matching rows from `start` (exclusive; None: the newest) in `order`, and, when
    `window` bounded the search short of the table's end, the id it stopped at."""
    # Keyset conditions are built here from ints, never from request text.
    keyset: list[str] = []
    cut = None
    if order == "DESC":
        if start is not None:
            keyset.append(f"id < {int(start)}")
        if window is not None:
            # Two statements: SQLite answers a lone min() or max() from the index end, but not both at once.
            low = db.execute("SELECT min(id) FROM traces").fetchone()[0]
            high = db.execute("SELECT max(id) FROM traces").fetchone()[0]
            floor = (int(start) if start is not None else int(high or 0) + 1) - window
            keyset.append(f"id >= {floor}")
            cut = floor if low is not None and low < floor else None
    else:
        keyset.append(f"id > {int(start or 0)}")
        if window is not None:
            ceiling = int(start or 0) + window
            keyset.append(f"id <= {ceiling}")
            high = db.execute("SELECT max(id) FROM traces").fetchone()[0]
            cut = ceiling if high is not None and high > ceiling else None
    where = [*clauses, *keyset]
    sql = f"SELECT {_LIST_COLUMNS} FROM traces"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return list(db.query(sql + f" ORDER BY id {order} LIMIT ?", [*params, limit])), cut


@dataclass(frozen=True)
class Neighbours:
    newer: int | None              # the next newer trace of the filter, None when there is none
    older: int | None
    newer_unsearched: bool = False  # none within a text search's window, but newer traces remain unsearched
    older_unsearched: bool = False


def neighbours(db: Db, trace_id: int, flt: TraceFilter) -> Neighbours:
    """The traces next to `trace_id` among those matching `flt` (bounded like a page for a text filter)."""
    clauses, params = flt.where(db.dialect)
    window = SCAN_WINDOW if flt.text else None
    newer, newer_cut = _walk(db, clauses, params, trace_id, "ASC", 1, window)
    older, older_cut = _walk(db, clauses, params, trace_id, "DESC", 1, window)
    return Neighbours(newer[0]["id"] if newer else None, older[0]["id"] if older else None,
                      not newer and newer_cut is not None, not older and older_cut is not None)


def trace_row(db: Db, trace_id: int) -> dict[str, Any] | None:
    """The work state and inputs of one trace (status, times, error, kb, metadata, query, response,
    and where the schema has them its external id and the run that last wrote or judged it)."""
    rows = list(db.query("SELECT * FROM traces WHERE id = ?", [trace_id]))
    if not rows:
        return None
    row = rows[0]
    row.setdefault("external_id", None)
    row.setdefault("run_id", None)
    return row


def kb_figures(db: Db) -> dict[str, dict[str, Any]]:
    """Per knowledge base, from the running totals (`trace_rollup`): traces, stored results, counts by
    cell and by gate, pass rate (passes / results, None without results), known cost and the number
    of results whose cost is unknown. Cheap at any size: the totals are kept by triggers."""
    out: dict[str, dict[str, Any]] = {}
    for row in db.query("SELECT * FROM trace_rollup ORDER BY knowledge_base"):
        kb = out.setdefault(row["knowledge_base"], {"traces": 0, "results": 0, "by_cell": {}, "by_gate": {},
                                                     "usd": 0.0, "usd_unknown": 0})
        kb["traces"] += row["n"]
        kb["usd"] += row["usd"] or 0.0
        kb["usd_unknown"] += row["usd_unknown"] or 0
        if row["quality_gate"]:  # '' marks "no stored result"
            kb["results"] += row["n"]
            cell = cell_name(row["failure_cell"])
            kb["by_cell"][cell] = kb["by_cell"].get(cell, 0) + row["n"]
            kb["by_gate"][row["quality_gate"]] = kb["by_gate"].get(row["quality_gate"], 0) + row["n"]
    for kb in out.values():
        kb["pass_rate"] = kb["by_gate"].get("pass", 0) / kb["results"] if kb["results"] else None
    return out


def daily_figures(db: Db, *, days: int = 30) -> dict[str, Any]:
    """The last `days` UTC days that end on the newest day with a result: per (day, knowledge base)
    the results by cell and the passes, and per day the known cost and the results of unknown cost.
    A trace counts on the day it was created.

    {"days": [date, ...] oldest first, "by_kb": {kb: {day: {"cells": {cell: n}, "results": n,
    "passes": n}}}, "cost": {day: {"usd": float, "unknown": n}}}
    """
    # Running totals per (day, kb, cell, gate) kept by triggers (migrations/0008): a few rows a day.
    newest = db.execute("SELECT max(day) FROM trace_daily").fetchone()[0]
    if newest is None:
        return {"days": [], "by_kb": {}, "cost": {}}
    last = dt.date.fromisoformat(str(newest))
    first = last - dt.timedelta(days=max(1, days) - 1)
    by_kb: dict[str, dict[str, dict[str, Any]]] = {}
    cost: dict[str, dict[str, Any]] = {}
    rows = db.execute("SELECT day, knowledge_base, failure_cell, quality_gate, n, usd, usd_unknown FROM trace_daily"
                      " WHERE day >= ?", [first.isoformat()]).fetchall()
    for day, kb, cell, gate, n, usd, unknown in rows:
        slot = by_kb.setdefault(kb, {}).setdefault(day, {"cells": {}, "results": 0, "passes": 0})
        name = cell_name(cell)
        slot["cells"][name] = slot["cells"].get(name, 0) + n
        slot["results"] += n
        slot["passes"] += n if gate == "pass" else 0
        spent = cost.setdefault(day, {"usd": 0.0, "unknown": 0})
        spent["usd"] += usd or 0.0
        spent["unknown"] += unknown or 0
    return {"days": [(first + dt.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)],
            "by_kb": dict(sorted(by_kb.items())), "cost": cost}


def run_cells(db: Db, runs: list[tuple[int, str]]) -> dict[int, dict[str, Any]]:
    """Per run (id, source): its results by cell and its passes, in daily_figures' slot shape. An
    eval run is counted from its own copies (what it found), an SDK run from its traces as they are."""
    out: dict[int, dict[str, Any]] = {run_id: {"cells": {}, "results": 0, "passes": 0} for run_id, _ in runs}
    for source, table in (("eval", "run_traces"), ("sdk", "traces")):
        ids = [run_id for run_id, kind in runs if kind == source]
        if not ids:
            continue
        marks = ", ".join("?" for _ in ids)
        for run_id, cell, gate, n in db.execute(
                f"SELECT run_id, failure_cell, quality_gate, COUNT(*) FROM {table}"
                f" WHERE run_id IN ({marks}) AND quality_gate IS NOT NULL GROUP BY 1, 2, 3", ids).fetchall():
            slot = out[run_id]
            name = cell_name(cell)
            slot["cells"][name] = slot["cells"].get(name, 0) + n
            slot["results"] += n
            slot["passes"] += n if gate == "pass" else 0
    return out


def run_labels(db: Db, *, limit: int = 50) -> list[tuple[int, str]]:
    """(id, "#id name") of the newest runs, for a filter's choices (no totals: a few rows)."""
    return [(int(i), f"#{i}" + (f" {name}" if name else "")) for i, name in
            db.execute("SELECT id, name FROM runs ORDER BY id DESC LIMIT ?", [limit]).fetchall()]


def knowledge_bases(db: Db) -> list[str]:
    """Every knowledge base that has traces (from the running totals: a few rows)."""
    return [r[0] for r in db.execute("SELECT DISTINCT knowledge_base FROM trace_rollup ORDER BY 1").fetchall()]

