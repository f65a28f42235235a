"""One chat completion on an OpenAI-compatible server, shaped the way that server accepts it.

`Transport.complete` builds the request from what the server is known to do (veralith.llm.server:
structured-output mode, where the instructions go, log-probabilities, options it rejects), sends it
with retries (veralith.llm.retry), and checks what the server read (veralith.llm.learn). The SDK's
own retries are off, so that:

* a request the server rejects because of one option is adapted at once, never retried as is. This
  includes "structured outputs not supported" whatever the status code (llama-cpp-python answers
  a `json_schema` response_format with HTTP 500 naming response_format): auto mode then probes the
  other ways of sending the schema (veralith.llm.probe) and takes the first that constrains the
  reply, else JSON mode (`json_object`, the schema in the prompt), once per server and model, said
  once. Before the first request to a server, veralith.llm.probe learns (or reads back) what it does;
* the schema goes where the server constrains decoding with it (veralith.llm.probe.structured_request),
  narrowed to the call's own ids and item counts for a llama.cpp grammar on this machine (the forms
  only llama.cpp and llama-cpp-python take, or a server whose `/props` says it is llama.cpp:
  veralith.llm.grammar), and is written into the prompt only when the server constrains nothing;
* every attempt is counted, so messages and usage carry the right number of attempts;
* the timeout runs from when a request is *sent* (once it holds one of the server's slots), not from
  when it was queued, and it bounds the whole reply, however slowly it trickles in; for a local
  server it grows with the server's measured speed (veralith.llm.pace), and a request that timed out
  there is not sent again (its connection is closed; the server would still be generating it);
* every wait (for a slot, a reply, a backoff) ends at once when the process cancels its calls
  (veralith.llm.cancel: JudgeCallCancelled);
* the server's circuit breaker sees each failed attempt, and stops the retries of every call in the
  process once it opens.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, cast

import openai
from pydantic import BaseModel

from veralith.config import settings
from veralith.errors import JudgeCallError
from veralith.llm import cancel, pace, probe, retry
from veralith.llm.grammar import bounded
from veralith.llm.learn import TOP_LOGPROBS, TRUNCATION_RATIO, learn_logprobs, read_too_little, want_logprobs
from veralith.llm.prompts import render
from veralith.llm.server import CONSTRAINED, Habits, Server
from veralith.llm.tasks import Task
from veralith.usage import CallUsage

__all__ = ["TRUNCATION_RATIO", "Sent", "Transport"]

# One DEBUG record per request and per reply (benchmarks/local_server.py --calls writes them to a file):
# what was asked of a slow server and what it wrote, so a rejected reply can be read as the server sent it.
calls_log = logging.getLogger("veralith.llm.requests")
_LABELLED = frozenset({"sufficiency", "faithfulness", "completeness"})   # tasks whose verdicts get a confidence
_MAX_DETAIL = 300
_NOT_AN_OPTION = frozenset({401, 403, 404, 408, 409, 429})   # statuses that never mean "this option is refused"
KEEP_EVERY_S = 5.0


@dataclass
class Sent:
    """A completion and what produced it."""

    completion: Any
    messages: list[dict[str, str]]
    elapsed_s: float


class Transport:
    """Sends one task's request to one server for one model (see the module doc)."""

    def __init__(self, sdk: openai.OpenAI, server: Server, *, model: str, timeout_s: float, max_retries: int,
                 temperature: float, redact: Callable[[str], str],
                 asdk: Callable[[], AbstractContextManager[openai.AsyncOpenAI]] | None = None,
                 paced: bool = False) -> None:
        """`asdk()` holds an AsyncOpenAI client of the running event loop for one request (`acomplete`).
        `paced`: `timeout_s` is a default that a local server's measured speed may lengthen (veralith.llm.pace)."""
        self.sdk, self.asdk, self.server, self.model = sdk, asdk, server, model
        self.timeout_s, self.max_retries, self.temperature = timeout_s, max_retries, temperature
        self.redact = redact
        self.paced = paced and server.local
        self._kept_at = 0.0   # the first reply is kept at once

    def learn(self) -> None:
        """Learn what the server does before sending it anything (veralith.llm.probe); cheap once known."""
        if probe.pending(self.server.habits(self.model)):
            probe.learn(self.server, self.model, self.sdk, self.timeout_s)

    def keep_now_and_then(self) -> None:
        """Keep what was learnt (veralith.llm.notes) at most every KEEP_EVERY_S: after every reply of a
        server that takes longer than that per reply (a CPU), not hundreds of times a second for a fast one."""
        now = time.monotonic()
        if self.server.base_url and now - self._kept_at >= KEEP_EVERY_S:
            self._kept_at = now
            probe.keep(self.server, self.model)

    async def alearn(self) -> None:
        if probe.pending(self.server.habits(self.model)):
            await asyncio.to_thread(probe.learn, self.server, self.model, self.sdk, self.timeout_s)

    # ------------------------------------------------------------ the request
    def complete(self, task: Task, payload: BaseModel, schema: dict[str, Any], extra: list[dict[str, str]],
                 usage: CallUsage, *, max_tokens: int | None, rendered: list[dict[str, str]] | None = None) -> Sent:
        """One completion (retries and adaptations included), its usage added to `usage`.

        `rendered`: the payload's messages as render() gives them for json_schema mode, when the
        caller has them already (the client renders them for the cache key); else rendered here.
        Raises JudgeCallError (JudgeServerDown while the server is down)."""
        attempt = _Attempts(self, task, payload, schema, extra, usage, max_tokens, rendered)
        while True:
            self.learn()   # before the slot too: how many slots the server has is learnt here
            self.server.breaker.before_request()
            # The slot is held until the reply has been looked at (what the server read, how fast), so a
            # request waiting behind this one is built as the server is now known to want it. The request
            # is built once the slot is had for the same reason (another may have found json_schema refused,
            # and be probing the other forms: learn() waits for that).
            hold = _Hold(self.server.slots(settings.current.server_concurrency))
            wait = 0.0
            try:
                self.learn()
                messages, options = attempt.request()
                started = time.monotonic()
                try:
                    raw = self._send(messages, options, attempt.retries, hold)
                except (retry.DeadlinePassed, openai.APIError) as exc:
                    wait = attempt.failed(exc, options, messages)   # raises once no retry is left
                    continue
                sent = attempt.received(raw, messages, options, time.monotonic() - started)
                if sent is not None:
                    return sent
            finally:
                hold.done()
                if wait:
                    cancel.pause(wait)   # the backoff holds no slot

    async def acomplete(self, task: Task, payload: BaseModel, schema: dict[str, Any], extra: list[dict[str, str]],
                        usage: CallUsage, *, max_tokens: int | None,
                        rendered: list[dict[str, str]] | None = None) -> Sent:
        """`complete` on the event loop: the same attempts (`_Attempts`), sent with the AsyncOpenAI SDK,
        waiting for a slot and backing off without holding a thread."""
        attempt = _Attempts(self, task, payload, schema, extra, usage, max_tokens, rendered)
        while True:
            await self.alearn()   # before the slot too: how many slots the server has is learnt here
            self.server.breaker.before_request()
            slots = self.server.slots(settings.current.server_concurrency)
            await _acquire(slots)
            wait = 0.0
            try:
                await self.alearn()
                messages, options = attempt.request()
                started = time.monotonic()
                try:
                    raw = await self._asend(messages, options, attempt.retries)
                except (retry.DeadlinePassed, openai.APIError) as exc:
                    wait = attempt.failed(exc, options, messages)   # raises once no retry is left
                    continue
                sent = attempt.received(raw, messages, options, time.monotonic() - started)
                if sent is not None:
                    return sent
            finally:
                if slots is not None:
                    slots.release()   # a cancelled request is closed at once, so the server is done with it
                if wait:
                    await _apause(wait)   # the backoff holds no slot

    def _request(self, task: Task, payload: BaseModel, schema: dict[str, Any], extra: list[dict[str, str]],
                 habits: Habits, max_tokens: int | None, rendered: list[dict[str, str]] | None = None
                 ) -> tuple[list[dict[str, str]], dict[str, Any]]:
        current = settings.current
        mode = habits.structured if current.structured == "auto" else current.structured
        if mode in CONSTRAINED and rendered is not None:
            messages = [dict(m) for m in rendered] + extra   # copies: the caller's stay as they were
        else:
            messages = render(task.name, payload, schema_in_prompt=None if mode in CONSTRAINED else schema) + extra
        options: dict[str, Any] = {"_mode": mode}
        if habits.send_temperature:
            options["temperature"] = self.temperature
        if habits.send_cache_key:
            options["prompt_cache_key"] = _prompt_cache_key(task.name, messages)
        if task.name in _LABELLED and want_logprobs(self.server, habits):
            options["logprobs"] = True
            options["top_logprobs"] = TOP_LOGPROBS
        if max_tokens is not None and habits.send_max_tokens:
            options["max_tokens"] = max_tokens
        # A llama.cpp grammar on this machine gets the schema narrowed to this call (veralith.llm.grammar).
        sent = bounded(task, payload, schema) if self.server.local and (
            mode in ("json_object_schema", "json_schema_field") or self.server.kind == "llama.cpp") else schema
        options.update(probe.structured_request(mode, task.name, sent))
        if mode == "json_schema":
            options["_schema"] = schema   # structured outputs bill it as prompt tokens (veralith.llm.learn)
        placement = habits.system if current.system_prompt == "auto" else current.system_prompt
        if placement == "user":
            messages = _in_user_turn(messages)
        return messages, options

    def _deadline(self, messages: list[dict[str, str]], options: dict[str, Any]) -> float:
        """The request's timeout: the configured one, longer for a local server that needs it (veralith.llm.pace)."""
        if not self.paced:
            return self.timeout_s
        prompt = _prompt_estimate(messages)
        return pace.deadline(self.server.habits(self.model), self.timeout_s, adaptive=True, prompt_tokens=prompt,
                             max_tokens=options.get("max_tokens"))

    def _send(self, messages: list[dict[str, str]], options: dict[str, Any], retries: int, hold: _Hold) -> Any:
        """One HTTP request; the slot `hold` holds is kept until the request has ended, even when abandoned."""
        sendable = {k: v for k, v in options.items() if not k.startswith("_")}
        timeout = self._deadline(messages, options)
        # The SDK's header saying which retry this is, as it sends it when it retries itself.
        create = functools.partial(self.sdk.chat.completions.with_raw_response.create, model=self.model,
                                   messages=messages, timeout=timeout,
                                   extra_headers={"x-stainless-retry-count": str(retries)}, **sendable)
        hold.parties += 1
        return retry.within(timeout, create, release=hold.done)

    async def _asend(self, messages: list[dict[str, str]], options: dict[str, Any], retries: int) -> Any:
        """`_send` with the AsyncOpenAI SDK: the deadline cancels the request, which closes its connection."""
        if self.asdk is None:
            raise RuntimeError("this transport has no AsyncOpenAI client")
        sendable = {k: v for k, v in options.items() if not k.startswith("_")}
        timeout = self._deadline(messages, options)
        with self.asdk() as sdk:
            create = sdk.chat.completions.with_raw_response.create(
                model=self.model, messages=cast(Any, messages), timeout=timeout,
                extra_headers={"x-stainless-retry-count": str(retries)}, **sendable)
            return await retry.awithin(timeout, create)

    # ------------------------------------------------------------ failures
    def _adapt(self, exc: openai.APIStatusError, options: dict[str, Any], habits: Habits) -> bool:
        """True when the server refused one option of the request and it was changed for good."""
        if exc.status_code in _NOT_AN_OPTION:
            return False
        text = f"{exc.message} {exc.body}".lower()
        shown, auto = self.server.shown, settings.current.structured == "auto"
        if options["_mode"] in CONSTRAINED and auto and _names(text, "response_format", "json_schema", "schema",
                                                                "structured output", "grammar"):
            # The other forms are probed before the next attempt (veralith.llm.probe); JSON mode until then.
            habits.structured, habits.probe_structured, habits.probe_after = "json_object", True, 0.0
            self.server.warn_once(f"json_object:{self.model}", "veralith: the judge server at %s rejects %s "
                                  "structured outputs (HTTP %s); trying the other ways of sending the schema "
                                  "(VERALITH_STRUCTURED)", shown, options["_mode"], exc.status_code)
            return True
        if options["_mode"] == "json_object" and auto and _names(text, "response_format", "json_object", "json mode"):
            habits.structured = "off"
            self.server.warn_once(f"off:{self.model}", "veralith: the judge server at %s rejects JSON mode too "
                                  "(HTTP %s); sending no response_format, the schema in the prompt "
                                  "(VERALITH_STRUCTURED)", shown, exc.status_code)
            return True
        for option, flag in (("prompt_cache_key", "send_cache_key"), ("logprobs", "logprobs"),
                             ("max_tokens", "send_max_tokens"), ("temperature", "send_temperature")):
            if option in options and option in text:
                setattr(habits, flag, False)
                if option == "logprobs":
                    habits.logprobs_decided = True
                self.server.warn_once(f"{option}:{self.model}", "veralith: the judge server at %s rejects `%s` for "
                                      "model %s; not sending it from now on", shown, option, self.model)
                probe.keep(self.server, self.model)
                return True
        return False

    def _after_failure(self, exc: Exception, retries: int) -> float:
        """Count the failed attempt; return the seconds to wait before retrying, or raise JudgeCallError."""
        kind = retry.kind(exc)
        if kind in ("connection", "timeout", "server_error"):
            self.server.breaker.failure(retry.short(exc, self.timeout_s))   # raises JudgeServerDown when it opens
        else:
            self.server.breaker.success()   # an answer below 500: the server is up
        # A local server that timed out is most likely still generating the request (not every server stops
        # when the connection closes): the same request again would only queue behind it.
        again = not (kind == "timeout" and self.server.local)
        if again and retry.retryable(exc) and retries < self.max_retries:
            return retry.delay(exc, retries)
        raise JudgeCallError(kind, self._describe(exc, retries + 1), attempts=retries + 1)

    def _describe(self, exc: Exception, attempts: int) -> str:
        """What went wrong, secrets masked before the server's words are cut to length (a cut key would no
        longer match the secret it is a piece of)."""
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        # Either timer may fire first (ours on the whole reply, the SDK's on a silent socket): both say the same.
        local = "; not sent again to a local server, which would still be generating it" if self.server.local else ""
        if isinstance(exc, retry.DeadlinePassed):
            return (f"no complete reply within {exc.seconds:g} s of sending ({tries}; VERALITH_TIMEOUT_S{local}); the "
                    "server may be sending its reply very slowly")
        assert isinstance(exc, openai.APIError)
        if isinstance(exc, openai.APITimeoutError):
            return f"the judge server did not answer within {self.timeout_s:g} s ({tries}; VERALITH_TIMEOUT_S{local})"
        if isinstance(exc, openai.APIConnectionError):
            return f"cannot reach the judge server at {self.server.shown} ({tries}): {self.redact(exc.message)}"
        status = getattr(exc, "status_code", "?")
        message = self.redact(exc.message)
        detail = message if len(message) <= _MAX_DETAIL else message[:_MAX_DETAIL] + "..."
        hint = " Check OPENAI_API_KEY / VERALITH_API_KEY." if retry.kind(exc) == "auth" else ""
        return f"the judge server answered HTTP {status} ({tries}): {detail}{hint}"

