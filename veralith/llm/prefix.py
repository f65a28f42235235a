"""Whether a judge call's static prefix should grow past the provider's prompt-cache minimum.

OpenAI serves a prompt's prefix from its cache once it is at least 1,024 tokens long, in steps of 128,
billed at the model's cached-input price (PROMPTS.md §5.4); the static prefix of a call is its strict
schema and its system message, identical for every trace (veralith.llm.prompts). A prefix below the
minimum is billed in full on every call. Growing it with further worked examples (examples.MORE) costs
their tokens on every call and saves the discount on the whole cacheable part on every call that finds
it cached. So it pays when

    grown - HIT_SHARE * cacheable(grown) * discount  <  (1 - MIN_SAVING) * (prefix - HIT_SHARE * cacheable(prefix)
                                                                              * discount)

with `discount` = 1 - cached input price / input price of the model the call goes to, from the price
table (veralith.observability.pricing): a model without a cache discount, or without a price (a local
server), never grows. MIN_SAVING asks the growth to save a tenth of the prefix's cost, not a few tokens
that a lower hit share would turn into a loss: at gpt-4o's and gpt-4o-mini's 50 % nothing grows (the
best case, claims from 862 to 1,056 tokens, saves 7 %); at 75-90 % (gpt-4.1, gpt-5) the calls
close to the minimum do.

HIT_SHARE is an assumption, not a measurement: the share of calls that find their prefix cached. Every
trace has its own `prompt_cache_key` (veralith.llm.transport), which spreads traces over the provider's
cache machines, so a call cannot count on the one before it; half is what we assume.
"""

from __future__ import annotations

import functools

from pydantic import BaseModel

__all__ = ["CACHE_MIN", "HIT_SHARE", "MIN_SAVING", "cacheable", "grows", "prefix_tokens"]

CACHE_MIN = 1024
_STEP = 128
HIT_SHARE = 0.5
MIN_SAVING = 0.10


def cacheable(prefix: int) -> int:
    """The tokens of a static prefix of `prefix` tokens that the prompt cache can serve."""
    return 0 if prefix < CACHE_MIN else CACHE_MIN + (prefix - CACHE_MIN) // _STEP * _STEP


def grows(task_name: str, payload: BaseModel, model: str) -> int:
    """How many further examples the call of `task_name` for `payload` sent to `model` shows (0: none)."""
    from veralith.llm.examples import MORE
    from veralith.llm.tasks import gapless, timed
    from veralith.observability.pricing import price_of

    price = price_of(model, warn=False)   # looked up per call: VERALITH_PRICING may change it
    if task_name not in MORE or price is None or not price.input or price.cached_input >= price.input:
        return 0
    return _grows(task_name, timed(payload), model, 1 - price.cached_input / price.input, not gapless(payload))


@functools.lru_cache(maxsize=256)
def _grows(task_name: str, timed: bool, model: str, discount: float, gaps: bool = True) -> int:
    """The fewest further examples that bring the prefix to the cache's next step, when that pays at
    `discount` (1 - cached input price / input price); else 0."""
    from veralith.llm.examples import MORE

    def cost(prefix: int) -> float:
        return prefix - HIT_SHARE * cacheable(prefix) * discount

    now = prefix_tokens(task_name, timed, model, more=0, gaps=gaps)
    for more in range(1, len(MORE[task_name]) + 1):
        grown = prefix_tokens(task_name, timed, model, more=more, gaps=gaps)
        if now is None or grown is None:
            return 0   # no exact count (tiktoken's encoding cannot be had): never decided on a guess
        if cacheable(grown) > cacheable(now):
            return more if cost(grown) < (1 - MIN_SAVING) * cost(now) else 0
    return 0


def prefix_tokens(task_name: str, timed: bool, model: str, *, more: int, gaps: bool = True) -> int | None:
    """The static prefix's tokens: the strict schema as billed and the system message (3 + role + text);
    None without tiktoken's encoding, so that a process decides the same way for all its calls (the
    decision is kept per task and model) and never on a characters / 4 guess. `timed` and `gaps` as the
    call's payload has them (tasks.timed, tasks.gapless)."""
    import json

    from veralith.llm.client import strict_schema
    from veralith.llm.prompts import system_prompt
    from veralith.llm.tasks import TASKS, CompletenessGaplessOutput, FaithfulnessUntimedOutput
    from veralith.llm.tokens import count_tokens

    task = TASKS[task_name]
    model_type = (FaithfulnessUntimedOutput if task_name == "faithfulness" and not timed else
                  CompletenessGaplessOutput if task_name == "completeness" and not gaps else task.output_model)
    schema = strict_schema(task, None) if model_type is task.output_model else _strict(model_type)
    system = system_prompt(task_name, timed=timed, more=more, gaps=gaps)
    counted = [count_tokens(text, model) for text in (json.dumps(schema, separators=(",", ":")), "system" + system)]
    if any(method == "chars/4" for _, method in counted):
        return None
    return sum(n for n, _ in counted) + 3


def _strict(model_type: type[BaseModel]) -> dict:
    import openai

    from veralith.llm.client import untitled

    return untitled(openai.pydantic_function_tool(model_type)["function"]["parameters"])
