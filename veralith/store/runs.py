"""Runs: the traces one `veralith eval` invocation (or one named stream of logged traces) produced.

An eval run is opened by `start_run` before the first trace is written and closed by `finish_run`,
which stores its totals. As it judges (or reuses) each trace, `record_result` copies the trace's
rolled-up outcome into `run_traces`: a re-run of a file re-judges its traces in place (external ids
are unique per knowledge base), so the traces row keeps only the newest outcome, and each run's
own view lives in that copy. `traces.run_id` names the run that last wrote or judged the trace.

An SDK run is open-ended: `sdk_run_id` finds or creates it by name inside the write transaction
that creates the trace, so naming a run costs `log()` no extra lock wait; its traces are read
through `traces.run_id`. Totals of an open run (SDK runs, or an eval run whose process died) are
counted live.

A run reference given by a person (`veralith compare A B`) is a run id or a name; a name that
several eval runs share means the newest of them (`resolve_run`).

The rows `veralith compare` works on are read here in one query per run (`trace_rows`), and the
details behind a changed trace's one-line reason only for the traces that need one
(`failure_details`), so comparing two large runs reads little more than their rolled-up rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from veralith.errors import StoreError
from veralith.store.rows import now_iso
from veralith.store.sql import Db
from veralith.validate import MAX_RUN_NAME, check_run_name

__all__ = ["MAX_RUN_NAME", "TRACE_ROW_COLUMNS", "Run", "RunNotFound", "check_run_name", "discard_if_empty",
           "failure_details", "fill_unjudged", "finish_run", "get_run", "list_runs", "record_result", "resolve_run",
           "sdk_run_id", "start_run", "tag_trace", "trace_rows"]


# The columns `trace_rows` returns, in order (veralith.compare.TraceRow has the same fields).
TRACE_ROW_COLUMNS = ("id", "external_id", "knowledge_base", "query", "failure_cell", "quality_gate", "status",
                     "sufficiency_fraction", "faithfulness_fraction", "n_claims", "n_extra_claims", "reason", "mode",
                     "correctness", "correctness_known")
# run_traces columns after run_id, and what each is copied from in `traces`.
_COPIED = ("trace_id", "external_id", "knowledge_base", "failure_cell", "quality_gate", "status",
           "sufficiency_fraction", "faithfulness_fraction", "n_claims", "n_extra_claims", "usd", "query", "mode",
           "correctness")
# The correctness layer of a trace's stored result (issue 42), NULL without a reference: it lives in
# trace_references, so it is read with a subquery from a `traces` row.
_CORRECTNESS = "(SELECT r.correctness FROM trace_references r WHERE r.trace_id = traces.id)"


class RunNotFound(StoreError, KeyError):
    """No run has this id or name."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "run not found"


@dataclass(frozen=True)
class Run:
    """One run and its totals (counted live while the run is open)."""

    id: int
    name: str | None
    source: str                      # 'eval' | 'sdk'
    started_at: str
    ended_at: str | None
    backend: str | None
    model: str | None
    prompt_versions: dict[str, str] | None
    input: str | None
    n_traces: int
    n_pass: int
    n_fail: int
    n_indeterminate: int
    n_unevaluated: int
    usd: float
    usd_unknown: int

    @property
    def pass_rate(self) -> float | None:
        """pass / traces with a result; None when nothing has a result (never NaN)."""
        results = self.n_pass + self.n_fail + self.n_indeterminate
        return self.n_pass / results if results else None

    @property
    def label(self) -> str:
        return f"#{self.id}" + (f" {self.name}" if self.name else "")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pass_rate": self.pass_rate}


def start_run(db: Db, *, name: str | None, backend: str | None, model: str | None,
              prompt_versions: dict[str, str] | None, input: str | None = None, source: str = "eval") -> int:
    """Open a run; return its id."""
    if name is not None:
        name = check_run_name(name, what="run name")
    with db.write():
        return db.insert_id(
            "INSERT INTO runs (name, source, started_at, backend, model, prompt_versions, input)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [name, source, now_iso(), backend, model,
             None if prompt_versions is None else json.dumps(prompt_versions, sort_keys=True), input])


