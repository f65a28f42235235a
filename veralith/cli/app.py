"""The `veralith` command: eval, resume, inspect, list, stats, export.

Commands only wire options to the library and choose exit codes; reading and running batches lives
in veralith.cli.batch, and everything shown is built by veralith.cli.render. Heavy modules are imported
inside the commands so `veralith --help` stays instant.

Exit codes: 0 clean; 1 missing or empty input, unknown trace, bad invocation; 2 finished with
per-record errors (bad lines, failed records, judge errors), an invalid VERALITH_* setting, or a
database that stopped accepting writes (full disk, read-only); 130 interrupted by Ctrl-C.
Every error is one line on stderr, with secrets (API key, URL passwords) masked.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from veralith.cli import batch, records, render

__all__ = ["app", "main"]

app = typer.Typer(name="veralith", help="Diagnose why a RAG answer went wrong.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)

EXIT_INPUT, EXIT_RECORD_ERRORS, EXIT_INTERRUPTED = 1, 2, 130
EXIT_CONFIG = 2
MAX_ID = 2**63 - 1  # SQLite's largest integer; larger ids cannot exist and would overflow the driver


def _print_version(value: bool) -> None:
    if value:
        from veralith import __version__

        typer.echo(f"veralith {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", help="Show the version and exit.", callback=_print_version,
                                          is_eager=True)] = False,
) -> None:
    # No docstring: the app's help (above) stays the one shown by `veralith --help`.
    pass


class Backend(str, Enum):
    auto = "auto"
    openai = "openai"
    local = "local"


class Format(str, Enum):
    jsonl = "jsonl"
    csv = "csv"


def _out() -> Console:
    # Built per command, not at import: the console must write to whatever sys.stdout is *now*
    # (a pipe, a file, a test runner's capture). highlight=False: no guessing colours into our text.
    return Console(highlight=False)


def _err() -> Console:
    return Console(stderr=True, highlight=False)


def _fail(message: str, code: int = EXIT_INPUT) -> typer.Exit:
    _err().print(render.literal(f"error: {_redacted(message)}", "red"), soft_wrap=True)
    return typer.Exit(code)


def _redacted(message: object) -> str:
    """The message with the API key and any URL password masked (veralith.redact)."""
    from veralith.redact import redact_configured

    return redact_configured(message)


def _check_output(output: Path) -> None:
    """Refuse an output that is the database or one of its -wal/-shm files, before opening it."""
    from veralith.store.db import output_conflict

    problem = output_conflict(output)
    if problem is not None:
        raise _fail(f"--output {problem}")


def _open_output(path: Path, *, newline: str | None) -> Any:
    try:
        return path.open("w", encoding="utf-8", newline=newline)
    except OSError as exc:
        raise _fail(f"--output {path}: cannot write ({exc.strerror or exc})") from None


def _existing_db() -> Any | None:
    """The database if it exists; read-only commands never create one."""
    from veralith.config import settings
    from veralith.store.db import open_db

    if settings.db_path != ":memory:" and not Path(settings.db_path).expanduser().exists():
        return None
    return open_db()


@app.command("eval")
def eval_command(
    file: Annotated[Path, typer.Argument(help="JSONL: one {query, context, response} per line; optional id, "
                                               "knowledge_base, metadata.", show_default=False)],
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", "-c", min=1, max=256, help="Traces evaluated in parallel (default: from settings)")] = None,
    no_persist: Annotated[bool, typer.Option("--no-persist", help="Dry run: write nothing to the database.")] = False,
    backend: Annotated[Backend | None, typer.Option(help="Judge backend (default: from settings)")] = None,
    model: Annotated[str | None, typer.Option(help="Judge model name (default: from settings)")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write one full result per line "
                                                "(JSON), in input order.")] = None,
    kb: Annotated[str, typer.Option("--kb", help="Knowledge base of records that name none.")] = "default",
) -> None:
    """Evaluate every trace in a JSONL file; bad lines are reported as FILE:LINE and skipped."""
    if not file.exists():
        raise _fail(f"{file}: no such file")
    if not file.is_file():
        raise _fail(f"{file}: not a regular file")
    if output is not None and output.exists() and output.resolve() == file.resolve():
        raise _fail(f"--output {output} is the input file; it would be overwritten before it is read")
    if output is not None:
        _check_output(output)
    try:
        total = records.count_lines(file)
    except OSError as exc:
        raise _fail(f"{file}: cannot read ({exc.strerror or exc})") from None
    if total == 0:
        raise _fail(f"{file} is empty: expected one JSON object per line")
    persist = not no_persist

    def jobs(db: Any, client: Any, tally: batch.Tally, report: Any) -> Any:
        return batch.eval_jobs(file, default_kb=kb, persist=persist, db=db, client=client, tally=tally,
                               report=report)

    def work(record: records.Record, client: Any) -> Any:
        return batch.evaluate_record(record, persist=persist, client=client)

    _run("veralith eval", jobs, work, total=total, persist=persist, backend=backend, model=model,
         concurrency=concurrency, output=output, where=lambda r: f"{file}:{r.line}")


@app.command("resume")
def resume_command(
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", "-c", min=1, max=256, help="Traces evaluated in parallel (default: from settings)")] = None,
    backend: Annotated[Backend | None, typer.Option(help="Judge backend (default: from settings)")] = None,
    model: Annotated[str | None, typer.Option(help="Judge model name (default: from settings)")] = None,
    failed: Annotated[bool, typer.Option(
        "--failed", help="Instead re-judge stored traces whose last evaluation failed (judge errors, e.g. an "
        "outage); earlier errors stay in their history.")] = False,
) -> None:
    """Evaluate traces left pending (or abandoned by a crashed process); with --failed, re-judge failed ones."""
    db = _existing_db()
    if db is None:
        _out().print("nothing to resume: no database yet")
        return
    from veralith.store.db import resolve_path
    from veralith.store.repository import resumable_trace_ids
    from veralith.store.spool import recover

    if not failed:
        recover(db, resolve_path())  # traces spooled by a process that is gone
    ids = resumable_trace_ids(db, failed=failed)
    if not ids:
        _out().print("nothing to resume: " + ("no traces with judge errors" if failed else "no pending traces"))
        return

    def jobs(db: Any, client: Any, tally: batch.Tally, report: Any) -> Any:
        return batch.resume_jobs(db, ids)

    def work(job: records.Record, client: Any) -> Any:
        return batch.evaluate_record(job, persist=True, client=client, failed=failed)

    _run("veralith resume", jobs, work, total=len(ids), persist=True, backend=backend, model=model,
         concurrency=concurrency, output=None, where=lambda r: f"trace {r.trace_id}")


def _run(title: str, jobs: Any, work: Any, *, total: int, persist: bool, backend: Backend | None,
         model: str | None, concurrency: int | None, output: Path | None, where: Any) -> None:
    """Shared body of eval and resume: progress, per-record reports, ordered output, summary, exit code."""
    from veralith.config import ConfigError, settings
    from veralith.errors import StoreError
    from veralith.store.errors import WritesStopped

    # A dry run must not create or touch the database, and the judge-reply cache lives in it.
    overrides: dict[str, Any] = {} if persist else {"cache": False}
    if backend is not None:
        overrides["backend"] = backend.value
    if model is not None:
        overrides["judge_model"] = model
    err, tally = _err(), batch.Tally(total=total)
    sink = _open_output(output, newline=None) if output else None
    try:
        with settings.override(**overrides):
            from veralith.llm import get_client
            from veralith.store.db import open_db

            client = get_client()
            db = open_db() if persist else None
            with batch.Reporter(err, tally) as reporter:
                def on_done(job: Any, result: Any, error: BaseException | None) -> None:
                    batch.record_outcome(tally, job, result, error, persist=persist, db=db,
                                         report=reporter.report, where=where(job))
                    reporter.advance()

                def on_flush(job: Any, result: Any, error: BaseException | None) -> None:
                    if sink is not None and result is not None:
                        sink.write(result.model_dump_json() + "\n")
                        sink.flush()

                tally.started = time.monotonic()  # the rate counts evaluation, not start-up imports
                try:
                    batch.run_ordered(jobs(db, client, tally, reporter.report), lambda job: work(job, client),
                                      concurrency=concurrency or settings.concurrency, on_done=on_done,
                                      on_flush=on_flush)
                except batch.Interrupted as stop:
                    tally.interrupted = True
                    tally.left_pending, tally.left_running = len(stop.cancelled), len(stop.abandoned)
                    if persist:
                        batch.release(db, stop.cancelled)
    except ConfigError as exc:
        raise _fail(str(exc), EXIT_CONFIG) from None
    except WritesStopped as exc:  # full disk, read-only file: what was committed stays
        raise _fail(str(exc), EXIT_RECORD_ERRORS) from None
    except StoreError as exc:
        raise _fail(str(exc)) from None
    finally:
        if sink is not None:
            sink.close()
    tally.finished = time.monotonic()
    _out().print(render.summary_view(tally, title=title))
    if tally.interrupted:
        if tally.left_running:
            # Evaluations still running in worker threads cannot be stopped from Python; leaving at
            # once abandons them. Their leases name this process, which is about to be gone, so
            # `veralith resume` reclaims them as stale.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        raise typer.Exit(EXIT_INTERRUPTED)
    if tally.errors:
        raise typer.Exit(EXIT_RECORD_ERRORS)


@app.command("inspect")
def inspect_command(
    trace_id: Annotated[int, typer.Argument(metavar="ID", min=1, max=MAX_ID, help="Trace id (see `veralith list`).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the full result as JSON.")] = False,
) -> None:
    """Show one trace's diagnosis: sub-questions, claims by verdict, cell, suggestion (read-only)."""
    from veralith.errors import StoreError
    from veralith.store.repository import load_result

    db = _existing_db()
    if db is None:
        raise _fail(f"trace {trace_id} not found: no database yet")
    try:
        result = load_result(trace_id, db=db)
    except StoreError as exc:  # unknown id, or a trace with no result yet (pending, running, error)
        raise _fail(str(exc)) from None
    except sqlite3.DatabaseError as exc:  # a damaged page: say which trace, not a traceback
        raise _fail(f"trace {trace_id} cannot be read: {exc} (the database file is damaged)") from None
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        return
    _out().print(render.result_view(result))


