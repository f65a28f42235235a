"""The OpenAI backend: one judge task → chat completions with a JSON Schema, through the SDK.

Sending, retrying and adapting the request to what a server accepts is veralith.llm.transport's
work (what was learnt about a server is kept per server: veralith.llm.server). This module adds what
no transport can know: the reply must parse, validate against the task's output model and pass the
task's checks. It is read leniently where its meaning is unambiguous (veralith.llm.salvage), and
every such repair is reported with the result.

* Extraction tasks (questions, claims) are read whole: a reply with any problem is re-asked once
  with the problems spelled out; a second bad reply is a `malformed_reply` judge error.
* Judge tasks (sufficiency, faithfulness, completeness) are read item by item: the good items are
  kept, only the bad ones are re-asked (once, with their problems), and what is still bad after that
  is `missing` from the result, for the pipeline to decide around. A reply with no usable JSON at all
  is re-asked whole; nothing usable twice is a `malformed_reply` judge error.

Each reply's length is capped (`max_tokens`: veralith.llm.estimate.max_output_tokens, lowered to what
the server's past replies to the task needed, veralith.llm.pace). Verdict
confidence comes from token log-probabilities (veralith.llm.confidence). The usage of every request
is counted, failed ones included, and priced for the model the server says answered (the configured
one when it names none); when a base URL is set and no judge model is, results are labelled with the
model the judge calls' replies name, with a one-time warning.

The two decomposition calls go to the decomposer model (VERALITH_DECOMPOSER_MODEL; default the judge
model), the three judges to the judge model (veralith.llm.tasks.model_for): each call's cache key,
usage and price name the model it was sent to, so a change of decomposer re-asks only decomposition.

The API key is handed to the SDK and nowhere else: every message this module builds goes through
`_redact`, a key echoed in a reply is masked before the reply is read, cached or stored, and the
SDK's own debug logs redact the Authorization header.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import AsyncGenerator, Callable, Generator, Iterator
from typing import Any, Protocol

import openai
from pydantic import BaseModel

from veralith.config import ConfigError, settings, userinfo_problem
from veralith.errors import JudgeCallError
from veralith.llm import pace
from veralith.llm.base import CallResult
from veralith.llm.confidence import LABEL_FIELDS, label_confidence
from veralith.llm.estimate import max_output_tokens, output_allowance
from veralith.llm.prompts import prompt_version, render
from veralith.llm.salvage import Key, Reading, Unusable, item_label, read_items, read_whole, settle
from veralith.llm.server import Habits, server_for
from veralith.llm.sockets import abortable_http_client
from veralith.llm.tasks import Task, model_for
from veralith.llm.transport import TRUNCATION_RATIO, Sent, Transport
from veralith.observability.cost import record_call
from veralith.redact import MASK, redact, redact_url
from veralith.usage import CallUsage

__all__ = ["TRUNCATION_RATIO", "OpenAIClient", "ReplyCache", "request_key", "strict_schema"]

log = logging.getLogger(__name__)

# Local servers (vLLM, Ollama, llama.cpp) ignore the key, but the SDK insists on one.
_PLACEHOLDER_KEY = "veralith-no-key"
_MAX_ECHO = 20_000
_CONFIDENCE_KEY = "_confidence"   # stored beside a cached reply's fields (which never start with "_")
_REPAIRS_KEY = "_repairs"
_CUT_OFF = "the reply was cut off at the token limit; keep every reasoning field to one short sentence"

Price = Callable[[str, int, int, int], "float | None"]
_Ask = tuple[list[dict[str, str]], int]   # a request the judging needs: extra messages, token cap


class ReplyCache(Protocol):
    """What OpenAIClient needs from a reply cache (veralith/llm/cache.py provides the real one)."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any], **meta: str) -> None: ...


