"""The OpenAI backend: one judge task → one chat completion with a strict JSON Schema, through the SDK.

Retries with backoff on 408/409/429/5xx, timeouts and connection errors (Retry-After honoured)
are the SDK's own (`max_retries`); this module adds what the SDK cannot know about: the reply
must parse, validate against the task's output model and pass `task.check`, or it is re-asked
once with the problems spelled out. Servers that reject `json_schema` structured outputs get
JSON mode with the schema in the prompt, remembered for the client's lifetime; so are servers
that reject a temperature, `prompt_cache_key` or `logprobs`.

Two checks on every completion, besides the reply itself:

* Truncation. A local server whose context window is smaller than the prompt (Ollama's OpenAI
  endpoint keeps 2-4k tokens unless configured) silently drops the *start* of the prompt, which
  holds the instructions. The server's `usage.prompt_tokens` is compared with the count expected
  for the messages sent (tiktoken, or ceil(characters / 4) offline, as the budget counts): when a
  prompt of at least TRUNCATION_MIN_TOKENS is reported at under TRUNCATION_RATIO of that, the call
  is a `context_truncated` judge error, never a verdict, and is not re-asked. 0.6 leaves room for
  the tokenizers of other model families, which count the same text differently from o200k (by
  tens of percent; chat templates add tokens on top), so only a real cut trips it; a cut of less
  than about 40 % of the prompt goes unseen.
* Confidence. Where the server returns token log-probabilities (`logprobs`, `top_logprobs: 5`),
  each item's label probability is read at the label's value inside the JSON ("relation",
  "sufficient", "status"): the first token of the value, normalised over the alternatives that
  begin a valid label, times the following tokens until the label is decided. It is returned in
  `CallResult.confidence` by item id and cached with the reply. No log-probabilities: no entry.

The API key is handed to the SDK and nowhere else: every message this module builds goes through
`_redact`, and the SDK's own debug logs redact the Authorization header.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import openai
from pydantic import BaseModel, ValidationError

from veralith.config import ConfigError, settings, userinfo_problem
from veralith.errors import JudgeCallError
from veralith.llm.base import CallResult
from veralith.llm.confidence import label_confidence
from veralith.llm.prompts import PROMPT_VERSIONS, render
from veralith.llm.tasks import Task
from veralith.observability.cost import record_call
from veralith.redact import MASK, redact, redact_url
from veralith.usage import CallUsage

__all__ = ["TRUNCATION_MIN_TOKENS", "TRUNCATION_RATIO", "OpenAIClient", "ReplyCache",
           "request_key", "strict_schema"]

log = logging.getLogger(__name__)

# Local servers (vLLM, Ollama, llama.cpp) ignore the key, but the SDK insists on one.
_PLACEHOLDER_KEY = "veralith-no-key"
_MAX_DETAIL = 300
_MAX_ECHO = 20_000
TRUNCATION_RATIO = 0.6        # reported / expected prompt tokens below this: the server cut the prompt
TRUNCATION_MIN_TOKENS = 400   # shorter prompts are not checked (template overhead dominates them)
_TOP_LOGPROBS = 5
_CONFIDENCE_KEY = "_confidence"   # stored beside a cached reply's fields (which never start with "_")

Price = Callable[[str, int, int, int], "float | None"]


class ReplyCache(Protocol):
    """What OpenAIClient needs from a reply cache (veralith/llm/cache.py provides the real one)."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any], **meta: str) -> None: ...


