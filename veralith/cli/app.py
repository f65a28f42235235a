"""The `veralith` command: eval, resume, inspect, list, stats, export.

Commands only wire options to the library and choose exit codes; reading and running batches lives
in veralith.cli.batch, and everything shown is built by veralith.cli.render. Heavy modules are imported
inside the commands so `veralith --help` stays instant.

Exit codes: the one table in veralith.cli.exits (ExitCode), documented in docs/cli.md.
Every error is one line on stderr, with secrets (API key, URL passwords) masked.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shlex
import sqlite3
import sys
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from veralith.cli import (
    agreeing,
    batch,
    batchjobs,
    compare,
    deadletters,
    filters,
    importing,
    labelling,
    listing,
    migrate,
    patterns,
    records,
    render,
    reviewing,
    runs,
    serve,
    worker,
)
from veralith.cli.command import VeralithCommand, VeralithGroup, epilog
from veralith.cli.exits import ExitCode, fail, print_error
from veralith.llm.local.about import about
from veralith.store import ops

if TYPE_CHECKING:
    from veralith.store.protocol import Store

__all__ = ["app", "main"]

app = typer.Typer(name="veralith", help="Diagnose why a RAG answer went wrong.\n\nJudges: an OpenAI-compatible "
                  f"model when OPENAI_API_KEY or VERALITH_BASE_URL is set, else the {about()}", add_completion=False,
                  pretty_exceptions_enable=False, cls=VeralithGroup, rich_markup_mode=None)

# Shown under the help when `veralith` runs with no command: the loop a new user starts with.
GETTING_STARTED = """
Getting started:
  veralith eval traces.jsonl   judge a file of query/context/response records
  veralith list                the stored traces, newest first, with their cell
  veralith inspect ID          why one trace failed, claim by claim, and the fix"""

MAX_ID = 2**63 - 1  # SQLite's largest integer; larger ids cannot exist and would overflow the driver


_SINCE_HELP = ("Only traces created at or after this ISO date/time (UTC unless it names a zone) or this long "
               "ago: 30m, 24h, 7d, 2w.")


def _command(name: str) -> Any:
    """Register a subcommand with the shared help layout and its example (veralith.cli.command)."""
    return app.command(name, cls=VeralithCommand, epilog=epilog(name))


def _print_version(value: bool) -> None:
    if value:
        from veralith import __version__

        typer.echo(f"veralith {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", help="Show the version and exit.", callback=_print_version,
                                          is_eager=True)] = False,
) -> None:
    # No docstring: the app's help (above) stays the one shown by `veralith --help`.
    if ctx.invoked_subcommand is None:  # bare `veralith`: the help, then where to start
        shown = ctx.get_help()  # typer's rich help prints itself and returns ""; plain click returns the text
        if shown:
            typer.echo(shown)
        typer.echo(GETTING_STARTED)
        raise typer.Exit()


class Backend(str, Enum):
    auto = "auto"
    openai = "openai"
    local = "local"


class Mode(str, Enum):
    full = "full"
    fast = "fast"


_MODE_HELP = ("full: decompose, then three isolated judges (2 round trips); fast: one call per trace that does "
              "both, for screening large logs (default: from settings, VERALITH_MODE)")


class Format(str, Enum):
    jsonl = "jsonl"
    csv = "csv"


def _out() -> Console:
    # Built per command, not at import: the console must write to whatever sys.stdout is *now*
    # (a pipe, a file, a test runner's capture). highlight=False: no guessing colours into our text.
    return Console(highlight=False)


def _err() -> Console:
    return Console(stderr=True, highlight=False)


_fail = fail  # one error line, then the exit code (veralith.cli.exits)


def _check_output(output: Path) -> None:
    """Refuse an output that is the database or one of its -wal/-shm files, before opening it."""
    from veralith.store.db import output_conflict

    problem = output_conflict(output)
    if problem is not None:
        raise _fail(f"--output {problem}", ExitCode.ERROR)


def _open_output(path: Path, *, newline: str | None) -> Any:
    try:
        return path.open("w", encoding="utf-8", newline=newline)
    except OSError as exc:
        raise _fail(f"--output {path}: cannot write ({exc.strerror or exc})", ExitCode.ERROR) from None


def _store() -> Store:
    """The configured store (veralith.store.protocol), opened (and created) on first use."""
    from veralith.store import open_store

    return open_store()


def _resolve(store: Store, ref: str, kb: str | None) -> int:
    """The trace id a person means by `ref`: a trace id, else their own record id (see resolve).
    Not found, or a record id used in several knowledge bases: StoreError, shown by VeralithGroup."""
    _known_kb(kb)
    try:
        return store.read(ops.resolve, ref, knowledge_base=kb)
    except sqlite3.DatabaseError as exc:  # a damaged page: a message, not a traceback
        raise _fail(f"trace {ref} cannot be read: {exc} (the database file is damaged)", ExitCode.ERROR) from None


def _known_kb(kb: str | None) -> str | None:
    """`kb` if some trace is stored under it (or there is no database to ask); otherwise a one-line
    error naming the knowledge bases that have traces, exit 2. Every --kb that selects is checked here."""
    db = _existing_db()
    try:
        return kb if db is None else filters.knowledge_base(kb, lambda: db.read(ops.knowledge_bases))
    except filters.BadOption as exc:
        raise _fail(str(exc), ExitCode.ERROR) from None


def _kb_needs_ids(kb: str | None, refs: list[str] | None) -> None:
    """`--kb` of export and resume says which knowledge base the ids given belong to; without ids
    it would be ignored and every knowledge base exported or resumed, so it is a bad option."""
    if kb is not None and not refs:
        raise _fail(f"--kb {kb!r} names the knowledge base of the ids given, and no id was given; "
                    "give the ids (trace ids or your own record ids) too", ExitCode.ERROR)


def _resolve_all(store: Store, refs: list[str], kb: str | None) -> list[int]:
    return list(dict.fromkeys(_resolve(store, ref, kb) for ref in refs))  # in the order given, once each


def _existing_db() -> Store | None:
    """The store opened read-only, or None when there is none yet: reading commands never create one."""
    found: Store | None = runs.existing_db()
    return found


@_command("eval")
def eval_command(
    file: Annotated[Path, typer.Argument(
        metavar="FILE", help="JSONL: one {query, context, response} per line; optional id, knowledge_base, "
        "metadata. A .csv file: a header row naming the same columns. RAGAS and DeepEval field names are read too.",
        show_default=False)],
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", "-c", min=1, max=256, metavar="N",
        help="Traces evaluated in parallel, 1-256 (default: from settings)")] = None,
    no_persist: Annotated[bool, typer.Option(
        "--no-persist", help="Judge, but write nothing to the database (--dry-run calls no judge).")] = False,
    backend: Annotated[Backend | None, typer.Option(help="Judge backend (default: from settings)")] = None,
    model: Annotated[str | None, typer.Option(metavar="NAME", help="Judge model name (default: from settings)")] = None,
    mode: Annotated[Mode | None, typer.Option(help=_MODE_HELP)] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", metavar="FILE", help="Write one full result per line "
                                                "(JSON), in input order.")] = None,
    kb: Annotated[str, typer.Option("--kb", metavar="NAME", help="Knowledge base of records that name none.")] \
        = "default",
    run_name: Annotated[str | None, typer.Option(
        "--run-name", metavar="NAME",
        help="Name this run (every eval is a run; see `veralith runs`, `veralith compare A B`).")]
    = None,
    fail_under: Annotated[float | None, typer.Option(
        "--fail-under", min=0.0, max=1.0, metavar="RATE",
        help="CI gate: exit 3 when the pass rate (0-1; indeterminate counts as not passing) is below RATE.")] = None,
    max_cell: Annotated[list[str] | None, typer.Option(
        "--max-cell", metavar="CELL=N", help="CI gate: exit 3 when more than N traces land in CELL (one of the "
        "six cells or indeterminate). Repeatable.")] = None,
    min_correct: Annotated[float | None, typer.Option(
        "--min-correct", min=0.0, max=1.0, metavar="RATE",
        help="CI gate: exit 3 when, of the traces with a reference answer, the share judged `correct` (0-1; not "
        "assessed counts as not correct) is below RATE, or no trace has a reference.")] = None,
    min_recall: Annotated[float | None, typer.Option(
        "--min-recall", min=0.0, max=1.0, metavar="RATE",
        help="CI gate: exit 3 when the share of reference facts the retrieved context states (context recall, "
        "0-1, pooled over the run) is below RATE, or no reference fact was judged.")] = None,
    rejudge: Annotated[bool, typer.Option(
        "--rejudge", help="Re-evaluate records whose id is already stored even when nothing changed (in place; "
        "the earlier outcome stays in the trace's history).")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Call no model and write nothing: print each trace's judge calls, prompt and output "
        "tokens and estimated cost for the configured judge model, and the totals (output: the budget guard's "
        "allowance, or once the store holds past runs, what they wrote). Records a real run would skip as "
        "already evaluated are left out and counted (the database is only read; --rejudge estimates them "
        "too).")] = False,
    explain: Annotated[bool, typer.Option(
        "--explain", help="For each failing trace, one more judge call: what went wrong in it and the change to "
        "try, quoting the trace (shown by `inspect`, kept beside the suggestion; priced, cached, within the budget; "
        "--dry-run counts it for every trace).")] = False,
    batch_api: Annotated[bool, typer.Option(
        "--batch", help="Send every judge call through the OpenAI Batch API (half price; replies within 24 h), "
        "one model per batch, as many batches as VERALITH_BATCH_MAX_REQUESTS / _MAX_BYTES need: waits and shows "
        "progress; if it stops, `veralith batch collect` finishes the job.")] = False,
    expect: Annotated[bool, typer.Option(
        "--expect", help="Compare each record's `expected` verdicts (a file from `veralith export --labelled`) with "
        "what the judge says now, and report the agreement instead of quality.")] = False,
    min_agreement: Annotated[float | None, typer.Option(
        "--min-agreement", min=0.0, max=1.0, metavar="RATE", help="CI gate on the judge itself (implies --expect): "
        "exit 3 when the agreement over every expected verdict is below RATE.")] = None,
) -> None:
    """Evaluate every trace in a JSONL or CSV file; bad lines are reported as FILE:LINE and skipped.

    A record's `id` is its trace's external id: re-running a file skips the records already evaluated
    with the same inputs and judges, and re-evaluates changed ones in place."""
    if not file.exists():
        raise _fail(f"{file}: no such file")
    if not file.is_file():
        raise _fail(f"{file}: not a regular file")
    if output is not None and output.exists() and output.resolve() == file.resolve():
        raise _fail(f"--output {output} is the input file; it would be overwritten before it is read",
                    ExitCode.ERROR)
    if output is not None:
        _check_output(output)
    try:
        total = records.count_lines(file)
    except OSError as exc:
        raise _fail(f"{file}: cannot read ({exc.strerror or exc})") from None
    if total == 0:
        raise _fail(f"{file} is empty: expected " + ("a header row and one row per trace" if records.is_csv(file)
                                                      else "one JSON object per line"))
    if not records.is_csv(file) and records.is_json_array(file):
        raise _fail(f"{file} is a JSON array; `veralith eval` reads JSONL, one JSON object per line "
                    f"(convert it, e.g. jq -c '.[]' {shlex.quote(str(file))} > records.jsonl)")
    if dry_run:
        from veralith.cli.dryrun import dry_run as estimate

        # --no-persist has no stored results to skip by: a real run would judge every record, as with --rejudge.
        from veralith.config import settings

        with settings.override(explain=True) if explain else contextlib.nullcontext():
            bad = estimate(file, default_kb=kb, backend=backend.value if backend else None, model=model,
                           out=_out(), err=_err(), rejudge=rejudge or no_persist,
                           mode=mode.value if mode else None)
        if batch_api:
            from veralith.observability.pricing import BATCH_DISCOUNT

            _out().print(f"with --batch, the Batch API bills every token at {BATCH_DISCOUNT:.0%} of the prices above",
                         markup=False)
        raise typer.Exit(ExitCode.ERROR if bad else ExitCode.OK)
    persist = not no_persist
    expect = expect or min_agreement is not None
    if expect and not persist:
        raise _fail("--expect compares the stored results with the file; it cannot run with --no-persist",
                    ExitCode.ERROR)
    if batch_api:
        _eval_batch(file, total=total, kb=kb, backend=backend, model=model, run_name=run_name, rejudge=rejudge,
                    refused=[name for name, given in (("--no-persist", no_persist), ("--output", output),
                                                      ("--fail-under", fail_under), ("--max-cell", max_cell),
                                                      ("--min-correct", min_correct), ("--min-recall", min_recall),
                                                      ("--concurrency", concurrency), ("--explain", explain),
                                                      ("--expect", expect),
                                                      ("--mode fast", mode is not None and mode.value == "fast"))
                             if given])
        return
    from veralith.cli.gate import EvalHooks

    try:  # the run (--run-name) and the CI gate (--fail-under, --max-cell)
        hooks = EvalHooks(file, persist=persist, run_name=run_name, fail_under=fail_under, max_cell=max_cell,
                          min_correct=min_correct, min_recall=min_recall)
    except (TypeError, ValueError) as exc:
        raise _fail(str(exc), ExitCode.ERROR) from None

    def jobs(db: Any, client: Any, tally: batch.Tally, report: Any) -> Any:
        return batch.eval_jobs(file, default_kb=kb, persist=persist, store=_store() if persist else None,
                               client=client, tally=tally, report=report, run_id=hooks.start(db, client),
                               rejudge=rejudge, yield_unchanged=output is not None or explain)

    def work(record: records.Record, client: Any) -> Any:
        if record.unchanged:  # not judged again: its stored result goes to --output in its place
            assert record.trace_id is not None
            if explain:   # ... explained first when it fails and has no explanation yet
                from veralith.cli.explaining import explain_stored

                return explain_stored(_store(), _store().read(ops.load_result, record.trace_id), client=client)
            return _store().read(ops.load_result, record.trace_id)
        # again: a re-run record names a trace already evaluated, re-judged in place
        return hooks.record(record, batch.evaluate_record(record, persist=persist, client=client, again=True))

    async def awork(record: records.Record, client: Any) -> Any:
        """`work` on the event loop (VERALITH_ASYNC_CALLS): the store's part on a thread."""
        if record.unchanged:   # a stored result (explained first with --explain): the sync path, on a thread
            return await asyncio.to_thread(work, record, client)
        result = await batch.aevaluate_record(record, persist=persist, client=client, again=True)
        return await asyncio.to_thread(hooks.record, record, result)

    # Closes the run whatever happens; raises Exit(3) when only the gate failed.
    def judge_all() -> None:
        hooks.around(lambda: _run("veralith eval", jobs, work, total=total, persist=persist, backend=backend,
                                  model=model, mode=mode, concurrency=concurrency, output=output,
                                  where=lambda r: f"{file}:{r.line}", explain=explain, awork=awork), _out())

    if not expect:
        judge_all()
        return
    code = ExitCode.OK
    try:
        judge_all()
    except typer.Exit as stop:
        code = ExitCode(stop.exit_code)
    if code in (ExitCode.ERROR, ExitCode.INTERRUPTED):
        raise typer.Exit(code)
    from veralith.cli.expect import check_expected

    held = check_expected(_store(), file, default_kb=kb, min_agreement=min_agreement, out=_out(), err=_err())
    raise typer.Exit(code if held else ExitCode.CHECK_FAILED)


