"""One chat completion on an OpenAI-compatible server, shaped the way that server accepts it.

`Transport.complete` builds the request from what the server is known to do (veralith.llm.server:
structured-output mode, where the instructions go, log-probabilities, options it rejects), sends it
with retries, and checks what the server read. The SDK's own retries are off, so that:

* a request the server rejects because of one option is adapted at once, never retried as is. This
  includes "structured outputs not supported" whatever the status code (llama-cpp-python answers
  a `json_schema` response_format with HTTP 500 naming response_format): auto mode falls back to
  JSON mode (`json_object`, the schema in the prompt), then to no response_format (`off`), once per
  server and model, said once;
* every attempt is counted, so messages and usage carry the right number of attempts;
* the timeout runs from when a request is *sent* (after it got one of the server's slots), not from
  when it was queued, and it bounds the whole reply, however slowly it trickles in;
* the server's circuit breaker sees each failed attempt, and stops the retries of every call in the
  process once it opens.

Retries follow the SDK's rules: 408, 409, 429, 5xx, timeouts and connection errors, up to
`max_retries` times, waiting Retry-After (or retry-after-ms) when the server gives one under a
minute, else 0.5 s x 2^n (at most 8 s) less up to 25 % jitter; `x-should-retry` is obeyed.

Two checks on every completion:

* What the server read. Its `usage.prompt_tokens` is compared with the count expected for the
  messages sent (veralith.llm.tokens). Under TRUNCATION_RATIO of it, either the chat template
  dropped the system message (the count matches the messages without it: llama.cpp's `gemma` format
  does this) or the context window cut the start of the prompt. In auto mode the first is answered by
  sending the instructions in the user turn from then on, and the call is sent again; otherwise the
  call is a `context_truncated` judge error whose message names the likely cause and its fix.
* Log-probabilities, in auto mode: a server that returns none when asked is not asked again; a local
  server is compared per output token with and without them (calls without come free: the
  decomposition calls never ask) and not asked again when they make it LOGPROBS_SLOWER times slower.
"""

from __future__ import annotations

import email.utils
import functools
import logging
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
from pydantic import BaseModel

from veralith.config import settings
from veralith.errors import JudgeCallError
from veralith.llm.prompts import render
from veralith.llm.server import Habits, Server
from veralith.llm.tasks import Task
from veralith.usage import CallUsage

__all__ = ["LOGPROBS_SLOWER", "TRUNCATION_RATIO", "Sent", "Transport"]

TRUNCATION_RATIO = 0.6    # reported / expected prompt tokens below this: the server did not read the whole prompt
LOGPROBS_SLOWER = 3.0     # a local server this many times slower per output token with log-probabilities: not asked
_TOP_LOGPROBS = 5
_LABELLED = frozenset({"sufficiency", "faithfulness", "completeness"})   # tasks whose verdicts get a confidence
_MAX_DETAIL = 300
_RETRY_STATUS = frozenset({408, 409, 429})
_NOT_AN_OPTION = frozenset({401, 403, 404, 408, 409, 429})   # statuses that never mean "this option is refused"
_CONTEXT_SIZES = tuple(n * 1024 for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32))


@dataclass
class Sent:
    """A completion and what produced it."""

    completion: Any
    messages: list[dict[str, str]]
    elapsed_s: float


class _DeadlinePassed(Exception):
    """The request did not finish within its deadline."""


