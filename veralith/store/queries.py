"""Read-only views over many traces: the listing and the statistics behind `veralith list/stats`.

Listing walks an index of `traces` newest-first and stops after `limit`. Stats reads
`trace_rollup`, the running totals per (knowledge base, cell, gate, status) that triggers keep
(migrations/0002), so its cost does not grow with the number of traces.
"""

from __future__ import annotations

from typing import Any

from veralith.config import settings
from veralith.models import cell_name
from veralith.store import deadletters
from veralith.store.calibration import CountedCalibration, calibrate, labelled_sufficiency, value_counts
from veralith.store.histogram import app_latency_percentiles, histograms, percentiles
from veralith.store.review_cutoff import fitted_cutoff, labelled_review
from veralith.store.sql import Db

__all__ = ["PREVIEW_CHARS", "STATUSES", "app_latency_percentiles", "knowledge_bases", "list_traces", "stats",
           "trace_run"]

PREVIEW_CHARS = 80
STATUSES = ("pending", "running", "done", "error")  # a trace's work states (migrations/0001)


def list_traces(db: Db, *, limit: int = 50, cell: str | None = None, kb: str | None = None,
                status: str | None = None, since: str | None = None,
                preview_chars: int | None = PREVIEW_CHARS) -> list[dict[str, Any]]:
    """The newest traces first, optionally filtered by failure cell, knowledge base, status and
    creation time (`since`: UTC ISO text as stored, kept when created at or after it).
    `query_preview` holds the first `preview_chars` characters of the query (all of it for None)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be a non-negative int, got {limit!r}")
    where, params = [], []
    for column, value in (("failure_cell", cell), ("knowledge_base", kb), ("status", status)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(getattr(value, "value", value))
    if since is not None:
        where.append("created_at >= ?")
        params.append(since)
    sql = ("SELECT id, external_id, created_at, status, knowledge_base, failure_cell, quality_gate,"
           " sufficiency_fraction, faithfulness_fraction, substr(query, 1, ?) AS query_preview, usd, error_message,"
           " needs_review"
           " FROM traces")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY id DESC LIMIT ?"
    # substr() needs a length; the largest a string can be stands for "all of it".
    return list(db.query(sql, [2**31 - 1 if preview_chars is None else preview_chars, *params, limit]))


def trace_run(db: Db, trace_id: int) -> str | None:
    """The run that last wrote or judged the trace, labelled as people name it ("#3" or "#3 main")."""
    row = db.execute("SELECT runs.id, runs.name FROM traces JOIN runs ON runs.id = traces.run_id"
                     " WHERE traces.id = ?", [trace_id]).fetchone()
    return None if row is None else f"#{row[0]}" + (f" {row[1]}" if row[1] else "")


def knowledge_bases(db: Db) -> list[str]:
    """The knowledge bases that hold at least one trace, sorted (read from the rollup: no table scan)."""
    return [row[0] for row in db.execute(
        "SELECT DISTINCT knowledge_base FROM trace_rollup WHERE n > 0 ORDER BY 1").fetchall()]


def stats(db: Db, *, kb: str | None = None) -> dict[str, Any]:
    """Counts by cell, gate and status; mean fractions; usage totals; the threshold per KB.

    `by_cell` and `by_gate` count stored results (a result without a cell counts as
    veralith.models.NO_CELL, "indeterminate"); `by_status` counts every trace. Each threshold is
    the one evaluation would use now (veralith.store.calibration.calibrate).

    `needs_review` counts results whose deciding verdict is low-confidence (a person should look).
    Means are None when nothing was judged (never NaN). `usd` sums the known costs and
    `usd_unknown` counts results whose price was unknown, so a partial total is never passed off
    as complete. `app_latency` holds, per knowledge base whose traces recorded the app's own
    latency, its p50 and p95 in ms, how many traces `n` they are over and the `relative_error` they
    are within: read from a histogram, they are approximate (veralith.store.histogram).
    `dead_letters` counts the records set aside in the dead-letter place (veralith.store.deadletters).
    """
    sql = "SELECT * FROM trace_rollup"  # running totals kept by triggers (migrations/0002)
    params: list[Any] = []
    if kb is not None:
        sql += " WHERE knowledge_base = ?"
        params.append(kb)
    by_cell: dict[str, int] = {}
    by_gate: dict[str, int] = {}
    by_status = dict.fromkeys(STATUSES, 0)
    sums = dict.fromkeys(("s_sum", "s_n", "f_sum", "f_n", "calls", "input_tokens", "output_tokens",
                          "usd_unknown", "review_n"), 0)
    usd = 0.0
    kbs: set[str] = set()
    total = 0
    for row in db.query(sql, params):
        kbs.add(row["knowledge_base"])
        total += row["n"]
        by_status[row["status"]] = by_status.get(row["status"], 0) + row["n"]
        if row["quality_gate"]:  # a stored result ('' marks none)
            cell = cell_name(row["failure_cell"])
            by_cell[cell] = by_cell.get(cell, 0) + row["n"]
            by_gate[row["quality_gate"]] = by_gate.get(row["quality_gate"], 0) + row["n"]
        for key in sums:
            sums[key] += row[key] or 0
        usd += row["usd"] or 0.0
    thresholds, latency = {}, {}
    # One read each for every knowledge base's counts by value and latency histogram.
    counted = CountedCalibration(value_counts(db, settings.calibration_percentile, kb), labelled_sufficiency(db, kb))
    timed = histograms(db, kb)
    flagged = labelled_review(db, kb)
    for name in sorted(kbs if kb is None else {kb}):
        found = calibrate(counted, name)
        cutoff = fitted_cutoff(flagged.get(name, []))
        thresholds[name] = {"threshold": found.threshold, "source": "labels" if found.labels else found.source.value,
                            "calibration_traces": found.traces, "review_cutoff": cutoff.cutoff,
                            "review_source": "labels" if cutoff.labels else "default", "review_labels": cutoff.labels}
        figures = percentiles(timed.get(name))
        if figures is not None:
            latency[name] = figures
    return {
        "traces": total,
        "results": sum(by_gate.values()),
        "by_cell": dict(sorted(by_cell.items())),
        "by_gate": dict(sorted(by_gate.items())),
        "by_status": by_status,
        "mean_sufficiency_fraction": sums["s_sum"] / sums["s_n"] if sums["s_n"] else None,
        "mean_faithfulness_fraction": sums["f_sum"] / sums["f_n"] if sums["f_n"] else None,
        "calls": sums["calls"],
        "input_tokens": sums["input_tokens"],
        "output_tokens": sums["output_tokens"],
        "usd": usd,
        "usd_unknown": sums["usd_unknown"],
        "needs_review": sums["review_n"],
        "thresholds": thresholds,
        "app_latency": latency,
        "dead_letters": deadletters.count(db, kb=kb),
        "reference": reference_stats(db, kb=kb),
    }


def reference_stats(db: Db, *, kb: str | None = None) -> dict[str, Any]:
    """Over the judged traces that carry a reference answer: counts by correctness layer, and the mean
    context recall and answer correctness of those where they were judged (None when none: never NaN).
    Empty when no judged trace has a reference answer (through the correctness index)."""
    sql = ("SELECT r.correctness, COUNT(*), SUM(r.context_recall), COUNT(r.context_recall),"
           " SUM(r.answer_correctness), COUNT(r.answer_correctness) FROM trace_references r")
    params: list[Any] = []
    if kb is not None:
        sql += " JOIN traces t ON t.id = r.trace_id"
    sql += " WHERE r.correctness IS NOT NULL AND r.answer IS NOT NULL"
    if kb is not None:
        sql += " AND t.knowledge_base = ?"
        params.append(kb)
    rows = db.execute(sql + " GROUP BY r.correctness", params).fetchall()
    if not rows:
        return {}
    recall = (sum(r[2] or 0 for r in rows), sum(r[3] for r in rows))
    correct = (sum(r[4] or 0 for r in rows), sum(r[5] for r in rows))
    return {"traces": sum(r[1] for r in rows), "by_correctness": {r[0]: r[1] for r in sorted(rows)},
            "mean_context_recall": recall[0] / recall[1] if recall[1] else None,
            "mean_answer_correctness": correct[0] / correct[1] if correct[1] else None}
