"""The judge client of `veralith eval --batch`: the synchronous client, its requests answered by a batch.

A trace is evaluated by the ordinary pipeline and OpenAIClient, so requests are built, and replies
parsed, validated, re-asked and cached, by exactly the code of the synchronous path. Only the last
step differs: where the synchronous transport would send a request, `ReplayTransport` looks its body
up among the replies the job's batches brought back. Found: the reply is read as if the server had
just sent it. Not found: the request is noted (`needed`) and `CallDeferred` ends this evaluation of
the trace, which is judged again in the next pass, once its batch is back. So a trace takes one pass
per round trip (decomposition, then the three judges, then any re-ask), and only its last pass,
the one that completes, counts: its usage, its cost-tracker reports and its reply-cache writes are
held back per pass (`Pass`) and kept only if the pass completes.

A request is named by the sha256 of its body (`custom_id`), so the same request asked by two
traces or two passes is one request, sent and paid for once.

What the server is known to do (its habits: structured-output mode, options it takes) starts afresh
for each call and changes only on what that call's own replies say: a line the service answered
with a 4xx is raised as the SDK's error for that status, so the transport adapts the request exactly
as on the synchronous path (drops a refused option, falls back from json_schema) and asks for the
adapted one, which goes in a later batch. Each pass of a trace therefore asks for the same requests,
whichever passes came before it.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

import openai

from veralith.errors import JudgeCallError, JudgeServerDown
from veralith.llm.batchlines import status_error
from veralith.llm.client import OpenAIClient
from veralith.llm.server import Habits, Server
from veralith.llm.transport import Transport, _Hold
from veralith.observability.cost import record_call
from veralith.usage import CallUsage

__all__ = ["BatchClient", "CallDeferred", "Pass", "custom_id"]


class CallDeferred(JudgeServerDown):
    """The call's request went to a batch; its reply is not in yet.

    A JudgeServerDown as far as the pipeline is concerned: it ends the trace's evaluation without
    recording anything against the trace, which stays unjudged until its replies are in.
    """

    def __init__(self, custom_id: str) -> None:
        super().__init__("the Batch API", f"request {custom_id} is waiting for its batch", retry_after_s=0.0)
        self.custom_id = custom_id


def custom_id(body: Mapping[str, Any]) -> str:
    """The request's name in its batch and in the store: a hash of its canonical JSON, without the
    value of its `max_tokens`. That cap is sized from a token count that may be an estimate until the
    tokenizer has loaded (veralith.llm.estimate.max_output_tokens), so two passes may size it a few
    tokens apart; the reply to either is as good, and a re-ask (a grown cap) differs in its messages
    anyway. A request sent without the cap (a model that refuses it) is another request."""
    named = {k: v for k, v in body.items() if k != "max_tokens"}
    if "max_tokens" not in body:
        named["_no_max_tokens"] = True
    text = json.dumps(named, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "v1-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


class Pass:
    """One evaluation of one trace: what it would write to the reply cache and report as spent,
    held until it is known whether the pass completes (`commit`) or was deferred (dropped)."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.calls: list[CallUsage] = []
        self._lock = threading.Lock()   # the pipeline's judge threads share one pass

    def commit(self, put: Callable[..., None] | None) -> None:
        for key, value, meta in self.puts:
            if put is not None:
                put(key, value, **meta)
        for usage in self.calls:
            record_call(usage)


_PASS: contextvars.ContextVar[Pass | None] = contextvars.ContextVar("veralith_batch_pass", default=None)


class _Answered:
    """What `raw.parse()` gives the transport for a reply that came back in a batch."""

    def __init__(self, completion: Any) -> None:
        self._completion = completion

    def parse(self) -> Any:
        return self._completion


