"""What a caller runs on a store's connection: `store.read(ops.stats, kb="docs")`, `store.write(ops.start_run, …)`.

A store has one way to run code on a connection (`read`, `write`, and `stream` for a generator that
holds its connection while it is consumed: veralith.store.protocol.Connected), as datasette's
`execute_fn`/`execute_write_fn`; the SQL lives in the modules below, shared by both stores. This
module only gathers those functions under the names callers use (each takes the connection first),
with the few adapters a shape needs: no function here holds a rule of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veralith.store.browse import (
    count_traces,
    daily_figures,
    kb_figures,
    neighbours,
    page_sorted,
    page_traces,
    run_cells,
    run_labels,
    trace_row,
)
from veralith.store.calibration import SqlCalibration, calibrate
from veralith.store.history import history
from veralith.store.idblocks import reserve_block, secure as secure_ids, taken as taken_ids
from veralith.store.outputsizes import read_output_sizes as output_sizes
from veralith.store.patterns import (
    bad_claims,
    common_suggestions,
    document_examples,
    document_figures,
    question_rows,
    scope_counts as pattern_counts,
)
from veralith.store.queries import knowledge_bases, list_traces, stats, trace_run
from veralith.store.reference_patterns import expected_examples, expected_figures, missed_facts, reference_counts
from veralith.store.repository import (
    find_external,
    iter_stored as iter_results,
    load_input,
    load_result as _load_result,
    resolve,
    save_explanation,
    trace_info,
)
from veralith.store.review_cutoff import review_cutoff
from veralith.store.runs import (
    discard_if_empty,
    failure_details,
    finish_run,
    get_run,
    list_runs,
    record_result,
    resolve_run,
    start_run,
    tag_trace,
    trace_rows,
)

if TYPE_CHECKING:
    from veralith.models import EvaluationResult, ThresholdSource
    from veralith.store.calibration import Calibration
    from veralith.store.sql import Db

__all__ = ["bad_claims", "calibration", "calibration_count", "calibration_labels", "calibration_values",
           "common_suggestions", "count_traces", "current_threshold", "daily_figures", "discard_if_empty",
           "document_examples", "document_figures", "expected_examples", "expected_figures", "failure_details",
           "find_external", "finish_run", "get_run", "history", "iter_results", "kb_figures", "knowledge_bases",
           "list_runs", "list_traces", "load_input", "load_result", "missed_facts", "neighbours", "output_sizes",
           "page_sorted", "page_traces", "pattern_counts", "question_rows", "record_result", "reference_counts",
           "reserve_block", "resolve", "resolve_run", "review_cutoff", "run_cells", "run_labels", "save_explanation",
           "secure_ids", "start_run", "stats", "tag_trace", "taken_ids", "trace_info", "trace_row", "trace_rows",
           "trace_run"]


def load_result(db: Db, trace_id: int) -> EvaluationResult:
    """The stored result of a trace (TraceNotFound, TraceNotEvaluated: veralith.store.repository)."""
    return _load_result(trace_id, db)


def calibration_count(db: Db, knowledge_base: str) -> int:
    return SqlCalibration(db).calibration_count(knowledge_base)


def calibration_values(db: Db, knowledge_base: str, offset: int, limit: int) -> list[float]:
    return SqlCalibration(db).calibration_values(knowledge_base, offset, limit)


def calibration_labels(db: Db, knowledge_base: str) -> list[tuple[float, bool]]:
    return SqlCalibration(db).calibration_labels(knowledge_base)


def calibration(db: Db, knowledge_base: str) -> Calibration:
    """The sufficiency threshold `knowledge_base` has earned, where from, and the labels it was fitted to."""
    return calibrate(SqlCalibration(db), knowledge_base)


def current_threshold(db: Db, knowledge_base: str) -> tuple[float, ThresholdSource]:
    """The sufficiency threshold `knowledge_base` has earned (veralith.pipeline.calibrate)."""
    found = calibrate(SqlCalibration(db), knowledge_base)
    return found.threshold, found.source
