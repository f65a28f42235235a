"""Copy a whole history from one store into another (`veralith migrate --to URL`).

Everything a store holds is copied: traces with their context and every judgment, run membership
and runs, the history of superseded outcomes, reviewers' labels (veralith.store.labels), the judge-reply
cache, and the output sizes the dry
run learns from (veralith.store.outputsizes; a sum the target already has is kept as it is). The running totals and the
counts by value (calibration, app latency) are not copied: the target's own triggers build them as
the traces arrive.

Re-running a copy copies nothing twice. A trace is recognised by its `uid` (every trace has one,
veralith.store.repository), a run by its kind, name, start time and input, a cache entry by its
key. Where a copied trace goes is the caller's `place` (the work layer's allocator decides which
ids a copy may keep; its children, runs and history follow it). A trace whose (knowledge base,
external id) the target holds for another trace is a conflict: skipped and reported one by one
(`on_conflict="skip"`), or, with "fail", found before anything is copied and raised (CopyConflict).
Each batch of traces is written in one transaction, so an interrupted copy leaves whole traces only,
and running it again finishes it.
The copy ends by counting, in both stores, what should now be in both: `CopyReport.mismatches`.

A trace holding text no store can hold (a NUL character or a lone surrogate, as an older SQLite
history may: the rule of veralith.validate) is not copied: it is set aside in the target's dead-letter
place with its reason (veralith.store.deadletters, source `migrate`), counted as such, and the rest
is copied around it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veralith.errors import StoreError
from veralith.store import deadletters
from veralith.store.labels import copy_labels
from veralith.store.outputsizes import copy_output_sizes
from veralith.validate import unstorable

if TYPE_CHECKING:
    from veralith.store.sql import Db
    from veralith.store.sqlstore import SqlStore

__all__ = ["Conflict", "CopyConflict", "CopyReport", "copy_history"]

_BATCH = 500
# A trace's child tables, in the order foreign keys allow (completeness before its two children).
_CHILDREN = ("context_chunks", "sub_questions", "claims", "gaps", "remarks", "sufficiency_judgments",
             "faithfulness_judgments", "grounding", "judge_errors", "completeness", "completeness_mappings",
             "completeness_extras", "explanations", "trace_references", "reference_facts", "expected_contexts")


@dataclass(frozen=True)
class Conflict:
    """A source trace not copied: the target has another trace with its external id."""
    source_id: int
    knowledge_base: str
    external_id: str
    target_id: int

    def line(self) -> str:
        return (f"trace {self.source_id} not copied: the target's trace {self.target_id} has its external id "
                f"{self.external_id!r} in knowledge base {self.knowledge_base!r}")


class CopyConflict(StoreError):
    """`on_conflict="fail"` and the target holds some copied traces' external ids: nothing was copied."""

    def __init__(self, conflicts: list[Conflict]) -> None:
        first = conflicts[0]
        super().__init__(f"{len(conflicts):,} trace(s) of the source have an external id the target holds for "
                         f"another trace (first: {first.line()}); nothing was copied: use --on-conflict skip to "
                         "copy the rest")
        self.conflicts = conflicts


Place = Callable[[list[int], set[int]], dict[int, int]]


@dataclass
class CopyReport:
    traces: int = 0          # copied by this run
    skipped: int = 0         # already in the target
    renumbered: int = 0      # copied under a new id (theirs was taken, or may have been handed out, in the target)
    conflicts: list[Conflict] = field(default_factory=list)   # not copied: external id held by another trace
    runs: int = 0
    cache_entries: int = 0
    output_sizes: int = 0    # (task, model, prompt version) sums the dry run learns from, copied
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # what: (in the source, found in the target)
    set_aside: int = 0       # traces set aside by this run (text no store can hold)
    aside: dict[str, int] = field(default_factory=dict)  # what: of the source's, how many are in the dead-letter place

    @property
    def mismatches(self) -> dict[str, tuple[int, int]]:
        return {what: pair for what, pair in self.counts.items() if pair[0] != pair[1] + self.aside.get(what, 0)}


