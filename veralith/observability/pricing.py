"""What a model call costs: a dated price table for OpenAI models, overridable through settings.

Prices are USD per 1M tokens: (input, cached input, output). They were read on 2026-11-30 from
OpenAI's pricing page (developers.openai.com/api/docs/pricing) as quoted by third-party copies
dated 2025-06 to 2026-11 (OpenAI's own page was not reachable from where this was written): the
api-evangelist post "OpenAI API Pricing: What Every Model Costs Per Million Tokens" (read the page
2026-11-05), GitHub's Copilot `models-and-pricing.yml`, the hex.pm `openai_responses` pricing
table (2025-06-03) and the docs.rs `adk-model` / `openai-cost` tables (2026). Where those
disagreed, the figure at least two of them agree on was taken. Check them before you bill anyone:
prices change, and VERALITH_PRICING overrides any row without a release.

Lookup order for a model name: VERALITH_PRICING (exact name, then its family), the table below
(exact, then family), then a `"*"` entry of VERALITH_PRICING (a catch-all, e.g. to price every
model of a local server at 0). A dated snapshot resolves to its family: `gpt-4o-2024-08-06` ->
`gpt-4o`, `gpt-4-0613` -> `gpt-4`. An unknown model costs None, never 0, with one warning per
model per process: a figure of $0 for a model that cannot be priced would make an expensive run look free.
"""

from __future__ import annotations

import re
import threading
import warnings
from typing import NamedTuple

from veralith.config import settings
from veralith.errors import VeralithWarning

__all__ = ["BATCH_DISCOUNT", "PRICES_CHECKED", "CostWarning", "Price", "batch_price_usd", "family", "price_of",
           "price_usd"]

PRICES_CHECKED = "2026-11-30"


class CostWarning(VeralithWarning):
    """A cost or a token count could not be computed exactly (unknown price, tokenizer offline)."""


class Price(NamedTuple):
    input: float          # USD per 1M uncached input tokens
    cached_input: float   # USD per 1M input tokens served from the provider's prompt cache
    output: float         # USD per 1M output tokens (reasoning tokens included, as OpenAI bills them)


_TABLE: dict[str, Price] = {
    # GPT-5 family: cached input is billed at 10 % of input.
    "gpt-5.5": Price(5.00, 0.50, 30.00),
    "gpt-5.4": Price(2.50, 0.25, 15.00),
    "gpt-5.4-mini": Price(0.75, 0.075, 4.50),
    "gpt-5.4-nano": Price(0.20, 0.02, 1.25),
    "gpt-5.2": Price(1.75, 0.175, 14.00),
    "gpt-5.1": Price(1.25, 0.125, 10.00),
    "gpt-5": Price(1.25, 0.125, 10.00),
    "gpt-5-mini": Price(0.25, 0.025, 2.00),
    "gpt-5-nano": Price(0.05, 0.005, 0.40),
    # GPT-4.1 family: cached input at 25 %.
    "gpt-4.1": Price(2.00, 0.50, 8.00),
    "gpt-4.1-mini": Price(0.40, 0.10, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.025, 0.40),
    # GPT-4o family: cached input at 50 %.
    "gpt-4o": Price(2.50, 1.25, 10.00),
    "gpt-4o-mini": Price(0.15, 0.075, 0.60),
    # o-series (reasoning tokens are output tokens).
    "o1": Price(15.00, 7.50, 60.00),
    "o1-mini": Price(1.10, 0.55, 4.40),
    "o3": Price(2.00, 0.50, 8.00),
    "o3-mini": Price(1.10, 0.55, 4.40),
    "o4-mini": Price(1.10, 0.275, 4.40),
    # Older chat models still reachable; no prompt caching, so cached == input.
    "gpt-4-turbo": Price(10.00, 10.00, 30.00),
    "gpt-4": Price(30.00, 30.00, 60.00),
    "gpt-3.5-turbo": Price(0.50, 0.50, 1.50),
    # Embeddings: input only.
    "text-embedding-3-small": Price(0.02, 0.02, 0.0),
    "text-embedding-3-large": Price(0.13, 0.13, 0.0),
    "text-embedding-ada-002": Price(0.10, 0.10, 0.0),
}

# A dated snapshot suffix: -2024-08-06 (current style) or -0613 / -0125 (older style).
_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{4})$")

_warned: set[str] = set()
_warned_lock = threading.Lock()


def family(model: str) -> str:
    """The family name a model id is priced under: lower-cased, snapshot date removed."""
    return _SNAPSHOT.sub("", model.strip().lower())


def _override(model: str) -> Price | None:
    overrides = settings.pricing or {}
    lowered = {name.lower(): prices for name, prices in overrides.items()}
    for name in (model.strip().lower(), family(model)):
        if name in lowered:
            row = lowered[name]
            # A server without prompt caching bills cached tokens as ordinary input.
            return Price(row["input"], row.get("cached_input", row["input"]), row["output"])
    return None


def price_of(model: str, *, warn: bool = True) -> Price | None:
    """The Price of `model`, or None (with one CostWarning per model) when it is unknown."""
    found = _override(model)
    if found is None:
        found = _TABLE.get(model.strip().lower()) or _TABLE.get(family(model))
    if found is None and "*" in (settings.pricing or {}):
        row = settings.pricing["*"]
        found = Price(row["input"], row.get("cached_input", row["input"]), row["output"])
    if found is None and warn:
        _warn_unknown(model)
    return found


def _warn_unknown(model: str) -> None:
    with _warned_lock:
        if model in _warned:
            return
        _warned.add(model)
    warnings.warn(
        f"no price known for model {model!r}: its cost is reported as None (unknown), not $0. "
        f'Set VERALITH_PRICING=\'{{"{model}": {{"input": ..., "cached_input": ..., "output": ...}}}}\' '
        "(USD per 1M tokens; use 0 for a local server).", CostWarning, stacklevel=3)


def price_usd(model: str, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> float | None:
    """USD cost of one call, or None when the model's price is unknown.

    `input_tokens` is every prompt token, the cached ones included (the API's `prompt_tokens`);
    `cached_input_tokens` is the part of them the provider served from its prompt cache
    (`prompt_tokens_details.cached_tokens`), billed at the cached rate.
    """
    price = price_of(model)
    if price is None:
        return None
    cached = min(max(cached_input_tokens, 0), max(input_tokens, 0))
    uncached = max(input_tokens, 0) - cached
    return (uncached * price.input + cached * price.cached_input + max(output_tokens, 0) * price.output) / 1e6


# The OpenAI Batch API bills every token of a batched request at half the synchronous rate (input,
# cached input and output alike), whatever the model: `veralith eval --batch` prices with this.
BATCH_DISCOUNT = 0.5


def batch_price_usd(model: str, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> float | None:
    """USD cost of one call sent through the Batch API: `price_usd` times BATCH_DISCOUNT (None when unknown)."""
    usd = price_usd(model, input_tokens, cached_input_tokens, output_tokens)
    return None if usd is None else usd * BATCH_DISCOUNT
