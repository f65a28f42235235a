"""`veralith eval FILE --dry-run`: what evaluating a file would cost, without calling any model.

Each record is read and validated exactly as `veralith eval` reads it, then priced by the budget
guard's own estimate (veralith.pipeline.budget.estimate_trace: the prompts the trace would send,
the pipeline's batching, tiktoken counts and an output allowance) for the configured backend, judge
model and decomposer model. When the decomposer model differs from the judge model, the totals are
also shown per model, each priced at its own price. The offline backend makes no paid calls, so it
estimates 0 calls and $0.

Output tokens: the budget guard counts a generous allowance (an upper bound), and so does the dry
run of a store with no history. When the store (SQLite or PostgreSQL, opened read-only) holds what
past real runs' calls wrote (`output_sizes()`), the dry run reports the expected cost instead: each
call's prompt tokens and allowance scaled by the requests per planned call and the output its task,
model and prompt version had before (veralith.llm.estimate.LearntOutput), and says how many past
calls it learnt from. A record is marked
over budget by the guard's own (allowance) estimate either way.

A real run skips records already evaluated (same id, inputs and judge configuration); so does the
estimate. When the database exists it is opened read-only (SQLite `mode=ro`, `query_only`) and each
record with an id is put to the batch runner's own rule (veralith.cli.batch.existing_trace);
`--rejudge` prices every record, as the real run then judges every one. When there is no database
it is not created, and every record is priced. Nothing is called, nothing is written, and no API key
is needed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from veralith.cli import render
from veralith.cli.records import BadLine, Record, read_records
from veralith.store import ops
from veralith.usage import CallUsage

if TYPE_CHECKING:   # the estimator loads when a dry run starts, not when the CLI does
    from veralith.llm.estimate import LearntOutput
    from veralith.pipeline.budget import ModelCost

__all__ = ["DryRunRow", "FileEstimate", "dry_run", "estimate_file"]

_SHOWN_ROWS = 200   # per-trace rows printed; the totals always cover every record


@dataclass(frozen=True)
class DryRunRow:
    line: int
    label: str               # the record's own id, else its line
    calls: int
    input_tokens: int
    output_tokens: int
    usd: float | None        # None: a called model's price is unknown
    over_budget: bool
    by_model: tuple[ModelCost, ...] = ()   # the same split by model (budget.TraceEstimate.by_model)
    learnt_calls: int = 0    # calls whose output tokens were learnt from past runs, not the allowance


@dataclass(frozen=True)
class FileEstimate:
    rows: list[DryRunRow]    # the records a real run would judge, in file order
    bad: int                 # bad records (blank lines are not counted)
    method: str              # how tokens were counted ("local" when nothing is)
    skipped: int = 0         # records a real run would skip: already evaluated alike
    database: str | None = None   # the database consulted (read-only), when one was
    learnt: LearntOutput | None = None   # past runs' output sizes the estimate used, when asked to


SkipRule = Callable[[Record], bool]


def estimate_file(path: Path, *, default_kb: str, report: Any, skip: SkipRule | None = None,
                  database: str | None = None, learnt: LearntOutput | None = None) -> FileEstimate:
    """The estimate of `path` under the settings in force: one row per valid record that `skip`
    (default: none) does not leave out, counted in `skipped` instead and not priced.

    With `learnt`, output tokens are those past runs lead to expect where they can (the expected
    cost); `over_budget` is always the budget guard's own verdict, on its allowance.

    Bad records are passed to `report` as `FILE:LINE: message`, as `veralith eval` reports them.
    `database` is only carried into the result, to say which database `skip` read.
    """
    from veralith.config import settings
    from veralith.pipeline.budget import estimate_trace

    budget = settings.per_trace_budget_usd
    rows, bad, skipped, method = [], 0, 0, "local"
    for item in read_records(path, default_kb=default_kb):
        if isinstance(item, BadLine):
            bad += not item.blank
            report(f"{path}:{item.line}: {item.message}")
            continue
        if skip is not None and skip(item):   # before the estimate: a skipped record is never budget-checked
            skipped += 1
            continue
        est = estimate_trace(item.query, item.context, item.response, learnt=learnt)
        method = est.method
        guard = est if budget is None or not est.learnt_calls else estimate_trace(item.query, item.context,
                                                                                    item.response)
        over = budget is not None and guard.usd is not None and guard.usd > budget
        rows.append(DryRunRow(line=item.line, label=item.external_id or f"line {item.line}", calls=est.calls,
                              input_tokens=est.input_tokens, output_tokens=est.output_tokens, usd=est.usd,
                              over_budget=over, by_model=est.by_model, learnt_calls=est.learnt_calls))
    return FileEstimate(rows=rows, bad=bad, method=method, skipped=skipped, database=database, learnt=learnt)


def past_output(report: Callable[[str], None]) -> tuple[LearntOutput | None, str | None]:
    """(What past real runs' calls wrote, per task, model and prompt version; the store it was read
    from), from the configured store opened read-only; (None, None) when there is no store (none is
    created) or it cannot be read (said once through `report`)."""
    from veralith.llm.estimate import LearntOutput
    from veralith.llm.prompts import PROMPT_VERSIONS
    from veralith.redact import redact_url
    from veralith.store import open_store, store_url

    url = store_url()
    if url.startswith("sqlite:///") and (url == "sqlite:///:memory:" or not os.path.exists(url[len("sqlite:///"):])):
        return None, None
    try:
        sizes = open_store(url, read_only=True).read(ops.output_sizes)
    # An older schema without the table (a real run migrates it first; PostgreSQL's undefined table is
    # not a store error), a server out of reach, ...: the history is an aid, so the estimate goes on.
    except Exception as exc:
        report(f"note: past output sizes cannot be read ({exc}); output is estimated with the generous allowance")
        return None, None
    return LearntOutput(tuple(sizes), dict(PROMPT_VERSIONS)), redact_url(url)


@contextlib.contextmanager
def _already_evaluated(*, rejudge: bool, report: Callable[[str], None]) -> Iterator[tuple[SkipRule | None, str | None]]:
    """(the rule a real `veralith eval` would skip a record by, the database it reads), under the
    settings in force; (None, None) when every record would be judged: with `rejudge`, or when
    there is no database (none is created) or it cannot be read (said once through `report`).

    The database is opened read-only and closed on leaving; the rule is batch.existing_trace, asked
    for the judge configuration the real run would use (backend, model, prompt versions), which
    needs no API key: the client is built but never called.
    """
    from veralith.store.db import resolve_path

    target = resolve_path()
    if rejudge or target == ":memory:" or not os.path.exists(target):
        yield None, None
        return
    from veralith.errors import StoreError
    from veralith.store.sqlite import connect_readonly

    try:
        db = connect_readonly(target)
    except StoreError as exc:  # an older schema (a real run migrates it first), not a database, ...
        report(f"note: {exc}; every record is estimated, as if none had been evaluated")
        yield None, None
        return
    try:
        yield _skip_rule(db, target, report), target
    finally:
        with contextlib.suppress(sqlite3.Error):
            db.close()


def _skip_rule(db: Any, target: str, report: Callable[[str], None]) -> SkipRule:
    from veralith.cli.batch import existing_trace
    from veralith.store.sqlite import SQLiteStore

    store = SQLiteStore.over(db)   # its read methods only; the connection is read-only besides
    judge = _judge()
    unreadable = False

    def skip(record: Record) -> bool:
        nonlocal unreadable
        if record.external_id is None or unreadable:   # a record without an id is never matched
            return False
        try:
            return existing_trace(store, record, judge, rejudge=False) == "unchanged"
        except sqlite3.DatabaseError as exc:  # a damaged page: estimate the rest as if new, say so once
            unreadable = True
            report(f"note: the database at {target} cannot be read ({exc}); records from line {record.line} on "
                   "are estimated as if none had been evaluated")
            return False

    return skip


def _judge() -> Any:
    """A client of the backend and model a real run would use, to name its judge configuration."""
    from veralith.llm.backends import resolve_backend

    if resolve_backend() == "local":
        from veralith.llm.local import LocalClient

        return LocalClient()
    # Built directly, not by get_client: that one refuses a missing API key, which naming the model
    # and prompt versions does not need. Nothing is sent (no cache, no price: never called).
    from veralith.llm.client import OpenAIClient

    return OpenAIClient()


def dry_run(path: Path, *, default_kb: str, backend: str | None, model: str | None, out: Console,
            err: Console, rejudge: bool = False, mode: str | None = None) -> int:
    """Print the per-trace and total estimate of `path` for `backend` and `model` (default: from
    settings), leaving out records a real run would skip unless `rejudge`; return the number of
    bad records."""
    from veralith.config import settings

    overrides: dict[str, Any] = {}
    if backend is not None:
        overrides["backend"] = backend
    if model is not None:
        overrides["judge_model"] = model
    if mode is not None:
        overrides["mode"] = mode
    with settings.override(**overrides):
        return _dry_run(path, default_kb=default_kb, out=out, err=err, rejudge=rejudge)


def _dry_run(path: Path, *, default_kb: str, out: Console, err: Console, rejudge: bool) -> int:
    from veralith.config import settings
    from veralith.llm.backends import resolve_backend

    def report(line: str) -> None:
        err.print(render.literal(line), soft_wrap=True)

    learnt, history = past_output(report) if resolve_backend() != "local" else (None, None)
    with warnings.catch_warnings(record=True) as caught:   # an unknown price, tiktoken offline: one line each
        warnings.simplefilter("always")
        with _already_evaluated(rejudge=rejudge, report=report) as (skip, database):
            found = estimate_file(path, default_kb=default_kb, report=report, skip=skip, database=database,
                                  learnt=learnt)
    for message in dict.fromkeys(str(w.message) for w in caught):
        report(f"note: {message}")
    rows = found.rows
    backend, model, budget = resolve_backend(), settings.judge_model, settings.per_trace_budget_usd
    fast = settings.mode == "fast" and backend != "local"
    # The single call goes to the judge model: no decomposer model is used in that mode.
    decomposer = model if fast else settings.decomposer_model or model
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
    label = f"total ({len(rows)} traces" + (f"; {found.skipped} skipped)" if found.skipped else ")")
    table.add_row(render.literal(label, "bold"), f"{total.calls:,}",
                  f"{total.input_tokens:,}", f"{total.output_tokens:,}", render.literal(_usd(total_usd), "bold"))
    if backend != "local" and decomposer != model:
        for role, name, part in (("decomposer", decomposer, _model_total(rows, decomposer)),
                                 ("judges", model, _model_total(rows, model))):
            table.add_row(render.literal(f"  {role} ({name})"), f"{part.calls:,}", f"{part.input_tokens:,}",
                          f"{part.output_tokens:,}", render.literal(_usd(part.usd)))
    out.print(table)
    if found.skipped:
        out.print(render.literal(f"{found.skipped} would be skipped (already evaluated): their results in "
                                 f"{found.database} stand (same id, inputs and judges); --rejudge estimates them "
                                 "too."))
    where = "offline heuristics, no paid calls" if backend == "local" else f"judge model {model}" + (
        f", decomposer model {decomposer}" if decomposer != model else "") + (
        ", fast mode: one call per trace" if fast else "")
    written = " (the database was only read)" if found.database else ""
    out.print(render.literal(f"Dry run: no model was called and nothing was written{written}. Backend {backend} "
                             f"({where}); tokens counted by {found.method}; cost is priced without "
                             "provider-cache discounts."))
    if backend != "local" and rows:
        out.print(render.literal(_output_line(rows, found.learnt, history, model, decomposer)))
    if settings.explain and backend != "local":
        out.print(render.literal("--explain: one explain call is counted for every trace, since which traces fail "
                                 "(and get one) is known only after judging."))
    if backend == "local":
        out.print(render.literal("To estimate an OpenAI-compatible judge: --backend openai --model NAME."))
        if settings.mode == "fast":
            out.print(render.literal("The offline judge has no single-call mode: it runs (and labels its results) "
                                     "full."))
    if rows and total_usd is None:
        unknown = sorted({m.model for row in rows for m in row.by_model if m.usd is None}) or [model]
        out.print(render.literal(f"The price of {' and '.join(map(repr, unknown))} is unknown: set VERALITH_PRICING "
                                 "to estimate its cost."))
    over = sum(r.over_budget for r in rows)
    if budget is not None:
        out.print(render.literal(f"{over} of {len(rows)} traces over the per-trace budget ${budget:.6g} "
                                 "(VERALITH_PER_TRACE_BUDGET_USD): `veralith eval` would refuse them."))
    return found.bad


def _output_line(rows: list[DryRunRow], learnt: LearntOutput | None, history: str | None, model: str,
                 decomposer: str) -> str:
    """One line: where the output tokens come from (past runs, the allowance, or both)."""
    calls = sum(r.calls for r in rows)
    learnt_calls = sum(r.learnt_calls for r in rows)
    if not learnt_calls:
        models = " or ".join(dict.fromkeys((model, decomposer)))
        return (f"No past runs of {models} to learn output sizes from: output estimated with the generous "
                "allowance (what the budget guard counts), so the cost errs high.")
    past = learnt.calls_used() if learnt is not None else 0
    rest = "" if learnt_calls == calls else (
        f"; the other {calls - learnt_calls:,} (tasks or models with no past run) use the generous allowance")
    return (f"Expected cost: output tokens and requests per call learnt from {past:,} past calls of the same "
            f"tasks, models and prompt versions (in {history}) for {learnt_calls:,} of the {calls:,} calls{rest}. "
            "The budget guard keeps its generous allowance.")


def _model_total(rows: list[DryRunRow], model: str) -> CallUsage:
    """The rows' calls, tokens and USD for `model` alone (CallUsage.add: an unknown price stays unknown)."""
    total = CallUsage(model=model)
    for row in rows:
        for part in row.by_model:
            if part.model == model:
                total.add(CallUsage(calls=part.calls, input_tokens=part.input_tokens,
                                    output_tokens=part.output_tokens, usd=part.usd))
    return total


def _usd(usd: float | None) -> str:
    # Six decimals: one trace on a small model costs a fraction of a cent.
    return "unknown" if usd is None else f"${usd:.6f}"