def request_key(backend: str, model: str, prompt_version: str, messages: list[dict[str, Any]],
                schema: dict[str, Any], sampling: dict[str, Any]) -> str:
    """sha256 of a canonical JSON of everything that determines a judge reply."""
    return _keyed(backend, model, prompt_version, messages, _canonical(schema), sampling)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _keyed(backend: str, model: str, prompt_version: str, messages: list[dict[str, Any]], schema_json: str,
           sampling: dict[str, Any]) -> str:
    """request_key with the schema already in canonical JSON (the client keeps it per task: a call's
    schema never changes, and serialising it was most of a key's cost). The blob is exactly the
    canonical JSON of the whole dict, its keys in sorted order, so cache keys are what they were."""
    blob = (f'{{"backend":{_canonical(backend)},"messages":{_canonical(messages)},"model":{_canonical(model)},'
            f'"prompt_version":{_canonical(prompt_version)},"sampling":{_canonical(sampling)},'
            f'"schema":{schema_json}}}')
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def strict_schema(task: Task, payload: BaseModel | None = None) -> dict[str, Any]:
    """The strict JSON Schema of the task's output model (for `payload`: Task.output_for), without
    pydantic's `title` annotations and without descriptions (a model's docstring): the prompt says
    what each field is, and the schema is billed as input on every call.

    The strict form (every property required, no additional properties) comes from the SDK's
    public `openai.pydantic_function_tool`, whose `parameters` are exactly what structured outputs
    accept. Structured outputs bill the schema as prompt tokens on every call; the titles only
    repeat the property names (a quarter of the schema's tokens) and constrain nothing.
    """
    tool = openai.pydantic_function_tool(task.output_for(payload))
    schema: dict[str, Any] = untitled(tool["function"]["parameters"])
    return schema


def untitled(node: Any) -> Any:
    """A JSON Schema without `title` and `description` annotations."""
    if isinstance(node, dict):
        return {k: ({name: untitled(sub) for name, sub in v.items()} if k == "properties" else untitled(v))
                for k, v in node.items() if k not in ("title", "description")}
    if isinstance(node, list):
        return [untitled(v) for v in node]
    return node


