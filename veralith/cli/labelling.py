"""`veralith label` (one reviewer's verdict on a trace) and `veralith labels` (export, import).

The label itself is veralith.review.verdicts.make_label and the files veralith.review.files; this
module only wires options, opens the store and prints one line per outcome.
"""

from __future__ import annotations

import getpass
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from veralith.cli.exits import ExitCode, fail
from veralith.cli.render import literal
from veralith.store import ops

__all__ = ["label_command", "labels_command", "reviewer_name"]


def reviewer_name(given: str | None) -> str:
    """Who is labelling: --by, else VERALITH_REVIEWER, else the login name (said in the output)."""
    if given and given.strip():
        return given.strip()
    from_env = os.environ.get("VERALITH_REVIEWER", "").strip()
    if from_env:
        return from_env
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        raise fail("who is labelling? give --by NAME (or set VERALITH_REVIEWER)", ExitCode.ERROR) from None


def _pairs(cell: str | None, gate: str | None, claim: tuple[str, str] | None, sufficiency: tuple[str, str] | None,
           coverage: tuple[str, str] | None) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    for target, whole in (("cell", cell), ("gate", gate)):
        if whole is not None:
            found.append((target, "", whole))
    for target, pair in (("claim", claim), ("sufficiency", sufficiency), ("coverage", coverage)):
        if pair is not None and pair[0] is not None:
            found.append((target, pair[0], pair[1]))
    return found


def label_command(
    ref: Annotated[str, typer.Argument(metavar="ID", help="Trace id, or your own record id.", show_default=False)],
    cell: Annotated[str | None, typer.Option(metavar="CELL", help="The cell the trace belongs in, e.g. "
                                             "incomplete_grounded (or indeterminate).")] = None,
    gate: Annotated[str | None, typer.Option(metavar="pass|fail", help="Whether the answer should pass.")] = None,
    claim: Annotated[tuple[str, str] | None, typer.Option(
        metavar="K RELATION", help="One claim's relation: supported, unsupported, contradicted, conflicting, "
        "stale.", show_default=False)] = None,
    sufficiency: Annotated[tuple[str, str] | None, typer.Option(
        metavar="Q Y|N", help="Whether the context answers one sub-question.", show_default=False)] = None,
    coverage: Annotated[tuple[str, str] | None, typer.Option(
        metavar="Q COVERAGE", help="How the response covers one sub-question: answered, partial, "
        "ungrounded_answer, declined, unanswered.", show_default=False)] = None,
    by: Annotated[str | None, typer.Option("--by", metavar="NAME", help="Reviewer (default: VERALITH_REVIEWER, "
                                           "else your login name).")] = None,
    note: Annotated[str | None, typer.Option(metavar="TEXT", help="Why, in a sentence.")] = None,
    kb: Annotated[str | None, typer.Option("--kb", metavar="NAME", help="Knowledge base of the id, when your own "
                                           "id is used in several.")] = None,
) -> None:
    """Record a reviewer's verdict on a stored trace (its cell, gate, a claim or a sub-question), with
    what the judge said; a later label on the same part corrects an earlier one."""
    from veralith.cli.runs import existing_db
    from veralith.review.verdicts import make_label
    from veralith.store import open_store
    from veralith.store.labels import LabelError, add_labels

    wanted = _pairs(cell, gate, claim, sufficiency, coverage)
    if not wanted:
        raise fail("say what the label is: --cell, --gate, --claim K RELATION, --sufficiency Q Y|N or "
                   "--coverage Q COVERAGE", ExitCode.ERROR)
    if existing_db() is None:
        raise fail(f"trace {ref} not found: no database yet")
    store = open_store()
    trace_id = store.read(ops.resolve, ref, knowledge_base=kb)
    result = store.read(ops.load_result, trace_id)
    info = store.read(ops.trace_info, trace_id)
    who = reviewer_name(by)
    try:
        labels = [make_label(result, target, item, value, reviewer=who, note=note, evaluated_at=info.evaluated_at)
                  for target, item, value in wanted]
    except LabelError as exc:
        raise fail(str(exc), ExitCode.ERROR) from None
    store.write(add_labels, labels)
    out = Console(highlight=False)
    for label in labels:
        part = label.target + (f" {label.item}" if label.item else "")
        verdict = ("agrees" if label.judged == label.value else f"judge said {label.judged}") \
            if label.judged is not None else "the judge gave none"
        out.print(literal(f"trace {trace_id}: {part} labelled {label.value} by {label.reviewer} ({verdict})"),
                  soft_wrap=True)


class Action(str, Enum):
    export = "export"
    import_ = "import"


