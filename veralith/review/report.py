"""The agreement report as data, one source for `veralith agreement`, `veralith serve`'s /agreement page and
the benchmarks: each current label with its trace's result (`labelled_pairs`), the figures of
veralith.review.agreement over them, the knowledge bases' thresholds and review cut-offs fitted to labels
(out of fold), and the rows and Markdown every view lays out (`figures`, `rows`, `markdown`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from veralith.store import ops

if TYPE_CHECKING:
    from veralith.models import EvaluationResult
    from veralith.store.labels import Label

__all__ = ["HEAD", "calibration_figures", "calibration_line", "confusion", "figures", "labelled_pairs", "markdown",
           "pct", "review_flag_figures", "review_flag_line", "row", "rows", "versions"]


def figures(store: Any, *, kb: str | None = None, since: float | None = None,
            min_labels: int | None = None) -> tuple[dict[str, Any], int]:
    """(the report's JSON with `calibration` and `review_flag`, labels compared) for a store (None: empty)."""
    from veralith.config import settings
    from veralith.review.agreement import agreement

    pairs = [] if store is None else labelled_pairs(store, kb=kb, since=since)
    data = agreement(pairs, min_labels=min_labels or settings.labels_min).to_json()
    data["calibration"] = {} if store is None else store.read(calibration_figures, kb)
    data["review_flag"] = {} if store is None else store.read(review_flag_figures, kb)
    return data, len(pairs)


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


def review_flag_figures(db: Any, kb: str | None = None) -> dict[str, Any]:
    """Per knowledge base with enough labelled traces: the review cut-off fitted to them
    (veralith.store.review_cutoff), how its flag catches the disagreements out of fold (5 folds by
    trace), and how the default cut-off's flag does on the same traces; with the share of labelled
    traces that disagree, which is the precision of reading traces at random."""
    from veralith.policy import REVIEW_BELOW
    from veralith.store.review_cutoff import cross_validated, fitted_cutoff, flag_score, labelled_review

    out: dict[str, Any] = {}
    for name, pairs in labelled_review(db, kb).items():
        oof, folds = cross_validated(pairs)
        fitted = fitted_cutoff(pairs)
        default = flag_score(pairs, REVIEW_BELOW)

        def said(score: Any) -> dict[str, Any]:
            return {"flagged": score.flagged, "caught": score.caught, "precision": score.precision,
                    "recall": score.recall}

        out[name] = {"labelled_traces": len(pairs), "disagreements": default.disagreements,
                     "base_rate": default.disagreements / len(pairs), "cutoff": fitted.cutoff,
                     "fitted": fitted.labels is not None, "out_of_fold": said(oof) if oof else None, "folds": folds,
                     "default_cutoff": REVIEW_BELOW, "default": said(default)}
    return out


def calibration_line(name: str, c: dict[str, Any]) -> str:
    """One knowledge base's threshold fitted to labels, in words (calibration_figures)."""
    return (f"knowledge base {name}: sufficiency threshold fitted to {c['labelled_traces']} labelled traces "
            f"{c['threshold']}; balanced accuracy out of fold {pct(c['out_of_fold'])} ({c['folds']} folds), against "
            f"{pct(c['own_accuracy'])} for the threshold from the judge's own verdicts ({c['own_threshold']:.2f}, "
            f"{c['own_source']})")


def review_flag_line(name: str, f: dict[str, Any]) -> str:
    """One knowledge base's review cut-off fitted to labels, in words (review_flag_figures)."""
    def caught(s: dict[str, Any] | None) -> str:
        if s is None:
            return "–"
        return (f"catches {s['caught']} of {f['disagreements']} disagreements (recall {pct(s['recall'])}), "
                f"flagging {s['flagged']} traces (precision {pct(s['precision'])})")

    head = (f"fitted to {f['labelled_traces']} labelled traces {f['cutoff']:.2f}" if f["fitted"] else
            f"not fitted (no cut-off catches a disagreement), the default {f['cutoff']:.2f} stays")
    return (f"knowledge base {name}: review cut-off {head}; out of fold (5 folds by trace, {f['folds']} of them "
            f"fitted, the others flagged under the default) the flag "
            f"{caught(f['out_of_fold'])}; the default {f['default_cutoff']:.2f} {caught(f['default'])}; "
            f"reading at random: precision {pct(f['base_rate'])}")


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f} %"


def row(name: str, figures: dict[str, Any]) -> list[str]:
    """One line of the table (HEAD): labels, agreement, its interval, kappa, not judged, too few."""
    low_high = figures["interval_95"]
    interval = "–" if low_high is None else f"{low_high[0] * 100:.0f}–{low_high[1] * 100:.0f} %"
    kappa = "–" if figures["kappa"] is None else f"{figures['kappa']:.2f}"
    verdict = "too few to conclude" if figures["too_few"] else ""
    return [name, f"{figures['labels']}", pct(figures["agreement"]), interval, kappa, f"{figures['not_judged']}",
            verdict]


HEAD = ["", "labels", "agreement", "95 % interval", "kappa", "not judged", ""]


def rows(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each judge, then its split by needs_review, then by model and prompt when there are several."""
    out: list[tuple[str, dict[str, Any]]] = []
    for judge, found in data["judges"].items():
        out.append((judge, found))
        out += [(f"  {judge}, {flag.replace('_', ' ')}", f) for flag, f in sorted(data["by_review"][judge].items())]
        by_version = data["by_version"][judge]
        if len(by_version) > 1:
            out += [(f"  {judge}, {version}", f) for version, f in by_version.items()]
        if judge == "cell":
            out += [(f"  labelled {cell}", f) for cell, f in data["by_cell"].items()]
    return out


def confusion(figures: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[int]]]]:
    """(the values either side used, [(a label's value, counts by the judge's value in that order)])."""
    labels = sorted({c["label"] for c in figures["confusion"]} | {c["judge"] for c in figures["confusion"]})
    counts = {(c["label"], c["judge"]): c["n"] for c in figures["confusion"]}
    return labels, [(a, [counts.get((a, b), 0) for b in labels]) for a in labels]


def versions(data: dict[str, Any]) -> list[str]:
    return sorted({v for by_version in data["by_version"].values() for v in by_version})


def markdown(data: dict[str, Any]) -> str:
    """The report as Markdown (a pull request comment)."""
    lines = [f"### Judge–human agreement ({data['traces']} labelled traces)", "",
             "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for name, figures in rows(data):
        cells = [c.replace("|", "\\|") for c in row(name.strip(), figures)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Judge models and prompts: {'; '.join(versions(data)) or 'none'}.",
              f"A figure on fewer than {data['min_labels']} labels is marked too few to conclude; intervals are "
              "Wilson 95 %."]
    return "\n".join(lines) + "\n"