# ---------------------------------------------------------------- helpers

class _Attempts:
    """One completion's attempts, shared by `complete` and `acomplete`: everything but the sending and
    the waiting, so the two paths build, adapt, retry and count exactly alike."""

    def __init__(self, transport: Transport, task: Task, payload: BaseModel, schema: dict[str, Any],
                 extra: list[dict[str, str]], usage: CallUsage, max_tokens: int | None,
                 rendered: list[dict[str, str]] | None = None) -> None:
        self.transport, self.task, self.payload, self.schema = transport, task, payload, schema
        self.extra, self.usage, self.max_tokens, self.rendered = extra, usage, max_tokens, rendered
        self.retries = 0
        self.timed_out = False   # the last attempt timed out
        self.habits = transport.server.habits(transport.model)

    def request(self) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """The next attempt's request, built as the server is known to want it now; counted as a call."""
        built = self.transport._request(self.task, self.payload, self.schema, self.extra, self.habits,
                                        self.max_tokens, self.rendered)
        self.usage.calls += 1
        if self.timed_out and calls_log.isEnabledFor(logging.DEBUG):   # counted by benchmarks/local_server.py
            calls_log.debug("%s: attempt %d re-sent after a timeout", self.task.name, self.retries + 1)
        return built

    def failed(self, exc: Exception, options: dict[str, Any], messages: list[dict[str, str]]) -> float:
        """Seconds to wait before the next attempt (0: an option was adapted, send again at once);
        raises JudgeCallError once no retry is left."""
        self.timed_out = retry.kind(exc) == "timeout"
        if calls_log.isEnabledFor(logging.DEBUG):
            calls_log.debug("%s: attempt %d failed: %s", self.task.name, self.retries + 1,
                            self.transport.redact(f"{type(exc).__name__}: {exc}")[:500])   # masked, then cut
        if isinstance(exc, openai.APIStatusError) and self.transport._adapt(exc, options, self.habits):
            return 0.0
        if isinstance(exc, retry.DeadlinePassed) and self.transport.paced and options.get("max_tokens"):
            # Slower than its deadline: counted as a reply of its cap that took the whole deadline (pace).
            pace.note_speed(self.habits, _prompt_estimate(messages), options["max_tokens"], exc.seconds)
            self.transport.keep_now_and_then()
        wait = self.transport._after_failure(exc, self.retries)
        self.retries += 1
        return wait

    def received(self, raw: Any, messages: list[dict[str, str]], options: dict[str, Any],
                 elapsed: float) -> Sent | None:
        """The reply as a Sent, or None when it must be sent again (the server did not read the instructions)."""
        transport = self.transport
        self.timed_out = False
        transport.server.breaker.success()
        try:
            completion = raw.parse()
        except ValueError:   # a 200 whose body is not JSON (cut off in transit, a proxy's page)
            completion = None
        if not isinstance(completion, openai.types.chat.ChatCompletion):
            return Sent(None, messages, elapsed)
        if calls_log.isEnabledFor(logging.DEBUG):
            _log_reply(self.task.name, options, completion, elapsed, transport.redact)
        _add_usage(completion, self.usage)
        if read_too_little(transport.server, transport.model, completion, messages, options.get("_schema"),
                           self.habits):
            return None   # sent again with the instructions in the user turn
        learn_logprobs(transport.server, transport.model, self.habits, "logprobs" in options, completion, elapsed)
        if completion.usage is not None:
            pace.note_speed(self.habits, completion.usage.prompt_tokens or 0, completion.usage.completion_tokens or 0,
                            elapsed)
        transport.keep_now_and_then()
        return Sent(completion, messages, elapsed)


