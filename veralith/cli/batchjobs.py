"""`veralith eval FILE --batch` and `veralith batch status|collect [JOB]`: judging through the OpenAI
Batch API (veralith.sdk.batchjob does the work; this module reads the file, shows progress, and
chooses exit codes).

`eval --batch` stores the file's records, puts them in a new job and collects it: it waits for the
batches, showing where they stand, and stores each result as its calls come back. Stopping it
(Ctrl-C, a closed terminal, a killed process) loses nothing: `veralith batch collect` finishes the
job later, from any process that shares the store.
"""

from __future__ import annotations

import enum
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from veralith.cli import batch as running
from veralith.cli.exits import ExitCode, fail
from veralith.cli.render import literal
from veralith.store import ops

if TYPE_CHECKING:
    from veralith.sdk.batchjob import Round
    from veralith.store.protocol import Store

__all__ = ["batch_command", "eval_batch"]


class Action(str, enum.Enum):
    status = "status"
    collect = "collect"


def _err() -> Console:
    return Console(stderr=True, highlight=False)


def _out() -> Console:
    return Console(highlight=False)


def eval_batch(file: Path, *, store: Store, kb: str, run: Any, rejudge: bool, total: int) -> None:
    """Store the file's records as traces of a new batch job and collect it (see the module doc)."""
    from veralith.llm import get_client
    from veralith.sdk.batchjob import start

    client = get_client()
    if client.backend != "openai":
        raise fail("--batch needs the OpenAI backend (an API key, or VERALITH_BASE_URL for a server with the "
                   "files and batches endpoints)", ExitCode.ERROR)
    err, tally = _err(), running.Tally(total=total)
    with running.Reporter(err, tally) as reporter:
        run_id = run.start(store, client) if run is not None else None
        ids: list[int] = []
        for record in running.eval_jobs(file, default_kb=kb, persist=True, store=store, client=client, tally=tally,
                                        report=reporter.report, run_id=run_id, rejudge=rejudge):
            assert record.trace_id is not None   # a trace re-judged in place is reserved for the job as it is
            ids.append(record.trace_id)
    if not ids:
        _out().print(f"nothing to judge: {tally.unchanged} unchanged, {tally.bad_lines} bad lines, "
                     f"{tally.failed} refused", markup=False)
        if tally.errors:
            raise typer.Exit(ExitCode.ERROR)
        return
    job = start(store, ids, run_id=run_id)
    err.print(literal(f"batch job {job}: {len(ids)} traces; if this stops, `veralith batch collect {job}` "
                      "finishes it", "dim"), soft_wrap=True)
    tally.total = len(ids)
    try:
        _collect(store, job, tally, err, run_id)
    except KeyboardInterrupt:
        err.print(literal(f"interrupted: batch job {job} goes on; `veralith batch collect {job}` finishes it",
                          "yellow"), soft_wrap=True)
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    tally.finished = time.monotonic()
    from veralith.cli.render import summary_view

    _out().print(summary_view(tally, title="veralith eval --batch"))
    if tally.errors:   # bad lines, records refused (budget) or failed: as a synchronous eval, exit 2
        raise typer.Exit(ExitCode.ERROR)


def _collect(store: Store, job: str, tally: running.Tally, err: Console, run_id: int | None) -> int:
    """Collect the job; a batch service that is down, or refuses a call, ends it with one line and
    exit 2 (veralith.work.policy: a drain stops on a dead judge), the job's traces left pending."""
    from veralith.errors import JudgeCallError
    from veralith.sdk.batchjob import collect
    from veralith.work.batchjobs import BatchJobs
    from veralith.work.policy import decide

    def on_result(result: Any) -> None:
        tally.add(result, stored=True)
        if run_id is not None and result.trace_id is not None:
            from veralith.compare.reasons import result_reason

            store.write(ops.record_result, run_id, result.trace_id, result_reason(result))

    try:
        judged = collect(store, job, on_result=on_result, on_round=lambda r: _progress(err, r))
    except JudgeCallError as exc:   # raised by the batch service's calls, not by one trace's
        left = len(BatchJobs(store).reserved(job))
        after = "once it is back" if decide(exc).stops_drain else "once that is fixed"
        raise fail(f"{exc}; batch job {job} stopped after {tally.evaluated} judged here: {left} traces left "
                   f"pending, `veralith batch collect {job}` goes on {after}", ExitCode.ERROR) from None
    if run_id is not None:
        store.write(ops.finish_run, run_id)
    return judged


