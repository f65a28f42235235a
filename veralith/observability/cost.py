"""Where judge money goes: a process-wide tracker, per-trace scopes, and client instrumentation.

    from veralith.observability.cost import instrument, get_tracker, CostScope
    client = instrument(openai.OpenAI())       # wraps this instance only; returns it
    with CostScope() as scope:
        veralith.evaluate(q, ctx, r)            # or any call on an instrumented client
    scope.usd, scope.tokens, scope.calls, scope.cache_hits
    get_tracker().total_usd, get_tracker().by_model()

Every call funnels into `record_usage`, which adds to the tracker and to every CostScope active
in the caller's context. Scopes live in a ContextVar, so concurrent traces in threads or asyncio
tasks each see only their own calls, and worker threads that run in a copied context (the
pipeline's judges) report to the trace that started them. A scope inside a scope adds to both.

Cost is None, never 0, when a model's price is unknown (see pricing.py), and a None anywhere in a
sum makes the sum None: an undercount that looks exact is worse than an honest "unknown". Sums are
CallUsage.add (veralith/usage.py). This module prices and tracks only: it imports no judge or
prompt code (the judge clients import it), and BudgetExceeded, raised by the budget guard in
veralith.pipeline.budget, is defined here so callers catch it without loading the estimator.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
from typing import Any

from veralith.errors import VeralithError
from veralith.models import Usage
from veralith.observability.pricing import PRICES_CHECKED, CostWarning, price_of, price_usd
from veralith.usage import CallUsage, UsageLike

__all__ = [
    "PRICES_CHECKED", "BudgetExceeded", "CostScope", "CostTracker", "CostWarning", "ModelUsage",
    "get_tracker", "instrument", "price_usd", "record_call", "record_usage",
]


class BudgetExceeded(VeralithError):
    """The estimated judge cost of one trace is above VERALITH_PER_TRACE_BUDGET_USD.

    Raised by the budget guard (veralith.pipeline.budget.enforce_budget) before anything is
    written or called.
    """

    def __init__(self, estimated_usd: float, budget_usd: float) -> None:
        self.estimated_usd = estimated_usd
        self.budget_usd = budget_usd
        super().__init__(
            f"estimated judge cost ${estimated_usd:.6g} for this trace exceeds the per-trace budget "
            f"${budget_usd:.6g} (setting per_trace_budget_usd, env VERALITH_PER_TRACE_BUDGET_USD); "
            "nothing was called or stored. Raise the budget, shorten the context, or use a cheaper judge_model.")


class ModelUsage(CallUsage):
    """Usage summed over calls, safe to add to from several threads (CallUsage.add under a lock)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def add(self, other: UsageLike) -> None:
        with self._lock:
            super().add(other)

    def as_usage(self) -> Usage:
        with self._lock:
            return super().as_usage()


class CostTracker:
    """Process-wide totals, overall and per model; `reset()` starts over."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[str, ModelUsage] = {}
        self._all = ModelUsage()

    def add(self, model: str, usage: UsageLike) -> None:
        with self._lock:
            per_model = self._models.setdefault(model, ModelUsage())
            total = self._all
        per_model.add(usage)
        total.add(usage)

    total_usd = property(lambda self: self._all.usd, doc="USD of every call; None once a model was unpriced.")
    total_tokens = property(lambda self: self._all.tokens, doc="Input plus output tokens of every call.")
    calls = property(lambda self: self._all.calls, doc="Requests that reached a server.")
    cache_hits = property(lambda self: self._all.cache_hits, doc="Replies served from the reply cache.")

    def by_model(self) -> dict[str, Usage]:
        with self._lock:
            return {model: usage.as_usage() for model, usage in self._models.items()}

    @property
    def unpriced_models(self) -> list[str]:
        return sorted(model for model, usage in self.by_model().items() if usage.usd is None)

    def reset(self) -> None:
        with self._lock:
            self._models.clear()
            self._all = ModelUsage()


_TRACKER = CostTracker()
_SCOPE: contextvars.ContextVar[CostScope | None] = contextvars.ContextVar("veralith_cost_scope", default=None)
# Set while an instrumented method runs, so a wrapped call made inside another wrapped call (an SDK
# helper that calls `create` itself) is counted once.
_IN_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar("veralith_cost_in_call", default=False)


def get_tracker() -> CostTracker:
    return _TRACKER


class CostScope(ModelUsage):
    """Usage of the calls made inside a `with` (or `async with`) block, in this context only.

    Read `.usd`, `.tokens`, `.calls`, `.cache_hits`, `.input_tokens`, `.output_tokens` after the
    block exits. Threads started inside the block report here only if they run in a copy of the
    block's context (`contextvars.copy_context().run`, as the pipeline and asyncio do).
    """

    def __init__(self) -> None:
        super().__init__()
        self._parent: CostScope | None = None
        self._token: contextvars.Token[CostScope | None] | None = None

    def __enter__(self) -> CostScope:
        self._parent = _SCOPE.get()
        self._token = _SCOPE.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            try:
                _SCOPE.reset(self._token)
            except ValueError:  # exited in another context (e.g. a generator resumed elsewhere)
                _SCOPE.set(self._parent)
            self._token = None

    async def __aenter__(self) -> CostScope:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)


def record_usage(model: str, *, input_tokens: int, cached_input_tokens: int, output_tokens: int,
                 usd: float | None, cache_hit: bool = False, calls: int = 1) -> None:
    """Report one call (or one cache hit, which costs nothing) to the tracker and active scopes.

    `calls` is the number of HTTP requests behind this usage (a retried or re-asked judge call
    reports its total once).
    """
    usage = (CallUsage(model=model, cache_hits=1) if cache_hit else
             CallUsage(model=model, calls=calls, input_tokens=input_tokens, cached_input_tokens=cached_input_tokens,
                       output_tokens=output_tokens, usd=usd))
    _TRACKER.add(model, usage)
    scope = _SCOPE.get()
    while scope is not None:
        scope.add(usage)
        scope = scope._parent


def record_call(usage: CallUsage) -> None:
    """Report a judge client's CallUsage (one logical call: retries and the re-ask included)."""
    record_usage(usage.model, input_tokens=usage.input_tokens, cached_input_tokens=usage.cached_input_tokens,
                 output_tokens=usage.output_tokens, usd=usage.usd, cache_hit=usage.cache_hits > 0 and not usage.calls,
                 calls=usage.calls)