async def _acquire(slots: threading.Semaphore | None) -> None:
    """Take one of the server's slots without blocking the event loop. The slots are the threads' own
    semaphore, so sync and async callers in one process share one limit; a taken slot is polled for
    (a limit is rare: local servers, VERALITH_SERVER_CONCURRENCY)."""
    if slots is None:
        return
    pause = 0.001
    while not slots.acquire(blocking=False):
        cancel.check()
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.02)


async def _apause(seconds: float) -> None:
    """`cancel.pause` on the event loop: a retry's backoff, cut short by a cancellation."""
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        cancel.check()
        await asyncio.sleep(min(left, 0.1))
    cancel.check()

class _Hold:
    """One of a server's slots, given back when every party holding it is done: the caller (once it has
    looked at the reply) and the HTTP thread (once the request has ended, even when it was abandoned)."""

    def __init__(self, slots: threading.Semaphore | None) -> None:
        self.slots, self.parties = slots, 1
        self._lock = threading.Lock()
        if slots is not None:
            while not slots.acquire(timeout=0.1):   # a cancellation ends the wait for a slot
                cancel.check()

    def done(self) -> None:
        with self._lock:
            self.parties -= 1
            last = self.parties == 0
        if last and self.slots is not None:
            self.slots.release()


def _log_reply(task: str, options: dict[str, Any], completion: Any, elapsed: float,
               redact: Callable[[str], str]) -> None:
    """The DEBUG record of one reply (calls_log): the request's form, cap and schema, the reply's
    timing and tokens, and its text as the server wrote it (the key masked)."""
    usage = completion.usage
    out = (usage.completion_tokens or 0) if usage is not None else 0
    choice = completion.choices[0] if completion.choices else None
    sent = {k: v for k, v in options.items() if k in ("response_format", "extra_body")}
    calls_log.debug("%s", json.dumps({
        "task": task, "mode": options.get("_mode"), "max_tokens": options.get("max_tokens"),
        "seconds": round(elapsed, 2), "prompt_tokens": usage.prompt_tokens if usage is not None else None,
        "output_tokens": out, "tokens_per_s": round(out / elapsed, 2) if elapsed > 0 else None,
        "finish_reason": choice.finish_reason if choice is not None else None,
        "content": redact(choice.message.content or "") if choice is not None else None,
        "schema_sent": sent}, ensure_ascii=False))