def _say_mode(client: Any, err: Console) -> None:
    """One line when the fast mode was asked for (--mode fast, VERALITH_MODE) but the client judges in full."""
    from veralith.config import settings
    from veralith.pipeline.fast import effective_mode

    if settings.mode == "fast" and effective_mode(client) != "fast":
        err.print("note: mode fast saves paid judge calls, and the offline judge (backend local) makes none: this "
                  "run is judged in full mode, and its results say so (`veralith compare` counts it as full)",
                  markup=False, soft_wrap=True)


def _eval_batch(file: Path, *, total: int, kb: str, backend: Backend | None, model: str | None,
                run_name: str | None, rejudge: bool, refused: list[str]) -> None:
    """`eval --batch`: veralith.cli.batchjobs, with the same settings overrides as a synchronous eval."""
    if refused:
        raise _fail(f"--batch cannot be used with {', '.join(refused)}: a batch job stores every result and may "
                    "finish in another process (`veralith batch collect`)", ExitCode.ERROR)
    from veralith.cli import batchjobs
    from veralith.cli.gate import EvalHooks
    from veralith.config import settings

    try:
        hooks = EvalHooks(file, persist=True, run_name=run_name, fail_under=None, max_cell=None)
    except (TypeError, ValueError) as exc:
        raise _fail(str(exc), ExitCode.ERROR) from None
    overrides: dict[str, Any] = {"backend": backend.value} if backend is not None else {}
    if model is not None:
        overrides["judge_model"] = model
    with settings.override(**overrides):
        batchjobs.eval_batch(file, store=_store(), kb=kb, run=hooks.run, rejudge=rejudge, total=total)


