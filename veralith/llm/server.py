"""What Veralith learns about a judge server, shared by every client that talks to it.

A server is its base URL (OpenAI's API when none is set). Per server, for the process's lifetime:

* `slots` — at most VERALITH_SERVER_CONCURRENCY requests in flight (unset: as many as the server says
  it serves at once, `slot_count`, read by veralith.llm.probe; else 1 for a local server, which answers
  one request at a time anyway, so more only queue inside it where the wait would count against the
  timeout; no limit otherwise). A request takes a slot when it is sent, so its timeout
  starts then, and gives it back when the server has answered (or its read timed out).
* `breaker` — a circuit breaker. A server that failed BREAKER_FAILURES requests in a row (connection
  refused or reset, timeouts, 5xx), over at least BREAKER_SPAN_S, is taken to be down: every call
  raises JudgeServerDown at once for BREAKER_COOLDOWN_S, then one call at a time may try again
  (one success closes it, one failure opens it again). Any HTTP answer below 500 shows the server is
  up and resets the count. The span keeps a burst of simultaneous failures (one blip seen by every
  thread at once) from tripping it.
* `habits` per model — what the server was found to do with a request: which structured-output mode
  it accepts, whether its chat template drops the system message, whether log-probabilities are
  worth asking for, which options it rejects, how fast it answers and how long its replies are. Each
  is learnt once and said once (`warn_once`); veralith.llm.probe learns them before the first request
  to a local server, and veralith.llm.notes keeps them across processes.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from veralith.errors import JudgeServerDown
from veralith.redact import redact_url

__all__ = ["BREAKER_COOLDOWN_S", "BREAKER_FAILURES", "BREAKER_SPAN_S", "CONSTRAINED", "STRUCTURED_FORMS", "Breaker",
           "Habits", "Server", "forget_servers", "is_local", "server_for"]

log = logging.getLogger("veralith.llm")

BREAKER_FAILURES = 5       # failed requests in a row ...
BREAKER_SPAN_S = 1.0       # ... over at least this long (one call's retries back off 0.5 s, 1 s, 2 s)
BREAKER_COOLDOWN_S = 30.0  # then no call for this long


def is_local(base_url: str | None) -> bool:
    """True for a server on this machine: localhost, 127.0.0.0/8, ::1 (or 0.0.0.0, which reaches it)."""
    if not base_url:
        return False
    host = (urlsplit(base_url).hostname or "").lower()
    if host in ("localhost", "0.0.0.0") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Breaker:
    """Consecutive-failure circuit breaker for one server (see the module doc). Thread-safe."""

    def __init__(self, shown: str, *, failures: int | None = None, span_s: float | None = None,
                 cooldown_s: float | None = None) -> None:
        """Unset thresholds are the module's BREAKER_* constants as they are when the breaker is made."""
        self.shown = shown
        self.failures = BREAKER_FAILURES if failures is None else failures
        self.span_s = BREAKER_SPAN_S if span_s is None else span_s
        self.cooldown_s = BREAKER_COOLDOWN_S if cooldown_s is None else cooldown_s
        self._lock = threading.Lock()
        self._count = 0
        self._first_failure = 0.0
        self._open_until = 0.0
        self._last_error = ""
        self._probing = False

    def before_request(self) -> None:
        """Raise JudgeServerDown while the breaker is open; let one probe through once it cools down."""
        with self._lock:
            now = time.monotonic()
            if self._open_until == 0.0:
                return
            if now < self._open_until or self._probing:
                raise self._down(max(self._open_until - now, 1.0))
            self._probing = True   # half-open: this request decides

    def success(self) -> None:
        with self._lock:
            self._count, self._open_until, self._probing = 0, 0.0, False

    def failure(self, error: str) -> None:
        """Count a failed request; raise JudgeServerDown when this failure opens the breaker."""
        with self._lock:
            now = time.monotonic()
            if self._count == 0:
                self._first_failure = now
            self._count += 1
            self._last_error = error
            if self._probing or (self._count >= self.failures and now - self._first_failure >= self.span_s):
                self._open_until, self._probing = now + self.cooldown_s, False
                raise self._down(self.cooldown_s)

    @property
    def is_open(self) -> bool:
        with self._lock:
            return self._open_until != 0.0

    def _down(self, retry_after_s: float) -> JudgeServerDown:
        return JudgeServerDown(self.shown, f"{self._count} requests in a row failed (last: {self._last_error})",
                               retry_after_s=retry_after_s)