@app.command("list")
def list_command(
    limit: Annotated[int, typer.Option(min=1, max=MAX_ID, help="Most recent traces to show.")] = 50,
    cell: Annotated[str | None, typer.Option(help="Only this failure cell, e.g. incomplete_ungrounded.")] = None,
    kb: Annotated[str | None, typer.Option("--kb", help="Only this knowledge base.")] = None,
    status: Annotated[str | None, typer.Option(help="Only traces in this state: pending, running, done, error.")]
    = None,
) -> None:
    """List stored traces, newest first."""
    from veralith.models import FailureCell
    from veralith.store.repository import list_traces

    if cell is not None and cell not in FailureCell.__members__:
        raise _fail(f"--cell {cell!r} is not a cell; use one of {', '.join(FailureCell.__members__)}", 2)
    from veralith.store.queries import STATUSES

    if status is not None and status not in STATUSES:
        raise _fail(f"--status {status!r} is not a status; use one of {', '.join(STATUSES)}", 2)
    db = _existing_db()
    rows = [] if db is None else list_traces(db, limit=limit, cell=cell, kb=kb, status=status)
    if not rows:
        _out().print("no traces" + ("" if db else " (no database yet)"))
        return
    _out().print(render.traces_table(rows))


@app.command("stats")
def stats_command(kb: Annotated[str | None, typer.Option("--kb", help="Only this knowledge base.")] = None) -> None:
    """Failure-cell distribution, gate counts, mean fractions, cost and thresholds."""
    from veralith.store.repository import stats

    db = _existing_db()
    if db is None:
        _out().print("no traces (no database yet)")
        return
    _out().print(render.stats_view(stats(db, kb=kb)))