@_command("resume")
def resume_command(
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", "-c", min=1, max=256, metavar="N",
        help="Traces evaluated in parallel, 1-256 (default: from settings)")] = None,
    backend: Annotated[Backend | None, typer.Option(help="Judge backend (default: from settings)")] = None,
    model: Annotated[str | None, typer.Option(metavar="NAME", help="Judge model name (default: from settings)")] = None,
    mode: Annotated[Mode | None, typer.Option(help=_MODE_HELP)] = None,
    failed: Annotated[bool, typer.Option(
        "--failed", help="Instead re-judge stored traces whose last evaluation failed (judge errors, e.g. an "
        "outage); earlier errors stay in their history.")] = False,
    refs: Annotated[list[str] | None, typer.Argument(
        metavar="ID", help="Only these traces (trace ids or your own record ids).", show_default=False)]
    = None,
    kb: Annotated[str | None, typer.Option("--kb", metavar="NAME", help="Knowledge base of the record ids given.")] \
        = None,
) -> None:
    """Evaluate traces left pending (or abandoned by a crashed process); with --failed, re-judge failed ones."""
    _kb_needs_ids(kb, refs)
    from veralith.store import store_url
    from veralith.work import shipper

    # A spool on this host is moved in whatever the database's state: none yet, or a file whose first
    # migration a killed app never finished (the writing store below brings it up to date).
    if not (not refs and shipper.spooled_here(store_url())) and _existing_db() is None:
        # (A spool with no database yet: processes that logged and died before their first ship.)
        if refs:
            raise _fail(f"trace {refs[0]} not found: no database yet")
        _out().print("nothing to resume: no database yet")
        return
    from veralith.work.claims import claims_for

    store = _store()
    wanted = _resolve_all(store, refs or [], kb)
    if not failed:
        shipper.recover(store)  # moves in traces spooled by a process that is gone, first
    ids = claims_for(store).resumable(failed=failed)
    if refs:
        idle = [i for i in wanted if i not in set(ids)]
        for trace_id in idle:
            _out().print(f"trace {trace_id}: nothing to resume (it is not " + (
                "a failed evaluation)" if failed else "pending, nor left running by a process that is gone)"))
        ids = [i for i in wanted if i not in set(idle)]
    if not ids:
        if not refs:
            _out().print("nothing to resume: " + ("no traces with judge errors" if failed else "no pending traces"))
        return

    def jobs(db: Any, client: Any, tally: batch.Tally, report: Any) -> Any:
        return batch.resume_jobs(store, ids)

    def work(job: records.Record, client: Any) -> Any:
        return batch.evaluate_record(job, persist=True, client=client, failed=failed)

    async def awork(job: records.Record, client: Any) -> Any:
        return await batch.aevaluate_record(job, persist=True, client=client, failed=failed)

    _run("veralith resume", jobs, work, total=len(ids), persist=True, backend=backend, model=model, mode=mode,
         concurrency=concurrency, output=None, where=lambda r: f"trace {r.trace_id}", awork=awork)