def labels_command(
    action: Annotated[Action, typer.Argument(metavar="ACTION", help="export: every label (the newest and the ones "
                                             "it corrected) as JSONL or CSV. import: labels from FILE.",
                                             show_default=False)],
    file: Annotated[Path | None, typer.Argument(metavar="FILE", help="import: the file to read.",
                                                show_default=False)] = None,
    fmt: Annotated[str | None, typer.Option("--format", metavar="FORMAT", help="jsonl or csv (export; import: "
                                            "found from the file), langfuse (scores) or phoenix (annotations).")]
    = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", metavar="FILE", help="export: file to write "
                                                "(default: stdout).")] = None,
    by: Annotated[str | None, typer.Option("--by", metavar="NAME", help="import: reviewer of rows that name none.")]
    = None,
) -> None:
    """Labels out to a file and in from one: a Veralith export, a spreadsheet (CSV with the same
    columns), Langfuse scores or Phoenix annotations named cell, gate, claim:K, sufficiency:Q or
    coverage:Q. Importing a file twice adds nothing twice."""
    if action is Action.export:
        _export(fmt or "jsonl", output)
    else:
        if file is None:
            raise fail("labels import needs the FILE to read", ExitCode.ERROR)
        _import(file, fmt, by)


def _export(fmt: str, output: Path | None) -> None:
    from veralith.cli.runs import existing_db
    from veralith.review.files import write_labels
    from veralith.store.labels import Label, trace_keys

    if fmt not in ("jsonl", "csv"):
        raise fail(f"--format {fmt!r}: labels are exported as jsonl or csv", ExitCode.ERROR)
    store = existing_db()

    def every(db: Any) -> list[tuple[Label, tuple[str, str, str | None]]]:
        rows = [Label(**{k: r[k] for k in Label.__dataclass_fields__})
                for r in db.query("SELECT * FROM labels ORDER BY labelled_at, uid")]
        keys = trace_keys(db, sorted({label.trace_id for label in rows}))
        return [(label, keys[label.trace_id]) for label in rows]

    rows = [] if store is None else store.read(every)
    try:
        sink = output.open("w", encoding="utf-8", newline="") if output else sys.stdout
    except OSError as exc:
        raise fail(f"--output {output}: cannot write ({exc.strerror or exc})", ExitCode.ERROR) from None
    from veralith.cli.records import _cell_safe
    from veralith.cli.render import terminal_safe

    escape = terminal_safe if output is None and sys.stdout.isatty() else None
    try:
        count = write_labels(rows, sink, fmt, cell=_cell_safe, escape=escape)
    finally:
        if output:
            sink.close()
    if output:
        Console(stderr=True, highlight=False).print(literal(f"exported {count} labels to {output}"))


def _import(file: Path, fmt: str | None, by: str | None) -> None:
    from veralith.errors import StoreError
    from veralith.review.files import Problem, read_labels
    from veralith.review.verdicts import make_label
    from veralith.store import open_store
    from veralith.store.labels import LabelError, add_labels, find_trace

    try:
        text = file.read_text(encoding="utf-8-sig")
    except FileNotFoundError as exc:   # what is not there is 1, as for every command (docs/cli.md)
        raise fail(f"{file}: cannot read ({exc.strerror})", ExitCode.NOT_FOUND) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"{file}: cannot read ({getattr(exc, 'strerror', None) or exc})", ExitCode.ERROR) from None
    err = Console(stderr=True, highlight=False)
    store = open_store()
    labels, problems = [], 0
    for row in read_labels(text, fmt, reviewer=by):
        if isinstance(row, Problem):
            problems += 1
            err.print(literal(f"{file}:{row.line}: {row.message}; skipped", "red"), soft_wrap=True)
            continue
        trace_id = store.read(find_trace, trace_uid=row.trace_uid, knowledge_base=row.knowledge_base,
                              external_id=row.external_id, trace_id=row.trace_id)
        if trace_id is None:
            problems += 1
            named = row.trace_uid or row.external_id or row.trace_id
            err.print(literal(f"{file}:{row.line}: no stored trace {named!r}; skipped", "red"), soft_wrap=True)
            continue
        try:
            result = store.read(ops.load_result, trace_id)
            labels.append(make_label(result, row.target, row.item, row.value, reviewer=row.reviewer, note=row.note,
                                     source=row.source, evaluated_at=store.read(ops.trace_info, trace_id).evaluated_at,
                                     labelled_at=row.labelled_at, uid=row.uid))
        except (LabelError, StoreError) as exc:  # a trace without a result, an id it does not hold
            problems += 1
            err.print(literal(f"{file}:{row.line}: {exc}; skipped", "red"), soft_wrap=True)
    added = store.write(add_labels, labels)
    Console(highlight=False).print(literal(f"imported {added} labels ({len(labels) - added} already there, "
                                           f"{problems} skipped) from {file}"), soft_wrap=True)
    if problems:
        raise typer.Exit(ExitCode.ERROR)