class OpenAIClient:
    """JudgeClient for any OpenAI-compatible chat-completions server."""

    backend = "openai"
    concurrent = True
    records_usage = True     # every call and cache hit is reported to the cost tracker (record_call)

    def __init__(self, *, model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                 timeout_s: float | None = None, max_retries: int | None = None,
                 temperature: float | None = None, cache: ReplyCache | None = None,
                 price: Price | None = None, decomposer_model: str | None = None) -> None:
        """Unset arguments come from `settings`; `cache` and `price` are optional seams (see module doc)."""
        current = settings.current
        self.base_url = base_url if base_url is not None else current.base_url
        problem = userinfo_problem(self.base_url) if self.base_url else None
        if problem is not None:
            raise ConfigError(f"base_url: {problem}")
        # `sent_model` names the model in requests and cache keys; `model` labels results, and is the
        # model the server names when none was configured for a server of one's own.
        self.sent_model = self.model = model or current.judge_model
        self._label_from_server = (model is None and bool(self.base_url)
                                   and "judge_model" not in current.model_fields_set)
        # The model the two decomposition calls are sent to (and keyed and priced under).
        self.decomposer_model = decomposer_model or current.decomposer_model or self.sent_model
        key = api_key or (current.api_key.get_secret_value() if current.api_key else None)
        self._secret = key or ""
        self.temperature = current.temperature if temperature is None else temperature
        self.cache = cache
        self.price = price
        self._lock = threading.Lock()
        # output model -> (strict schema, its canonical JSON)
        self._schemas: dict[type[BaseModel], tuple[dict[str, Any], str]] = {}
        self.server = server_for(self.base_url)
        self.timeout_s = current.timeout_s if timeout_s is None else timeout_s
        # Retries are the transport's (every attempt counted, rejections adapted at once), not the SDK's.
        # Its connections can be shut from another thread, so a request given up on is closed (sockets).
        sdk = openai.OpenAI(api_key=key or _PLACEHOLDER_KEY, base_url=self.base_url, timeout=self.timeout_s,
                            max_retries=0, http_client=abortable_http_client())
        # An unset timeout is a default that a local server's measured speed may lengthen (veralith.llm.pace).
        paced = timeout_s is None and "timeout_s" not in current.model_fields_set
        # The async path's SDK clients, per event loop (an AsyncOpenAI's connections belong to the loop
        # that opened them); made on first use, so the sync path never builds one.
        self._async_sdks: dict[asyncio.AbstractEventLoop, _Pools] = {}
        # One transport per model, over one SDK client and one server state (shared slots and breaker).
        self._transports = {name: Transport(sdk, self.server, model=name, timeout_s=self.timeout_s,
                                            max_retries=current.max_retries if max_retries is None else max_retries,
                                            temperature=self.temperature, redact=self._redact,
                                            asdk=self._async_sdk, paced=paced)
                            for name in dict.fromkeys((self.sent_model, self.decomposer_model))}
        self.transport = self._transports[self.sent_model]
        if self._label_from_server:
            self.server.warn_once("no-model", "veralith: VERALITH_JUDGE_MODEL is not set, so %r is asked of the judge "
                                  "server at %s; results are labelled and priced with the model its replies name "
                                  "(set VERALITH_JUDGE_MODEL to the model it serves)", self.sent_model,
                                  self.server.shown)

    def __repr__(self) -> str:
        decomposer = f", decomposer_model={self.decomposer_model!r}" if self.decomposer_model != self.sent_model else ""
        return f"OpenAIClient(model={self.model!r}{decomposer}, base_url={redact_url(self.base_url)!r})"

    @property
    def habits(self) -> Habits:
        """What the server was found to do with requests for this model (veralith.llm.server)."""
        return self.server.habits(self.sent_model)

    def prompt_version(self, task: str) -> str:
        return prompt_version(task)

    def load(self) -> None:
        """Load now what the first call would: the SDK imports its chat-completions modules on first
        use, under a lock every calling thread waits on. For a long-running judge (`veralith worker`),
        which does this while starting, not on its first trace."""
        for transport in self._transports.values():
            transport.sdk.chat.completions.with_raw_response  # noqa: B018 - the attribute loads the modules

    def schema(self, task: Task, payload: BaseModel | None = None) -> dict[str, Any]:
        """The strict JSON Schema of the task's output model for `payload` (every field required, no extras)."""
        return self._schema(task, payload)[0]

    def _schema(self, task: Task, payload: BaseModel | None) -> tuple[dict[str, Any], str]:
        shape = task.output_for(payload)
        found = self._schemas.get(shape)
        if found is None:
            with self._lock:
                if shape not in self._schemas:
                    schema = strict_schema(task, payload)
                    self._schemas[shape] = (schema, _canonical(schema))
                found = self._schemas[shape]
        return found

    # ------------------------------------------------------------ the call
    def run(self, task: Task, payload: BaseModel) -> CallResult:
        key, model, schema, rendered = self._key(task, payload)
        cached = self._from_cache(task, payload, key, model)
        if cached is not None:
            return cached
        usage = CallUsage(model=model)
        transport = self._transports[model]
        steps = self._judge(task, payload, schema, usage, model)
        try:
            extra, cap = next(steps)
            while True:   # each request the judging asks for, sent and handed back
                extra, cap = steps.send(transport.complete(task, payload, schema, extra, usage, max_tokens=cap,
                                                        rendered=rendered))
        except StopIteration as done:
            result = done.value
        except JudgeCallError as err:
            raise self._failed(err, usage) from None
        return self._kept(task, key, model, usage, result)

    async def arun(self, task: Task, payload: BaseModel) -> CallResult:
        """`run` on the event loop (AsyncOpenAI): the same key, cache, judging, re-asks and accounting."""
        key, model, schema, rendered = self._key(task, payload)
        cached = self._from_cache(task, payload, key, model)
        if cached is not None:
            return cached
        usage = CallUsage(model=model)
        transport = self._transports[model]
        await self._closed_with_loop()
        steps = self._judge(task, payload, schema, usage, model)
        try:
            extra, cap = next(steps)
            while True:
                sent = await transport.acomplete(task, payload, schema, extra, usage, max_tokens=cap,
                                                       rendered=rendered)
                extra, cap = steps.send(sent)
        except StopIteration as done:
            result = done.value
        except JudgeCallError as err:
            raise self._failed(err, usage) from None
        return self._kept(task, key, model, usage, result)

    @contextlib.contextmanager
    def _async_sdk(self) -> Iterator[openai.AsyncOpenAI]:
        """An AsyncOpenAI client of the running event loop for one request (those of closed loops are
        dropped): the least busy of the loop's connection pools (_Pools)."""
        with self._lock:
            pools = self._pools()
            index = pools.take()
        try:
            yield pools.sdks[index]
        finally:
            with self._lock:
                pools.busy[index] -= 1

    async def _closed_with_loop(self) -> None:
        """Make the running loop's clients, once, with an async generator that closes them: a loop that
        shuts down (asyncio.run, veralith.pipeline.pool.LoopPool) closes its async generators."""
        with self._lock:
            pools = self._pools()
            closer, pools.closer = pools.closer, pools.closer or _closing(pools)
        if closer is None:
            await pools.closer.__anext__()   # started: the loop now knows it, and closes it when it shuts down

    def _pools(self) -> _Pools:
        """The running loop's clients (those of closed loops are dropped); the caller holds the lock."""
        loop = asyncio.get_running_loop()
        pools = self._async_sdks.get(loop)
        if pools is None:
            for gone in [old for old in self._async_sdks if old.is_closed()]:
                del self._async_sdks[gone]
            pools = self._async_sdks[loop] = _Pools(self._new_async_sdk)
        return pools

    def _new_async_sdk(self) -> openai.AsyncOpenAI:
        # aiohttp (the SDK's DefaultAioHttpClient): 0.70x the CPU per request of httpx at concurrency 64
        # (benchmarks/async_transport.py). Its sessions are closed with their loop (_closed_with_loop).
        return openai.AsyncOpenAI(api_key=self._secret or _PLACEHOLDER_KEY, base_url=self.base_url,
                                  timeout=self.timeout_s, max_retries=0, http_client=openai.DefaultAioHttpClient())

    def _key(self, task: Task, payload: BaseModel) -> tuple[str, str, dict[str, Any], list[dict[str, str]]]:
        """(cache key, model the task goes to, schema, the call's messages as json_schema mode sends them)."""
        schema, schema_json = self._schema(task, payload)
        model = model_for(task.name, self.sent_model, self.decomposer_model)
        # Keyed on the json_schema rendering whatever the server accepts: all modes ask the same question.
        # The transport sends these messages as they are in that mode, instead of rendering them again.
        messages = render(task.name, payload, model=model)
        key = _keyed(self.backend, model, self.prompt_version(task.name), messages, schema_json,
                     {"temperature": self.temperature})
        return key, model, schema, messages

    def _kept(self, task: Task, key: str, model: str, usage: CallUsage, result: CallResult) -> CallResult:
        """A judged call's result, priced, reported to the cost tracker and cached (when complete)."""
        usage.usd = self._usd(usage)
        self._record(usage)
        if self.cache is not None and not result.missing:
            value = result.output.model_dump(mode="json")
            if result.confidence:
                value[_CONFIDENCE_KEY] = result.confidence
            if result.repairs:
                value[_REPAIRS_KEY] = [list(r) for r in result.repairs]
            self.cache.put(key, value, task=task.name, model=model,
                           prompt_version=self.prompt_version(task.name))
        return result

    def _judge(self, task: Task, payload: BaseModel, schema: dict[str, Any], usage: CallUsage,
               model: str) -> Generator[_Ask, Sent, CallResult]:
        """The judging of one call, as a generator: it yields each request it needs, (extra messages,
        token cap), is sent the reply, and returns the result. `run` and `arun` send the requests (one
        blocking, one awaiting); reading, re-asking and validating are written once, here."""
        # The cap: the task's fixed one, lowered to what this server's replies to it needed (veralith.llm.pace).
        habits = self.server.habits(model)
        allowance = output_allowance(task.name, payload, model)
        cap = pace.max_tokens(habits, task.name, allowance, max_output_tokens(task.name, payload, model, allowance))
        # Results are labelled with the judge model, so a reply from the decomposer model never names it.
        labels = model == self.sent_model

        def read(sent: Sent) -> tuple[str, list[Any] | None, list[str]]:
            return self._reply(sent, usage, labels=labels)

        first = yield [], cap
        if first.completion is not None and first.completion.usage is not None and first.completion.choices:
            pace.note_output(habits, task.name, first.completion.usage.completion_tokens or 0, allowance,
                             cut_off=first.completion.choices[0].finish_reason == "length")
        content, tokens, problems = read(first)
        if not task.items:
            return (yield from self._whole(task, payload, usage, content, problems, read, cap))
        reading = self._items(task, payload, content, problems)
        reasked = reading is None
        if reading is None:   # no JSON at all: asked again whole, once
            log.info("re-asking %s judge once: %s", task.name, self._redact("; ".join(problems)))
            content, tokens, problems = read((yield _reask(content, problems), _grown(cap, problems)))
            reading = self._items(task, payload, content, problems)
            if reading is None:
                raise JudgeCallError("malformed_reply", "the judge's reply was unusable twice: " + "; ".join(problems),
                                     attempts=2)
        replies = [(content, tokens, reading)]
        output, bad = settle(task, payload, reading.items, reading.bad)
        if bad and not reasked:   # only the bad items are asked again, once
            good = {k: v for k, v in reading.items.items() if k not in bad}
            log.info("re-asking %s judge for %d item(s)", task.name, len(bad))
            text = _items_reask(bad, reading.general + problems)
            content, tokens, problems = read((yield _reask_messages(content, text), _grown(cap, problems)))
            again = self._items(task, payload, content, problems, only=set(bad)) or Reading()
            replies.append((content, tokens, again))
            still = {k: [*v, "no usable item for it in the re-ask either"] for k, v in bad.items()
                     if k not in again.items and k not in again.bad}
            output, bad = settle(task, payload, {**good, **again.items}, {**still, **again.bad})
        if bad and not any(getattr(output, spec.field) for spec in task.items):
            notes = list(dict.fromkeys(g for _, _, r in replies for g in r.general))
            raise JudgeCallError("malformed_reply", "no usable item in the judge's replies: " + "; ".join(
                [f"{item_label(k)}: {' / '.join(v)}" for k, v in bad.items()] + notes),
                attempts=len(replies) + reasked)
        return CallResult(output, usage, self._confidence(task, output, replies),
                          missing={k[1]: self._redact("; ".join(v)) for k, v in bad.items()},
                          repairs=[r for _, _, reading in replies for r in reading.repairs])

    def _whole(self, task: Task, payload: BaseModel, usage: CallUsage, content: str, problems: list[str],
               read: Callable[[Sent], tuple[str, list[Any] | None, list[str]]],
               cap: int) -> Generator[_Ask, Sent, CallResult]:
        """An extraction task: the whole reply is used, or re-asked once, or the call fails."""
        for attempt in (1, 2):
            if not problems:
                try:
                    output, repairs = read_whole(task, payload, content)
                    return CallResult(output, usage, {}, repairs=list(repairs))
                except Unusable as bad:
                    problems = bad.problems
            if attempt == 2:
                break
            log.info("re-asking %s judge once: %s", task.name, self._redact("; ".join(problems)))
            content, _, problems = read((yield _reask(content, problems), _grown(cap, problems)))
        raise JudgeCallError("malformed_reply", "the judge's reply was unusable twice: " + "; ".join(problems),
                             attempts=2)

    def _items(self, task: Task, payload: BaseModel, content: str, problems: list[str], *,
               only: set[Key] | None = None) -> Reading | None:
        """The reply read item by item; None when nothing in it can be read (problems then say why)."""
        if problems and problems != [_CUT_OFF]:
            return None
        try:
            reading = read_items(task, payload, content, only=only)
        except Unusable as bad:
            problems[:] = bad.problems + problems
            return None
        return reading

    def _reply(self, sent: Sent, usage: CallUsage, *, labels: bool) -> tuple[str, list[Any] | None, list[str]]:
        """(content with any echoed key masked, its tokens' log-probabilities, problems that make it unusable)."""
        completion = sent.completion
        if completion is None:
            return "", None, ["the server's answer is not a chat completion; send the JSON object"]
        reported = completion.model if isinstance(completion.model, str) and completion.model.strip() else None
        if reported:
            usage.model = reported
            if self._label_from_server and labels:
                self.model = reported
        if not completion.choices:
            return "", None, ["the reply has no choices"]
        choice = completion.choices[0]
        if choice.message.refusal:
            return choice.message.refusal, None, [
                f"the model refused ({self._redact(choice.message.refusal)[:300]}); the texts are data to "
                "evaluate, so answer with the JSON object"]
        content = choice.message.content or ""
        if len(self._secret) >= 4 and self._secret in content:
            content = content.replace(self._secret, MASK)   # a server echoing the key: never read, cached or stored
        tokens = choice.logprobs.content if choice.logprobs is not None else None
        return content, tokens, ([_CUT_OFF] if choice.finish_reason == "length" else [])

    def _confidence(self, task: Task, output: BaseModel, replies: list[tuple[str, list[Any] | None, Reading]]
                    ) -> dict[str, float]:
        """Confidence of each item in `output`, read from the reply it was taken from."""
        kept = {(spec.field, item[spec.id_field]): item for spec in task.items
                for item in output.model_dump(mode="json")[spec.field]}
        confidence: dict[str, float] = {}
        for content, tokens, reading in replies:
            labels = {k: str(item[LABEL_FIELDS[(task.name, k[0])]]) for k, item in kept.items()
                      if (task.name, k[0]) in LABEL_FIELDS and reading.items.get(k) == item}
            confidence.update(label_confidence(task, content, tokens, labels))
        return confidence

    # ------------------------------------------------------------ helpers
    def _from_cache(self, task: Task, payload: BaseModel, key: str, model: str) -> CallResult | None:
        if self.cache is None:
            return None
        hit = self.cache.get(key)
        if hit is None:
            return None
        hit = dict(hit)                           # the cache's own copy stays as it was
        stored = hit.pop(_CONFIDENCE_KEY, None)   # absent in entries written without log-probabilities
        repairs = hit.pop(_REPAIRS_KEY, None)
        try:
            output = task.output_for(payload).model_validate(hit)
        except ValueError:
            return None   # written by an older output model: ask again, the fresh reply overwrites it
        usage = CallUsage(model=model, cache_hits=1, calls=0, usd=0.0)
        self._record(usage)
        confidence = {str(k): float(v) for k, v in stored.items()} if isinstance(stored, dict) else {}
        kept = [(str(r[0]), str(r[1])) for r in repairs or [] if isinstance(r, list) and len(r) == 2]
        return CallResult(output, usage, confidence, repairs=kept)

    def _record(self, usage: CallUsage) -> None:
        """Report one call or cache hit to the cost tracker (a subclass may hold it back: veralith.batchapi)."""
        record_call(usage)

    def _usd(self, usage: CallUsage) -> float | None:
        if self.price is None:
            return None   # unknown price is None, never a silent 0 (veralith/observability/cost.py prices)
        return self.price(usage.model, usage.input_tokens, usage.cached_input_tokens, usage.output_tokens)

    def _redact(self, text: str) -> str:
        """The key, a password in the base URL and echoed auth headers, masked (veralith/redact.py)."""
        return redact(text, [self._secret])

    def _failed(self, err: JudgeCallError, usage: CallUsage) -> JudgeCallError:
        """`err`, its message masked, carrying the usage the call consumed (already reported as spent)."""
        err.message = self._redact(err.message)
        err.args = (err.message,)
        # Tokens spent on a failed call still cost money; the cost tracker reads them from here.
        usage.usd = self._usd(usage)
        self._record(usage)
        err.usage = usage
        return err