def _run(title: str, jobs: Any, work: Any, *, total: int, persist: bool, backend: Backend | None,
         model: str | None, concurrency: int | None, output: Path | None, where: Any, explain: bool = False,
         awork: Any = None, mode: Mode | None = None) -> None:
    """Shared body of eval and resume: progress, per-record reports, ordered output, summary, exit code.

    `awork`: `work` as a coroutine function, used instead when VERALITH_ASYNC_CALLS is on (one event
    loop keeps every record's judge requests in flight, batch.LoopPool)."""
    from collections import deque

    from veralith.config import settings
    from veralith.errors import JudgeServerDown

    # A dry run must not create or touch the database, and the judge-reply cache lives in it.
    overrides: dict[str, Any] = {} if persist else {"cache": False}
    if backend is not None:
        overrides["backend"] = backend.value
    if model is not None:
        overrides["judge_model"] = model
    if explain:
        overrides["explain"] = True
    if mode is not None:
        overrides["mode"] = mode.value
    err, tally = _err(), batch.Tally(total=total)
    from veralith.policy import fail_cells

    fail_cells()  # a bad gate policy is one line now, not an error on every record
    sink = _open_output(output, newline=None) if output else None
    down_line = None  # the judge server went down: the one line that says so
    try:
        with settings.override(**overrides):
            from veralith.llm import get_client

            client = get_client()
            _say_mode(client, err)
            db = _store() if persist else None
            with batch.Reporter(err, tally) as reporter:
                def on_done(job: Any, result: Any, error: BaseException | None) -> None:
                    if getattr(job, "unchanged", False) and error is None:
                        return  # counted as unchanged when read (batch.eval_jobs)
                    batch.record_outcome(tally, job, result, error, persist=persist,
                                         report=reporter.report, where=where(job))
                    reporter.advance()

                def on_flush(job: Any, result: Any, error: BaseException | None) -> None:
                    if sink is not None and result is not None:
                        sink.write(result.model_dump_json() + "\n")
                        sink.flush()

                tally.started = time.monotonic()  # the rate counts evaluation, not start-up imports
                workers = concurrency or settings.concurrency
                source = jobs(db, client, tally, reporter.report)
                window: deque[Any] = deque(maxlen=2 * workers + 1)  # the records that may be in flight
                try:
                    asynchronous = awork is not None and settings.async_calls
                    with batch.stop_on_sigterm():   # SIGTERM stops the run as Ctrl-C does
                        batch.run_ordered(batch.recent(source, window),
                                          lambda job: (awork if asynchronous else work)(job, client),
                                          concurrency=workers, on_done=on_done, on_flush=on_flush,
                                          asynchronous=asynchronous)
                except JudgeServerDown as down:
                    down_line = batch.server_down(down, _store() if persist else None, window, source, tally)
                except batch.Interrupted as stop:
                    tally.interrupted = True
                    # an unchanged record's trace is done, not left pending (it was only to be read back)
                    cancelled = [job for job in stop.cancelled if not getattr(job, "unchanged", False)]
                    # += : a trace stored but not yet handed over is already counted (batch.eval_jobs)
                    tally.left_pending += len(cancelled)
                    tally.left_running = len(stop.abandoned)
                    if persist:
                        batch.release(_store(), cancelled)
    finally:  # a ConfigError or StoreError (full disk, read-only file...) is shown by VeralithGroup
        if sink is not None:
            sink.close()
    if down_line is not None:
        raise _fail(down_line, ExitCode.ERROR)
    tally.finished = time.monotonic()
    _out().print(render.summary_view(tally, title=title))
    if tally.interrupted:
        if tally.left_running:
            # Evaluations still running in worker threads cannot be stopped from Python; leaving at
            # once abandons them. Their leases name this process, which is about to be gone, so
            # `veralith resume` reclaims them as stale.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(ExitCode.INTERRUPTED)
        # Stopping promptly: the objects left are the interpreter's to free, not to search for cycles
        # (the final collections took seconds on a busy machine).
        gc.freeze()
        raise typer.Exit(ExitCode.INTERRUPTED)
    if tally.errors:
        raise typer.Exit(ExitCode.ERROR)


