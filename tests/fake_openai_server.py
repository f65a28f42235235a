"""A small OpenAI-compatible chat-completions server on 127.0.0.1, for tests and benchmarks.

The real `openai` SDK talks to it over HTTP, so retries, timeouts, usage accounting and
structured-output parsing are exercised for real (openai 3.x runs on httpx2, which respx and
httpx.MockTransport do not see).

In pytest (the `openai_server` fixture, exposed by tests/conftest.py):

    def test_x(openai_server):
        openai_server.enqueue({"items": [...]})              # JSON content of one chat.completion
        openai_server.enqueue('{"items": [')                 # content text as is (malformed here)
        openai_server.enqueue(Reply.error(429, retry_after=0))
        openai_server.enqueue(Reply.error(500))
        openai_server.enqueue(Reply.raw('{"id": "x", "cho'))  # raw HTTP body (truncated)
        openai_server.enqueue(Reply.hang(5))                  # sleeps past the client's timeout
        openai_server.enqueue(Reply.tool_calls([{"id": "call_1", "name": "search", "arguments": {"q": "x"}}]))
        openai_server.responder = lambda body: {...}          # computed replies (after the queue)
        openai_server.latency_s = 0.05
        openai_server.count_tokens = True                     # usage counted with tiktoken (o200k_base)
        openai_server.usage = {"prompt_tokens": 300, ...}     # what every reply reports (None: counted)
        openai_server.enqueue(Reply.of({...}, usage={"prompt_tokens": 40}))      # one reply's usage
        openai_server.enqueue(Reply.of({...}, label_probs=[{"supported": 0.9, "unsupported": 0.1}]))
        openai_server.logprobs = True                         # log-probabilities on every reply that asks
        openai_server.served_model = "llama-3.2-3b.gguf"       # the model every reply names
        openai_server.set_faults(rate_429=0.1, rate_500=0.1, rate_truncated=0.1, seed=7)
        openai_server.habits = {"json_schema_500", "prose"}    # habits of local model servers (below)
        ... settings.override(backend="openai", base_url=openai_server.base_url, api_key="test") ...
        openai_server.slots = 4                               # GET /props says total_slots (llama.cpp)
        openai_server.owned_by = "vllm"                       # the model list names vLLM
        openai_server.ollama_version = "0.12.0"                # GET /api/version answers (Ollama)
        openai_server.requests, openai_server.count, openai_server.by_task(), openai_server.probes

Order of answers: scripted queue, then `responder` (body -> reply, or None to pass), then (when
`auto` is true, the default) a valid, schema-conforming trivial judgment computed from the prompt;
with `auto = False` an unanswered request gets a 400 naming the problem. A responder that raises
yields a 500 carrying its error. Faults apply only to unscripted requests.

As a subprocess (benchmarks, crash and CLI tests):

    python tests/fake_openai_server.py --port 0 --latency 0.5 --auto [--fault-429 0.1 --seed 1] \
        [--count-tokens] [--logprobs] [--habit prose --habit enum_case ...]

prints `READY http://127.0.0.1:PORT/v1` on its first stdout line; GET /v1/_stats returns counts.

The auto responder reads the data blocks Veralith's prompts render (veralith/llm/prompts.py):
a `Boundary token: T` line, then `<name-T id="..." ...>text</name-T>` blocks. It answers the
questions task with one sub-question (the query), the claims task with one claim per response
sentence (a sentence saying information is missing becomes a gap instead), every claim supported
by the first chunk, every sub-question sufficient from the first chunk, and every claim answering
the first sub-question. Standard library only, so it runs without Veralith installed.

Probes: a request with the `x-veralith-probe: 1` header (veralith.llm.probe, learning what the server
does) is answered apart from the judge calls: recorded in `probes` (not `requests` nor `count`), it
skips the queue, the responder and the faults. Its answer is what a server would give: the schema's
one valid instance when a schema constrains the reply (below), else a JSON greeting in JSON mode,
else a greeting in prose. Schemas constrain replies as a llama.cpp-based server's grammar does, in
any of three forms: a `json_schema` response_format, `{"type": "json_object", "schema": ...}`
(llama-cpp-python), a top-level `json_schema` field (llama.cpp); habits below change that.

Usage: `prompt_tokens` is ceil(characters / 4) of the messages and response_format schema, at
least 100 (so a tiny raw request reports 100), unless `count_tokens` counts it with tiktoken or
`usage` / a reply's `usage` scripts it. Veralith's client compares it with what it sent to detect
servers that truncate prompts, so a scripted figure far below the real size reads as truncation.

Habits (`habits`, `--habit`), what local model servers were seen to do; each applies to every
request (json_schema_500, drop_system, slow_logprobs) or to every unscripted reply (the others):

    json_schema_500   a `json_schema` response_format is answered HTTP 500 naming it, as llama-cpp-python's
                      server does (older llama.cpp builds too); `json_object` with a `schema` works and
                      constrains the reply, as llama-cpp-python's does
    no_grammar        every form is accepted and none constrains the reply (a server that ignores schemas:
                      a probe is answered with a greeting); JSON mode still gives JSON
    drop_system       the chat template drops the system message: usage counts the other messages only,
                      and a request that had one gets prose back (the model never saw its instructions)
    prose             the JSON comes wrapped in prose and a ```json fence
    enum_case         enum values capitalised ("Supported", "Yes", "Answered", "Answers")
    id_case           item ids echoed upper-case ("K1", "Q1")
    bad_item          in a judge reply, the last item has an invalid label; a re-ask is answered right
    bad_item_always   the same, and the re-ask repeats it
    slow_logprobs     log-probabilities are returned, and a request that asks for them (a probe too)
                      takes `slow_logprobs_s` (0.4 s) longer: a small model on a CPU
Streaming: a request with `stream: true` gets its reply (content or tool calls) as server-sent
chunks, the content cut into words, then the usage chunk when `stream_options.include_usage` asks.

Log-probabilities: a request with `logprobs: true` gets `choices[0].logprobs` when the reply has
`label_probs` or the server's `logprobs` is true. The content is cut into tokens so that each label
value ("relation", "sufficient", "status") is one token; `label_probs[n]` gives the n-th label's
alternatives as {label: probability}, the label in the content first (default: it alone at 1.0).
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import random
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["HABITS", "FakeOpenAIServer", "Reply", "auto_reply", "openai_server"]


@dataclass
class Reply:
    """One scripted answer. Plain dicts/strings passed to `enqueue` become `Reply.content(...)`."""

    kind: str = "content"                 # content | tool_calls | error | raw | hang | trickle
    content: Any = None                   # dict/list -> JSON text; str -> verbatim content
    status: int = 200
    retry_after: float | None = None
    body: str | None = None               # raw HTTP body (kind raw/error)
    seconds: float = 0.0                  # hang duration
    usage: dict[str, int] | None = None   # prompt_tokens, completion_tokens, cached_tokens
    finish_reason: str = "stop"
    label_probs: list[dict[str, float]] | None = None   # per label occurrence: {label: probability}
    quote_in_token: bool = False          # the label's opening quote shares its token ('"supported')

    @staticmethod
    def of(content: Any, *, usage: dict[str, int] | None = None, finish_reason: str = "stop",
           label_probs: list[dict[str, float]] | None = None, quote_in_token: bool = False) -> Reply:
        return Reply("content", content=content, usage=usage, finish_reason=finish_reason,
                     label_probs=label_probs, quote_in_token=quote_in_token)

    @staticmethod
    def tool_calls(calls: list[dict[str, Any]]) -> Reply:
        """An assistant message that calls tools: [{"id", "name", "arguments" (a dict)}, ...]."""
        return Reply("tool_calls", content=calls, finish_reason="tool_calls")

    @staticmethod
    def error(status: int, *, retry_after: float | None = None, message: str | None = None) -> Reply:
        text = message or {429: "Rate limit reached", 500: "The server had an error"}.get(status, "error")
        body = json.dumps({"error": {"message": text, "type": "fake_error", "param": None, "code": str(status)}})
        return Reply("error", status=status, retry_after=retry_after, body=body)

    @staticmethod
    def raw(body: str, *, status: int = 200) -> Reply:
        return Reply("raw", status=status, body=body)

    @staticmethod
    def hang(seconds: float) -> Reply:
        return Reply("hang", seconds=seconds)

    @staticmethod
    def trickle(content: Any, seconds_per_byte: float) -> Reply:
        """A valid reply sent one byte at a time: every read succeeds, the whole takes long."""
        return Reply("trickle", content=content, seconds=seconds_per_byte)


class _Server(ThreadingHTTPServer):
    daemon_threads = True       # handler threads never block teardown
    request_queue_size = 256    # concurrent CLI/benchmark clients would overflow the default backlog of 5


class FakeOpenAIServer:
    """The server object: scripting, recording and lifecycle. Thread-safe."""

    def __init__(self, *, port: int = 0, latency_s: float = 0.0, auto: bool = True,
                 count_tokens: bool = False) -> None:
        self.latency_s = latency_s
        self.auto = auto
        self._count_tokens = False
        self.count_tokens = count_tokens      # report usage counted with tiktoken instead of self.usage
        self.responder: Callable[[dict[str, Any]], Any] | None = None
        # prompt_tokens None: counted from the request (see the module doc)
        self.usage: dict[str, int | None] = {"prompt_tokens": None, "completion_tokens": 20, "cached_tokens": 0}
        self.logprobs = False                 # log-probabilities on every reply whose request asks for them
        self.habits: set[str] = set()         # see the module doc
        self.served_model: str | None = None  # the model replies name (None: the one the request asked for)
        self.slow_logprobs_s = 0.4
        self.slots: int | None = None         # GET /props answers {"total_slots": slots} when set (llama.cpp)
        self.instance = f"fake-{os.getpid()}-{time.time_ns()}"
        self.owned_by = "fake"                # the model list's owned_by ("vllm": what vLLM says)
        self.ollama_version: str | None = None   # GET /api/version answers {"version": ...} when set (Ollama)
        self._probes: list[dict[str, Any]] = []
        self._faults: dict[str, float] = {}
        self._rng = random.Random(0)
        self._lock = threading.Lock()
        self._queue: list[Reply] = []
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self.in_flight = 0                    # requests being answered now
        self.max_in_flight = 0                # the most answered at once (concurrency the client reached)
        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", port), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai-server", daemon=True)

    # ------------------------------------------------------------ lifecycle
    @property
    def count_tokens(self) -> bool:
        return self._count_tokens

    @count_tokens.setter
    def count_tokens(self, on: bool) -> None:
        if on:   # a test that asks for tiktoken counts skips here, with the reason, on a fresh clone
            need_offline_encodings()
        self._count_tokens = on

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()          # wakes hanging handlers so teardown is immediate
        self._httpd.shutdown()
        self._httpd.server_close()

    # ------------------------------------------------------------ scripting
    def enqueue(self, *replies: Any) -> None:
        with self._lock:
            self._queue.extend(r if isinstance(r, Reply) else Reply.of(r) for r in replies)

    def set_faults(self, *, rate_429: float = 0.0, rate_500: float = 0.0, rate_truncated: float = 0.0,
                   seed: int = 0) -> None:
        """Turn unscripted answers into 429 / 500 / truncated-JSON content at these rates (seeded)."""
        with self._lock:
            self._faults = {"429": rate_429, "500": rate_500, "truncated": rate_truncated}
            self._rng = random.Random(seed)

    # ------------------------------------------------------------ recording
    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        with self._lock:
            return list(self._headers)

    @property
    def probes(self) -> list[dict[str, Any]]:
        """The probe requests (veralith.llm.probe), in order; not in `requests`."""
        with self._lock:
            return list(self._probes)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self._requests)

    def by_task(self) -> Counter[str]:
        """Requests per task name (from response_format, else the system prompt's first line)."""
        return Counter(task_of(body) for body in self.requests)

    # ------------------------------------------------------------ answering
    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.pop(0)
            roll = self._rng.random() if self._faults else 1.0
        if roll < self._faults.get("429", 0.0):
            return Reply.error(429, retry_after=0)
        roll -= self._faults.get("429", 0.0)
        if roll < self._faults.get("500", 0.0):
            return Reply.error(500)
        roll -= self._faults.get("500", 0.0)
        truncate = roll < self._faults.get("truncated", 0.0)
        try:
            # A responder may answer only some requests: None falls through to the auto reply.
            reply = self.responder(body) if self.responder is not None else None
            if reply is None and self.auto:
                reply = auto_reply(body)
        except Exception as exc:  # a broken responder shows up as a readable 500, not a dropped socket
            return Reply.error(500, message=f"fake_openai_server: responder failed: {type(exc).__name__}: {exc}")
        if reply is None:
            return Reply.error(400, message=f"fake_openai_server: no reply scripted for request #{self.count} "
                                            "(enqueue one, set .responder, or set .auto = True)")
        reply = reply if isinstance(reply, Reply) else Reply.of(reply)
        if reply.kind == "content" and self.habits:
            reply = _with_habits(self.habits, body, reply)
        if truncate and reply.kind == "content":
            text = _content_text(reply.content)
            reply = Reply.of(text[: max(1, len(text) // 2)], finish_reason="length", usage=reply.usage)
        return reply

    def probe_answer(self, body: dict[str, Any]) -> tuple[int, str]:
        """(status, JSON body) for a probe request, recorded in `probes` (see the module doc)."""
        with self._lock:
            self._probes.append(body)
        fmt = body.get("response_format") or {}
        if "json_schema_500" in self.habits and fmt.get("type") == "json_schema":
            message = 'response_format type must be one of "text" or "json_object", but got: json_schema'
            return 500, json.dumps({"error": {"code": 500, "message": message, "type": "server_error"}})
        schema = constraining_schema(body, self.habits)
        if schema is not None:
            content: Any = instance_of(schema)
        elif fmt.get("type") == "json_object":
            content = {"greeting": "Hello!"}
        else:
            content = "Hello! How can I help you today?"
        return 200, json.dumps(self._completion(body, Reply.of(content)))

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        if reply.kind == "tool_calls":
            return _tool_call_completion(self.count, body, reply)
        content = _content_text(reply.content)
        read = body
        if "drop_system" in self.habits:   # what the chat template kept is what is counted
            read = {**body, "messages": [m for m in body.get("messages") or [] if m.get("role") != "system"]}
        counted = counted_usage(read, content) if self.count_tokens else {}
        usage = {**self.usage, **counted, **(reply.usage or {})}
        if usage.get("prompt_tokens") is None:
            usage["prompt_tokens"] = approximate_prompt_tokens(read)
        logprobs = None
        wanted = reply.label_probs is not None or self.logprobs or "slow_logprobs" in self.habits
        if body.get("logprobs") and wanted:
            logprobs = {"content": token_logprobs(content, reply.label_probs or [], reply.quote_in_token,
                                                  int(body.get("top_logprobs") or 0)), "refusal": None}
        return {
            "id": f"chatcmpl-fake-{self.count}", "object": "chat.completion", "created": int(time.time()),
            "model": self.served_model or body.get("model", "fake-model"), "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "finish_reason": reply.finish_reason, "logprobs": logprobs,
                         "message": {"role": "assistant", "content": content, "refusal": None}}],
            "usage": {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                      "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
                      "prompt_tokens_details": {"cached_tokens": usage["cached_tokens"]}},
        }


def _tool_call_completion(n: int, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
             for c in reply.content]
    return {"id": f"chatcmpl-fake-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "fake-model"),
            "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None,
                         "message": {"role": "assistant", "content": None, "refusal": None, "tool_calls": calls}}],
            "usage": {"prompt_tokens": approximate_prompt_tokens(body), "completion_tokens": 10, "total_tokens":
                      approximate_prompt_tokens(body) + 10}}