class ReplayTransport(Transport):
    """A transport whose `_send` answers from the job's replies, or notes the request and defers."""

    def __init__(self, *args: Any, answers: Mapping[str, tuple[str, str | None]],
                 needed: dict[str, str], needed_lock: threading.Lock, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers, self.needed, self.needed_lock = answers, needed, needed_lock
        self._sends = threading.local()   # sends within the current complete() call of each thread

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        self._sends.names = set()
        return super().complete(*args, **kwargs)

    def _send(self, messages: list[dict[str, str]], options: dict[str, Any], retries: int, hold: _Hold) -> Any:
        body = {"model": self.model, "messages": messages,
                **{k: v for k, v in options.items() if not k.startswith("_")}}
        name = custom_id(body)
        # The synchronous transport sends again after adapting the request; a request asked twice in
        # one call would get the same reply twice: stop instead of looping.
        asked: set[str] = getattr(self._sends, "names", set())
        if name in asked:
            raise JudgeCallError("context_truncated", f"the Batch API's reply to request {name} asks for it to be "
                                 "sent again as it is, and a batch cannot adapt it to the server", attempts=1)
        asked.add(name)
        self._sends.names = asked
        found = self.answers.get(name)
        if found is None:
            with self.needed_lock:
                self.needed[name] = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            raise CallDeferred(name)
        state, text = found
        if state == "refused" and text is not None:
            answered = json.loads(text)   # a 4xx: the transport reads it as the synchronous call's error
            raise status_error(self.sdk, int(answered["status_code"]), answered.get("body"))
        if state != "done" or text is None:
            # Sent as often as VERALITH_BATCH_MAX_TRIES allows and never answered, or given up (the
            # service refused its batch's input): the call failed, as a synchronous call fails after its
            # retries, and the pipeline records it against its judge.
            raise JudgeCallError("server_error", f"the Batch API gave no reply to request {name}: {text}",
                                 attempts=1)
        return _Answered(openai.types.chat.ChatCompletion.model_validate(json.loads(text)))


class _BatchServer(Server):
    """The Batch API as a server: OpenAI's behaviour assumed (structured outputs, a system role,
    log-probabilities) at the start of every call; no request slots (nothing is sent from a pass)."""

    def __init__(self, base_url: str | None) -> None:
        super().__init__(base_url)
        self.local = False

    def habits(self, model: str) -> Habits:
        """Fresh habits for each call (see the module docstring): what one reply teaches changes that
        call's next request only, so every pass builds the same requests."""
        return Habits(logprobs_decided=True, learnt=True)

    def slots(self, limit: int | None) -> threading.Semaphore | None:
        return None


class BatchClient(OpenAIClient):
    """OpenAIClient whose calls are answered from a batch job's replies (see the module docstring).

    `answers`: custom_id -> (state, text), the job's answered and given-up requests
    (veralith.work.batchjobs.replies: `done` and the completion, `refused` and the service's 4xx
    response, `failed` and why).
    After a pass, `needed` holds the bodies (by custom_id) the deferred calls want sent.
    """

    def __init__(self, answers: Mapping[str, tuple[str, str | None]], **kwargs: Any) -> None:
        from veralith.llm.cache import get_cache
        from veralith.observability.pricing import batch_price_usd

        kwargs.setdefault("cache", get_cache())   # as get_client() builds the synchronous client
        super().__init__(price=batch_price_usd, **kwargs)
        real_cache = self.cache
        self.needed: dict[str, str] = {}
        self._needed_lock = threading.Lock()
        self._put = real_cache.put if real_cache is not None else None
        if real_cache is not None:
            self.cache = _PassCache(real_cache)
        self.server = _BatchServer(self.base_url)
        self._transports = {name: ReplayTransport(t.sdk, self.server, model=t.model, timeout_s=t.timeout_s,
                                                  max_retries=0, temperature=t.temperature, redact=t.redact,
                                                  answers=answers, needed=self.needed,
                                                  needed_lock=self._needed_lock)
                            for name, t in self._transports.items()}
        self.transport = self._transports[self.sent_model]

    def run_pass(self, work: Callable[[], Any]) -> Any:
        """`work()` (one evaluation of one trace) as one pass: its cache writes and cost reports are
        kept when it returns, dropped when it raises (CallDeferred included)."""
        this = Pass()
        token = _PASS.set(this)
        try:
            outcome = work()
        finally:
            _PASS.reset(token)
        this.commit(self._put)
        return outcome

    def _record(self, usage: CallUsage) -> None:
        current = _PASS.get()
        if current is None:
            record_call(usage)
            return
        with current._lock:
            current.calls.append(usage)


class _PassCache:
    """The reply cache as a pass sees it: reads go through, writes wait for the pass to complete."""

    def __init__(self, cache: Any) -> None:
        self._cache = cache

    def get(self, key: str) -> dict[str, Any] | None:
        hit: dict[str, Any] | None = self._cache.get(key)
        return hit

    def put(self, key: str, value: dict[str, Any], **meta: Any) -> None:
        current = _PASS.get()
        if current is None:
            self._cache.put(key, value, **meta)
            return
        with current._lock:
            current.puts.append((key, value, meta))
