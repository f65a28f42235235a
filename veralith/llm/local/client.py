"""The offline judge client: runs each task's heuristic after the input checks (admit.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from veralith.errors import JudgeCallError
from veralith.llm.base import CallResult, CallUsage
from veralith.llm.local import admit
from veralith.llm.local.completeness import completeness
from veralith.llm.local.decompose import claims, questions
from veralith.llm.local.explain import explain
from veralith.llm.local.grounding import faithfulness
from veralith.llm.local.model import load
from veralith.llm.local.sufficiency import sufficiency
from veralith.llm.tasks import Task

__all__ = ["LocalClient"]

# Bump a task's version whenever its behaviour changes: it is stored with every judgment and
# is part of the cache key, so stale cached verdicts are never reused.
_VERSIONS = {"questions": "3", "claims": "4", "sufficiency": "9", "faithfulness": "7", "completeness": "8",
             "explain": "2"}
_RUNNERS = {"questions": questions, "claims": claims, "sufficiency": sufficiency, "faithfulness": faithfulness,
            "completeness": completeness, "explain": explain}


class LocalClient:
    """JudgeClient over the heuristics; stateless, so one instance may serve every thread."""

    backend = "local"
    model = "local-heuristics"
    concurrent = False  # CPU-bound: threads would only add overhead

    def prompt_version(self, task: str) -> str:
        if task not in _VERSIONS:
            raise KeyError(f"unknown judge task {task!r}; known: {sorted(_VERSIONS)}")
        version = f"local-{task}-{_VERSIONS[task]}"
        if task in ("sufficiency", "faithfulness"):
            version += f"+m{load()[task].version}"
        return version

    def run(self, task: Task, payload: BaseModel) -> CallResult:
        runner = _RUNNERS.get(task.name)
        if runner is None:
            raise JudgeCallError("bad_request", f"the local backend has no judge for task {task.name!r}")
        if not isinstance(payload, task.input_model):
            raise JudgeCallError("bad_request", f"task {task.name!r} takes {task.input_model.__name__}, "
                                 f"got {type(payload).__name__}")
        admit.check(task.name, payload)   # too large, or not English: refused with a reason, never judged
        produced: Any = runner(payload)  # type: ignore[operator]  # each runner takes its own input model
        # The judges with a fitted model also say how sure they are: (output, {item id: probability}).
        output, confidence = produced if isinstance(produced, tuple) else (produced, {})
        problems = task.check(payload, output)
        if problems:
            # A heuristic bug must surface as a recorded judge error, never as a silently wrong verdict.
            raise JudgeCallError("internal", f"local {task.name} produced an invalid output: {'; '.join(problems)}")
        return CallResult(output, CallUsage(model=self.model, calls=0, usd=0.0), dict(confidence))
