"""Reasons reach the command line, not only Python: each verdict's reasoning in `inspect`, a legend that
tells contradicted from unsupported, and `needs_review` in `list`, `stats` and the CSV export."""

from __future__ import annotations

import csv
import io

from typer.testing import CliRunner
from work_support import save_result

import veralith
from veralith.cli import app

CONTEXT = ["The warranty lasts 36 months from the date of purchase."]


def _stored(*, review: bool) -> int:
    from veralith.store import open_store

    result = veralith.evaluate("How long is the warranty?", CONTEXT, "The warranty lasts 24 months.", persist=False)
    if review:
        diagnosis = result.diagnosis.model_copy(update={"needs_review": True, "review_ids": ["k1"]})
        result = result.model_copy(update={"diagnosis": diagnosis})
    return save_result(open_store(), result)


def _run(*args: str):
    return CliRunner(env={"COLUMNS": "120"}).invoke(app, list(args))


def test_inspect_shows_each_verdicts_reasoning_and_tells_contradicted_from_unsupported():
    trace_id = _stored(review=False)
    result = veralith.evaluate("How long is the warranty?", CONTEXT, "The warranty lasts 24 months.", persist=False)
    out = " ".join(_run("inspect", str(trace_id)).stdout.split())
    for judgment in [*result.faithfulness, *result.sufficiency]:
        assert judgment.reasoning and " ".join(judgment.reasoning.split())[:60] in out, judgment.reasoning
    assert "24 months" in out and "36 months" in out  # the contradiction, in the judge's words
    assert "✗ unsupported (no chunk supports it)" in out and "⊘ contradicted (a chunk says otherwise)" in out


def test_needs_review_shows_in_list_stats_and_the_csv_export():
    plain, flagged = _stored(review=False), _stored(review=True)
    rows = {line.split()[0]: line for line in _run("list").stdout.splitlines()[1:] if line.strip()}
    assert "review" in rows[str(flagged)] and "review" not in rows[str(plain)]
    stats = " ".join(_run("stats").stdout.split())
    assert "review 1 result(s) decided by a low-confidence verdict" in stats
    exported = list(csv.DictReader(io.StringIO(_run("export", "--format", "csv").stdout)))
    assert {int(r["trace_id"]): r["needs_review"] for r in exported} == {plain: "False", flagged: "True"}