@_command("inspect")
def inspect_command(
    ref: Annotated[str, typer.Argument(metavar="ID", help="Trace id (see `veralith list`; #N is always trace N), or "
                                       "your own id: the `id` of the record it came from.", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print the full result as JSON.")] = False,
    kb: Annotated[str | None, typer.Option(
        "--kb", metavar="NAME", help="Knowledge base of the id, when your own id is used in "
                                           "several.")] = None,
    explain: Annotated[bool, typer.Option(
        "--explain", help="For a failing trace without one yet: one more judge call (the configured judge) saying "
        "what went wrong in it and the change to try, quoting the trace; stored beside the suggestion. "
        "Priced, cached, within the budget.")] = False,
) -> None:
    """Show one trace's diagnosis: sub-questions, claims by verdict, cell, suggestion (read-only without --explain)."""

    store = _existing_db()
    if store is None:
        raise _fail(f"trace {ref} not found: no database yet")
    trace_id = _resolve(store, ref, kb)
    try:  # a trace with no result yet (pending, running, error) is a StoreError: VeralithGroup shows it
        result = store.read(ops.load_result, trace_id)
        info = store.read(ops.trace_info, trace_id)
        run = store.read(ops.trace_run, trace_id)
    except sqlite3.DatabaseError as exc:  # a damaged page: say which trace, not a traceback
        raise _fail(f"trace {trace_id} cannot be read: {exc} (the database file is damaged)",
                    ExitCode.ERROR) from None
    if explain:
        from veralith.cli.explaining import explain_stored

        result = explain_stored(_store(), result, _err())
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        return
    _out().print(render.result_view(result, external_id=info.external_id, created_at=info.created_at, run=run,
                                    app_latency=info.app_latency_ms))


@_command("list")
def list_command(
    limit: Annotated[int, typer.Option(min=1, max=MAX_ID, metavar="N", help="Most recent traces to show.")] = 50,
    cell: Annotated[str | None, typer.Option(
        metavar="CELL", help="Only this failure cell, e.g. incomplete_ungrounded.")] = None,
    kb: Annotated[str | None, typer.Option("--kb", metavar="NAME", help="Only this knowledge base.")] = None,
    status: Annotated[str | None, typer.Option(
        metavar="STATUS", help="Only traces in this state: pending, running, done, error.")]
    = None,
    since: Annotated[str | None, typer.Option(
        metavar="WHEN", help=_SINCE_HELP)] = None,
    wide: Annotated[bool, typer.Option("--wide", help="Every column and the whole query, however wide the "
                                       "terminal.")] = False,
) -> None:
    """List stored traces, newest first, with when each was created.

    On a narrow terminal the numeric columns give way first so the query stays readable; --wide
    shows every column and the whole query."""
    try:
        cell, status, when = filters.cell(cell), filters.status(status), filters.since(since)
    except filters.BadOption as exc:
        raise _fail(str(exc), ExitCode.ERROR) from None
    kb = _known_kb(kb)
    db = _existing_db()
    out = _out()
    # A query is never shown wider than the terminal, so that much of it is all a row needs.
    rows = [] if db is None else db.read(ops.list_traces, limit=limit, cell=cell, kb=kb, status=status, since=when,
                                                      preview_chars=None if wide else max(out.width, 1))
    if not rows:
        given = [f"--{name} {value}" for name, value in (("cell", cell), ("kb", kb), ("status", status),
                                                         ("since", since)) if value is not None]
        out.print(render.literal("no traces" + (" (no database yet)" if db is None else
                                                f" match {' '.join(given)}" if given else "")))
        return
    table = listing.traces_table(rows, width=out.width, wide=wide)
    if wide:  # as wide as the table needs: a row per line, never wrapped or cut (a pager or a file scrolls)
        width, out.width = out.width, 10**6  # measure() caps at the console's width
        out.width = max(width, out.measure(table).maximum)
    out.print(table)


@_command("stats")
def stats_command(kb: Annotated[str | None, typer.Option("--kb", metavar="NAME", help="Only this knowledge base.")]
                  = None) -> None:
    """Failure-cell distribution, gate counts, mean fractions, cost and thresholds."""
    store = _existing_db()
    if store is None:
        _out().print("no traces (no database yet)")
        return
    from veralith.llm.backends import resolve_backend
    from veralith.store.queue import queue_figures

    judge = f"judge: {about()}" if resolve_backend() == "local" else ""
    figures = {**store.read(ops.stats, kb=_known_kb(kb)), "queue": store.read(queue_figures).as_dict()}
    _out().print(render.stats_view(figures, judge))


@_command("export")
def export_command(
    fmt: Annotated[Format, typer.Option("--format", help="jsonl: full results; csv: one flat row each.")]
    = Format.jsonl,
    since: Annotated[str | None, typer.Option(
        metavar="WHEN", help=_SINCE_HELP)] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="FILE", help="File to write (default: stdout).")]
    = None,
    refs: Annotated[list[str] | None, typer.Argument(
        metavar="ID", help="Only these traces (trace ids or your own record ids).", show_default=False)]
    = None,
    kb: Annotated[str | None, typer.Option("--kb", metavar="NAME", help="Knowledge base of the record ids given.")] \
        = None,
    labelled: Annotated[bool, typer.Option(
        "--labelled", help="Instead: every labelled trace as an `eval` record with the verdicts people gave "
        "(`expected`), a regression set for `veralith eval FILE --expect --min-agreement X`.")] = False,
) -> None:
    """Export stored results (traces with a result), oldest first, with when each trace was created,
    updated and evaluated, its external id, backend, model, prompt versions and usage."""
    from veralith.cli.export import write_stored

    if labelled:
        _export_labelled(output, fmt, refs, since)
        return

    try:
        when = filters.since(since)  # the same dates and durations as `list --since`
    except filters.BadOption as exc:
        raise _fail(str(exc), ExitCode.ERROR) from None
    _kb_needs_ids(kb, refs)
    if output is not None:
        _check_output(output)
    store = _existing_db()
    if store is None and refs:
        raise _fail(f"trace {refs[0]} not found: no database yet")
    wanted = None if store is None or not refs else _resolve_all(store, refs, kb)
    unreadable: list[int] = []

    def skip(trace_id: int, exc: Exception) -> None:  # a damaged page spoils its traces, not the export
        unreadable.append(trace_id)
        _err().print(render.literal(f"error: trace {trace_id} cannot be read: {exc}; skipped", "red"),
                     soft_wrap=True)

    results = iter([]) if store is None else store.stream(ops.iter_results, since=when, on_error=skip, trace_ids=wanted)
    sink = _open_output(output, newline="") if output else sys.stdout
    # On a terminal, control and bidi characters in stored text are shown escaped, never obeyed.
    escape = render.terminal_safe if output is None and sys.stdout.isatty() else None
    try:
        count = write_stored(results, sink, fmt.value, escape=escape)
    except sqlite3.DatabaseError as exc:  # the listing itself hit a damaged page
        raise _fail(f"the database file is damaged ({exc}); export stopped", ExitCode.ERROR) from None
    finally:
        if output:
            sink.close()
    if output:
        _err().print(render.literal(f"exported {count} traces to {output}"))
    if unreadable:
        raise _fail(f"{len(unreadable)} trace(s) could not be read (damaged database pages): "
                    f"{', '.join(map(str, unreadable[:20]))}", ExitCode.ERROR)