class _Pools:
    """The AsyncOpenAI clients of one event loop, each with its own HTTP connection pool.

    httpx's pool looks at every connection it holds (an idle one with a system call) whenever a
    request starts or ends, so with a hundred requests in flight one pool cost more CPU per request
    than the rest of the SDK (profiled at concurrency 64: docs/benchmarks.md, "Async path"). A
    request goes to the least busy pool; another pool is opened, up to MAX, only when each holds
    SHARE requests, so below SHARE requests in flight there is one client, as there always was.
    """

    SHARE = 32
    MAX = 8

    def __init__(self, make: Callable[[], openai.AsyncOpenAI]) -> None:
        self.make = make
        self.sdks: list[openai.AsyncOpenAI] = []
        self.busy: list[int] = []   # requests in flight on each
        self.closer: AsyncGenerator[None, None] | None = None   # closes them with the loop (_closing)

    def take(self) -> int:
        """The index of the client the next request goes to, counted as busy (the caller holds the lock)."""
        index = min(range(len(self.busy)), key=self.busy.__getitem__, default=-1)
        if index < 0 or (self.busy[index] >= self.SHARE and len(self.sdks) < self.MAX):
            self.sdks.append(self.make())
            self.busy.append(0)
            index = len(self.sdks) - 1
        self.busy[index] += 1
        return index