class Transport:
    """Sends one task's request to one server for one model (see the module doc)."""

    def __init__(self, sdk: openai.OpenAI, server: Server, *, model: str, timeout_s: float, max_retries: int,
                 temperature: float, redact: Callable[[str], str]) -> None:
        self.sdk, self.server, self.model = sdk, server, model
        self.timeout_s, self.max_retries, self.temperature = timeout_s, max_retries, temperature
        self.redact = redact

    # ------------------------------------------------------------ the request
    def complete(self, task: Task, payload: BaseModel, schema: dict[str, Any], extra: list[dict[str, str]],
                 usage: CallUsage, *, max_tokens: int | None) -> Sent:
        """One completion (retries and adaptations included), its usage added to `usage`.

        Raises JudgeCallError (JudgeServerDown while the server is down)."""
        retries = 0
        habits = self.server.habits(self.model)
        while True:
            self.server.breaker.before_request()
            # The slot is held until the reply has been looked at (what the server read, how fast), so a
            # request waiting behind this one is built as the server is now known to want it. The request
            # is built once the slot is had for the same reason (another may have found json_schema refused).
            hold = _Hold(self.server.slots(settings.current.server_concurrency))
            wait = 0.0
            try:
                messages, options = self._request(task, payload, schema, extra, habits, max_tokens)
                usage.calls += 1
                started = time.monotonic()
                try:
                    raw = self._send(messages, options, retries, hold)
                except (_DeadlinePassed, openai.APIError) as exc:
                    if isinstance(exc, openai.APIStatusError) and self._adapt(exc, options, habits):
                        continue
                    wait = self._after_failure(exc, retries)   # raises once no retry is left
                    retries += 1
                    continue
                self.server.breaker.success()
                elapsed = time.monotonic() - started
                try:
                    completion = raw.parse()
                except ValueError:   # a 200 whose body is not JSON (cut off in transit, a proxy's page)
                    completion = None
                if not isinstance(completion, openai.types.chat.ChatCompletion):
                    return Sent(None, messages, elapsed)
                _add_usage(completion, usage)
                if self._read_too_little(completion, messages, options, habits, usage):
                    continue   # sent again with the instructions in the user turn
                self._learn_logprobs(habits, "logprobs" in options, completion, elapsed)
                return Sent(completion, messages, elapsed)
            finally:
                hold.done()
                if wait:
                    time.sleep(wait)   # the backoff holds no slot

    def _request(self, task: Task, payload: BaseModel, schema: dict[str, Any], extra: list[dict[str, str]],
                 habits: Habits, max_tokens: int | None) -> tuple[list[dict[str, str]], dict[str, Any]]:
        current = settings.current
        mode = habits.structured if current.structured == "auto" else current.structured
        messages = render(task.name, payload, schema_in_prompt=None if mode == "json_schema" else schema) + extra
        options: dict[str, Any] = {"_mode": mode}
        if habits.send_temperature:
            options["temperature"] = self.temperature
        if habits.send_cache_key:
            options["prompt_cache_key"] = _prompt_cache_key(task.name, messages)
        if task.name in _LABELLED and self._want_logprobs(habits):
            options["logprobs"] = True
            options["top_logprobs"] = _TOP_LOGPROBS
        if max_tokens is not None and habits.send_max_tokens:
            options["max_tokens"] = max_tokens
        if mode == "json_schema":
            options["response_format"] = {"type": "json_schema",
                                          "json_schema": {"name": task.name, "strict": True, "schema": schema}}
            options["_schema"] = schema
        elif mode == "json_object":
            options["response_format"] = {"type": "json_object"}
        placement = habits.system if current.system_prompt == "auto" else current.system_prompt
        if placement == "user":
            messages = _in_user_turn(messages)
        return messages, options

    def _send(self, messages: list[dict[str, str]], options: dict[str, Any], retries: int, hold: _Hold) -> Any:
        """One HTTP request; the slot `hold` holds is kept until the request has ended, even when abandoned."""
        sendable = {k: v for k, v in options.items() if not k.startswith("_")}
        # The SDK's header saying which retry this is, as it sends it when it retries itself.
        create = functools.partial(self.sdk.chat.completions.with_raw_response.create, model=self.model,
                                   messages=messages, timeout=self.timeout_s,
                                   extra_headers={"x-stainless-retry-count": str(retries)}, **sendable)
        hold.parties += 1
        return _within(self.timeout_s, create, release=hold.done)

    # ------------------------------------------------------------ failures
    def _adapt(self, exc: openai.APIStatusError, options: dict[str, Any], habits: Habits) -> bool:
        """True when the server refused one option of the request and it was changed for good."""
        if exc.status_code in _NOT_AN_OPTION:
            return False
        text = f"{exc.message} {exc.body}".lower()
        shown, auto = self.server.shown, settings.current.structured == "auto"
        if options["_mode"] == "json_schema" and auto and _names(text, "response_format", "json_schema",
                                                                  "structured output", "grammar"):
            habits.structured = "json_object"
            self.server.warn_once(f"json_object:{self.model}", "veralith: the judge server at %s rejects json_schema "
                                  "structured outputs (HTTP %s); using JSON mode with the schema in the prompt "
                                  "from now on (VERALITH_STRUCTURED)", shown, exc.status_code)
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
                return True
        return False

    def _after_failure(self, exc: Exception, retries: int) -> float:
        """Count the failed attempt; return the seconds to wait before retrying, or raise JudgeCallError."""
        kind = _kind(exc)
        if kind in ("connection", "timeout", "server_error"):
            self.server.breaker.failure(_short(exc, self.timeout_s))   # raises JudgeServerDown when it opens
        else:
            self.server.breaker.success()   # an answer below 500: the server is up
        if _retryable(exc) and retries < self.max_retries:
            return _delay(exc, retries)
        raise JudgeCallError(kind, self._describe(exc, retries + 1), attempts=retries + 1)

    def _describe(self, exc: Exception, attempts: int) -> str:
        """What went wrong, secrets masked before the server's words are cut to length (a cut key would no
        longer match the secret it is a piece of)."""
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        if isinstance(exc, _DeadlinePassed):
            return (f"no complete reply within {self.timeout_s:g} s of sending ({tries}; VERALITH_TIMEOUT_S); the "
                    "server may be sending its reply very slowly")
        assert isinstance(exc, openai.APIError)
        if isinstance(exc, openai.APITimeoutError):
            return f"the judge server did not answer within {self.timeout_s:g} s ({tries}; VERALITH_TIMEOUT_S)"
        if isinstance(exc, openai.APIConnectionError):
            return f"cannot reach the judge server at {self.server.shown} ({tries}): {self.redact(exc.message)}"
        status = getattr(exc, "status_code", "?")
        message = self.redact(exc.message)
        detail = message if len(message) <= _MAX_DETAIL else message[:_MAX_DETAIL] + "..."
        hint = " Check OPENAI_API_KEY / VERALITH_API_KEY." if _kind(exc) == "auth" else ""
        return f"the judge server answered HTTP {status} ({tries}): {detail}{hint}"

    # ------------------------------------------------------------ what the server read
    def _read_too_little(self, completion: Any, messages: list[dict[str, str]], options: dict[str, Any],
                         habits: Habits, usage: CallUsage) -> bool:
        """True when the server dropped the system message and the call should be sent again in the
        user turn (auto mode); raise context_truncated when it read too little for another reason."""
        reported = completion.usage.prompt_tokens if completion.usage is not None else None
        if not reported:
            return False   # a server that reports no usage cannot be checked
        from veralith.llm.tokens import prompt_tokens

        schema = options.get("_schema")
        expected, method = prompt_tokens(messages, schema, self.model)
        if reported >= TRUNCATION_RATIO * expected:
            return False
        user_only = [m for m in messages if m["role"] != "system"]
        if len(user_only) < len(messages):
            without, _ = prompt_tokens(user_only, schema, self.model)
            if reported >= TRUNCATION_RATIO * without:   # what it read is about the messages without the system one
                if settings.current.system_prompt == "auto":
                    habits.system = "user"
                    self.server.warn_once(f"system:{self.model}", "veralith: the judge server at %s drops the "
                                          "system message for model %s (it read %s of about %s prompt tokens); "
                                          "sending the instructions in the user turn from now on "
                                          "(VERALITH_SYSTEM_PROMPT)", self.server.shown, self.model, reported,
                                          expected)
                    return True
                raise JudgeCallError("context_truncated", (
                    f"the judge server read {reported} prompt tokens of the about {expected} sent ({method}), about "
                    f"what the messages hold without the system message ({without}): its chat template drops the "
                    "system message, where the instructions are (llama.cpp's gemma chat format does). Set "
                    "VERALITH_SYSTEM_PROMPT=user (or auto)."), attempts=1)
        window = next((n for n in _CONTEXT_SIZES if n * 0.9 <= reported <= n), None)
        cause = (f"its context window (about {window} tokens) is smaller than the prompt" if window else
                 "its context window is smaller than the prompt, or its chat template dropped part of the messages")
        raise JudgeCallError("context_truncated", (
            f"the judge server read {reported} prompt tokens of the about {expected} sent ({method}): {cause}, so "
            "it cut the start of the prompt, where the instructions are. Raise its context length (Ollama: "
            "OLLAMA_CONTEXT_LENGTH=16384, or PARAMETER num_ctx 16384 in a Modelfile; vLLM: --max-model-len; "
            "llama.cpp: --ctx-size) or lower VERALITH_BATCH_SIZE."), attempts=1)

    # ------------------------------------------------------------ log-probabilities
    def _want_logprobs(self, habits: Habits) -> bool:
        choice = settings.current.logprobs
        if choice != "auto":
            return choice == "on"
        if not habits.logprobs:
            return False
        if self.server.local and not habits.logprobs_decided:
            # No call without them to compare with yet (every decomposition call came from the cache):
            # one labelled call goes without.
            return not (len(habits.timings[True]) >= 4 and not habits.timings[False])
        return True

    def _learn_logprobs(self, habits: Habits, asked: bool, completion: Any, elapsed: float) -> None:
        if settings.current.logprobs != "auto":
            return
        choice = completion.choices[0] if completion.choices else None
        if asked and choice is not None and choice.logprobs is None:
            habits.logprobs, habits.logprobs_decided = False, True
            self.server.warn_once(f"nologprobs:{self.model}", "veralith: the judge server at %s returns no "
                                  "log-probabilities for model %s; not asking for them (verdicts carry no "
                                  "confidence)", self.server.shown, self.model, level=logging.INFO)
            return
        out = completion.usage.completion_tokens if completion.usage is not None else 0
        if not self.server.local or habits.logprobs_decided or not out:
            return
        with self.server.lock:
            habits.timings[asked].append(elapsed / out)
            with_, without = habits.timings[True], habits.timings[False]
            if len(with_) < 2 or len(without) < 2:
                return
            ratio = statistics.median(with_) / max(statistics.median(without), 1e-9)
            habits.logprobs_decided = True
            habits.logprobs = ratio < LOGPROBS_SLOWER
        if not habits.logprobs:
            self.server.warn_once(f"slowlogprobs:{self.model}", "veralith: the judge server at %s is %.1fx slower "
                                  "per output token with log-probabilities; not asking for them (verdicts carry no "
                                  "confidence; VERALITH_LOGPROBS=on asks anyway)", self.server.shown, ratio)


