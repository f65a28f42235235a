"""Labels: a reviewer's verdicts on stored traces (the `labels` table, migrations 0023 / postgres 0015).

A label is one verdict on one part of a trace: its cell, its gate, one claim's relation, one
sub-question's sufficiency or coverage. Every label is kept; the newest on the same (trace,
target, item) is the one that counts (`current`), so a correction is a new row, not an update.
`judged` and `result_at` say what the judge had said when the label was given, so a trace
judged again keeps its label and shows whether the judge now agrees.

The vocabulary (which values each target takes) is `VALUES`, read from veralith.models, so a label
can only say what a result can. Functions take a `Db` and run through `Store.read` / `Store.write`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from veralith.models import CELLS, NO_CELL, Coverage, Gate, Relation, Verdict
from veralith.store.sql import Db

__all__ = ["TARGETS", "VALUES", "Label", "LabelError", "add_labels", "check", "copy_labels", "current",
           "enough_labelled", "find_trace", "labels_of", "queue", "trace_keys"]

TARGETS = ("cell", "gate", "claim", "sufficiency", "coverage")
VALUES: dict[str, tuple[str, ...]] = {
    "cell": (*CELLS, NO_CELL),
    "gate": tuple(g.value for g in Gate),
    "claim": tuple(r.value for r in Relation),
    "sufficiency": tuple(v.value for v in Verdict),
    "coverage": tuple(c.value for c in Coverage),
}
_COLUMNS = ("uid", "trace_id", "target", "item", "value", "reviewer", "labelled_at", "note", "judged", "result_at",
            "source")


class LabelError(ValueError):
    """A label that cannot be stored: an unknown target or value, an item missing or not in the trace."""


@dataclass(frozen=True)
class Label:
    trace_id: int
    target: str
    value: str
    reviewer: str
    item: str = ""
    note: str | None = None
    judged: str | None = None
    result_at: str | None = None
    source: str = "veralith"
    labelled_at: float = field(default_factory=time.time)
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)

    def row(self) -> list[Any]:
        data = asdict(self)
        return [data[c] for c in _COLUMNS]


def check(target: str, item: str, value: str) -> tuple[str, str, str]:
    """(target, item, value) normalised (lower case; Y/N upper), or LabelError saying what is allowed."""
    target = target.strip().lower()
    if target not in VALUES:
        raise LabelError(f"unknown label target {target!r}; one of: {', '.join(TARGETS)}")
    value = value.strip()
    value = value.upper() if target == "sufficiency" else value.lower()
    if value not in VALUES[target]:
        raise LabelError(f"{target} label {value!r} is not one of: {', '.join(VALUES[target])}")
    item = item.strip()
    if target in ("cell", "gate") and item:
        raise LabelError(f"a {target} label is on the whole trace; it takes no item (got {item!r})")
    if target not in ("cell", "gate") and not item:
        raise LabelError(f"a {target} label names its {'claim' if target == 'claim' else 'sub-question'} id")
    return target, item, value


def add_labels(db: Db, labels: Iterable[Label]) -> int:
    """Store labels in one transaction; a label whose uid is stored already is skipped. Returns how
    many were new."""
    rows = [label.row() for label in labels]
    if not rows:
        return 0
    with db.write():
        before = int(db.execute("SELECT COUNT(*) FROM labels").fetchone()[0])
        db.executemany(f"INSERT INTO labels ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)})"
                       " ON CONFLICT (uid) DO NOTHING", rows)
        return int(db.execute("SELECT COUNT(*) FROM labels").fetchone()[0]) - before


def _label(row: dict[str, Any]) -> Label:
    return Label(**{c: row[c] for c in _COLUMNS})


def enough_labelled(db: Db, condition: str, knowledge_base: str | None = None) -> list[str]:
    """The knowledge bases (`knowledge_base`, or every one with None) with at least `settings.labels_min`
    traces holding a label that meets `condition` (SQL over `l`, the label, and `t`, its trace): one
    count, so calibration from labels costs a store without enough of them one query."""
    from veralith.config import settings

    scope, params = ("", []) if knowledge_base is None else (" AND t.knowledge_base = ?", [knowledge_base])
    rows = db.execute("SELECT t.knowledge_base, COUNT(DISTINCT l.trace_id) FROM labels l JOIN traces t"
                      f" ON t.id = l.trace_id WHERE {condition}{scope} GROUP BY t.knowledge_base", params).fetchall()
    return [kb for kb, n in rows if int(n) >= settings.labels_min]


def labels_of(db: Db, trace_id: int) -> list[Label]:
    """Every label of one trace, oldest first (corrections after what they correct)."""
    return [_label(r) for r in db.query("SELECT * FROM labels WHERE trace_id = ? ORDER BY labelled_at, uid",
                                        [trace_id])]


def current(db: Db, *, kb: str | None = None, since: float | None = None,
            trace_ids: Sequence[int] | None = None, target: str | None = None) -> list[Label]:
    """The label that counts for each (trace, target, item): the newest. Optionally only one
    knowledge base's traces, labels given at or after `since` (unix time), or some traces."""
    clauses: list[str] = []
    params: list[Any] = []
    if kb is not None:
        clauses.append("t.knowledge_base = ?")
        params.append(kb)
    if target is not None:
        clauses.append("l.target = ?")
        params.append(target)
    if since is not None:
        clauses.append("l.labelled_at >= ?")
        params.append(since)
    if trace_ids is not None:
        if not trace_ids:
            return []
        clauses.append(f"l.trace_id IN ({', '.join('?' for _ in trace_ids)})")
        params.extend(trace_ids)
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    rows = db.query(f"SELECT l.* FROM labels l JOIN traces t ON t.id = l.trace_id{where}"
                    " ORDER BY l.trace_id, l.target, l.item, l.labelled_at, l.uid", params)
    latest: dict[tuple[int, str, str], Label] = {}
    for row in rows:  # ascending time: the last one seen for a key is the newest
        label = _label(row)
        latest[(label.trace_id, label.target, label.item)] = label
    return list(latest.values())


