"""`veralith runs`: the runs in the database, newest first, with their totals.

Every `veralith eval` invocation is a run; traces logged with a run name (VERALITH_RUN, or `run=`
on log()) form an open SDK run whose totals are counted live.
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from veralith.cli.render import fmt_usd, literal
from veralith.store import ops

__all__ = ["existing_db", "pct", "runs_command", "runs_table"]


def existing_db() -> Any:
    """The store opened read-only, or None when there is none yet: reading commands never create one."""
    from veralith.store import open_store, store_url

    url = store_url()
    if url.startswith("sqlite:///") and not os.path.exists(url[len("sqlite:///"):]):
        return None
    return open_store(url, read_only=True)


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f} %"


def runs_command(
    limit: Annotated[int, typer.Option(min=1, metavar="N", help="Most recent runs to show.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON.")] = False,
) -> None:
    """List runs (each `veralith eval`, and each run name logged traces used), newest first."""
    db = existing_db()
    runs = [] if db is None else db.read(ops.list_runs, limit=limit)
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in runs], indent=2, ensure_ascii=False))
        return
    if not runs:
        Console(highlight=False).print("no runs" + ("" if db else " (no database yet)"))
        return
    out = Console(highlight=False)
    out.print(runs_table(runs, width=out.width))


# `veralith runs` columns, and what gives way, in order, when the terminal is too narrow for them and a
# readable name (_NAME_MIN columns): the judge is cut, then the least needed columns go (`--json` has
# them all). The id, pass, fail and rate always stay; the id is never cut (`compare` takes it), so
# below every narrowing the name gives way instead, cut with an ellipsis like every cut cell.
_RUN_COLUMNS = ("id", "name", "started", "judge", "traces", "pass", "fail", "ind.", "rate", "cost")
_RUN_NARROWING = (("cut", "judge"), ("drop", "ind."), ("drop", "cost"), ("drop", "traces"), ("drop", "judge"),
                  ("drop", "started"))
_NAME_MIN, _RUN_CUT = 12, 12
_RUN_GAP = 1  # the space between two columns (SIMPLE_HEAD, padding 0)


def runs_table(runs: list[Any], *, width: int = 80) -> Table:
    """One line per run, fitted to `width` columns (see _RUN_NARROWING); a cut cell ends in "…".
    `veralith runs --json` has every field (prompt versions, input, times)."""
    from rich import box

    cells = [_run_cells(r) for r in runs]
    shown = list(_RUN_COLUMNS)
    cut: set[str] = set()

    def natural(column: str) -> int:
        longest = max([len(column)] + [c[column].cell_len for c in cells])
        return min(longest, _RUN_CUT) if column in cut else longest

    def fixed() -> int:
        return sum(natural(c) + _RUN_GAP for c in shown if c != "name")

    for action, column in _RUN_NARROWING:
        if fixed() + min(_NAME_MIN, natural("name")) <= width:
            break
        if action == "cut":
            cut.add(column)
        else:
            shown.remove(column)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0, collapse_padding=True)
    for column in shown:
        # Narrower than every narrowing allows, the name gives way: a table wider than the terminal would
        # be shrunk by rich column by column, cutting the id too (or dropping it altogether).
        limit = max(width - fixed(), 4) if column == "name" else _RUN_CUT if column in cut else None
        table.add_column(column, justify="left" if column in ("name", "started", "judge") else "right",
                         no_wrap=True, overflow="ellipsis", max_width=limit)
    for row in cells:
        table.add_row(*(row[c] for c in shown))
    return table


def _run_cells(r: Any) -> dict[str, Text]:
    judge = r.backend or "-"
    if r.backend == "openai" and r.model:
        judge += f" {r.model}"
    label = literal(r.name or "-")
    if r.source == "sdk" or r.ended_at is None:
        label.append(f" ({r.source}{', open' if r.ended_at is None else ''})", "dim")
    return {
        "id": Text(str(r.id)),
        "name": label,
        "started": literal(f"{r.started_at[5:10]} {r.started_at[11:16]}"),
        "judge": literal(judge),
        "traces": Text(str(r.n_traces)),
        "pass": Text(str(r.n_pass)),
        "fail": Text(str(r.n_fail)),
        "ind.": Text(str(r.n_indeterminate)),
        "rate": Text(pct(r.pass_rate)),
        "cost": Text(fmt_usd(r.usd) + (f" +{r.usd_unknown}?" if r.usd_unknown else "")),
    }


class EvalRun:
    """The run of one `veralith eval` invocation: opened when the database and judge client are
    ready (so it records the judge configuration actually used), closed with its totals at the end
    whatever the outcome. A process killed mid-run leaves it open; its totals are then counted live."""

    def __init__(self, name: str | None, input: str) -> None:
        self.name, self.input = name, input
        self.db: Any = None
        self.id: int | None = None

    def start(self, db: Any, client: Any) -> int:
        from veralith.llm.prompts import PROMPT_VERSIONS

        versions: dict[str, str] = {}
        for task in PROMPT_VERSIONS:
            try:
                versions[task] = str(client.prompt_version(task))
            except Exception:  # a client that does not know a task simply does not record it
                continue
        self.db = db
        self.id = db.write(ops.start_run, name=self.name, backend=getattr(client, "backend", None),
                               model=getattr(client, "model", None), prompt_versions=versions, input=self.input)
        return self.id

    def finish(self) -> Any:
        """Close the run; returns it. None when it never started, or when it stored nothing (then
        it is deleted: a run without traces is not a run anyone can list or compare)."""
        if self.id is None:
            return None
        run = self.db.write(ops.finish_run, self.id)
        if run.n_traces == 0 and self.db.write(ops.discard_if_empty, self.id):
            return None   # a run that stored nothing is not recorded
        return run


def file_unchanged(store: Any, record: Any, run_id: int) -> None:
    """File a re-run record whose stored result stands (not evaluated again) under the eval run,
    with the reason line of that result when it did not pass."""
    from veralith.compare.reasons import failure_reason

    info = store.read(ops.find_external, record.knowledge_base, record.external_id)
    if info is None:
        return
    row = store.read(ops.trace_row, info.trace_id)
    reason = None
    if row is not None and row["quality_gate"] != "pass":
        reason = failure_reason(store.read(ops.failure_details, [info.trace_id])[info.trace_id])
    store.write(ops.record_result, run_id, info.trace_id, reason)
