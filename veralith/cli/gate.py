"""The CI gate of `veralith eval`: `--fail-under RATE` and `--max-cell CELL=N`.

The gate is checked over the run's traces: those it evaluated and those of a re-run file whose
stored result stands (without the database, `--no-persist`, over the records evaluated). The pass
rate is pass / traces: an `indeterminate` trace (a judge could not run) and one whose evaluation
failed count as not passing, because nothing is ever reported as pass when nothing was assessed:
with no trace at all, or none with a verdict ("not judged"), the gate fails, and a run that exits 2
(record or judge errors) never prints "passed". `--max-cell indeterminate=N` bounds traces without
a cell. When the gate fails, the command exits 3 and names the worst traces, worst cell first
(veralith.models.cell_severity).
"""

from __future__ import annotations

import shlex
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.text import Text

from veralith.cli.render import literal
from veralith.models import CELLS, NO_CELL, cell_name, cell_severity
from veralith.store import ops

__all__ = ["EXIT_GATE", "Collector", "GateResult", "GateSpec", "Outcome", "check_gate", "gate_view", "parse_spec"]

EXIT_GATE = 3
WORST_SHOWN = 10
_CELL_NAMES = (*CELLS, NO_CELL)  # what --max-cell accepts


@dataclass(frozen=True)
class GateSpec:
    fail_under: float | None = None
    max_cells: dict[str, int] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.fail_under is not None or bool(self.max_cells)


@dataclass(frozen=True)
class Outcome:
    """One trace of the run, as much as the gate's summary needs."""

    line: int | None              # input line, when this invocation read it
    trace_id: int | None
    key: str                      # the record's external id, else its query
    cell: str                     # failure cell, or NO_CELL
    gate: str                     # pass | fail | indeterminate
    faithfulness: float | None
    reason: str | None            # why it did not pass, one line


@dataclass(frozen=True)
class GateResult:
    passed: bool
    evaluated: int
    pass_rate: float | None
    cells: dict[str, int]
    failures: list[str]           # one line per broken rule
    worst: list[Outcome]          # the worst non-passing traces, worst first


def parse_spec(fail_under: float | None, max_cell: Iterable[str] | None) -> GateSpec:
    """The gate from the command's options; ValueError naming the option when one is malformed."""
    limits: dict[str, int] = {}
    for item in max_cell or ():
        cell, sep, count = item.partition("=")
        cell = cell.strip()
        if not sep or cell not in _CELL_NAMES:
            raise ValueError(f"--max-cell {item!r}: expected CELL=N with CELL one of {', '.join(_CELL_NAMES)}")
        try:
            limit = int(count)
        except ValueError:
            raise ValueError(f"--max-cell {item!r}: N must be a whole number >= 0") from None
        if limit < 0:
            raise ValueError(f"--max-cell {item!r}: N must be a whole number >= 0")
        if limits.get(cell, limit) != limit:  # which one was meant? a gate must not guess
            raise ValueError(f"--max-cell {item!r}: {cell} is already limited to {limits[cell]}; give it once")
        limits[cell] = limit
    return GateSpec(fail_under=fail_under, max_cells=limits)


class Collector:
    """Outcomes gathered from the worker threads (appends are serialised by a lock)."""

    def __init__(self) -> None:
        self._items: list[Outcome] = []
        self._lock = threading.Lock()

    def add(self, record: Any, result: Any) -> None:
        if result is None:
            return
        from veralith.compare.reasons import result_reason

        external = getattr(record, "external_id", None)
        diagnosis = result.diagnosis
        outcome = Outcome(
            line=record.line, trace_id=result.trace_id, key=str(external) if external is not None else result.query,
            cell=cell_name(result.failure_cell),
            gate=result.status.quality_gate.value,
            faithfulness=diagnosis.faithfulness_fraction if diagnosis else None, reason=result_reason(result))
        with self._lock:
            self._items.append(outcome)

    @property
    def outcomes(self) -> list[Outcome]:
        with self._lock:
            return sorted(self._items, key=lambda o: o.line or 0)


