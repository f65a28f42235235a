"""What every judge backend offers the pipeline: run one task on one input, return output + usage.

Judges receive a client object (never a module-level singleton), so tests pass a fake and the
OpenAI and local backends are interchangeable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from veralith.llm.tasks import Task
from veralith.usage import CallUsage  # defined in a neutral module: the cost tracker reads it too

__all__ = ["CallResult", "CallUsage", "JudgeClient"]


@dataclass
class CallResult:
    output: BaseModel
    usage: CallUsage = field(default_factory=CallUsage)
    # Item id (claim, sub-question) -> probability that the label given for it is right, when the
    # backend can tell (the local models; token log-probabilities on the OpenAI backend). An id
    # that is absent has no known confidence: it is None downstream, never invented.
    confidence: dict[str, float] = field(default_factory=dict)
    # Item id -> why no usable verdict could be had for it, even after the re-ask: the item is absent
    # from `output`, and the pipeline decides what it still can without it.
    missing: dict[str, str] = field(default_factory=dict)
    # (kind, what was read how) for each lenient reading of the reply (veralith.llm.salvage).
    repairs: list[tuple[str, str]] = field(default_factory=list)


@runtime_checkable
class JudgeClient(Protocol):
    backend: str          # "openai" | "local" | a test fake's name
    model: str            # judge model name ("local-heuristics" for the offline backend)
    concurrent: bool      # True when calls are I/O bound and worth running in parallel threads

    def prompt_version(self, task: str) -> str:
        """Version string of the prompt (or heuristic) used for `task`; stored with every judgment."""
        ...

    def run(self, task: Task, payload: BaseModel) -> CallResult:
        """Run `task` on `payload`; return an instance of task.output_model that passes task.check.

        The output of a task with judged items (`task.items`) may lack some, named in `missing`.
        Raises veralith.errors.JudgeCallError(kind, message) when it cannot (JudgeServerDown when
        the server is down and should not be called for a while).
        """
        ...
