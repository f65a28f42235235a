"""`veralith import FILE`: judge traces people already have (OTLP JSON, Phoenix spans, Langfuse traces).

The file is read and grouped by veralith.importers; each trace becomes the record `veralith eval`
would read (its id is the trace id, so importing a file again skips what was judged), validated by
the same checks (veralith.cli.records.parse_object) and run through eval's own batch runner, run
and gate (veralith.cli.app._run, batch.eval_jobs, gate.EvalHooks). A trace that cannot be judged is
reported as `FILE:N: trace ID: what is missing`, N counting traces in the order they started; a
trace that retrieved nothing is reported as skipped (no RAG answer), not as an error.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from veralith.cli.exits import ExitCode
from veralith.store import ops

if TYPE_CHECKING:
    from veralith.cli.records import BadLine, Record
    from veralith.importers import Imported

__all__ = ["import_command", "import_records"]


def import_records(imported: Imported, *, default_kb: str) -> list[Record | BadLine]:
    """The eval records of an imported file, or a BadLine per trace that cannot be judged."""
    from veralith.cli.records import BadLine, parse_object
    from veralith.importers import Problem

    out: list[Record | BadLine] = []
    for n, item in enumerate(imported.traces, start=1):
        if isinstance(item, Problem):
            # A trace that retrieved nothing is no RAG answer: reported, not an error (as a blank line is).
            out.append(BadLine(n, f"trace {item.trace_id}: {item.message}" if item.trace_id else item.message,
                               blank=item.not_rag))
            continue
        parsed = parse_object(n, item, default_kb=default_kb)
        out.append(BadLine(n, f"trace {item['id']}: {parsed.message}") if isinstance(parsed, BadLine) else parsed)
    return out


def import_command(
    file: Annotated[Path, typer.Argument(help="A trace export: OTLP JSON spans with OpenInference or GenAI "
                                              "attributes (one object, or one per line), Phoenix's span listing, "
                                              "or Langfuse traces / observations.", show_default=False)],
    kb: Annotated[str, typer.Option("--kb", help="Knowledge base of the imported traces.")] = "default",
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", "-c", min=1, max=256, help="Traces evaluated in parallel (default: from settings)")] = None,
    no_persist: Annotated[bool, typer.Option("--no-persist", help="Judge, but write nothing to the database.")]
    = False,
    backend: Annotated[str | None, typer.Option(help="Judge backend: auto, openai or local (default: from settings)")]
    = None,
    model: Annotated[str | None, typer.Option(help="Judge model name (default: from settings)")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write one full result per line (JSON).")]
    = None,
    run_name: Annotated[str | None, typer.Option("--run-name", help="Name this run (see `veralith runs`).")] = None,
    fail_under: Annotated[float | None, typer.Option(
        "--fail-under", min=0.0, max=1.0, metavar="RATE", help="CI gate, as for `veralith eval`.")] = None,
    max_cell: Annotated[list[str] | None, typer.Option(
        "--max-cell", metavar="CELL=N", help="CI gate, as for `veralith eval`. Repeatable.")] = None,
) -> None:
    """Judge traces you already have: group the spans of FILE into (query, context, response) traces and
    evaluate them as `veralith eval` does. A trace's id is its OpenTelemetry (or Langfuse) trace id, so
    importing a file again skips the traces already judged."""
    from veralith.cli import batch
    from veralith.cli.gate import EvalHooks
    from veralith.importers import UnknownFormat, read_file

    # The command module (not the package's `app` attribute, the Typer object): imported here,
    # since it imports this module to register the command.
    cli = importlib.import_module("veralith.cli.app")
    from veralith.config import settings

    settings.current  # an invalid VERALITH_* setting is the one line this command prints (VeralithGroup)  # noqa: B018
    if not file.is_file():
        raise cli._fail(f"{file}: no such file" if not file.exists() else f"{file}: not a regular file")
    if output is not None:
        cli._check_output(output)
    try:
        imported = read_file(file)
    except UnknownFormat as exc:
        raise cli._fail(f"{file}: {exc}") from None
    except OSError as exc:
        raise cli._fail(f"{file}: cannot read ({exc.strerror or exc})") from None
    items = import_records(imported, default_kb=kb)
    cli._out().print(f"{file}: {imported.format}, {imported.spans} spans in {len(items)} traces", markup=False,
                     soft_wrap=True)
    if not items:
        raise cli._fail(f"{file} holds no spans")
    try:
        chosen = cli.Backend(backend) if backend is not None else None
    except ValueError:
        raise cli._fail(f"--backend {backend!r}: expected auto, openai or local", ExitCode.ERROR) from None
    persist = not no_persist
    try:
        hooks = EvalHooks(file, persist=persist, run_name=run_name, fail_under=fail_under, max_cell=max_cell)
    except (TypeError, ValueError) as exc:
        raise cli._fail(str(exc), ExitCode.ERROR) from None

    def jobs(db: Any, client: Any, tally: batch.Tally, report: Any) -> Any:
        return batch.eval_jobs(file, default_kb=kb, persist=persist, store=cli._store() if persist else None,
                               client=client, tally=tally, report=report, run_id=hooks.start(db, client),
                               yield_unchanged=output is not None, items=items)

    def work(record: Any, client: Any) -> Any:
        if record.unchanged:
            return cli._store().read(ops.load_result, record.trace_id)
        return hooks.record(record, batch.evaluate_record(record, persist=persist, client=client, again=True))

    # A trace skipped as no RAG answer is reported, not judged: like a blank line of eval, it is no part
    # of the "N/M done" count.
    judgeable = sum(1 for item in items if not getattr(item, "blank", False))
    hooks.around(lambda: cli._run("veralith import", jobs, work, total=judgeable, persist=persist, backend=chosen,
                                  model=model, concurrency=concurrency, output=output,
                                  where=lambda r: f"{file}:{r.line}"), cli._out())
