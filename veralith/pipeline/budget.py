"""The per-trace budget guard: price what a trace's judge calls will cost, refuse it before any call.

    from veralith.pipeline.budget import BudgetExceeded, enforce_budget, estimate_trace
    estimate = estimate_trace(query, context, response)   # calls, tokens, USD; no model is called
    enforce_budget(query, context, response)              # raises BudgetExceeded above the budget

Calls and tokens come from veralith.llm.estimate (the prompts the trace would send, with the
pipeline's batching, counted with tiktoken, plus an output allowance); the price from
veralith.observability.pricing, each model's share at its own price (the decomposition calls go to
the decomposer model, the judges to the judge model): USD = input tokens x input price + output
tokens x output price, with no provider-cache discount, so the estimate errs high. With `explain` on
(--explain) one explain call per trace is counted, and `inspect --explain` checks the explanation of a
stored trace against what the trace already cost (`enforce_explain_budget`). The offline backend makes no paid
calls, so its estimate is 0 calls and $0. `veralith eval --dry-run` prints the same estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from veralith.config import ConfigError, settings
from veralith.llm.backends import resolve_backend
from veralith.models import EvaluationResult
from veralith.observability.cost import BudgetExceeded
from veralith.observability.pricing import price_of
from veralith.pipeline.inputs import normalize_context

if TYPE_CHECKING:   # veralith.llm.estimate loads with the first estimate
    from veralith.llm.estimate import LearntOutput

__all__ = ["BudgetExceeded", "ModelCost", "TraceEstimate", "enforce_budget", "enforce_explain_budget",
           "estimate_explain", "estimate_trace"]


@dataclass(frozen=True)
class ModelCost:
    """The estimated calls, tokens and USD of one trace's calls to one model."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    usd: float | None          # None when this model's price is unknown


@dataclass(frozen=True)
class TraceEstimate:
    model: str                 # the judge model
    calls: int
    input_tokens: int
    output_tokens: int
    usd: float | None          # None when any called model's price is unknown
    method: str                # "tiktoken:<encoding>" | "chars/4" | "local" (no model is called)
    decomposer_model: str = ""   # the model of the two decomposition calls ("" for the offline backend)
    by_model: tuple[ModelCost, ...] = ()   # the same split by model, the decomposer's first; () when no call
    learnt_calls: int = 0      # calls whose output tokens were learnt from past runs (`learnt`), not the allowance

    def unpriced(self) -> list[str]:
        """The called models whose price is unknown."""
        return [m.model for m in self.by_model if m.usd is None]


def estimate_trace(query: str, context: Sequence[Any], response: str, *, client: Any = None,
                   model: str | None = None, decomposer_model: str | None = None,
                   learnt: LearntOutput | None = None) -> TraceEstimate:
    """Estimated calls, tokens and USD of evaluating one trace with `client` (default: the settings').

    Output tokens are the generous allowance (an upper bound: what the budget guard checks), or with
    `learnt` (the dry run's expected cost, veralith.llm.estimate.LearntOutput) what past real runs
    wrote for the same tasks and models, where there are some.

    `model` is the judge model and `decomposer_model` the decomposition calls' (default: the
    client's, else the settings'; unset, the judge model). `context` takes any form evaluate()
    accepts (normalised the same way, so a malformed context raises the same error). No model is
    called and nothing is written.
    """
    model = model or getattr(client, "model", None) or settings.judge_model
    if decomposer_model is None:
        decomposer_model = (getattr(client, "decomposer_model", None) if client is not None
                            else settings.decomposer_model)
    decomposer_model = decomposer_model or model
    backend = str(getattr(client, "backend", "openai")) if client is not None else resolve_backend()
    if backend == "local":
        return TraceEstimate(model=model, calls=0, input_tokens=0, output_tokens=0, usd=0.0, method="local")
    from veralith.llm.estimate import estimate_tokens  # lazy: loads the prompts and, on first count, tiktoken

    tokens = estimate_tokens(query, normalize_context(context), response, model=model,
                             schema=getattr(client, "schema", None), decomposer_model=decomposer_model,
                             learnt=learnt)
    by_model = tuple(ModelCost(m.model, m.calls, m.input_tokens, m.output_tokens,
                               _usd(m.model, m.input_tokens, m.output_tokens)) for m in tokens.by_model)
    usd: float | None = 0.0
    for part in by_model:
        usd = None if usd is None or part.usd is None else usd + part.usd
    return TraceEstimate(model=model, calls=tokens.calls, input_tokens=tokens.input_tokens,
                         output_tokens=tokens.output_tokens, usd=usd, method=tokens.method,
                         decomposer_model=decomposer_model, by_model=by_model, learnt_calls=tokens.learnt_calls)