def _export_labelled(output: Path | None, fmt: Format, refs: list[str] | None, since: str | None) -> None:
    from veralith.cli.expect import write_labelled

    given = [name for name, value in (("--format csv", fmt is Format.csv), ("ID", refs), ("--since", since)) if value]
    if given:
        raise _fail(f"--labelled writes every labelled trace as JSONL; it takes no {', '.join(given)}", ExitCode.ERROR)
    if output is not None:
        _check_output(output)
    store = _existing_db()
    sink = _open_output(output, newline="") if output else sys.stdout
    try:
        count = 0 if store is None else write_labelled(store, sink)
    finally:
        if output:
            sink.close()
    if output:
        _err().print(render.literal(f"exported {count} labelled traces to {output}"))


# The web view lives in its own module (it needs the optional `web` extra, imported when it runs).
_command("serve")(serve.serve_command)
# Runs and their comparison; the comparison itself is veralith.compare, shared with the web view.
_command("runs")(runs.runs_command)
_command("compare")(compare.compare_command)
# Failing traces grouped by shared cause; the grouping is veralith.patterns, shared with the web view.
_command("patterns")(patterns.patterns_command)
# Fleet mode: judging pending traces from any host, and copying a history into another store.
_command("worker")(worker.worker_command)
_command("migrate")(migrate.migrate_command)
# Records a store refused, set aside with their reason (veralith.work.deadletter): listed, retried, dropped.
_command("dead-letters")(deadletters.dead_letters_command)
# Traces people already have (OTLP JSON, Phoenix, Langfuse), judged as `eval` judges a file.
_command("import")(importing.import_command)
_command("batch")(batchjobs.batch_command)
# Human review: labels, the judge's agreement with them (veralith.review, shared with the web view).
_command("label")(labelling.label_command)
_command("labels")(labelling.labels_command)
_command("agreement")(agreeing.agreement_command)
_command("review")(reviewing.review_command)


def main() -> None:
    """Console-script entry point (pyproject: veralith = "veralith.cli:main"). Errors raised out of a
    command are shown by VeralithGroup; this only catches what happens around it."""
    from veralith.config import ConfigError
    from veralith.errors import VeralithError

    try:
        app()
    except (ConfigError, VeralithError) as exc:  # raised outside a command (e.g. while parsing)
        print_error(exc)
        sys.exit(ExitCode.ERROR)
    except KeyboardInterrupt:     # Ctrl-C before a batch started (imports, opening the database)
        sys.exit(ExitCode.INTERRUPTED)
    except BrokenPipeError:       # `veralith export | head`: the reader left; no traceback for that
        # Point stdout at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(ExitCode.OK)