def check_gate(outcomes: Sequence[Outcome], spec: GateSpec) -> GateResult:
    """Apply the gate (a pure function of the outcomes)."""
    cells = Counter(o.cell for o in outcomes)
    passed_n = sum(o.gate == "pass" for o in outcomes)
    rate = passed_n / len(outcomes) if outcomes else None
    failures = []
    # Nothing is ever reported as passed when nothing was assessed: a run whose traces all lack a
    # verdict (judge errors, an outage) fails whatever the limits say.
    if spec.active and not outcomes:
        failures.append("not judged: the run has no trace with a result")
    elif spec.active and cells[NO_CELL] == len(outcomes):
        failures.append(f"not judged: none of the {len(outcomes)} trace(s) has a verdict (judge errors); "
                        "nothing was assessed")
    if spec.fail_under is not None and rate is not None and rate < spec.fail_under:
        failures.append(f"pass rate {rate:.1%} ({passed_n}/{len(outcomes)}) is under --fail-under "
                        f"{spec.fail_under:g}")
    for cell, limit in spec.max_cells.items():
        if cells[cell] > limit:
            failures.append(f"{cells[cell]} trace(s) in {cell}, more than --max-cell {cell}={limit}")
    bad = [o for o in outcomes if o.gate != "pass"]
    # The cells a broken --max-cell names come first, then the usual worst-first order.
    named = {cell for cell, limit in spec.max_cells.items() if cells[cell] > limit}
    bad.sort(key=lambda o: (o.cell not in named, cell_severity(o.cell),
                            o.faithfulness if o.faithfulness is not None else 2.0, o.line or 0,
                            o.trace_id or 0))
    return GateResult(passed=not failures, evaluated=len(outcomes), pass_rate=rate, cells=dict(cells),
                      failures=failures, worst=bad[:WORST_SHOWN] if failures else [])