def copy_history(source: SqlStore, target: SqlStore, *, place: Place, report: Callable[[str], None] | None = None,
                 on_conflict: str = "skip") -> CopyReport:
    """Copy everything `source` holds into `target` (see the module docstring); `place(ids, taken)`
    maps the ids of a batch of copied traces to their ids in the target (`taken`: those the target
    stores already)."""
    say = report or (lambda line: None)
    out = CopyReport()
    with source.connection() as src, target.connection() as dst:
        columns = {table: [c for c in _columns(src, table) if c in set(_columns(dst, table))]
                   for table in ("traces", "runs", "trace_history", "run_traces", "llm_cache", *_CHILDREN)}
        if on_conflict == "fail":
            found = [c for batch in _batches(src, "SELECT * FROM traces ORDER BY id")
                     for c in _conflicts(dst, _not_there(dst, batch))]
            if found:
                raise CopyConflict(found)
        run_ids = _copy_runs(src, dst, columns["runs"], out)
        for batch in _batches(src, "SELECT * FROM traces ORDER BY id"):
            _copy_traces(src, dst, place, batch, columns, run_ids, out)
            say(f"{out.traces + out.skipped:,} traces looked at, {out.traces:,} copied")
        out.cache_entries = _copy_cache(src, dst, columns["llm_cache"])
        out.output_sizes = copy_output_sizes(src, dst)
        labels = copy_labels(src, dst)  # after the traces: a label finds its trace by the trace's uid
        target.after_copy(dst)
        out.counts = _counts(src, dst, {c.source_id for c in out.conflicts})
        out.aside = _aside(src, dst)
        out.counts["labels"] = labels
        out.counts["runs"] = (int(src.execute("SELECT COUNT(*) FROM runs").fetchone()[0]), len(run_ids))
    return out


def _columns(db: Db, table: str) -> list[str]:
    return db.columns(table)


def _batches(db: Db, sql: str) -> Iterator[list[dict[str, Any]]]:
    """Rows of a full-table read, a batch at a time, walked by id (never one long read transaction)."""
    last: int | None = None
    base = sql.replace(" ORDER BY id", "")
    while True:
        rows = list(db.query(base + (" WHERE id > ?" if last is not None else "") + f" ORDER BY id LIMIT {_BATCH}",
                             [] if last is None else [last]))
        if not rows:
            return
        yield rows
        last = rows[-1]["id"]


def _copy_runs(src: Db, dst: Db, columns: list[str], out: CopyReport) -> dict[int, int]:
    """Runs by identity (kind, name, start, input); returns source id -> target id."""
    mapping: dict[int, int] = {}
    for run in src.query("SELECT * FROM runs ORDER BY id"):
        found = dst.execute(f"SELECT id FROM runs WHERE source = ? AND name {dst.dialect.same} ? AND started_at = ?"
                            f" AND input {dst.dialect.same} ?",
                            [run["source"], run["name"], run["started_at"], run["input"]]).fetchone()
        if found is not None:
            mapping[run["id"]] = int(found[0])
            continue
        taken = dst.execute("SELECT 1 FROM runs WHERE id = ?", [run["id"]]).fetchone() is not None
        names = [c for c in columns if c != "id" or not taken]
        with dst.write():
            if taken:  # keep it apart: a new id from the target
                mapping[run["id"]] = dst.insert_id(
                    f"INSERT INTO runs ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
                    [run[c] for c in names])
            else:
                dst.execute(f"INSERT INTO runs ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
                            [run[c] for c in names])
                mapping[run["id"]] = run["id"]
        out.runs += 1
    return mapping