def tag_trace(db: Db, run_id: int, trace_id: int) -> None:
    """Make the run the trace's latest before it is judged again in place, so that the run keeps
    the trace (without an outcome) even when that evaluation fails."""
    with db.write():
        db.execute("UPDATE traces SET run_id = ? WHERE id = ?", [run_id, trace_id])


def record_result(db: Db, run_id: int, trace_id: int, reason: str | None = None) -> None:
    """File the trace's current outcome under the eval run (replacing what the run had for it)
    and make the run the trace's latest. `reason`: the one-line why, when it did not pass."""
    with db.write():
        db.execute("UPDATE traces SET run_id = ? WHERE id = ?", [run_id, trace_id])
        _copy(db, run_id, "id = ?", [trace_id], reason=reason, replace=True)


def fill_unjudged(db: Db, trace_id: int) -> None:
    """Inside the write transaction that just stored the trace's result: every eval run that holds
    the trace without an outcome of it (its evaluation stopped: a judge outage, a crash, Ctrl-C) takes
    this one, and a closed run's stored totals are counted again. A run that recorded an outcome
    keeps its own: a later re-judge never rewrites an earlier run's view."""
    # In run id order: two results written at once whose traces two runs share lock those runs' rows
    # (below) in the same order, so neither waits for a lock the other holds while holding one it wants.
    waiting = [int(r[0]) for r in db.execute(
        "SELECT run_id FROM run_traces WHERE trace_id = ? AND quality_gate IS NULL ORDER BY run_id",
        [trace_id]).fetchall()]
    for run_id in waiting:
        # The run's row is locked before its totals are counted: on PostgreSQL two results of one run
        # written at once (resume's threads) each counted before waiting for the other's lock, and the
        # later commit stored totals without the earlier trace (run 1 judged 11 of 12, fault 12). Under
        # the lock the count (a new statement, a new snapshot at READ COMMITTED) sees the other's copy.
        ended = db.execute(f"SELECT ended_at FROM runs WHERE id = ?{db.dialect.for_update}", [run_id]).fetchone()
        _copy(db, run_id, "id = ?", [trace_id], reason=None, replace=True)
        if ended is not None and ended[0] is not None:
            totals = _totals(db, [run_id]).get(run_id, _EMPTY)
            db.execute("UPDATE runs SET n_traces = ?, n_pass = ?, n_fail = ?, n_indeterminate = ?,"
                       " n_unevaluated = ?, usd = ?, usd_unknown = ? WHERE id = ?", [*totals, run_id])


def finish_run(db: Db, run_id: int) -> Run:
    """Close a run: store its end time and totals (as they are now); return it. An eval run also
    keeps the traces it wrote but holds no outcome for (a failed evaluation) as they are now."""
    with db.write():
        # Locked first, as in fill_unjudged: a result written meanwhile is counted, not overwritten.
        source = db.execute(f"SELECT source FROM runs WHERE id = ?{db.dialect.for_update}", [run_id]).fetchone()
        if source is not None and source[0] == "eval":
            _copy(db, run_id, "run_id = ?", [run_id], reason=None, replace=False)
        totals = _totals(db, [run_id]).get(run_id, _EMPTY)
        db.execute("UPDATE runs SET ended_at = ?, n_traces = ?, n_pass = ?, n_fail = ?, n_indeterminate = ?,"
                   " n_unevaluated = ?, usd = ?, usd_unknown = ? WHERE id = ?",
                   [now_iso(), *totals, run_id])
    return get_run(db, run_id)