def _event_stream(body: dict[str, Any], completion: dict[str, Any]) -> str:
    """A completion as the server-sent chunks of a streamed reply: the content word by word (or the
    tool calls), the finish reason, the usage when asked, then [DONE]."""
    message, head = completion["choices"][0]["message"], {k: completion[k] for k in ("id", "created", "model")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return "data: " + json.dumps({**head, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}) + "\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": word}) for word in re.findall(r"\S+\s*|\s+", message.get("content") or "")]
    events += [chunk({"tool_calls": [{"index": i, **call}]}) for i, call in enumerate(message.get("tool_calls") or [])]
    events.append(chunk({}, completion["choices"][0]["finish_reason"]))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append("data: " + json.dumps({**head, "object": "chat.completion.chunk", "choices": [],
                                             "usage": completion["usage"]}) + "\n\n")
    return "".join(events) + "data: [DONE]\n\n"


def _content_text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content)


def approximate_prompt_tokens(body: dict[str, Any]) -> int:
    """ceil(characters / 4) of the messages and the response_format schema, at least 100."""
    chars = sum(len(str(m.get("role", ""))) + len(str(m.get("content") or "")) for m in body.get("messages") or [])
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
    if schema is not None:
        chars += len(json.dumps(schema, separators=(",", ":")))
    return max(100, -(-chars // 4))


_LABEL_KEY = re.compile(r'(?<!\\)"(?:relation|sufficient|status)"\s*:\s*"')


def token_logprobs(content: str, label_probs: list[dict[str, float]], quote_in_token: bool = False,
                   top: int = 5) -> list[dict[str, Any]]:
    """The chat-completions `logprobs.content` list for `content` (see the module doc)."""
    def token(text: str, logprob: float, alternatives: list[tuple[str, float]]) -> dict[str, Any]:
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8")),
                "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode("utf-8"))}
                                 for t, lp in alternatives[:max(top, 1)]]}

    def plain(text: str) -> list[dict[str, Any]]:
        return [token(text[i:i + 4], 0.0, [(text[i:i + 4], 0.0)]) for i in range(0, len(text), 4)]

    tokens: list[dict[str, Any]] = []
    position = 0
    for n, match in enumerate(_LABEL_KEY.finditer(content)):
        start = match.end() - 1 if quote_in_token else match.end()
        value = content[match.end():content.index('"', match.end())]
        probs = label_probs[n] if n < len(label_probs) else {value: 1.0}
        if next(iter(probs)) != value:
            raise ValueError(f"label_probs[{n}] must start with the label in the content, {value!r}")
        lead = '"' if quote_in_token else ""
        tokens += plain(content[position:start])
        tokens.append(token(lead + value, math.log(probs[value]),
                            [(lead + label, math.log(p)) for label, p in probs.items()]))
        position = match.end() + len(value)
    return tokens + plain(content[position:])