# ---------------------------------------------------------------- helpers

class _Hold:
    """One of a server's slots, given back when every party holding it is done: the caller (once it has
    looked at the reply) and the HTTP thread (once the request has ended, even when it was abandoned)."""

    def __init__(self, slots: threading.Semaphore | None) -> None:
        self.slots, self.parties = slots, 1
        self._lock = threading.Lock()
        if slots is not None:
            slots.acquire()

    def done(self) -> None:
        with self._lock:
            self.parties -= 1
            last = self.parties == 0
        if last and self.slots is not None:
            self.slots.release()


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


def _within(seconds: float, call: Callable[[], Any], *, release: Callable[[], None] | None) -> Any:
    """Run `call` and return its result, or raise _DeadlinePassed after `seconds`; `release` runs when
    the call has ended (so a server slot is held for as long as the server works on the request).

    The call runs on a daemon thread: when the deadline passes it is abandoned (its connection
    closes when the server finishes or its read timeout fires), and it never delays interpreter exit.
    """
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:   # handed to the caller's thread
            box["error"] = exc
        finally:
            if release is not None:
                release()
            done.set()

    try:
        threading.Thread(target=run, name="veralith-judge-call", daemon=True).start()
    except RuntimeError:   # interpreter shutdown (the at-exit drain, Python 3.12+): no new threads
        run()              # the SDK's per-read timeout still applies; the drain has its own deadline
    if not done.wait(seconds):
        raise _DeadlinePassed()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _names(text: str, *words: str) -> bool:
    return any(word in text for word in words)