# ---------------------------------------------------------------- instrumenting an SDK client

def instrument(client: Any) -> Any:
    """Record every chat, structured (`parse`) and embeddings call made through `client`.

    Wraps the methods on this instance only (never the SDK's classes), so other clients in the
    process are untouched; calling it twice changes nothing. Veralith's judge clients already
    report each of their calls (and cache hits) through `record_usage` (the local backend makes
    no paid calls at all), so they are returned as they are, never counted twice.
    Works for `openai.OpenAI` and `openai.AsyncOpenAI`; returns `client`.
    """
    if getattr(client, "records_usage", False) or getattr(client, "backend", None) == "local":
        return client
    targets = []
    chat = getattr(client, "chat", None)
    completions = getattr(chat, "completions", None)
    if completions is not None:
        targets += [(completions, "create"), (completions, "parse")]
    beta_completions = getattr(getattr(getattr(client, "beta", None), "chat", None), "completions", None)
    if beta_completions is not None:
        targets.append((beta_completions, "parse"))
    if getattr(client, "embeddings", None) is not None:
        targets.append((client.embeddings, "create"))
    if not targets:
        raise TypeError(f"instrument() needs an OpenAI SDK client or a Veralith judge client, "
                        f"got {type(client).__name__}")
    for resource, name in targets:
        method = getattr(resource, name, None)
        if method is not None and not getattr(method, "_veralith_instrumented", False):
            setattr(resource, name, _wrap(method))
    return client


def _wrap(method: Any) -> Any:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _IN_CALL.get():
            return method(*args, **kwargs)
        token = _IN_CALL.set(True)
        try:
            response = method(*args, **kwargs)
        finally:
            _IN_CALL.reset(token)
        if inspect.isawaitable(response):  # AsyncOpenAI: its methods are plain functions returning coroutines
            return _record_when_done(kwargs.get("model"), response, bool(kwargs.get("stream")))
        if kwargs.get("stream"):
            return _Metered(response, kwargs.get("model"))
        _record_response(kwargs.get("model"), response)
        return response

    wrapper._veralith_instrumented = True  # type: ignore[attr-defined]
    return wrapper


async def _record_when_done(requested_model: str | None, pending: Any, stream: bool) -> Any:
    token = _IN_CALL.set(True)
    try:
        response = await pending
    finally:
        _IN_CALL.reset(token)
    if stream:
        return _Metered(response, requested_model)
    _record_response(requested_model, response)
    return response


class _Metered:
    """A streamed response that records its usage chunk as it passes by.

    Only streams asked with stream_options={"include_usage": True} carry one; without it the API
    sends no token counts at all, so there is nothing honest to record.
    """

    def __init__(self, stream: Any, model: str | None) -> None:
        self._stream, self._model = stream, model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _see(self, chunk: Any) -> Any:
        if getattr(chunk, "usage", None) is not None:
            _record_response(self._model, chunk)
        return chunk

    def __iter__(self) -> Any:
        return (self._see(chunk) for chunk in self._stream)

    async def __aiter__(self) -> Any:
        async for chunk in self._stream:
            yield self._see(chunk)

    def __enter__(self) -> _Metered:
        self._stream.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._stream.__exit__(*exc)

    async def __aenter__(self) -> _Metered:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._stream.__aexit__(*exc)


def _record_response(requested_model: str | None, response: Any) -> None:
    """Record a response's (or a stream's final chunk's) own usage block."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return
    input_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    output_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0)
    # Price under the name the caller asked for (what VERALITH_PRICING is keyed by); the server's
    # reported name (often a dated snapshot) is the fallback when that one is unknown.
    reported = getattr(response, "model", None) or requested_model or "unknown"
    model = requested_model or reported
    if price_of(model, warn=False) is None and price_of(reported, warn=False) is not None:
        model = reported
    usd = price_usd(model, input_tokens, cached, output_tokens)  # None, with one warning, if unknown
    record_usage(model, input_tokens=input_tokens, cached_input_tokens=cached,
                 output_tokens=output_tokens, usd=usd)