def offline_encodings() -> Path | None:
    """The offline copy of tiktoken's encodings: TIKTOKEN_CACHE_DIR when set, else the optional shared
    folder's (VERALITH_SHARED_DIR, or ../shared beside the checkout); None when neither is there."""
    cached = os.environ.get("TIKTOKEN_CACHE_DIR")
    if cached:
        return Path(cached) if Path(cached).is_dir() else None
    shared = Path(os.environ.get("VERALITH_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared")
    return shared / "tiktoken" if (shared / "tiktoken").is_dir() else None


def need_offline_encodings() -> Path:
    """The offline encodings, or (under pytest) skip the calling test naming what is missing: tiktoken
    would otherwise download them, and tests never touch the network. Outside pytest, a RuntimeError."""
    found = offline_encodings()
    if found is not None:
        return found
    reason = ("needs the offline tiktoken encodings (the shared folder's tiktoken/ or TIKTOKEN_CACHE_DIR), "
              "absent on this checkout: tiktoken would otherwise download them")
    if "pytest" in sys.modules:
        import pytest

        pytest.skip(reason)
    raise RuntimeError(reason)


def counted_usage(body: dict[str, Any], content: str) -> dict[str, int]:
    """Usage as OpenAI counts chat input: per message 3 + tokens(role + content), 3 to prime the reply,
    plus the compact JSON of a response_format schema (structured outputs bill it as input).

    Only for `count_tokens`: tiktoken is imported here so the default mode stays stdlib-only.
    """
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(need_offline_encodings()))   # never a download
    import tiktoken

    enc = tiktoken.get_encoding("o200k_base")
    prompt = 3 + sum(3 + len(enc.encode(f"{m.get('role', '')}{m.get('content') or ''}", disallowed_special=()))
                     for m in body.get("messages") or [])
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
    if schema is not None:
        prompt += len(enc.encode(json.dumps(schema, separators=(",", ":")), disallowed_special=()))
    return {"prompt_tokens": prompt, "completion_tokens": len(enc.encode(content, disallowed_special=()))}