def discard_if_empty(db: Db, run_id: int) -> bool:
    """Delete an eval run that holds no trace (every line of its input was bad, say), so that a run
    that stored nothing is never listed or compared; True when it was deleted."""
    with db.write():
        cursor = db.execute(
            "DELETE FROM runs WHERE id = ? AND source = 'eval'"
            " AND NOT EXISTS (SELECT 1 FROM run_traces WHERE run_id = ?)"
            " AND NOT EXISTS (SELECT 1 FROM traces WHERE run_id = ?)", [run_id, run_id, run_id])
    return cursor.rowcount > 0


def sdk_run_id(db: Db, name: str) -> int:
    """The id of the SDK run called `name`, created if needed. Call it inside the caller's write
    transaction (create_trace's): the unique index on SDK run names makes concurrent first uses of a
    name agree on one run (the second insert does nothing and reads the first one's row)."""
    if not db.in_transaction:
        raise StoreError("sdk_run_id() must run inside the write transaction that stores the trace")
    row = db.execute("SELECT id FROM runs WHERE source = 'sdk' AND name = ?", [name]).fetchone()
    if row is not None:
        return int(row[0])
    db.execute("INSERT INTO runs (name, source, started_at) VALUES (?, 'sdk', ?)"
               " ON CONFLICT (name) WHERE source = 'sdk' DO NOTHING", [name, now_iso()])
    return int(db.execute("SELECT id FROM runs WHERE source = 'sdk' AND name = ?", [name]).fetchone()[0])


def get_run(db: Db, run_id: int) -> Run:
    """The run with this id; RunNotFound otherwise."""
    runs = _load(db, "WHERE id = ?", [run_id])
    if not runs:
        raise RunNotFound(f"no run with id {run_id}")
    return runs[0]


def resolve_run(db: Db, ref: str) -> Run:
    """A run named by a person: its id (digits, optionally after '#'), else its name (the newest
    run of that name). RunNotFound says what was tried."""
    text = ref.strip()
    digits = text[1:] if text.startswith("#") else text
    if digits.isdigit() and int(digits) < 2**63:
        found = _load(db, "WHERE id = ?", [int(digits)])
        if found:
            return found[0]
    found = _load(db, "WHERE name = ? ORDER BY id DESC LIMIT 1", [text])
    if found:
        return found[0]
    raise RunNotFound(f"no run with id or name {ref!r} (see `veralith runs`)")


def list_runs(db: Db, *, limit: int = 50) -> list[Run]:
    """The newest runs first."""
    return _load(db, "ORDER BY id DESC LIMIT ?", [limit])


def trace_rows(db: Db, run: Run) -> list[tuple[Any, ...]]:
    """Every trace of the run as a tuple of TRACE_ROW_COLUMNS, in trace id order: an eval run's
    own copies (with their reasons), an SDK run's traces as they are now (reason None)."""
    if run.source == "eval":
        columns = ", ".join("trace_id" if c == "id" else c for c in TRACE_ROW_COLUMNS)
        rows = db.execute(f"SELECT {columns} FROM run_traces WHERE run_id = ? ORDER BY trace_id",
                          [run.id]).fetchall()
    else:
        columns = ", ".join({"reason": "NULL", "correctness": _CORRECTNESS, "correctness_known": "1"}.get(c, c)
                            for c in TRACE_ROW_COLUMNS)
        rows = db.execute(f"SELECT {columns} FROM traces WHERE run_id = ? ORDER BY id", [run.id]).fetchall()
    return [(*row[:-1], bool(row[-1])) for row in rows]   # correctness_known: 0/1 in the store