@app.command("export")
def export_command(
    fmt: Annotated[Format, typer.Option("--format", help="jsonl: full results; csv: one flat row each.")]
    = Format.jsonl,
    since: Annotated[str | None, typer.Option(
        help="Only traces created at or after this ISO date/time (UTC unless it names a zone).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write (default: stdout).")]
    = None,
) -> None:
    """Export stored results (traces with a result), oldest first."""
    from datetime import datetime, timezone

    from veralith.store.repository import iter_results

    when = None
    if since is not None:
        try:
            parsed = datetime.fromisoformat(since)
        except ValueError:
            raise _fail(f"--since {since!r} is not an ISO date such as 2026-01-31 or 2026-01-31T12:00", 2) from None
        # Stored times are UTC ISO text; a time without a zone is taken as UTC.
        aware = parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
        when = aware.astimezone(timezone.utc).isoformat(timespec="microseconds")
    if output is not None:
        _check_output(output)
    db = _existing_db()
    unreadable: list[int] = []

    def skip(trace_id: int, exc: Exception) -> None:  # a damaged page spoils its traces, not the export
        unreadable.append(trace_id)
        _err().print(render.literal(f"error: trace {trace_id} cannot be read: {exc}; skipped", "red"),
                     soft_wrap=True)

    results = iter([]) if db is None else iter_results(db, since=when, on_error=skip)
    sink = _open_output(output, newline="") if output else sys.stdout
    # On a terminal, control and bidi characters in stored text are shown escaped, never obeyed.
    escape = render.terminal_safe if output is None and sys.stdout.isatty() else None
    try:
        count = records.write_export(results, sink, fmt.value, escape=escape)
    except sqlite3.DatabaseError as exc:  # the listing itself hit a damaged page
        raise _fail(f"the database file is damaged ({exc}); export stopped", EXIT_RECORD_ERRORS) from None
    finally:
        if output:
            sink.close()
    if output:
        _err().print(render.literal(f"exported {count} traces to {output}"))
    if unreadable:
        raise _fail(f"{len(unreadable)} trace(s) could not be read (damaged database pages): "
                    f"{', '.join(map(str, unreadable[:20]))}", EXIT_RECORD_ERRORS)


def main() -> None:
    """Console-script entry point (pyproject: veralith = "veralith.cli:main")."""
    from veralith.config import ConfigError
    from veralith.errors import VeralithError

    try:
        app()
    except ConfigError as exc:    # an invalid VERALITH_* value: `error: VERALITH_X: ...`
        _err().print(render.literal(f"error: {_redacted(exc)}", "red"), soft_wrap=True)
        sys.exit(EXIT_CONFIG)
    except VeralithError as exc:  # e.g. a database newer than this code: a message, not a traceback
        _err().print(render.literal(f"error: {_redacted(exc)}", "red"), soft_wrap=True)
        sys.exit(EXIT_INPUT)
    except KeyboardInterrupt:     # Ctrl-C before a batch started (imports, opening the database)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:       # `veralith export | head`: the reader left; no traceback for that
        # Point stdout at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_INPUT)