async def _closing(pools: _Pools) -> AsyncGenerator[None, None]:
    """Closes a loop's clients (their aiohttp sessions) when the loop shuts its async generators down."""
    try:
        yield
    finally:
        for sdk in pools.sdks:
            with contextlib.suppress(Exception):
                await sdk.close()


def _grown(cap: int, problems: list[str]) -> int:
    """The cap for a re-ask: twice as large when the reply it follows was cut off there."""
    return cap * 2 if _CUT_OFF in problems else cap


def _reask(content: str, problems: list[str]) -> list[dict[str, str]]:
    listed = "\n".join(f"- {p}" for p in problems[:20])
    return _reask_messages(content, f"Your reply could not be used:\n{listed}\nReply again with one complete JSON "
                                    "object that follows the schema, with exactly one item per id given in the "
                                    "data blocks.")


def _reask_messages(content: str, text: str) -> list[dict[str, str]]:
    # The bad reply is echoed so the model sees what to fix; a runaway one is cut short.
    return [{"role": "assistant", "content": content[:_MAX_ECHO] or "(empty reply)"}, {"role": "user", "content": text}]


def _items_reask(bad: dict[Key, list[str]], general: list[str]) -> str:
    listed = "\n".join(f"- {item_label(k)}: {' / '.join(v)}" for k, v in list(bad.items())[:20])
    notes = "".join(f"\n- {g}" for g in dict.fromkeys(general) if g != _CUT_OFF) + (
        f"\n- {_CUT_OFF}" if _CUT_OFF in general else "")
    wanted = "; ".join(f"{field}: {', '.join(i for f, i in bad if f == field)}"
                       for field in dict.fromkeys(f for f, _ in bad))
    return (f"These items of your reply could not be used:\n{listed}{notes}\nReply again with one JSON object that "
            f"follows the schema and holds items only for these ids ({wanted}); leave the other lists empty. The "
            "other items are kept as they were.")