def trace_keys(db: Db, trace_ids: Sequence[int]) -> dict[int, tuple[str, str, str | None]]:
    """{trace id: (uid, knowledge base, external id)}: how an exported label names its trace."""
    out: dict[int, tuple[str, str, str | None]] = {}
    ids = list(trace_ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        marks = ", ".join("?" for _ in chunk)
        for tid, uid, kb, ext in db.execute(
                f"SELECT id, uid, knowledge_base, external_id FROM traces WHERE id IN ({marks})", chunk).fetchall():
            out[int(tid)] = (uid, kb, ext)
    return out


def queue(db: Db, *, reviewer: str | None, kb: str | None = None, run_id: int | None = None,
          cell: str | None = None, since: str | None = None, limit: int = 50,
          sample_share: float = 0.2) -> list[int]:
    """Trace ids to review, in order: needs-review first, then failing, then a sample of the rest
    (about `sample_share` of `limit`, so agreement is not measured only on the hard cases). Only
    done traces, and none this reviewer (anyone, when None) has labelled: a queue resumes where it
    stopped. The sample is ordered by the trace's random uid, so it is the same every time."""
    clauses = ["t.status = 'done'"]
    params: list[Any] = []
    if reviewer is None:
        clauses.append("NOT EXISTS (SELECT 1 FROM labels l WHERE l.trace_id = t.id)")
    else:
        clauses.append("NOT EXISTS (SELECT 1 FROM labels l WHERE l.trace_id = t.id AND l.reviewer = ?)")
        params.append(reviewer)
    for sql, value in (("t.knowledge_base = ?", kb), ("t.run_id = ?", run_id), ("t.created_at >= ?", since)):
        if value is not None:
            clauses.append(sql)
            params.append(value)
    if cell is not None:
        clauses.append("t.failure_cell IS NULL" if cell == NO_CELL else "t.failure_cell = ?")
        params.extend([] if cell == NO_CELL else [cell])
    where = " AND ".join(clauses)
    rest = max(1, round(limit * sample_share)) if limit > 1 else 0
    hard = limit - rest
    picked: list[int] = []
    for extra, order in (("t.needs_review = 1", "t.id"),
                         ("COALESCE(t.needs_review, 0) = 0 AND t.quality_gate <> 'pass'", "t.id")):
        want = hard - len(picked)
        if want <= 0:
            break
        picked += [int(r[0]) for r in db.execute(f"SELECT t.id FROM traces t WHERE {where} AND {extra}"
                                                 f" ORDER BY {order} LIMIT {int(want)}", params).fetchall()]
    want = limit - len(picked)
    picked += [int(r[0]) for r in db.execute(
        f"SELECT t.id FROM traces t WHERE {where} AND COALESCE(t.needs_review, 0) = 0 AND t.quality_gate = 'pass'"
        f" ORDER BY t.uid LIMIT {int(want)}", params).fetchall()]
    return picked


def find_trace(db: Db, *, trace_uid: str | None = None, knowledge_base: str | None = None,
               external_id: str | None = None, trace_id: int | None = None) -> int | None:
    """The trace an imported label names (veralith.review.files: its uid, else its record id within
    a knowledge base, or within all of them when that is unambiguous, else its id); None: not here."""
    if trace_uid:
        row = db.execute("SELECT id FROM traces WHERE uid = ?", [trace_uid]).fetchone()
        if row is not None:
            return int(row[0])
    if external_id:
        sql, params = "SELECT id FROM traces WHERE external_id = ?", [external_id]
        if knowledge_base:
            sql, params = sql + " AND knowledge_base = ?", [external_id, knowledge_base]
        rows = db.execute(sql + " LIMIT 2", params).fetchall()
        if len(rows) == 1:
            return int(rows[0][0])
        if rows:
            return None  # used in several knowledge bases: the row must say which
    if trace_id is not None and not trace_uid and not external_id:
        row = db.execute("SELECT id FROM traces WHERE id = ?", [trace_id]).fetchone()
        return None if row is None else int(row[0])
    return None


def copy_labels(src: Db, dst: Db) -> tuple[int, int]:
    """Copy every label of `src` whose trace `dst` holds (matched by the trace's uid) into `dst`,
    once (by the label's uid). Returns (labels in the source, labels of them the target holds)."""
    total = held = 0
    last = ""
    while True:
        rows = list(src.query("SELECT l.*, t.uid AS trace_uid FROM labels l JOIN traces t ON t.id = l.trace_id"
                              " WHERE l.uid > ? ORDER BY l.uid LIMIT 500", [last]))
        if not rows:
            return total, held
        last = rows[-1]["uid"]
        total += len(rows)
        uids = sorted({r["trace_uid"] for r in rows})
        ids = {u: int(i) for i, u in dst.execute(
            f"SELECT id, uid FROM traces WHERE uid IN ({', '.join('?' for _ in uids)})", uids).fetchall()}
        wanted = [dict(r, trace_id=ids[r["trace_uid"]]) for r in rows if r["trace_uid"] in ids]
        add_labels(dst, [_label(r) for r in wanted])
        marks = ", ".join("?" for _ in rows)
        held += int(dst.execute(f"SELECT COUNT(*) FROM labels WHERE uid IN ({marks})",
                                [r["uid"] for r in rows]).fetchone()[0])