def estimate_explain(result: EvaluationResult, *, client: Any = None) -> ModelCost:
    """The estimated cost of explaining a stored `result` (`inspect --explain`): one call to the judge model."""
    model = getattr(client, "model", None) or settings.judge_model
    backend = str(getattr(client, "backend", "openai")) if client is not None else resolve_backend()
    if backend == "local":
        return ModelCost(model, 0, 0, 0, 0.0)
    from veralith.llm import prompts
    from veralith.llm.client import strict_schema
    from veralith.llm.estimate import OUTPUT_ALLOWANCE
    from veralith.llm.tasks import EXPLAIN
    from veralith.llm.tokens import estimate_prompt_tokens
    from veralith.pipeline.explain import explain_input

    schema: Callable[..., dict[str, Any]] = getattr(client, "schema", None) or strict_schema
    payload = explain_input(result)
    messages = prompts.render(EXPLAIN.name, payload, model=model)
    tokens, _ = estimate_prompt_tokens(messages, schema(EXPLAIN, payload), model)
    output = OUTPUT_ALLOWANCE["explain"]
    return ModelCost(model, 1, tokens, output, _usd(model, tokens, output))


def enforce_explain_budget(result: EvaluationResult, *, client: Any = None) -> ModelCost | None:
    """Raise BudgetExceeded when what the trace already cost plus its explanation's estimate is above the
    per-trace budget (None at once without a budget); a budget on an unpriced model fails loudly."""
    budget = settings.per_trace_budget_usd
    if budget is None:
        return None
    cost = estimate_explain(result, client=client)
    if cost.usd is None:
        raise ConfigError(f"VERALITH_PER_TRACE_BUDGET_USD is set but the price of judge model {cost.model!r} is "
                          "unknown, so the budget cannot be enforced; add it to VERALITH_PRICING.")
    total = (result.usage.usd or 0.0) + cost.usd
    if total > budget:
        raise BudgetExceeded(total, budget)
    return cost


def _usd(model: str, input_tokens: int, output_tokens: int) -> float | None:
    price = price_of(model)
    return None if price is None else (input_tokens * price.input + output_tokens * price.output) / 1e6


def enforce_budget(query: str, context: Sequence[Any], response: str, *, budget_usd: float | None = None,
                   client: Any = None) -> TraceEstimate | None:
    """Raise BudgetExceeded when the trace's estimated cost is above the budget; return the estimate.

    `budget_usd` defaults to settings.per_trace_budget_usd; with no budget this returns None at once.
    A budget on a model without a known price cannot be enforced, so that fails loudly too.
    """
    budget = settings.per_trace_budget_usd if budget_usd is None else budget_usd
    if budget is None:
        return None
    estimate = estimate_trace(query, context, response, client=client)
    if estimate.usd is None:
        unknown = estimate.unpriced()[0] if estimate.unpriced() else estimate.model
        role = "decomposer" if unknown != estimate.model else "judge"
        raise ConfigError(f"VERALITH_PER_TRACE_BUDGET_USD is set but the price of {role} model {unknown!r} "
                          "is unknown, so the budget cannot be enforced; add it to VERALITH_PRICING "
                          '(e.g. {"%s": {"input": 0, "output": 0}} for a local server).' % unknown)
    if estimate.usd > budget:
        raise BudgetExceeded(estimate.usd, budget)
    return estimate
