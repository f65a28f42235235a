"""The /agreement page: what `veralith agreement` shows, from the same computation (veralith.review.report),
laid out for the page. Read-only, so it needs no `--review`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from veralith.review.report import HEAD, calibration_line, confusion, figures, review_flag_line, row, rows, versions

__all__ = ["agreement_context"]


def agreement_context(store: Any, kb: str | None, since: dt.date | None) -> dict[str, Any]:
    """The template's values: the table's rows (a split row indented under its judge), a confusion matrix
    per judge, the thresholds and review cut-offs fitted to labels, and the judge models and prompts."""
    start = None if since is None else dt.datetime.combine(since, dt.time(), tzinfo=dt.timezone.utc).timestamp()
    data, compared = figures(store, kb=kb, since=start)
    table = [{"name": name.strip(), "split": name.startswith(" "), "cells": row(name.strip(), found)[1:]}
             for name, found in rows(data)]
    matrices = [(judge, *confusion(found)) for judge, found in data["judges"].items()]
    return {"data": data, "compared": compared, "head": HEAD[1:], "table": table, "matrices": matrices,
            "versions": versions(data),
            "fitted": [calibration_line(name, c) for name, c in data["calibration"].items()]
            + [review_flag_line(name, f) for name, f in data["review_flag"].items()]}
