"""Usage of judge calls (requests, cache hits, tokens, USD) and the one rule for summing it.

A neutral module: the judge clients (veralith.llm) fill a CallUsage per logical call, the cost
tracker (veralith.observability) and the pipeline sum them, and none of them imports the others
for it. `CallUsage.add` is the only place usage is summed; every total in Veralith (a trace's
`EvaluationResult.usage`, a CostScope, the tracker, the CLI's run summary) goes through it.

USD is None, never 0, when a price is unknown, and None anywhere in a sum makes the sum None: an
undercount that looks exact is worse than an honest "unknown".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from veralith.models import Usage

__all__ = ["CallUsage", "OutputSize", "UsageLike"]


class UsageLike(Protocol):
    """Anything that carries usage counts: a CallUsage, the result model's Usage, a CostScope."""

    calls: int
    cache_hits: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    usd: float | None


@dataclass
class CallUsage:
    """Usage of one logical judge call (retries and the re-ask included), or a sum of such."""

    model: str = ""
    calls: int = 0               # HTTP requests that reached the server; cache hits are not calls
    cache_hits: int = 0
    input_tokens: int = 0        # all prompt tokens, provider-cached ones included
    cached_input_tokens: int = 0
    output_tokens: int = 0
    usd: float | None = 0.0      # None when a price is unknown

    def add(self, other: UsageLike) -> None:
        """Add `other`'s counts to these; USD becomes None once either side is None."""
        self.calls += other.calls
        self.cache_hits += other.cache_hits
        self.input_tokens += other.input_tokens
        self.cached_input_tokens += other.cached_input_tokens
        self.output_tokens += other.output_tokens
        self.usd = None if self.usd is None or other.usd is None else self.usd + other.usd

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def as_usage(self) -> Usage:
        """The result model's Usage, as EvaluationResult.usage carries it."""
        return Usage(calls=self.calls, cache_hits=self.cache_hits, input_tokens=self.input_tokens,
                     cached_input_tokens=self.cached_input_tokens, output_tokens=self.output_tokens, usd=self.usd)


@dataclass(frozen=True)
class OutputSize:
    """What the calls of one task wrote, next to what the dry run's allowance gave them, and how many
    requests they took next to the calls the dry run plans.

    Per trace, one for each planned task whose calls all answered from the model (no cache hit, no
    failure), or that the pipeline decided without a call (no claims to judge, say):
    the pipeline fills them, the store sums them per (task, model, prompt version) and the dry run
    learns its expected output from the sums (veralith.llm.estimate.LearntOutput). `traces` is 1 for
    one trace's figures and the number of traces in a sum.
    """

    task: str
    model: str
    prompt_version: str
    calls: int                   # requests made, retries and re-asks included (0: a planned call not needed)
    planned_calls: int           # the calls the dry run plans for this trace and task
    allowance_tokens: int        # the allowance of the calls the dry run plans for this trace and task
    output_tokens: int           # what the model wrote, as the server reported it
    traces: int = 1