def failure_details(db: Db, trace_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """What a one-line reason is built from, for each trace: its status summary, its unsupported or
    contradicted claims (with the chunks that contradict them), its uncovered sub-questions (with
    their sufficiency verdict), its extra claims and its judge errors, each list in stored order."""
    ids = sorted(set(trace_ids))
    out: dict[int, dict[str, Any]] = {
        i: {"summary": None, "reason": None, "bad_claims": [], "uncovered": [], "extra": [], "errors": []}
        for i in ids}
    for chunk in _chunks(ids, 500):
        marks = ",".join("?" * len(chunk))
        uncovered: dict[int, list[tuple[str, str]]] = {}
        for tid, summary, reason, coverage in db.execute(
                f"SELECT id, status_summary, status_reason, coverage FROM traces WHERE id IN ({marks})", chunk):
            out[tid]["summary"], out[tid]["reason"] = summary, reason
            # The diagnosis' per sub-question coverage is the classifier's own rule; without it
            # (results stored before it existed), the Completeness judge's uncovered list.
            if coverage:
                uncovered[tid] = [(q, how) for q, how in json.loads(coverage).items() if how != "answered"]
        against: dict[tuple[int, int], list[str]] = {}
        for tid, pos, chunk_id in db.execute(
                "SELECT trace_id, judgment_position, chunk_id FROM grounding WHERE kind = 'contradicts'"
                f" AND trace_id IN ({marks}) ORDER BY trace_id, judgment_position, position", chunk):
            against.setdefault((tid, pos), []).append(chunk_id)
        for tid, claim_id, text, relation, pos in db.execute(
                "SELECT f.trace_id, f.claim_id, c.text, f.relation, f.position FROM faithfulness_judgments f"
                " LEFT JOIN claims c ON c.trace_id = f.trace_id AND c.claim_id = f.claim_id"
                f" WHERE f.trace_id IN ({marks}) AND f.verdict = 'N' ORDER BY f.trace_id, f.position", chunk):
            out[tid]["bad_claims"].append({"id": claim_id, "text": text or "", "relation": relation,
                                           "contradicting_chunk_ids": against.get((tid, pos), [])})
        for tid, ids_json in db.execute(
                f"SELECT trace_id, uncovered_sub_question_ids FROM completeness WHERE trace_id IN ({marks})", chunk):
            if tid not in uncovered:
                uncovered[tid] = [(q, "unanswered") for q in json.loads(ids_json)]
        if uncovered:
            texts = {(t, q): s for t, q, s in db.execute(
                f"SELECT trace_id, sub_question_id, text FROM sub_questions WHERE trace_id IN ({marks})", chunk)}
            verdicts = {(t, q): v for t, q, v in db.execute(
                "SELECT trace_id, sub_question_id, verdict FROM sufficiency_judgments"
                f" WHERE trace_id IN ({marks})", chunk)}
            for tid, sq_ids in uncovered.items():
                out[tid]["uncovered"] = [{"id": q, "text": texts.get((tid, q), ""),
                                          "sufficient": verdicts.get((tid, q)), "coverage": how} for q, how in sq_ids]
        for tid, claim_id, text in db.execute(
                "SELECT e.trace_id, e.claim_id, c.text FROM completeness_extras e LEFT JOIN claims c"
                " ON c.trace_id = e.trace_id AND c.claim_id = e.claim_id"
                f" WHERE e.trace_id IN ({marks}) ORDER BY e.trace_id, e.position", chunk):
            out[tid]["extra"].append({"id": claim_id, "text": text or ""})
        for tid, phase, kind, message in db.execute(
                f"SELECT trace_id, phase, kind, message FROM judge_errors WHERE trace_id IN ({marks})"
                " ORDER BY trace_id, position", chunk):
            out[tid]["errors"].append({"phase": phase, "kind": kind, "message": message})
    return out


# --- internals ----------------------------------------------------------------------------------

_EMPTY = (0, 0, 0, 0, 0, 0.0, 0)


_OUTCOME = {"failure_cell", "quality_gate", "sufficiency_fraction", "faithfulness_fraction", "n_claims",
            "n_extra_claims", "usd", "mode", "correctness"}


def _copy(db: Db, run_id: int, where: str, params: list[Any], *, reason: str | None, replace: bool) -> None:
    # A trace whose last evaluation failed may still hold an earlier result; that result is not
    # this run's outcome, so only a `done` trace's outcome columns are copied.
    def source(column: str) -> str:
        if column == "trace_id":
            return "id"
        value = _CORRECTNESS if column == "correctness" else column
        return f"CASE WHEN status = 'done' THEN {value} END" if column in _OUTCOME else value

    columns = ", ".join(source(c) for c in _COPIED)
    # The SELECT's WHERE comes before ON CONFLICT: without one SQLite would read ON as a join's ON.
    # A copy taken now records its layer (correctness_known: 1, migration 0027), replacing one that did not.
    if replace:
        updates = ", ".join(f"{c} = excluded.{c}" for c in (*_COPIED[1:], "reason", "correctness_known"))
        action = f"DO UPDATE SET {updates}"
    else:
        action = "DO NOTHING"
    db.execute(f"INSERT INTO run_traces (run_id, {', '.join(_COPIED)}, reason, correctness_known)"
               f" SELECT ?, {columns}, ?, 1 FROM traces WHERE {where}"
               f" ON CONFLICT (run_id, trace_id) {action}", [run_id, reason, *params])


def _count(condition: str) -> str:
    return f"SUM(CASE WHEN {condition} THEN 1 ELSE 0 END)"


_TOTALS = ("SELECT run_id, COUNT(*), " + ", ".join(_count(c) for c in (
    "quality_gate = 'pass'", "quality_gate = 'fail'", "quality_gate = 'indeterminate'", "quality_gate IS NULL"))
    + ", COALESCE(SUM(usd), 0), " + _count("quality_gate IS NOT NULL AND usd IS NULL"))


def _totals(db: Db, run_ids: Sequence[int]) -> dict[int, tuple[int, int, int, int, int, float, int]]:
    """Live (n_traces, n_pass, n_fail, n_indeterminate, n_unevaluated, usd, usd_unknown) per run:
    an eval run's from its copies, an SDK run's from its traces."""
    out: dict[int, tuple[int, int, int, int, int, float, int]] = {}
    select = _TOTALS
    for chunk in _chunks(list(run_ids), 500):
        marks = ",".join("?" * len(chunk))
        for row in db.execute(
                f"{select} FROM run_traces WHERE run_id IN ({marks}) GROUP BY run_id UNION ALL"
                f" {select} FROM traces WHERE run_id IN (SELECT id FROM runs WHERE source = 'sdk' AND id IN ({marks}))"
                " GROUP BY run_id", chunk + chunk):
            out[row[0]] = (int(row[1]), int(row[2] or 0), int(row[3] or 0), int(row[4] or 0), int(row[5] or 0),
                           float(row[6]), int(row[7] or 0))
    return out


def _load(db: Db, tail: str, params: list[Any]) -> list[Run]:
    rows = list(db.query(f"SELECT * FROM runs {tail}", params))
    live = _totals(db, [r["id"] for r in rows if r["ended_at"] is None])
    runs = []
    for r in rows:
        if r["ended_at"] is None:
            totals = live.get(r["id"], _EMPTY)
        else:
            totals = (r["n_traces"] or 0, r["n_pass"] or 0, r["n_fail"] or 0, r["n_indeterminate"] or 0,
                      r["n_unevaluated"] or 0, r["usd"] or 0.0, r["usd_unknown"] or 0)
        runs.append(Run(id=r["id"], name=r["name"], source=r["source"], started_at=r["started_at"],
                        ended_at=r["ended_at"], backend=r["backend"], model=r["model"],
                        prompt_versions=json.loads(r["prompt_versions"]) if r["prompt_versions"] else None,
                        input=r["input"], n_traces=totals[0], n_pass=totals[1], n_fail=totals[2],
                        n_indeterminate=totals[3], n_unevaluated=totals[4], usd=totals[5], usd_unknown=totals[6]))
    return runs


def _chunks(items: list[int], size: int) -> Iterable[list[int]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
