"""Veralith: diagnose why a RAG answer went wrong.

This module only re-exports the public surface; nothing optional (LangChain, chromadb, tiktoken)
is imported here.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError, version as _version

from veralith.models import (
    Claim,
    CompletenessJudgment,
    ContextChunk,
    Diagnosis,
    EvaluationResult,
    FailureCell,
    FaithfulnessJudgment,
    Gate,
    JudgeError,
    Relation,
    Status,
    SubQuestion,
    SufficiencyJudgment,
    SufficiencyLevel,
    Suggestion,
    Usage,
    Verdict,
)
from veralith.pipeline.evaluate import aevaluate, evaluate
from veralith.sdk.handoff import context
from veralith.sdk.log import log, resume, shutdown
from veralith.sdk.trace import TraceContext, TraceReturn, trace

try:
    # Written once, in pyproject.toml, under the distribution name (not "veralith": another project's).
    __version__ = _version("veralith-rag")
except _PackageNotFoundError:  # imported from a source tree that was never installed: no metadata
    __version__ = "0+unknown"

__all__ = [
    "Claim",
    "CompletenessJudgment",
    "ContextChunk",
    "Diagnosis",
    "EvaluationResult",
    "FailureCell",
    "FaithfulnessJudgment",
    "Gate",
    "JudgeError",
    "Relation",
    "Status",
    "SubQuestion",
    "SufficiencyJudgment",
    "SufficiencyLevel",
    "Suggestion",
    "TraceContext",
    "TraceReturn",
    "Usage",
    "Verdict",
    "aevaluate",
    "context",
    "evaluate",
    "log",
    "resume",
    "shutdown",
    "trace",
]
