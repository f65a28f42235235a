"""`veralith agreement`: the judge against reviewers' labels (veralith.review.agreement), as a table,
JSON, or Markdown for a pull request."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from veralith.cli.exits import ExitCode, fail
from veralith.cli.render import literal
from veralith.review.report import (
    HEAD,
    calibration_figures,
    calibration_line,
    confusion,
    labelled_pairs,
    markdown,
    review_flag_line,
    row,
    rows,
    versions,
)

__all__ = ["agreement_command", "calibration_figures", "labelled_pairs", "markdown"]


def _confusion(name: str, figures: dict[str, Any]) -> Table:
    labels, matrix = confusion(figures)
    table = Table("label \\ judge", *labels, title=f"{name}: people (rows) by the judge (columns)",
                  title_justify="left")
    for label, counts in matrix:
        table.add_row(literal(label), *[str(n) for n in counts])
    return table


def agreement_command(
    kb: Annotated[str | None, typer.Option("--kb", metavar="NAME", help="Only this knowledge base.")] = None,
    since: Annotated[str | None, typer.Option(metavar="WHEN", help="Only labels given at or after this ISO date/time "
                                              "or this long ago: 30m, 24h, 7d, 2w.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The figures as JSON.")] = False,
    as_markdown: Annotated[bool, typer.Option("--markdown", help="A Markdown table, for a pull request.")] = False,
    min_labels: Annotated[int | None, typer.Option(min=1, metavar="N", help="Labels a figure needs to conclude "
                                                   "from (default: VERALITH_LABELS_MIN).")] = None,
) -> None:
    """How often the judge agrees with reviewers' labels: per judge, per cell and for the gate, with
    95 % Wilson intervals, Cohen's kappa and the confusion matrix; split by needs_review and by
    judge model and prompt version. Says when there are too few labels to conclude."""
    import datetime as dt

    from veralith.cli import filters
    from veralith.cli.runs import existing_db
    from veralith.review.report import figures

    try:
        when = filters.since(since)
    except filters.BadOption as exc:
        raise fail(str(exc), ExitCode.ERROR) from None
    start = None if when is None else dt.datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
    data, compared = figures(existing_db(), kb=kb, since=start, min_labels=min_labels)
    out = Console(highlight=False)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    if as_markdown:
        typer.echo(markdown(data), nl=False)
        return
    if not compared:
        out.print("no labels yet: give some with `veralith review` or `veralith label`")
        return
    out.print(literal(f"{compared} labels on {data['traces']} traces; judge models and prompts: "
                      + "; ".join(versions(data))), soft_wrap=True)
    table = Table(*HEAD, title="Agreement with reviewers' labels", title_justify="left")
    for name, found in rows(data):
        table.add_row(*[literal(c) for c in row(name, found)])
    out.print(table)
    for name, found in data["judges"].items():
        out.print(_confusion(name, found))
    for name, c in data["calibration"].items():
        out.print(literal(calibration_line(name, c)), soft_wrap=True)
    for name, f in data["review_flag"].items():
        out.print(literal(review_flag_line(name, f)), soft_wrap=True)