def request_key(backend: str, model: str, prompt_version: str, messages: list[dict[str, Any]],
                schema: dict[str, Any], sampling: dict[str, Any]) -> str:
    """sha256 of a canonical JSON of everything that determines a judge reply."""
    blob = json.dumps({"backend": backend, "model": model, "prompt_version": prompt_version,
                       "messages": messages, "schema": schema, "sampling": sampling},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def strict_schema(task: Task) -> dict[str, Any]:
    """The strict JSON Schema of the task's output model, without pydantic's `title` annotations.

    The strict form (every property required, no additional properties) comes from the SDK's
    public `openai.pydantic_function_tool`, whose `parameters` are exactly what structured outputs
    accept. Structured outputs bill the schema as prompt tokens on every call; the titles only
    repeat the property names (a quarter of the schema's tokens) and constrain nothing.
    """
    tool = openai.pydantic_function_tool(task.output_model)
    schema: dict[str, Any] = _untitled(tool["function"]["parameters"])
    return schema


def _untitled(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: ({name: _untitled(sub) for name, sub in v.items()} if k == "properties" else _untitled(v))
                for k, v in node.items() if k != "title"}
    if isinstance(node, list):
        return [_untitled(v) for v in node]
    return node


class _Malformed(Exception):
    """A completed reply that cannot be used; `content` is what the model said (for the re-ask)."""

    def __init__(self, problems: list[str], content: str) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems
        self.content = content


class OpenAIClient:
    """JudgeClient for any OpenAI-compatible chat-completions server."""

    backend = "openai"
    concurrent = True
    records_usage = True     # every call and cache hit is reported to the cost tracker (record_call)

    def __init__(self, *, model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                 timeout_s: float | None = None, max_retries: int | None = None,
                 temperature: float | None = None, cache: ReplyCache | None = None,
                 price: Price | None = None) -> None:
        """Unset arguments come from `settings`; `cache` and `price` are optional seams (see module doc)."""
        current = settings.current
        self.model = model or current.judge_model
        self.base_url = base_url if base_url is not None else current.base_url
        problem = userinfo_problem(self.base_url) if self.base_url else None
        if problem is not None:
            raise ConfigError(f"base_url: {problem}")
        key = api_key or (current.api_key.get_secret_value() if current.api_key else None)
        self._secret = key or ""
        self.temperature = current.temperature if temperature is None else temperature
        self.cache = cache
        self.price = price
        self.json_mode = False          # flips to True once the server rejects json_schema response_format
        self.send_temperature = True    # flips to False once the model rejects a temperature
        self.send_cache_key = True      # flips to False once the server rejects prompt_cache_key
        self.send_logprobs = True       # flips to False once the server rejects logprobs
        self._lock = threading.Lock()
        self._schemas: dict[str, dict[str, Any]] = {}
        timeout = current.timeout_s if timeout_s is None else timeout_s
        retries = current.max_retries if max_retries is None else max_retries
        # The SDK's timeout bounds each read, so a server trickling a byte at a time never trips it:
        # the whole call (every attempt and the backoff between them) gets a deadline of its own.
        self.deadline_s = timeout * (retries + 1) + _BACKOFF_ALLOWANCE_S * retries
        self._sdk = openai.OpenAI(
            api_key=key or _PLACEHOLDER_KEY, base_url=self.base_url,
            timeout=current.timeout_s if timeout_s is None else timeout_s,
            max_retries=current.max_retries if max_retries is None else max_retries)

    def __repr__(self) -> str:
        return f"OpenAIClient(model={self.model!r}, base_url={redact_url(self.base_url)!r})"

    def prompt_version(self, task: str) -> str:
        return PROMPT_VERSIONS[task]

    def schema(self, task: Task) -> dict[str, Any]:
        """The strict JSON Schema of the task's output model (every field required, no extras)."""
        with self._lock:
            if task.name not in self._schemas:
                self._schemas[task.name] = strict_schema(task)
            return self._schemas[task.name]

    # ------------------------------------------------------------ the call
    def run(self, task: Task, payload: BaseModel) -> CallResult:
        schema = self.schema(task)
        base_messages = render(task.name, payload)
        sampling = {"temperature": self.temperature}
        # Keyed on the json_schema rendering even in JSON mode: both ask the same question.
        key = request_key(self.backend, self.model, self.prompt_version(task.name), base_messages, schema, sampling)
        cached = self._from_cache(task, key)
        if cached is not None:
            hit = CallUsage(model=self.model, cache_hits=1, calls=0, usd=0.0)
            record_call(hit)
            return CallResult(cached[0], hit, cached[1])

        usage = CallUsage(model=self.model)
        extra: list[dict[str, str]] = []
        for attempt in (1, 2):
            try:
                output, confidence = self._attempt(task, payload, schema, extra, usage)
            except _Malformed as bad:
                if attempt == 2:
                    raise self._error("malformed_reply", "the judge's reply was unusable twice: "
                                      + "; ".join(bad.problems), usage) from None
                log.info("re-asking %s judge once: %s", task.name, self._redact("; ".join(bad.problems)))
                # The bad reply is echoed so the model sees what to fix; a runaway one is cut short.
                extra = [{"role": "assistant", "content": bad.content[:_MAX_ECHO] or "(empty reply)"},
                         {"role": "user", "content": _reask_text(bad.problems)}]
                continue
            usage.usd = self._usd(usage)
            record_call(usage)
            if self.cache is not None:
                value = output.model_dump(mode="json")
                if confidence:
                    value[_CONFIDENCE_KEY] = confidence
                self.cache.put(key, value, task=task.name, model=self.model,
                               prompt_version=self.prompt_version(task.name))
            return CallResult(output, usage, confidence)
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    def _attempt(self, task: Task, payload: BaseModel, schema: dict[str, Any], extra: list[dict[str, str]],
                 usage: CallUsage) -> tuple[BaseModel, dict[str, float]]:
        completion, messages, schema_sent = self._complete(task, payload, schema, extra, usage)
        if not isinstance(completion, openai.types.chat.ChatCompletion):
            raise _Malformed(["the server's answer is not a chat completion"], "")
        _add_usage(completion, usage)
        self._check_context(completion, messages, schema_sent, usage)
        content = self._unechoed(_content(completion))
        try:
            data = json.loads(_unfenced(content))
        except json.JSONDecodeError as exc:
            raise _Malformed([f"the reply is not valid JSON ({exc.msg} at character {exc.pos}); "
                              "send the complete JSON object"], content) from None
        try:
            output = task.output_model.model_validate(data)
        except ValidationError as exc:
            problems = [f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors()[:10]]
            raise _Malformed(problems, content) from None
        problems = task.check(payload, output)
        if problems:
            raise _Malformed(problems, content)
        logprobs = completion.choices[0].logprobs
        return output, label_confidence(task, output, content, logprobs.content if logprobs else None)

    def _check_context(self, completion: Any, messages: list[dict[str, str]], schema_sent: dict[str, Any] | None,
                       usage: CallUsage) -> None:
        """Raise `context_truncated` when the server read far fewer prompt tokens than were sent."""
        reported = completion.usage.prompt_tokens if completion.usage is not None else None
        if not reported:
            return   # a server that reports no usage cannot be checked
        from veralith.llm.tokens import prompt_tokens

        expected, method = prompt_tokens(messages, schema_sent, self.model)
        if expected >= TRUNCATION_MIN_TOKENS and reported < TRUNCATION_RATIO * expected:
            raise self._error(
                "context_truncated",
                f"the judge server read {reported} prompt tokens of the about {expected} sent ({method}): its "
                "context window is too small, so it cut the start of the prompt, where the instructions are. "
                "Raise its context length (Ollama: OLLAMA_CONTEXT_LENGTH=16384, or PARAMETER num_ctx 16384 in a "
                "Modelfile; vLLM: --max-model-len; llama.cpp: --ctx-size) or lower VERALITH_BATCH_SIZE.", usage)

    def _complete(self, task: Task, payload: BaseModel, schema: dict[str, Any], extra: list[dict[str, str]],
                  usage: CallUsage) -> tuple[Any, list[dict[str, str]], dict[str, Any] | None]:
        """One chat completion (the SDK's retries included), adapting once to what the server rejects.

        Returns the parsed completion, the messages sent and the schema sent as response_format (None
        in JSON mode, where the schema is in the messages).
        """
        while True:
            json_mode = self.json_mode
            messages = render(task.name, payload, schema_in_prompt=schema if json_mode else None) + extra
            options: dict[str, Any] = {}
            if self.send_temperature:
                options["temperature"] = self.temperature
            if self.send_cache_key:
                options["prompt_cache_key"] = _prompt_cache_key(task.name, messages)
            if self.send_logprobs:
                options["logprobs"] = True
                options["top_logprobs"] = _TOP_LOGPROBS
            options["response_format"] = {"type": "json_object"} if json_mode else {
                "type": "json_schema", "json_schema": {"name": task.name, "strict": True, "schema": schema}}
            try:
                create = functools.partial(self._sdk.chat.completions.with_raw_response.create,
                                           model=self.model, messages=messages, **options)
                raw = _within(self.deadline_s, create)
            except _DeadlinePassed:
                usage.calls += 1
                raise self._error("timeout", f"no complete reply within {self.deadline_s:g} s (VERALITH_TIMEOUT_S x "
                                  "the attempts VERALITH_MAX_RETRIES allows); the server may be sending its reply "
                                  "very slowly", usage) from None
            except openai.APIError as exc:
                attempts = _attempts(exc)
                usage.calls += attempts
                # Each adaptation flips a flag for the client's lifetime, so this loop runs at most 5 times.
                if not json_mode and _rejects(exc, "response_format", "json_schema", "structured output"):
                    log.warning("judge server at %s rejects json_schema structured outputs; using JSON mode "
                                "with the schema in the prompt from now on",
                                redact_url(self.base_url) or "api.openai.com")
                    self.json_mode = True
                    continue
                if "prompt_cache_key" in options and _rejects(exc, "prompt_cache_key"):
                    self.send_cache_key = False
                    continue
                if "logprobs" in options and _rejects(exc, "logprobs"):
                    # Reasoning models and some local servers: verdicts then carry no confidence.
                    log.info("judge model %s rejects logprobs; judgments will have no confidence", self.model)
                    self.send_logprobs = False
                    continue
                if "temperature" in options and _rejects(exc, "temperature"):
                    # Reasoning models accept only their default temperature.
                    log.warning("judge model %s rejects a temperature setting; sending none from now on",
                                self.model)
                    self.send_temperature = False
                    continue
                raise self._error(_kind(exc), _describe(exc, attempts, self._redact), usage) from None
            usage.calls += raw.retries_taken + 1
            try:
                return raw.parse(), messages, None if json_mode else schema
            except ValueError as exc:   # a 200 whose body is not JSON (cut off in transit, a proxy's page)
                raise _Malformed([f"the HTTP body is not a chat completion ({type(exc).__name__})"], "") from None

    # ------------------------------------------------------------ helpers
    def _from_cache(self, task: Task, key: str) -> tuple[BaseModel, dict[str, float]] | None:
        if self.cache is None:
            return None
        hit = self.cache.get(key)
        if hit is None:
            return None
        hit = dict(hit)                           # the cache's own copy stays as it was
        stored = hit.pop(_CONFIDENCE_KEY, None)   # absent in entries written without log-probabilities
        confidence = {str(k): float(v) for k, v in stored.items()} if isinstance(stored, dict) else {}
        try:
            return task.output_model.model_validate(hit), confidence
        except ValidationError:
            return None   # written by an older output model: ask again, the fresh reply overwrites it

    def _usd(self, usage: CallUsage) -> float | None:
        if self.price is None:
            return None   # unknown price is None, never a silent 0 (veralith/observability/cost.py prices)
        return self.price(self.model, usage.input_tokens, usage.cached_input_tokens, usage.output_tokens)

    def _unechoed(self, content: str) -> str:
        """The reply with the API key masked, should the server echo it: the reply is cached and stored."""
        if len(self._secret) >= 4 and self._secret in content:
            return content.replace(self._secret, MASK)
        return content

    def _redact(self, text: str) -> str:
        """The key, a password in the base URL and echoed auth headers, masked (veralith/redact.py)."""
        return redact(text, [self._secret])

    def _error(self, kind: str, message: str, usage: CallUsage) -> JudgeCallError:
        err = JudgeCallError(kind, self._redact(message), attempts=max(usage.calls, 1))
        # Tokens spent on a failed call still cost money; the cost tracker reads them from here.
        usage.usd = self._usd(usage)
        record_call(usage)
        err.usage = usage
        return err


def _add_usage(completion: Any, usage: CallUsage) -> None:
    if completion.usage is not None:
        usage.input_tokens += completion.usage.prompt_tokens or 0
        usage.output_tokens += completion.usage.completion_tokens or 0
        details = completion.usage.prompt_tokens_details
        usage.cached_input_tokens += (details.cached_tokens or 0) if details is not None else 0


def _content(completion: Any) -> str:
    """The completion's text, or raise _Malformed."""
    if not completion.choices:
        raise _Malformed(["the reply has no choices"], "")
    choice = completion.choices[0]
    content = choice.message.content or ""
    if choice.message.refusal:
        raise _Malformed([f"the model refused ({choice.message.refusal[:_MAX_DETAIL]}); the texts are data "
                          "to evaluate, so answer with the JSON object"], choice.message.refusal)
    if choice.finish_reason == "length":
        try:
            json.loads(content)
        except json.JSONDecodeError:
            raise _Malformed(["the reply was cut off at the token limit; keep every reasoning field to one "
                              "short sentence and send the complete JSON object"], content) from None
    return content


_BACKOFF_ALLOWANCE_S = 8.0   # the SDK's longest wait between two attempts


class _DeadlinePassed(Exception):
    """The call did not finish within its deadline."""


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """Run `call` and return its result, or raise _DeadlinePassed after `seconds`.

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
            done.set()

    try:
        threading.Thread(target=run, name="veralith-judge-call", daemon=True).start()
    except RuntimeError:   # interpreter shutdown (the at-exit drain, Python 3.12+): no new threads
        return call()      # the SDK's per-read timeout still applies; the drain has its own deadline
    if not done.wait(seconds):
        raise _DeadlinePassed()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _prompt_cache_key(task_name: str, messages: list[dict[str, str]]) -> str:
    """Routing hint for OpenAI's prompt cache (PROMPTS.md §5.4): same for every batch of one trace.

    The boundary token on the user message's first line is a hash of the trace's shared data
    (question, chunks), so batches of a trace land on the same cache engine while different traces
    spread out instead of crowding the one engine their common static prefix would pick.
    """
    first_line = messages[1]["content"].split("\n", 1)[0] if len(messages) > 1 else ""
    return f"veralith-{task_name}-{first_line.rsplit(' ', 1)[-1]}"


def _unfenced(content: str) -> str:
    """The JSON inside a ```json fence: JSON-mode models often add one, and re-asking costs a call."""
    text = content.strip()
    if text.startswith("```") and text.endswith("```") and "\n" in text:
        return text[text.index("\n") + 1:-3]
    return content


def _reask_text(problems: list[str]) -> str:
    listed = "\n".join(f"- {p}" for p in problems[:20])
    return (f"Your reply could not be used:\n{listed}\nReply again with one complete JSON object that follows "
            "the schema, with exactly one item per id given in the data blocks.")


def _attempts(exc: openai.APIError) -> int:
    """HTTP requests the SDK sent, read from the retry counter it stamps on each request."""
    try:
        return int(exc.request.headers.get("x-stainless-retry-count", "0")) + 1
    except (AttributeError, ValueError, RuntimeError):
        return 1


def _rejects(exc: openai.APIError, *words: str) -> bool:
    """A 400/422 whose message names one of `words`: the server refuses that request option."""
    if not isinstance(exc, (openai.BadRequestError, openai.UnprocessableEntityError)):
        return False
    text = f"{exc.message} {exc.body}".lower()
    return any(word in text for word in words)


def _kind(exc: openai.APIError) -> str:
    if isinstance(exc, openai.APITimeoutError):
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
    if isinstance(status, int) and status == 408:
        return "timeout"
    return "bad_request" if isinstance(status, int) else "connection"


def _describe(exc: openai.APIError, attempts: int, redact_text: Callable[[str], str]) -> str:
    """What went wrong, secrets masked before the server's words are cut to length (a cut key would
    no longer match the secret it is a piece of)."""
    tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
    if isinstance(exc, openai.APITimeoutError):
        return f"the judge server did not answer in time ({tries})"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot reach the judge server ({tries}): {exc.message}"
    status = getattr(exc, "status_code", "?")
    message = redact_text(exc.message)
    detail = message if len(message) <= _MAX_DETAIL else message[:_MAX_DETAIL] + "..."
    hint = " Check OPENAI_API_KEY / VERALITH_API_KEY." if _kind(exc) == "auth" else ""
    return f"the judge server answered HTTP {status} ({tries}): {detail}{hint}"
