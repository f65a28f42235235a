"""`veralith eval FILE --dry-run`: what evaluating a file would cost, without calling any model.

Each record is read and validated exactly as `veralith eval` reads it, then priced by the budget
guard's own estimate (veralith.pipeline.budget.estimate_trace: the prompts the trace would send,
the pipeline's batching, tiktoken counts and an output allowance) for the configured backend and
judge model. Nothing is called, nothing is written (the database is never opened) and no API key
is needed. The offline backend makes no paid calls, so it estimates 0 calls and $0.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from veralith.cli import render
from veralith.cli.records import BadLine, read_records
from veralith.usage import CallUsage

__all__ = ["DryRunRow", "dry_run", "estimate_file"]

_SHOWN_ROWS = 200   # per-trace rows printed; the totals always cover every record


@dataclass(frozen=True)
class DryRunRow:
    line: int
    label: str               # the record's own id, else its line
    calls: int
    input_tokens: int
    output_tokens: int
    usd: float | None        # None: the model's price is unknown
    over_budget: bool


def estimate_file(path: Path, *, default_kb: str, report: Any) -> tuple[list[DryRunRow], int, str]:
    """(one row per valid record, bad records, counting method) under the settings in force.

    Bad records are passed to `report` as `FILE:LINE: message`, as `veralith eval` reports them.
    """
    from veralith.config import settings
    from veralith.pipeline.budget import estimate_trace

    budget = settings.per_trace_budget_usd
    rows, bad, method = [], 0, "local"
    for item in read_records(path, default_kb=default_kb):
        if isinstance(item, BadLine):
            bad += not item.blank
            report(f"{path}:{item.line}: {item.message}")
            continue
        est = estimate_trace(item.query, item.context, item.response)
        method = est.method
        over = budget is not None and est.usd is not None and est.usd > budget
        rows.append(DryRunRow(line=item.line, label=item.external_id or f"line {item.line}", calls=est.calls,
                              input_tokens=est.input_tokens, output_tokens=est.output_tokens, usd=est.usd,
                              over_budget=over))
    return rows, bad, method


def dry_run(path: Path, *, default_kb: str, backend: str | None, model: str | None, out: Console,
            err: Console) -> int:
    """Print the per-trace and total estimate of `path` for `backend` and `model` (default: from
    settings); return the number of bad records."""
    from veralith.config import settings

    overrides: dict[str, Any] = {}
    if backend is not None:
        overrides["backend"] = backend
    if model is not None:
        overrides["judge_model"] = model
    with settings.override(**overrides):
        return _dry_run(path, default_kb=default_kb, out=out, err=err)


def _dry_run(path: Path, *, default_kb: str, out: Console, err: Console) -> int:
    from veralith.config import settings
    from veralith.llm.backends import resolve_backend

    def report(line: str) -> None:
        err.print(render.literal(line), soft_wrap=True)

    with warnings.catch_warnings(record=True) as caught:   # an unknown price, tiktoken offline: one line each
        warnings.simplefilter("always")
        rows, bad, method = estimate_file(path, default_kb=default_kb, report=report)
    for message in dict.fromkeys(str(w.message) for w in caught):
        report(f"note: {message}")
    backend, model, budget = resolve_backend(), settings.judge_model, settings.per_trace_budget_usd
    table = Table(title=render.literal(f"Estimated judge cost of {path.name}"), title_justify="left")
    for name, justify in (("trace", "left"), ("calls", "right"), ("prompt tokens", "right"),
                          ("output tokens", "right"), ("est. cost", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows[:_SHOWN_ROWS]:
        cost = render.literal(_usd(row.usd) + (" over budget" if row.over_budget else ""),
                              "red" if row.over_budget else "")
        table.add_row(render.literal(row.label), str(row.calls), f"{row.input_tokens:,}", f"{row.output_tokens:,}",
                      cost)
    if len(rows) > _SHOWN_ROWS:
        table.add_row(render.literal(f"... {len(rows) - _SHOWN_ROWS} more"), "", "", "", "")
    total = CallUsage()
    for row in rows:
        total.add(CallUsage(calls=row.calls, input_tokens=row.input_tokens, output_tokens=row.output_tokens,
                            usd=row.usd))
    total_usd = total.usd
    table.add_section()
    table.add_row(render.literal(f"total ({len(rows)} traces)", "bold"), f"{total.calls:,}",
                  f"{total.input_tokens:,}", f"{total.output_tokens:,}", render.literal(_usd(total_usd), "bold"))
    out.print(table)
    where = "offline heuristics, no paid calls" if backend == "local" else f"judge model {model}"
    out.print(render.literal(f"Dry run: no model was called and nothing was written. Backend {backend} ({where}); "
                             f"tokens counted by {method}; output tokens are an "
                             "allowance and cost is priced without provider-cache discounts, so it errs high."))
    if backend == "local":
        out.print(render.literal("To estimate an OpenAI-compatible judge: --backend openai --model NAME."))
    if rows and total_usd is None:
        out.print(render.literal(f"The price of {model!r} is unknown: set VERALITH_PRICING to estimate its cost."))
    over = sum(r.over_budget for r in rows)
    if budget is not None:
        out.print(render.literal(f"{over} of {len(rows)} traces over the per-trace budget ${budget:.6g} "
                                 "(VERALITH_PER_TRACE_BUDGET_USD): `veralith eval` would refuse them."))
    return bad


def _usd(usd: float | None) -> str:
    # Six decimals: one trace on a small model costs a fraction of a cent.
    return "unknown" if usd is None else f"${usd:.6f}"
