"""`veralith agreement`: the judge against reviewers' labels (veralith.review.agreement), as a table,
JSON, or Markdown for a pull request."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from veralith.cli.exits import ExitCode, fail
from veralith.cli.render import literal
from veralith.store import ops

if TYPE_CHECKING:
    from veralith.models import EvaluationResult
    from veralith.review.agreement import Report
    from veralith.store.labels import Label

__all__ = ["agreement_command", "labelled_pairs", "markdown"]


def labelled_pairs(store: Any, *, kb: str | None = None, since: float | None = None
                   ) -> list[tuple[Label, EvaluationResult]]:
    """Each current label with its trace's stored result (traces without one are left out)."""
    from veralith.store.errors import TraceNotEvaluated
    from veralith.store.labels import current

    labels = store.read(current, kb=kb, since=since)
    results: dict[int, EvaluationResult | None] = {}
    for trace_id in sorted({label.trace_id for label in labels}):
        try:
            results[trace_id] = store.read(ops.load_result, trace_id)
        except TraceNotEvaluated:
            results[trace_id] = None
    return [(label, found) for label in labels if (found := results[label.trace_id]) is not None]


def calibration_figures(db: Any, kb: str | None = None) -> dict[str, Any]:
    """Per knowledge base with enough sufficiency labels: the threshold fitted to them, its balanced
    accuracy out of fold (5 folds by trace), and the accuracy on the same labels of the threshold the
    judge's own verdicts give (the percentile rule); the second is not fitted to labels at all."""
    from veralith.config import settings
    from veralith.store.calibration import (
        CountedCalibration,
        balanced_accuracy,
        calibrate,
        cross_validated,
        fit_threshold,
        labelled_sufficiency,
        value_counts,
    )

    own = CountedCalibration(value_counts(db, settings.calibration_percentile, kb))
    out: dict[str, Any] = {}
    for name, pairs in labelled_sufficiency(db, kb).items():
        oof, folds = cross_validated(pairs)
        percentile = calibrate(own, name)
        out[name] = {"labelled_traces": len(pairs), "threshold": fit_threshold(pairs), "out_of_fold": oof,
                     "folds": folds, "own_threshold": percentile.threshold,
                     "own_source": percentile.source.value,
                     "own_accuracy": balanced_accuracy(pairs, percentile.threshold)}
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f} %"


def _row(name: str, figures: dict[str, Any]) -> list[str]:
    low_high = figures["interval_95"]
    interval = "–" if low_high is None else f"{low_high[0] * 100:.0f}–{low_high[1] * 100:.0f} %"
    kappa = "–" if figures["kappa"] is None else f"{figures['kappa']:.2f}"
    verdict = "too few to conclude" if figures["too_few"] else ""
    return [name, f"{figures['labels']}", _pct(figures["agreement"]), interval, kappa, f"{figures['not_judged']}",
            verdict]


_HEAD = ["", "labels", "agreement", "95 % interval", "kappa", "not judged", ""]


def _rows(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each judge, then its split by needs_review, then by model and prompt when there are several."""
    rows: list[tuple[str, dict[str, Any]]] = []
    for judge, figures in data["judges"].items():
        rows.append((judge, figures))
        rows += [(f"  {judge}, {flag.replace('_', ' ')}", f) for flag, f in sorted(data["by_review"][judge].items())]
        versions = data["by_version"][judge]
        if len(versions) > 1:
            rows += [(f"  {judge}, {version}", f) for version, f in versions.items()]
        if judge == "cell":
            rows += [(f"  labelled {cell}", f) for cell, f in data["by_cell"].items()]
    return rows


def _versions(data: dict[str, Any]) -> list[str]:
    return sorted({v for versions in data["by_version"].values() for v in versions})


def markdown(data: dict[str, Any]) -> str:
    """The report as Markdown (a pull request comment)."""
    lines = [f"### Judge–human agreement ({data['traces']} labelled traces)", "",
             "| " + " | ".join(_HEAD) + " |", "|" + "---|" * len(_HEAD)]
    for name, figures in _rows(data):
        cells = [c.replace("|", "\\|") for c in _row(name.strip(), figures)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Judge models and prompts: {'; '.join(_versions(data)) or 'none'}.",
              f"A figure on fewer than {data['min_labels']} labels is marked too few to conclude; intervals are "
              "Wilson 95 %."]
    return "\n".join(lines) + "\n"


def _confusion(name: str, figures: dict[str, Any]) -> Table:
    labels = sorted({c["label"] for c in figures["confusion"]} | {c["judge"] for c in figures["confusion"]})
    table = Table("label \\ judge", *labels, title=f"{name}: people (rows) by the judge (columns)",
                  title_justify="left")
    counts = {(c["label"], c["judge"]): c["n"] for c in figures["confusion"]}
    for row in labels:
        table.add_row(literal(row), *[str(counts.get((row, col), 0)) for col in labels])
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
    from veralith.config import settings
    from veralith.review.agreement import agreement

    try:
        when = filters.since(since)
    except filters.BadOption as exc:
        raise fail(str(exc), ExitCode.ERROR) from None
    start = None if when is None else dt.datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
    store = existing_db()
    pairs = [] if store is None else labelled_pairs(store, kb=kb, since=start)
    report: Report = agreement(pairs, min_labels=min_labels or settings.labels_min)
    data = report.to_json()
    data["calibration"] = {} if store is None else store.read(calibration_figures, kb)
    out = Console(highlight=False)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    if as_markdown:
        typer.echo(markdown(data), nl=False)
        return
    if not pairs:
        out.print("no labels yet: give some with `veralith review` or `veralith label`")
        return
    out.print(literal(f"{len(pairs)} labels on {report.traces} traces; judge models and prompts: "
                      + "; ".join(_versions(data))), soft_wrap=True)
    table = Table(*_HEAD, title="Agreement with reviewers' labels", title_justify="left")
    for name, figures in _rows(data):
        table.add_row(*[literal(c) for c in _row(name, figures)])
    out.print(table)
    for name, figures in data["judges"].items():
        out.print(_confusion(name, figures))
    for name, c in data["calibration"].items():
        out.print(literal(f"knowledge base {name}: sufficiency threshold fitted to {c['labelled_traces']} labelled "
                          f"traces {c['threshold']}; balanced accuracy out of fold {_pct(c['out_of_fold'])} "
                          f"({c['folds']} folds), against {_pct(c['own_accuracy'])} for the threshold from the "
                          f"judge's own verdicts ({c['own_threshold']:.2f}, {c['own_source']})"), soft_wrap=True)
