"""What the work layer's runner judges with, and what it gets back: the judge is passed in
(veralith.pipeline.evaluate.TraceJudge), so the work layer imports no judge or model code.

Kept apart from veralith.work.runner so that the pipeline can name these types without loading the
store (the runner's claims load the database library; `import veralith` must not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from veralith.models import EvaluationResult
from veralith.usage import OutputSize

if TYPE_CHECKING:
    from veralith.store.protocol import Store, TraceInput

__all__ = ["Judge", "Judged"]


@dataclass(frozen=True)
class Judged:
    """A judged trace: its result, and what its calls wrote per task, worked out when asked (the
    dry run learns its output sizes from it; None for the offline judge)."""

    result: EvaluationResult
    output_sizes: Callable[[], list[OutputSize]] | None = None


class Judge(Protocol):
    """What judges a stored trace (veralith.pipeline.evaluate.TraceJudge: the pipeline with a judge
    client). `store` is read for the trace's threshold and date, never written."""

    def judge(self, store: Store, trace_id: int, inputs: TraceInput) -> Judged: ...

    async def ajudge(self, store: Store, trace_id: int, inputs: TraceInput) -> Judged: ...