def _handler_for(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"   # keep-alive: the SDK pools connections
        # Headers and body go out in two writes; with Nagle's algorithm the body then waits for the
        # client's delayed ACK, 40 ms per request on Linux.
        disable_nagle_algorithm = True
        timeout = 60                    # an idle pooled connection frees its thread after a minute

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
            return

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/_stats"):
                self._send(200, json.dumps({"count": server.count, "by_task": dict(server.by_task()),
                                            "max_in_flight": server.max_in_flight, "probes": len(server.probes)}))
            elif self.path.rstrip("/").endswith("/models"):
                # `root` differs per server instance, so what a client learnt about one fake server (its
                # identity: veralith.llm.probe) is never taken for another on the same port.
                self._send(200, json.dumps({"object": "list", "data": [{"id": "fake-model", "object": "model",
                                                                          "owned_by": server.owned_by,
                                                                          "root": server.instance}]}))
            elif self.path.rstrip("/") == "/api/version" and server.ollama_version is not None:
                self._send(200, json.dumps({"version": server.ollama_version}))
            elif self.path.rstrip("/") == "/props" and server.slots is not None:
                self._send(200, json.dumps({"total_slots": server.slots, "build_info": "fake"}))
            else:
                self._send(404, json.dumps({"error": {"message": "not found"}}))

        def do_POST(self) -> None:
            with server._lock:
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            self._counted = True
            try:
                self._answer()
            finally:
                self._uncount()

        def _uncount(self) -> None:
            """The request is no longer in flight: before its answer is written, so that a client that
            sends its next request on reading the answer is never counted twice."""
            if getattr(self, "_counted", False):
                self._counted = False
                with server._lock:
                    server.in_flight -= 1

        def _answer(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                body = {"_unparsable": raw.decode("utf-8", "replace")}
            if self.headers.get("x-veralith-probe") == "1":
                self._probe(body)
                return
            with server._lock:
                server._requests.append(body)
                server._headers.append({k.lower(): v for k, v in self.headers.items()})
            if server.latency_s:
                server._stopping.wait(server.latency_s)
            if "slow_logprobs" in server.habits and body.get("logprobs"):
                server._stopping.wait(server.slow_logprobs_s)
            fmt = body.get("response_format") or {}
            if "json_schema_500" in server.habits and fmt.get("type") == "json_schema":
                message = 'response_format type must be one of "text" or "json_object", but got: json_schema'
                self._send(500, json.dumps({"error": {"code": 500, "message": message, "type": "server_error"}}))
                return
            if "drop_system" in server.habits and any(m.get("role") == "system" for m in body.get("messages") or []):
                reply = Reply.of("I'm happy to help! Could you tell me what you would like me to do with this text?")
                self._send(200, json.dumps(server._completion(body, reply)))
                return
            reply = server._next(body)
            if reply.kind == "hang":
                server._stopping.wait(reply.seconds)
                self.close_connection = True
                return
            if reply.kind == "trickle":
                self._trickle(json.dumps(server._completion(body, reply)).encode("utf-8"), reply.seconds)
                return
            if reply.kind in ("error", "raw"):
                extra = {"Retry-After": str(reply.retry_after)} if reply.retry_after is not None else {}
                self._send(reply.status, reply.body or "", extra)
                return
            if body.get("stream"):
                self._send(200, _event_stream(body, server._completion(body, reply)),
                           {"Content-Type": "text/event-stream"})
                return
            self._send(200, json.dumps(server._completion(body, reply)))

        def _probe(self, body: dict[str, Any]) -> None:
            if "slow_logprobs" in server.habits and body.get("logprobs"):
                server._stopping.wait(server.slow_logprobs_s)
            self._send(*server.probe_answer(body))

        def _trickle(self, data: bytes, pause: float) -> None:
            self._uncount()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                for i in range(len(data)):
                    if server._stopping.wait(pause):
                        break
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True

        def _send(self, status: int, text: str, extra: dict[str, str] | None = None) -> None:
            data = text.encode("utf-8")
            self._uncount()
            try:
                extra = extra or {}
                self.send_response(status)
                self.send_header("Content-Type", extra.pop("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(data)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True   # the client gave up (its timeout); nothing to do

    return Handler


def constraining_schema(body: dict[str, Any], habits: set[str]) -> dict[str, Any] | None:
    """The schema that constrains this request's reply, as a llama.cpp-based server reads it (module doc)."""
    if "no_grammar" in habits:
        return None
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema" and "json_schema_500" not in habits:
        return (fmt.get("json_schema") or {}).get("schema")
    if fmt.get("type") == "json_object" and isinstance(fmt.get("schema"), dict):
        return fmt["schema"]
    top = body.get("json_schema")
    return top if isinstance(top, dict) else None


def instance_of(schema: dict[str, Any]) -> Any:
    """The simplest value `schema` allows (its first enum value, empty strings and lists)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {name: instance_of(sub) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    return ""


# ---------------------------------------------------------------- auto responder

_TASKS = ("questions", "claims", "sufficiency", "faithfulness", "completeness", "explain", "fast", "fast_reask")
_TOKEN = re.compile(r"Boundary token: (\S+)")
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_LETTER = re.compile(r"[^\W\d_]")
# A sentence that says the documents lack something: the claims task makes it a gap.
_GAP = re.compile(r"\b(?:couldn't find|could not find|can't answer|cannot answer|do(?:es)?n't (?:say|mention)|"
                  r"do(?:es)? not (?:say|mention|contain)|no information)\b", re.IGNORECASE)


def task_of(body: dict[str, Any]) -> str:
    fmt = body.get("response_format") or {}
    name = (fmt.get("json_schema") or {}).get("name")
    if name in _TASKS:
        return str(name)
    messages = body.get("messages") or []
    first = str(messages[0].get("content", "")) if messages else ""
    match = re.search(r"task: (\w+)", first.split("\n", 1)[0])
    return match.group(1) if match and match.group(1) in _TASKS else "unknown"


def blocks(body: dict[str, Any]) -> dict[str, list[tuple[dict[str, str], str]]]:
    """Data blocks of the first user message: {tag name: [(attributes, text), ...]} in order."""
    user = next((m for m in body.get("messages") or [] if m.get("role") == "user"), {})
    text = str(user.get("content", ""))
    token = _TOKEN.search(text)
    found: dict[str, list[tuple[dict[str, str], str]]] = {}
    if not token:
        return found
    t = re.escape(token.group(1))
    for m in re.finditer(rf"<(\w+)-{t}((?: \w+=\"[^\"]*\")*)>\n?(.*?)\n?</\1-{t}>", text, re.DOTALL):
        attrs = {k: html.unescape(v) for k, v in _ATTR.findall(m.group(2))}
        found.setdefault(m.group(1), []).append((attrs, m.group(3)))
    return found


def auto_reply(body: dict[str, Any]) -> dict[str, Any]:
    """A valid, trivially optimistic judgment for whichever task the request is."""
    task, b = task_of(body), blocks(body)
    chunk_ids = [a["id"] for a, _ in b.get("chunk", [])]
    sq_ids = [a["id"] for a, _ in b.get("subq", [])]
    claim_ids = [a["id"] for a, _ in b.get("claim", [])]
    gap_ids = [a["id"] for a, _ in b.get("gap", [])]
    first = chunk_ids[:1]
    if task == "questions":
        query = b.get("question", [({}, "")])[0][1].strip()
        return {"sub_questions": [{"id": "q1", "text": query}] if _LETTER.search(query) else []}
    if task == "claims":
        sentences = [(a["id"], text.strip()) for a, text in b.get("s", []) if _LETTER.search(text)]
        gaps = [(i, text) for i, text in sentences if _GAP.search(text)]
        claims = [(i, text) for i, text in sentences if not _GAP.search(text)]
        return {"claims": [{"id": f"c{n}", "source_sentence_ids": [i], "text": text, "note": ""}
                           for n, (i, text) in enumerate(claims, 1)],
                "gaps": [{"id": f"g{n}", "source_sentence_ids": [i], "text": text}
                         for n, (i, text) in enumerate(gaps, 1)],
                "asks_clarification": False}
    # Sufficiency and faithfulness quote the first chunk's first words, verbatim: the chunks a verdict
    # rests on are the ones its evidence quotes (Veralith derives them; no reply writes them).
    opening = [{"chunk_id": first[0], "quote": " ".join(b["chunk"][0][1].split()[:8])}] if first else []
    if task == "sufficiency":
        return {"items": [{"sub_question_id": i, "evidence": opening, "missing_facts": [] if first else ["the answer"],
                           "reasoning": "auto reply", "sufficient": "yes" if first else "no"} for i in sq_ids]}
    if task == "faithfulness":
        return {"items": [{"claim_id": i, "evidence": opening, "reasoning": "auto reply",
                           "relation": "supported" if first else "unsupported", "contradicting_chunk_ids": []}
                          for i in claim_ids]}
    if task == "completeness":
        answered = bool(claim_ids and sq_ids)
        return {"claims": [{"claim_id": i, "role": "answers" if sq_ids else "extra",
                            "sub_question_ids": sq_ids[:1]} for i in claim_ids],
                "gaps": [{"gap_id": g, "sub_question_ids": [] if answered else sq_ids[:1]} for g in gap_ids],
                "sub_questions": [{"sub_question_id": q, "reasoning": "auto reply",
                                   "status": "answered" if answered and n == 0 else "unanswered"}
                                  for n, q in enumerate(sq_ids)]}
    if task == "explain":   # quotes the response's first words, verbatim
        said = " ".join(b.get("response", [({}, "")])[0][1].split()[:8])
        return {"quotes": [{"source": "response", "chunk_id": "", "quote": said}] if said else [],
                "missing_fact": "" if said else "the answer", "what_went_wrong": "auto reply",
                "change_to_try": "auto reply"}
    if task == "fast":
        return _fast_reply(body)
    if task == "fast_reask":   # the judged lists the re-ask's schema asks for, as the single call gives them
        asked = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema", {}).get("properties")
        return {k: v for k, v in _fast_reply(body).items()
                if k in (asked or ("sufficiency", "faithfulness", "completeness"))}
    return {"error": "fake_openai_server: unknown task"}


def _fast_reply(body: dict[str, Any]) -> dict[str, Any]:
    """The single-call task: the auto replies of the five tasks, each fed the ids the ones before wrote."""
    b = blocks(body)

    def reply(task: str, extra: dict[str, list[tuple[dict[str, str], str]]]) -> dict[str, Any]:
        lines = ["Boundary token: t"]
        for tag, items in {**b, **extra}.items():
            for attrs, text in items:
                shown = "".join(f' {k}="{html.escape(v, quote=True)}"' for k, v in attrs.items())
                lines.append(f"<{tag}-t{shown}>{text}</{tag}-t>")
        return auto_reply({"messages": [{"role": "system", "content": f"task: {task}"},
                                        {"role": "user", "content": "\n".join(lines)}]})

    questions = reply("questions", {})
    said = reply("claims", {})
    subq = {"subq": [({"id": q["id"]}, q["text"]) for q in questions["sub_questions"]]}
    claims = {"claim": [({"id": c["id"]}, c["text"]) for c in said["claims"]]}
    gaps = {"gap": [({"id": g["id"]}, g["text"]) for g in said["gaps"]]}
    judged = {"sufficiency": reply("sufficiency", subq)["items"], "faithfulness": reply("faithfulness", claims)["items"]}
    # Without chunks the schema asks for no sufficiency or faithfulness list.
    return {**questions, **said, "remarks": [], **(judged if "chunk" in b else {}),
            "completeness": reply("completeness", {**subq, **claims, **gaps})}


# ---------------------------------------------------------------- habits of local model servers

HABITS = ("json_schema_500", "no_grammar", "drop_system", "prose", "enum_case", "id_case", "bad_item",
          "bad_item_always", "slow_logprobs")
_LABEL_FIELDS = ("relation", "sufficient", "status", "role")
_ID_FIELDS = ("claim_id", "sub_question_id", "gap_id")
_BAD_LABEL = {"relation": "probably", "sufficient": "perhaps", "status": "mostly"}


def _with_habits(habits: set[str], body: dict[str, Any], reply: Reply) -> Reply:
    """`reply` as a server with these habits would send it (see the module doc)."""
    content = reply.content
    if isinstance(content, dict):
        content = json.loads(json.dumps(content))   # a private copy to change
        reasked = any(m.get("role") == "assistant" for m in body.get("messages") or [])
        if "bad_item_always" in habits or ("bad_item" in habits and not reasked):
            _spoil_last_item(content)
        for item in _items(content):
            for name in _LABEL_FIELDS:
                if "enum_case" in habits and isinstance(item.get(name), str):
                    item[name] = item[name].capitalize()
            for name in _ID_FIELDS:
                if "id_case" in habits and isinstance(item.get(name), str):
                    item[name] = item[name].upper()
    if "prose" in habits:
        content = (f"Sure! Here is the JSON you asked for:\n```json\n{_content_text(content)}\n```\n"
                   "Let me know if you need anything else.")
    return Reply.of(content, usage=reply.usage, finish_reason=reply.finish_reason, label_probs=None)


def _items(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for key in ("items", "claims", "gaps", "sub_questions") for item in content.get(key) or []
            if isinstance(item, dict) and any(f in item for f in _ID_FIELDS)]


def _spoil_last_item(content: dict[str, Any]) -> None:
    for key in ("items", "sub_questions"):
        items = content.get(key) or []
        for name, bad in _BAD_LABEL.items():
            if items and isinstance(items[-1], dict) and name in items[-1]:
                items[-1][name] = bad
                return


# ---------------------------------------------------------------- pytest fixture and CLI

# The fixture exists only when pytest is already loaded (conftest imports this module), so the
# subprocess mode starts fast and runs without pytest installed.
pytest = sys.modules.get("pytest")

if pytest is not None:
    @pytest.fixture
    def openai_server() -> Iterator[FakeOpenAIServer]:
        """A fresh server per test (starts in a few ms); answers unscripted requests with `auto_reply`."""
        server = FakeOpenAIServer().start()
        try:
            yield server
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible fake server for Veralith tests")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
    parser.add_argument("--auto", action="store_true", help="answer every request with a valid judgment")
    parser.add_argument("--fault-429", type=float, default=0.0)
    parser.add_argument("--fault-500", type=float, default=0.0)
    parser.add_argument("--fault-truncated", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count-tokens", action="store_true", help="report usage counted with tiktoken")
    parser.add_argument("--logprobs", action="store_true", help="return log-probabilities when asked")
    parser.add_argument("--habit", action="append", choices=HABITS, default=[],
                        help="a habit of local model servers (repeatable; see the module doc)")
    parser.add_argument("--slots", type=int, default=None, help="GET /props says total_slots (llama.cpp)")
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(port=args.port, latency_s=args.latency, auto=args.auto, count_tokens=args.count_tokens)
    server.logprobs = args.logprobs
    server.habits = set(args.habit)
    server.slots = args.slots
    server.set_faults(rate_429=args.fault_429, rate_500=args.fault_500, rate_truncated=args.fault_truncated,
                      seed=args.seed)
    print(f"READY {server.base_url}", flush=True)
    try:
        server._httpd.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()


if __name__ == "__main__":
    sys.exit(main())