def _progress(err: Console, now: Round) -> None:
    err.print(literal(f"veralith: batch job {now.job}: {now.judged} judged this round, {now.traces_left} traces "
                      f"waiting; {now.sent} requests sent; batches: {_batches(now.batches)}"), soft_wrap=True)


def _batches(batches: list[tuple[str, str, int, int]]) -> str:
    """A round's batches in a few words: each one while there are few, else counts by status."""
    if len(batches) <= 3:
        return ", ".join(f"{b} {status} {done}/{total}" for b, status, done, total in batches) or "none out"
    by_status: dict[str, int] = {}
    for _, status, _, _ in batches:
        by_status[status] = by_status.get(status, 0) + 1
    done, total = sum(b[2] for b in batches), sum(b[3] for b in batches)
    return (f"{len(batches)} (" + ", ".join(f"{n} {status}" for status, n in sorted(by_status.items()))
            + f"; {done}/{total} requests done)")


def batch_command(
    action: Annotated[Action, typer.Argument(
        metavar="ACTION", help="status: the batch jobs and where they stand, with the service's reason for any "
        "batch it refused. collect: wait for a job's batches and store its results (every unfinished job when no "
        "JOB is given); a batch service that is down stops it with one line, exit 2, the rest left pending.",
        show_default=False)],
    job: Annotated[str | None, typer.Argument(metavar="JOB", help="A job id (job-...), as `eval --batch` and "
                                              "`batch status` name it.", show_default=False)] = None,
) -> None:
    """Jobs of `veralith eval FILE --batch` (the OpenAI Batch API): see them, or finish them.

    A job lives in the database, so any process that shares it (another host, in fleet mode) can
    collect it; each trace is judged once, whoever collects, and each batch is recorded before it is
    created, so a collect after a crash finds a batch the service made instead of sending it again."""
    from veralith.cli.runs import existing_db
    from veralith.store import open_store
    from veralith.work.batchjobs import BatchJobs

    found = existing_db()   # reading never creates a database
    rows = BatchJobs(found).job_rows(job) if found is not None else []
    if job is not None and not rows:
        where = found.url if found is not None else "the database (there is none yet)"
        raise fail(f"no batch job {job!r} in {where} (see `veralith batch status`)")
    if action is Action.status:
        if not rows:
            _out().print("no batch jobs")
        for row in rows:
            _out().print(_status_line(row), soft_wrap=True)
        return
    from veralith.sdk.batchjob import JobBusy

    todo = [row["id"] for row in rows if row["state"] != "done"]
    if not todo:
        _out().print(f"batch job {job} is done: nothing to collect" if job else "no unfinished batch jobs",
                     markup=False)
        return
    store, err = open_store(), _err()
    for name in todo:
        row = next(r for r in rows if r["id"] == name)
        tally = running.Tally(total=row["traces"] - row["judged"])
        try:
            _collect(store, name, tally, err, row["settings"].get("run_id"))
        except JobBusy as busy:
            if job is not None:
                raise fail(busy, ExitCode.ERROR) from None
            err.print(literal(f"{busy}", "yellow"), soft_wrap=True)
            continue
        except KeyboardInterrupt:
            err.print(literal(f"interrupted: `veralith batch collect {name}` goes on from here", "yellow"),
                      soft_wrap=True)
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        _out().print(f"batch job {name}: {tally.evaluated} traces judged and stored here; done", markup=False)


def _status_line(row: dict[str, Any]) -> Any:
    """A job in one line, then a line per batch the service failed or lost output of (its reason)."""
    requests = ", ".join(f"{n} {state}" for state, n in sorted(row["requests"].items())) or "none yet"
    sends = row["sends"]
    out = [s["batch_id"] or f"{s['key']} (being created)" for s in sends if s["state"] != "read"]
    collector = f"collected by {row['collector']}" if row["collector"] else "no live collector"
    lines = [f"{row['id']}  {row['state']}  {row['judged']}/{row['traces']} traces judged  requests: "
             f"{requests}  batches: {len(sends)}, out: {', '.join(out) or 'none'}  {collector}  "
             f"(created {row['created_at'][:19]})"]
    lines += [f"  batch {s['batch_id']} ({s['model']}, {s['requests']} requests) {s['status']}: {s['error']}"
              for s in sends if s["error"]]
    return literal("\n".join(lines))