def _kind(exc: Exception) -> str:
    if isinstance(exc, (_DeadlinePassed, openai.APITimeoutError)):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limited"
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return "auth"
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status >= 500:
        return "server_error"
    if status == 408:
        return "timeout"
    return "bad_request" if isinstance(status, int) else "connection"


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, (_DeadlinePassed, openai.APITimeoutError, openai.APIConnectionError)):
        return True
    if not isinstance(exc, openai.APIStatusError):
        return False
    should = exc.response.headers.get("x-should-retry")
    if should in ("true", "false"):
        return should == "true"
    return exc.status_code in _RETRY_STATUS or exc.status_code >= 500


def _delay(exc: Exception, retries: int) -> float:
    """Seconds to wait before retry number `retries + 1` (the SDK's rule; see the module doc)."""
    headers = exc.response.headers if isinstance(exc, openai.APIStatusError) else {}
    wait: float | None = None
    try:
        if headers.get("retry-after-ms"):
            wait = float(headers["retry-after-ms"]) / 1000
        elif headers.get("retry-after"):
            value = headers["retry-after"]
            try:
                wait = float(value)
            except ValueError:
                when = email.utils.parsedate_to_datetime(value)
                wait = when.timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        wait = None
    if wait is not None and 0 <= wait <= 60:
        return wait
    return min(0.5 * 2 ** retries, 8.0) * (1 - 0.25 * random.random())


def _short(exc: Exception, timeout_s: float) -> str:
    if isinstance(exc, (_DeadlinePassed, openai.APITimeoutError)):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, openai.APIConnectionError):
        return "connection failed"
    return f"HTTP {getattr(exc, 'status_code', '?')}"
