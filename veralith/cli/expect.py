"""The judge's own CI gate: `veralith eval FILE --expect [--min-agreement X]` and the regression file
`veralith export --labelled` writes (veralith.review.regression).

After the file is judged, each record's `expected` verdicts are compared with its stored result
(the same comparison as `veralith agreement`); with --min-agreement the command exits 3 when the
agreement over every expected verdict is below it, so a prompt or model change that makes the
judge agree less with people fails the build.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console

from veralith.cli.render import literal
from veralith.store import ops

if TYPE_CHECKING:
    from veralith.models import EvaluationResult
    from veralith.store.labels import Label

__all__ = ["check_expected", "write_labelled"]


def write_labelled(store: Any, sink: TextIO, *, kb: str | None = None) -> int:
    """Every trace with a current label, as a regression record; returns how many."""
    from veralith.review.regression import record
    from veralith.store.labels import current

    labels = store.read(current, kb=kb)
    by_trace: dict[int, list[Label]] = {}
    for label in labels:
        by_trace.setdefault(label.trace_id, []).append(label)
    count = 0
    for trace_id, mine in sorted(by_trace.items()):
        inputs, info = store.read(ops.load_input, trace_id), store.read(ops.trace_info, trace_id)
        result = store.read(ops.load_result, trace_id)
        uid = store.read(lambda db, tid: db.execute("SELECT uid FROM traces WHERE id = ?", [tid]).fetchone()[0],
                         trace_id)
        data = {"id": info.external_id or f"veralith-{uid}", "query": inputs.query,
                "context": [c.model_dump(exclude_none=True) for c in inputs.context], "response": inputs.response,
                "knowledge_base": inputs.knowledge_base, "metadata": inputs.metadata}
        sink.write(json.dumps(record(data, result, mine), ensure_ascii=False) + "\n")
        count += 1
    return count


def _expectations(file: Path, default_kb: str, err: Console) -> list[tuple[int, str, str, Any]]:
    """(line, knowledge base, record id, expected) of each record that has `expected`."""
    found = []
    for n, line in enumerate(file.read_text(encoding="utf-8-sig").splitlines(), start=1):
        try:
            obj = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            continue   # eval itself reported the line
        if not isinstance(obj, dict) or "expected" not in obj:
            continue
        if obj.get("id") in (None, ""):
            err.print(literal(f"{file}:{n}: a record with `expected` needs an `id` to be found again; skipped", "red"),
                      soft_wrap=True)
            continue
        found.append((n, str(obj.get("knowledge_base") or default_kb), str(obj["id"]), obj["expected"]))
    return found


def check_expected(store: Any, file: Path, *, default_kb: str, min_agreement: float | None, out: Console,
                   err: Console) -> bool:
    """Compare the stored results with the file's expectations, print the agreement, and say whether
    it holds (--min-agreement; always True without one)."""
    from veralith.config import settings
    from veralith.review.regression import compare, expected_labels
    from veralith.review.report import markdown
    from veralith.store.errors import StoreError
    from veralith.store.labels import LabelError

    found: list[tuple[EvaluationResult, Any]] = []
    problems = 0
    for line, kb, ref, expected in _expectations(file, default_kb, err):
        try:
            result = store.read(ops.load_result, store.read(ops.resolve, ref, knowledge_base=kb))
            expected_labels(expected)   # a malformed expectation is named with its line, and not compared
        except (StoreError, LabelError) as exc:
            problems += 1
            err.print(literal(f"{file}:{line}: {exc}; not compared", "red"), soft_wrap=True)
            continue
        found.append((result, expected))
    comparison = compare(found, min_labels=settings.labels_min, problems=problems)
    out.print(literal(markdown(comparison.report.to_json()).rstrip()), soft_wrap=True)
    if comparison.moved:
        out.print(literal(f"{comparison.moved} expected claim or sub-question verdicts not compared: the judge now "
                          "decomposes those traces differently"), soft_wrap=True)
    overall = comparison.overall
    out.print(literal("agreement with the expected verdicts: "
                      + (f"{comparison.agree}/{comparison.total} = {overall:.3f}" if overall is not None
                         else "nothing to compare")), soft_wrap=True)
    if min_agreement is None:
        return True
    why = comparison.failure(min_agreement)
    if why is not None:
        err.print(literal(f"judge gate failed: agreement {why}", "red"), soft_wrap=True)
        return False
    out.print(literal(f"judge gate passed: agreement {overall:.3f} >= {min_agreement}", "green"))
    return True