def _not_there(dst: Db, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of `batch` the target does not hold yet (by uid: not copied before)."""
    uids = [row["uid"] for row in batch]
    marks = ", ".join("?" for _ in uids)
    have = {r[0] for r in dst.execute(f"SELECT uid FROM traces WHERE uid IN ({marks})", uids).fetchall()}
    return [row for row in batch if row["uid"] not in have]


def _conflicts(dst: Db, rows: list[dict[str, Any]]) -> list[Conflict]:
    """The rows whose (knowledge base, external id) the target holds for another trace."""
    named = [row for row in rows if row.get("external_id") is not None]
    if not named:
        return []
    marks = ", ".join("?" for _ in named)
    held = {(r[0], r[1]): int(r[2]) for r in dst.execute(
        f"SELECT knowledge_base, external_id, id FROM traces WHERE external_id IN ({marks})",
        [row["external_id"] for row in named]).fetchall()}
    return [Conflict(row["id"], row["knowledge_base"], row["external_id"], held[key]) for row in named
            if (key := (row["knowledge_base"], row["external_id"])) in held]


def _copy_traces(src: Db, dst: Db, place: Place, batch: list[dict[str, Any]], columns: dict[str, list[str]],
                 run_ids: dict[int, int], out: CopyReport) -> None:
    fresh = _not_there(dst, batch)
    out.skipped += len(batch) - len(fresh)
    fresh = _storable(src, dst, fresh, out)
    for attempt in range(3):
        try:
            with dst.write():   # conflicts read where the batch is written; one logged meanwhile under
                found = _conflicts(dst, fresh)   # the same external id fails the batch, which is read again
                left = {c.source_id for c in found}
                rows = [row for row in fresh if row["id"] not in left]
                moved = _write_batch(src, dst, place, rows, columns, run_ids)
            break
        except dst.dialect.integrity_error:
            if attempt == 2:
                raise
    out.conflicts += found
    out.renumbered += moved
    out.traces += len(rows)


def _write_batch(src: Db, dst: Db, place: Place, rows: list[dict[str, Any]], columns: dict[str, list[str]],
                 run_ids: dict[int, int]) -> int:
    """Inside the caller's transaction: the traces of `rows` under the ids `place` gives them, with
    their children; how many were renumbered."""
    if not rows:
        return 0
    ids = [row["id"] for row in rows]
    marks = ", ".join("?" for _ in ids)
    taken = {int(r[0]) for r in dst.execute(f"SELECT id FROM traces WHERE id IN ({marks})", ids).fetchall()}
    ids_to = place(ids, taken)
    _insert_traces(src, dst, rows, ids_to, columns, run_ids, marks)
    return sum(1 for old, new in ids_to.items() if old != new)


def _insert_traces(src: Db, dst: Db, fresh: list[dict[str, Any]], ids_to: dict[int, int],
                   columns: dict[str, list[str]], run_ids: dict[int, int], marks: str) -> None:
    names = columns["traces"]
    dst.executemany(f"INSERT INTO traces ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
                    [[ids_to[row["id"]] if c == "id" else run_ids.get(row[c]) if c == "run_id" and row[c]
                      is not None else row[c] for c in names] for row in fresh])
    ids = [row["id"] for row in fresh]
    for table in (*_CHILDREN, "trace_history", "run_traces"):
        names = [c for c in columns[table] if not (table == "trace_history" and c == "id")]
        rows = list(src.query(f"SELECT * FROM {table} WHERE trace_id IN ({marks})", ids))
        if rows:
            dst.executemany(
                f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
                [[ids_to[r["trace_id"]] if c == "trace_id" else run_ids.get(r[c], r[c]) if c == "run_id"
                  else r[c] for c in names] for r in rows])


def _storable(src: Db, dst: Db, fresh: list[dict[str, Any]], out: CopyReport) -> list[dict[str, Any]]:
    """The traces of `fresh` every store can hold; the others set aside in the target, with the reason."""
    if not fresh:
        return fresh
    bad: dict[int, str] = {}
    for row in fresh:
        why = _first_unstorable("traces", row)
        if why:
            bad[row["id"]] = why
    ids = [row["id"] for row in fresh]
    marks = ", ".join("?" for _ in ids)
    for table in (*_CHILDREN, "trace_history"):
        for child in src.query(f"SELECT * FROM {table} WHERE trace_id IN ({marks})", ids):
            if child["trace_id"] not in bad:
                why = _first_unstorable(table, child)
                if why:
                    bad[child["trace_id"]] = why
    if not bad:
        return fresh
    from veralith.store.repository import load_input

    letters = [deadletters.Letter(
        uid=row["uid"], source="migrate", trace_id=row["id"], knowledge_base=row["knowledge_base"],
        reason=f"not copied: {bad[row['id']]}",
        payload={"id": row["id"], "uid": row["uid"], "created_at": row["created_at"],
                 **load_input(src, row["id"]).to_json()})
        for row in fresh if row["id"] in bad]
    deadletters.set_aside(dst, letters)
    out.set_aside += len(letters)
    return [row for row in fresh if row["id"] not in bad]


def _first_unstorable(table: str, row: dict[str, Any]) -> str | None:
    for column, value in row.items():
        if isinstance(value, str) and ("\x00" in value or not value.isascii()):
            why = unstorable(value)
            if why:
                return f"{table}.{column} {why}"
    return None


def _aside(src: Db, dst: Db) -> dict[str, int]:
    """Of what the source holds, how much is in the target's dead-letter place (not copied)."""
    uids = [r[0] for r in dst.execute("SELECT uid FROM dead_letters WHERE source = 'migrate'").fetchall()]
    out = {"traces": 0, "stored results": 0, "earlier outcomes": 0}
    for start in range(0, len(uids), _BATCH):
        chunk = uids[start:start + _BATCH]
        marks = ", ".join("?" for _ in chunk)
        row = src.execute(f"SELECT COUNT(*), SUM(CASE WHEN execution IS NOT NULL THEN 1 ELSE 0 END) FROM traces"
                          f" WHERE uid IN ({marks})", chunk).fetchone()
        out["traces"] += int(row[0])
        out["stored results"] += int(row[1] or 0)
        out["earlier outcomes"] += int(src.execute(
            f"SELECT COUNT(*) FROM trace_history h JOIN traces t ON t.id = h.trace_id WHERE t.uid IN ({marks})",
            chunk).fetchone()[0])
    return {what: n for what, n in out.items() if n}


def _copy_cache(src: Db, dst: Db, columns: list[str]) -> int:
    copied = 0
    last = ""
    names = ", ".join(columns)
    while True:
        rows = list(src.query(f"SELECT {names} FROM llm_cache WHERE key > ? ORDER BY key LIMIT {_BATCH}", [last]))
        if not rows:
            return copied
        with dst.write():
            before = int(dst.execute("SELECT COUNT(*) FROM llm_cache").fetchone()[0])
            dst.executemany(f"INSERT INTO llm_cache ({names}) VALUES ({', '.join('?' for _ in columns)})"
                            " ON CONFLICT (key) DO NOTHING", [[r[c] for c in columns] for r in rows])
            copied += int(dst.execute("SELECT COUNT(*) FROM llm_cache").fetchone()[0]) - before
        last = rows[-1]["key"]


def _counts(src: Db, dst: Db, left_out: set[int]) -> dict[str, tuple[int, int]]:
    """What the source holds (but the traces left out: conflicts), and how much of it the target
    holds (matched by uid and key)."""
    out: dict[str, tuple[int, int]] = {}
    kept = [(r[1], r[2] is not None) for r in src.execute("SELECT id, uid, execution FROM traces").fetchall()
            if int(r[0]) not in left_out]
    source_uids: list[str] = [uid for uid, _ in kept]
    found = 0
    results = 0
    for start in range(0, len(source_uids), _BATCH):
        chunk = source_uids[start:start + _BATCH]
        marks = ", ".join("?" for _ in chunk)
        row = dst.execute(f"SELECT COUNT(*), SUM(CASE WHEN execution IS NOT NULL THEN 1 ELSE 0 END) FROM traces"
                          f" WHERE uid IN ({marks})", chunk).fetchone()
        found += int(row[0])
        results += int(row[1] or 0)
    out["traces"] = (len(source_uids), found)
    history = 0
    for start in range(0, len(source_uids), _BATCH):
        chunk = source_uids[start:start + _BATCH]
        history += int(dst.execute("SELECT COUNT(*) FROM trace_history h JOIN traces t ON t.id = h.trace_id"
                                   f" WHERE t.uid IN ({', '.join('?' for _ in chunk)})", chunk).fetchone()[0])
    per_trace = src.execute("SELECT trace_id, COUNT(*) FROM trace_history GROUP BY trace_id").fetchall()
    earlier = sum(int(n) for trace_id, n in per_trace if int(trace_id) not in left_out)
    out["earlier outcomes"] = (earlier, history)
    out["stored results"] = (sum(1 for _, judged in kept if judged), results)
    keys = [r[0] for r in src.execute("SELECT key FROM llm_cache").fetchall()]
    cached = 0
    for start in range(0, len(keys), _BATCH):
        chunk = keys[start:start + _BATCH]
        cached += int(dst.execute(f"SELECT COUNT(*) FROM llm_cache WHERE key IN ({', '.join('?' for _ in chunk)})",
                                  chunk).fetchone()[0])
    out["cache entries"] = (len(keys), cached)
    return out