# The ways a request can carry its schema, in the order they are tried (veralith.llm.probe); the first
# three constrain decoding with it, the last two only ask for JSON and write the schema into the prompt.
STRUCTURED_FORMS = ("json_schema", "json_object_schema", "json_schema_field", "json_object", "off")
CONSTRAINED = frozenset(STRUCTURED_FORMS[:3])


@dataclass
class Habits:
    """What one server does with requests for one model (see the module doc)."""

    structured: str = "json_schema"      # one of STRUCTURED_FORMS: how it takes the schema (auto mode)
    system: str = "system"               # system | user: where its chat template keeps the instructions
    logprobs: bool = True                # asking is worth it (auto mode)
    logprobs_decided: bool = False       # auto mode on a local server: the speed check has run
    timings: dict[bool, list[float]] = field(default_factory=lambda: {True: [], False: []})
    send_temperature: bool = True
    send_cache_key: bool = True
    send_max_tokens: bool = True
    # Recent replies as (prompt tokens, output tokens, seconds), for timeouts (veralith.llm.pace).
    speed: list[list[float]] = field(default_factory=list)
    # Per task, recent output tokens / the output allowance (veralith.llm.pace: max_tokens).
    outputs: dict[str, list[float]] = field(default_factory=dict)
    learnt: bool = False                 # what it does is known (probed or read back: veralith.llm.probe)
    probe_structured: bool = False       # the schema's forms are still to be probed (a rejected json_schema)
    probe_after: float = 0.0             # time.monotonic() before which a failed probe is not tried again
    structured_known: bool = False       # the forms were probed (or read back), not assumed

    # What is kept across processes (veralith.llm.notes); the rest is per process.
    KEPT = ("structured", "system", "logprobs", "logprobs_decided", "send_temperature", "send_cache_key",
            "send_max_tokens", "speed", "outputs")

    def kept(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.KEPT}

    def restore(self, kept: dict[str, object]) -> None:
        """Take back what `kept()` gave (values of the wrong type are ignored)."""
        for name in self.KEPT:
            value = kept.get(name)
            if type(value) is type(getattr(self, name)) and (name != "structured" or value in STRUCTURED_FORMS):
                setattr(self, name, value)


class Server:
    """One judge server's shared state (see the module doc)."""

    def __init__(self, base_url: str | None) -> None:
        self.base_url = base_url
        self.shown = redact_url(base_url) or "api.openai.com"
        self.local = is_local(base_url)
        self.breaker = Breaker(self.shown)
        self._habits: dict[str, Habits] = {}
        self._slots: dict[int, threading.Semaphore] = {}
        self.slot_count: int | None = None   # requests it serves at once, as it says (veralith.llm.probe)
        self.kind = ""                       # what it was recognised as (llama.cpp, ollama, vllm, ...)
        self.identity = ""                   # its model entry and version, hashed (veralith.llm.probe)
        self.learning: dict[str, threading.Lock] = {}   # per model: one thread learns, the others wait
        self._warned: set[str] = set()
        self.lock = threading.Lock()

    def habits(self, model: str) -> Habits:
        with self.lock:
            return self._habits.setdefault(model, Habits())

    def slots(self, limit: int | None) -> threading.Semaphore | None:
        """The semaphore for `limit` requests in flight (None: what the server says it serves at once, when
        it says; else 1 for a local server and no limit for others)."""
        if limit is None:
            limit = self.slot_count if self.slot_count is not None else (1 if self.local else None)
        if limit is None:
            return None
        with self.lock:
            slots = self._slots.get(limit)
            if slots is None:   # made once per limit (this runs before every request)
                slots = self._slots[limit] = threading.Semaphore(limit)
            return slots

    def learning_lock(self, model: str) -> threading.Lock:
        with self.lock:
            return self.learning.setdefault(model, threading.Lock())

    def warn_once(self, key: str, message: str, *args: object, level: int = logging.WARNING) -> None:
        """Log `message` the first time `key` is seen for this server, never again."""
        with self.lock:
            if key in self._warned:
                return
            self._warned.add(key)
        log.log(level, message, *args)


_servers: dict[str, Server] = {}
_servers_lock = threading.Lock()


def forget_servers() -> None:
    """Forget every server (tests: a port reused by a new fake server must not inherit its habits)."""
    with _servers_lock:
        _servers.clear()


def server_for(base_url: str | None) -> Server:
    """The shared state of the server at `base_url` (None: OpenAI's API)."""
    key = (base_url or "").rstrip("/")
    with _servers_lock:
        if key not in _servers:
            _servers[key] = Server(base_url)
        return _servers[key]