def gate_view(result: GateResult, *, where: str, errors: bool = False) -> RenderableType:
    """The gate's verdict; on failure, each broken rule and the worst traces (`where` names the input).
    `errors`: the run had record or judge errors (it exits 2), so rules that held are no pass."""
    if result.passed and errors:
        return Text(f"quality gate not passed: not judged: the run had record or judge errors (above); the "
                    f"rules held only over the {result.evaluated} trace(s) read back", "yellow")
    if result.passed:
        rate = "n/a" if result.pass_rate is None else f"{result.pass_rate:.1%}"
        return Text(f"quality gate passed: pass rate {rate} over {result.evaluated} trace(s)", "green")
    # One line that says why (CI logs are read by their first line), then the worst traces.
    parts: list[RenderableType] = [Text.assemble(("quality gate FAILED", "bold red"),
                                                 (": " + "; ".join(result.failures), "red"))]
    if result.worst:
        parts.append(Text("worst traces:"))
    for o in result.worst:
        line = Text("  ")
        line.append(f"#{o.trace_id}" if o.trace_id is not None else "(unsaved)", "bold")
        line.append_text(literal(f" {where}:{o.line} " if o.line is not None else " "))
        line.append_text(literal(_one_line(o.key, 50), "bold"))
        line.append(f"  {o.cell} ({o.gate})")
        if o.reason:
            line.append_text(literal(f": {_one_line(o.reason, 100)}", "dim"))
        parts.append(line)
    return Group(*parts)


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class EvalHooks:
    """What `veralith eval` adds around a batch for runs and the gate: opens the run when the
    database and judge client are ready, files each result under it and collects outcomes for the
    gate (both from the worker threads), closes the run whatever happens, then applies the gate.

    The exit code: 2 (record errors) and every other failure of the batch win over 3, because a
    gate computed over a run that lost records is no verdict; the gate's summary is still shown.
    """

    def __init__(self, file: Any, *, persist: bool, run_name: str | None, fail_under: float | None,
                 max_cell: Iterable[str] | None) -> None:
        from veralith.cli.runs import EvalRun

        self.spec = parse_spec(fail_under, max_cell)
        if run_name is not None:
            from veralith.validate import check_run_name

            run_name = check_run_name(run_name, what="--run-name")
            # `compare` and the hint printed after the run read digits as a run id (runs.resolve_run),
            # so a run named "12" could never be named on the command line.
            if run_name.removeprefix("#").isdigit():
                raise ValueError(f"--run-name {run_name!r} would be read as a run id; add a letter "
                                 f"(e.g. build-{run_name.removeprefix('#')})")
            if not persist:
                raise ValueError("--run-name needs the database; it cannot be used with --no-persist")
        self.where = str(file)
        self.run = EvalRun(run_name, str(file)) if persist else None
        self.outcomes = Collector()

    def start(self, db: Any, client: Any) -> int | None:
        return None if self.run is None else self.run.start(db, client)

    def record(self, record: Any, result: Any) -> Any:
        """Called in a worker thread with each evaluated record's result (None: not ours)."""
        if result is not None and self.run is not None and self.run.id is not None and result.trace_id is not None:
            from veralith.compare.reasons import result_reason

            self.run.db.write(ops.record_result, self.run.id, result.trace_id, result_reason(result))
        self.outcomes.add(record, result)
        return result

    def around(self, batch: Callable[[], None], console: Any) -> None:
        """Run the batch, then `finish` whatever happened (with the batch's exit code: 0 when it
        returned, the code of the typer.Exit it raised, None for any other exception)."""
        import typer

        from veralith.config import redact_configured
        from veralith.errors import StoreError

        code: int | None = None
        try:
            batch()
            code = 0
        except typer.Exit as stop:
            code = stop.exit_code
            raise
        finally:
            try:
                self.finish(console, code)
            except StoreError as exc:  # what was committed stays; the run keeps its live totals
                err = Console(stderr=True, highlight=False)
                err.print(literal(f"error: the run could not be closed: {redact_configured(exc)}", "red"),
                          soft_wrap=True)
                if code is not None:  # else the batch's own exception goes on, and is reported, as it is
                    raise typer.Exit(2) from None

    def finish(self, console: Any, exit_code: int | None) -> None:
        """Close the run; show the gate; raise typer.Exit(3) when only the gate failed.
        `exit_code`: the batch's (0 finished cleanly), None when it ended by an exception."""
        import typer

        run = self.run.finish() if self.run is not None else None
        if run is not None:
            # A command to copy: the name shell-quoted (it may hold spaces or `;`), the id when the
            # name would read as an option.
            ref = shlex.quote(run.name) if run.name and not run.name.startswith("-") else str(run.id)
            console.print(literal(f"run {run.label} recorded; compare it with an earlier run: "
                                  f"veralith compare EARLIER {ref}", "dim"), soft_wrap=True)
        outcomes = self._run_outcomes(run) if run is not None else self.outcomes.outcomes
        if not self.spec.active or exit_code not in (0, 2):
            return
        result = check_gate(outcomes, self.spec)
        # one line per trace in CI logs
        console.print(gate_view(result, where=self.where, errors=exit_code == 2), soft_wrap=True)
        if not result.passed and not exit_code:
            raise typer.Exit(EXIT_GATE)

    def _run_outcomes(self, run: Any) -> list[Outcome]:
        """The run's traces as the gate sees them, with the input line of those read this time."""
        from veralith.compare import TraceRow

        lines = {o.trace_id: o.line for o in self.outcomes.outcomes if o.trace_id is not None}
        out = []
        assert self.run is not None
        for raw in self.run.db.read(ops.trace_rows, run):
            r = TraceRow._make(raw)
            out.append(Outcome(line=lines.get(r.id), trace_id=r.id,
                               key=r.external_id if r.external_id is not None else r.query,
                               cell=cell_name(r.failure_cell), gate=r.quality_gate or "indeterminate",
                               faithfulness=r.faithfulness_fraction, reason=r.reason))
        return sorted(out, key=lambda o: (o.line is None, o.line or 0, o.trace_id or 0))
