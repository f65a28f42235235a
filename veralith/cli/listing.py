"""`veralith list`: the table of stored traces, fitted to the terminal (a pure function of the rows
ops.list_traces returns; user text goes through render.literal like everywhere else)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from veralith.cli.render import GATE_STYLE, fmt_fraction, fmt_time, fmt_usd, literal, one_line

__all__ = ["traces_table"]

# `veralith list` columns, and what gives way, in order, when the terminal is too narrow for them and
# a readable query (_QUERY_MIN columns): the numbers first (inspect shows them), then the status
# column folds into gate (a trace that is not done has no gate, so gate shows its status instead),
# then long names are cut, then the least needed columns go. The id and the cell always stay.
_LIST_COLUMNS = ("id", "ext id", "created", "status", "kb", "cell", "gate", "suff", "faith", "cost")
_NARROWING = (("drop", "cost"), ("drop", "faith"), ("drop", "suff"), ("fold", "status"), ("cut", "kb"),
              ("cut", "ext id"), ("drop", "kb"), ("drop", "ext id"), ("drop", "created"))
_QUERY_MIN, _CUT = 32, 12
_GAP = 2  # spaces between two columns (box=None, padding 1 on each side)


def traces_table(rows: Sequence[Mapping[str, Any]], *, width: int = 80, wide: bool = False,
                 now: dt.datetime | None = None) -> Table:
    """`veralith list`: one row per stored trace, newest first (rows as ops.list_traces returns them).

    Fits `width` columns while keeping the query at least _QUERY_MIN wide (see _NARROWING); with
    `wide`, every column is kept and nothing is cut, whatever the width (the caller prints it on a
    console as wide as the table). A result whose deciding verdict is low-confidence says
    "review" beside its gate (`inspect` shows which verdicts). Times are ages (`5m ago`, `3d ago`),
    a date past a week; with `wide`, UTC date-times."""
    now = now or dt.datetime.now(dt.timezone.utc)
    cells = [_list_cells(row, now=now, wide=wide) for row in rows]
    shown = [c for c in _LIST_COLUMNS if c != "ext id" or any(row.get("external_id") is not None for row in rows)]
    folded, cut = False, set()
    queries = [one_line(row["query_preview"] or "", 10**9) for row in rows]
    longest_query = max((len(q) for q in queries), default=0)

    def natural(column: str) -> int:
        # Once status folds into gate, a trace that is not done shows its status there: measured as shown,
        # or rich would take the difference out of the other columns (the id, the cell header).
        shown_cells = [c["status"] if folded and column == "gate" and row["status"] != "done" else c[column]
                       for row, c in zip(rows, cells, strict=True)]
        longest = max([len(column)] + [c.cell_len for c in shown_cells])
        return min(longest, _CUT) if column in cut else longest

    def needed() -> int:
        return sum(natural(c) + _GAP for c in shown) + min(_QUERY_MIN, max(longest_query, len("query")))

    for action, column in () if wide else _NARROWING:
        if needed() <= width:
            break
        if column not in shown:
            continue
        if action == "cut":
            cut.add(column)
        else:
            shown.remove(column)
            folded = folded or action == "fold"
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in shown:
        table.add_column(column, no_wrap=True, overflow="ellipsis", max_width=_CUT if column in cut else None)
    fixed = sum(natural(c) + _GAP for c in shown)
    # Narrower than every narrowing allows, the query gives way: a table wider than the terminal
    # would be shrunk by rich column by column, which wipes out the id that `inspect` needs.
    table.add_column("query", no_wrap=True, overflow="ellipsis", max_width=None if wide else max(width - fixed, 5))
    for row, row_cells, query in zip(rows, cells, queries, strict=True):
        if folded and row["status"] != "done":
            row_cells["gate"] = row_cells["status"]
        shown_query: Text = literal(query, "dim")
        if row["error_message"]:
            shown_query = Text.assemble(shown_query, "\n", literal(one_line(row["error_message"]), "red"))
        table.add_row(*(row_cells[c] for c in shown), shown_query)
    return table


def _list_cells(row: Mapping[str, Any], *, now: dt.datetime, wide: bool) -> dict[str, Text]:
    gate = row["quality_gate"] or "—"
    done = row["status"] == "done"
    external = row.get("external_id")
    return {
        "id": Text(str(row["id"])),
        "ext id": literal("—" if external is None else external, "" if external is not None else "dim"),
        "created": Text(fmt_time(row["created_at"], now=now, absolute=wide), style="dim"),
        "status": literal(row["status"], "red" if row["status"] == "error" else "" if done else "yellow"),
        "kb": literal(row["knowledge_base"]),
        "cell": literal(row["failure_cell"] or "—"),
        "gate": Text.assemble((gate, GATE_STYLE.get(gate, "")), (" review", "bold yellow")
                              if row.get("needs_review") else ""),
        "suff": Text(fmt_fraction(row["sufficiency_fraction"])),
        "faith": Text(fmt_fraction(row["faithfulness_fraction"])),
        "cost": Text(fmt_usd(row["usd"]) if done else "—"),
    }