def _prompt_estimate(messages: list[dict[str, str]]) -> int:
    """A generous prompt-token count, without a tokenizer: 3 characters a token."""
    return sum(len(m["content"]) for m in messages) // 3


def _in_user_turn(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The system message's text at the start of the first user message (chat templates without a system role)."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if system and rest and rest[0]["role"] == "user":
        rest[0]["content"] = "\n\n".join(system) + "\n\n---\n\n" + rest[0]["content"]
    return rest


def _prompt_cache_key(task_name: str, messages: list[dict[str, str]]) -> str:
    """Routing hint for OpenAI's prompt cache (PROMPTS.md §5.4): the same for every batch of one trace.

    The boundary token on the data's first line is a hash of the trace's shared data (question,
    chunks), so batches of a trace land on the same cache engine while different traces spread out
    instead of crowding the one engine their common static prefix would pick.
    """
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    first_line = user.split("\n", 1)[0]
    return f"veralith-{task_name}-{first_line.rsplit(' ', 1)[-1]}"


def _add_usage(completion: Any, usage: CallUsage) -> None:
    if completion.usage is not None:
        usage.input_tokens += completion.usage.prompt_tokens or 0
        usage.output_tokens += completion.usage.completion_tokens or 0
        details = completion.usage.prompt_tokens_details
        usage.cached_input_tokens += (details.cached_tokens or 0) if details is not None else 0


def _names(text: str, *words: str) -> bool:
    return any(word in text for word in words)


