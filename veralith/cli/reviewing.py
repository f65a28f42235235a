"""`veralith review`: a terminal review queue, one key per decision.

The queue is veralith.store.labels.queue (needs-review first, then failing, then a sample of the
rest; traces this reviewer labelled are left out, so a queue resumes where it stopped). Each trace
is shown as `inspect` shows it; the keys record labels at once (veralith.review.verdicts), so
quitting loses nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from veralith.cli import render
from veralith.cli.exits import ExitCode, fail
from veralith.cli.render import literal
from veralith.store import ops

if TYPE_CHECKING:
    from veralith.models import EvaluationResult

__all__ = ["review_command"]

KEYS = ("a agree (the cell and gate as judged)   c correct the cell   g correct the gate   k a claim   "
        "s a sub-question's sufficiency   v a sub-question's coverage   n note   enter next   x skip   q quit")


@contextlib.contextmanager
def _one_key() -> Iterator[Callable[[], str]]:
    """Reads one key: at a terminal without waiting for Enter (cbreak mode from before the keys are
    shown, so a key pressed as soon as they appear is not lost); from a pipe (a script), the next
    character, end of input quitting."""
    if not sys.stdin.isatty():
        yield lambda: sys.stdin.read(1) or "q"
        return
    try:
        import termios
        import tty
    except ImportError:  # Windows: the console reads a key by itself
        yield typer.getchar
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd, termios.TCSANOW)   # TCSANOW: a key typed ahead is kept, not flushed
    try:
        yield lambda: os.read(fd, 4).decode("utf-8", errors="replace")[:1] or "q"
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _choose(out: Console, what: str, options: tuple[str, ...]) -> str | None:
    """One of `options` by its number (or its name); None: nothing chosen."""
    out.print(literal("  ".join(f"{n}) {o}" for n, o in enumerate(options, 1))), soft_wrap=True)
    answer = typer.prompt(what, default="", show_default=False).strip()
    if answer.isdigit() and 1 <= int(answer) <= len(options):
        return options[int(answer) - 1]
    return answer if answer in options else None


def _item(out: Console, result: EvaluationResult, target: str) -> str | None:
    from veralith.review.verdicts import items

    known = items(result, target)
    if not known:
        out.print(literal(f"this trace has no {'claims' if target == 'claim' else 'sub-questions'}", "yellow"))
        return None
    return _choose(out, "which", tuple(known))


class _Session:
    """One trace under review: what was recorded on it, and the note for the next labels."""

    def __init__(self, store: Any, result: EvaluationResult, evaluated_at: str | None, reviewer: str,
                 out: Console) -> None:
        self.store, self.result, self.evaluated_at, self.reviewer, self.out = store, result, evaluated_at, reviewer, out
        self.note: str | None = None
        self.done: set[tuple[str, str]] = set()

    def record(self, target: str, item: str, value: str) -> None:
        from veralith.review.verdicts import make_label
        from veralith.store.labels import LabelError, add_labels

        try:
            label = make_label(self.result, target, item, value, reviewer=self.reviewer, note=self.note,
                               evaluated_at=self.evaluated_at)
        except LabelError as exc:
            self.out.print(literal(f"  {exc}", "red"), soft_wrap=True)
            return
        self.store.write(add_labels, [label])
        self.done.add((target, item))
        said = "agrees with the judge" if label.judged == label.value else f"the judge said {label.judged}"
        self.out.print(literal(f"  recorded {target}{' ' + item if item else ''} = {value} ({said})", "green"),
                       soft_wrap=True)

    def agree(self) -> None:
        from veralith.review.verdicts import judged

        for target in ("cell", "gate"):
            if (target, "") not in self.done:
                self.record(target, "", judged(self.result, target) or "indeterminate")

    def correct(self, key: str) -> None:
        from veralith.store.labels import VALUES

        target = {"c": "cell", "g": "gate", "k": "claim", "s": "sufficiency", "v": "coverage"}[key]
        item = "" if target in ("cell", "gate") else _item(self.out, self.result, target)
        if item is None:
            return
        value = _choose(self.out, f"{target}{' ' + item if item else ''} is", VALUES[target])
        if value is not None:
            self.record(target, item, value)


def _review_one(store: Any, trace_id: int, reviewer: str, out: Console) -> bool:
    """Show one trace and take keys until it is done; False when the reviewer quits."""
    result = store.read(ops.load_result, trace_id)
    info = store.read(ops.trace_info, trace_id)
    out.rule(literal(f"trace {trace_id}"))
    out.print(render.result_view(result, external_id=info.external_id, created_at=info.created_at,
                                 run=store.read(ops.trace_run, trace_id), app_latency=info.app_latency_ms))
    session = _Session(store, result, info.evaluated_at, reviewer, out)
    while True:
        with _one_key() as read:
            out.print(literal(KEYS, "dim"), soft_wrap=True)
            key = read()
        if key in ("q", "\x03", "\x04"):
            return False
        if key in ("\r", "\n", "x", " "):
            return True
        if key == "a":
            session.agree()
            return True
        if key == "n":
            session.note = typer.prompt("note", default="", show_default=False).strip() or None
        elif key in "cgksv" and len(key) == 1:
            session.correct(key)


def review_command(
    by: Annotated[str | None, typer.Option("--by", metavar="NAME", help="Reviewer (default: VERALITH_REVIEWER, "
                                           "else your login name).")] = None,
    kb: Annotated[str | None, typer.Option("--kb", metavar="NAME", help="Only this knowledge base.")] = None,
    run: Annotated[str | None, typer.Option(metavar="RUN", help="Only traces of this run (id or name).")] = None,
    cell: Annotated[str | None, typer.Option(metavar="CELL", help="Only this failure cell.")] = None,
    since: Annotated[str | None, typer.Option(metavar="WHEN", help="Only traces created at or after this ISO "
                                              "date/time or this long ago: 30m, 24h, 7d, 2w.")] = None,
    limit: Annotated[int, typer.Option(min=1, metavar="N", help="Traces in this sitting.")] = 50,
) -> None:
    """Review stored traces one key at a time: needs-review first, then failing, then a random sample
    of the rest (so agreement is not measured only on the hard cases). Each trace is shown as
    `inspect` shows it; agree, or correct the cell, the gate, a claim or a sub-question, add a note,
    skip or quit. Labels are stored at once; the queue leaves out what you labelled, so it resumes
    where you stopped."""
    from veralith.cli import filters
    from veralith.cli.labelling import reviewer_name
    from veralith.cli.runs import existing_db
    from veralith.store import open_store
    from veralith.store.labels import queue

    try:
        cell, when = filters.cell(cell), filters.since(since)
    except filters.BadOption as exc:
        raise fail(str(exc), ExitCode.ERROR) from None
    if existing_db() is None:
        raise fail("no traces to review: no database yet")
    store = open_store()
    run_id = None if run is None else store.read(ops.resolve_run, run).id
    who = reviewer_name(by)
    ids = store.read(queue, reviewer=who, kb=kb, run_id=run_id, cell=cell, since=when, limit=limit)
    out = Console(highlight=False)
    if not ids:
        out.print(literal(f"nothing to review for {who}: every matching judged trace has a label of yours"))
        return
    out.print(literal(f"{len(ids)} traces to review, as {who}"))
    reviewed = 0
    for trace_id in ids:
        if not _review_one(store, trace_id, who, out):
            break
        reviewed += 1
    out.print(literal(f"reviewed {reviewed} of {len(ids)}; `veralith agreement` shows how the judge fares"))
