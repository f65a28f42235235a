"""Configuration: read once at import from the environment (and `.env`), held by `settings`.

Every setting is an environment variable `VERALITH_<NAME>`; `OPENAI_API_KEY` and `OPENAI_BASE_URL`
are honoured the way the OpenAI SDK honours them. A wrong value raises ConfigError naming the
variable (`VERALITH_BATCH_SIZE: ...`) the first time a setting is read, so a typo never turns into a
silent default, and `veralith --help` still works with a broken environment.

`.env` is read from the current working directory only, never from a parent folder or from next
to the installed package: a `.env` elsewhere on disk must not be able to redirect the judge server
(and the API key sent to it). Variables already in the environment win over `.env`.

    from veralith.config import settings
    settings.judge_model                      # 'gpt-4o'
    with settings.override(batch_size=1):     # validated; restored on exit, also on exception
        ...                                   # context-local: other threads/tasks do not see it
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import logging
import math
import os
import threading
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from dotenv import dotenv_values
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from veralith.errors import VeralithError
from veralith.redact import SecretFilter, has_userinfo, redact, redact_url

__all__ = ["BATCH_API_MAX_BYTES", "BATCH_API_MAX_REQUESTS", "ConfigError", "Settings", "dotenv_notice", "env_name",
           "load_dotenv_cwd", "load_settings", "redact_configured", "settings", "userinfo_problem"]

# The OpenAI Batch API's limits per batch: "The file can contain up to 50,000 requests, and can be up to
# 200 MB in size" (API reference, POST /v1/batches, `input_file_id`; the same words in openai-python's
# types/batch_create_params.py). MB read as 10^6 bytes, the smaller reading, so a file under it is under either.
BATCH_API_MAX_REQUESTS = 50_000
BATCH_API_MAX_BYTES = 200 * 1000 * 1000

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(VeralithError, ValueError):
    """A setting has a value Veralith cannot use; the message names the variable."""


class Settings(BaseModel):
    """All tunables. Field descriptions are the documentation (docs/configuration.md is generated)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True, allow_inf_nan=False)

    backend: Literal["auto", "openai", "local"] = Field(
        "auto", description="Judge backend: `openai` (any OpenAI-compatible server), `local` (offline "
        "heuristics) or `auto` (openai when an API key or base URL is configured, else local).")
    judge_model: str = Field("gpt-4o", description="Model name sent to the OpenAI-compatible server.")
    decomposer_model: str | None = Field(
        None, min_length=1, description="Model for the two decomposition calls (the query into sub-questions, the "
        "response into claims), on the same server; the three judges keep `JUDGE_MODEL`. Unset: the judge model. "
        "A small model (`gpt-4o-mini`) costs much less; `veralith eval FILE --dry-run` shows the difference.")
    base_url: str | None = Field(
        None, description="Base URL of an OpenAI-compatible server (vLLM, Ollama, llama.cpp, Azure...). "
        "Falls back to OPENAI_BASE_URL. A URL carrying user info (`user:password@host`) is refused: put the "
        "credential in VERALITH_API_KEY.")
    api_key: SecretStr | None = Field(
        None, description="API key for the judge server. Falls back to OPENAI_API_KEY. Never stored, "
        "logged or printed. Not sent to a server that a `.env` chose unless that `.env` sets the key too.")
    batch_size: int = Field(6, ge=1, le=50, description="Items (claims or sub-questions) per judge call.")
    mode: Literal["full", "fast"] = Field(
        "full", description="`full`: two decomposition calls, then three isolated judges (2 round trips). `fast`: "
        "one call per trace that decomposes and judges at once (1 round trip, fewer tokens), for screening large "
        "logs; its judges are not isolated, so it agrees less with careful labels. Results record their mode "
        "and `veralith compare` will not mix modes unless told to. The offline backend makes no calls and "
        "always runs `full`.")
    concurrency: int = Field(4, ge=1, le=256, description="Traces evaluated in parallel by `veralith eval`.")
    async_calls: bool = Field(
        False, description="`veralith eval`, `resume` and `worker` judge on one event loop with the AsyncOpenAI "
        "client: every trace's requests stay in flight without a thread each (faster at high `--concurrency`). "
        "Off: a thread per trace, as before. Results are the same either way.")
    timeout_s: float = Field(60.0, gt=0, le=3600, description="Deadline in seconds for one judge call (the "
                             "whole request, however slowly the server sends its reply). Unset, for a local "
                             "server: at least this, longer when the server's measured speed says a reply of "
                             "the call's max_tokens needs it.")
    max_retries: int = Field(
        3, ge=0, le=20, description="Retries with backoff on 429/5xx/timeouts (Retry-After honoured).")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of judge calls.")
    structured: Literal["auto", "json_schema", "json_object_schema", "json_schema_field", "json_object", "off"] = Field(
        "auto", description="How a judge reply's JSON Schema reaches the server. Constraining its decoding: "
        "`json_schema` (an OpenAI `json_schema` response_format: OpenAI, vLLM, recent llama.cpp, Ollama, which "
        "hands it to its `format`), `json_object_schema` (`{\"type\": \"json_object\", \"schema\": ...}`: "
        "llama-cpp-python's server, llama.cpp), `json_schema_field` (llama.cpp's own `json_schema` field). "
        "Only asking for JSON, the schema written into the prompt: `json_object` (JSON mode), `off` (no "
        "response_format). `auto`: learnt per server and model, with a few tiny requests to a local server "
        "before its first call (the first form whose reply the schema really constrained), and on a "
        "rejected `json_schema` elsewhere; kept across processes (`SERVER_NOTES`).")
    system_prompt: Literal["auto", "system", "user"] = Field(
        "auto", description="Where the judge instructions go: a `system` message, the start of the `user` turn "
        "(chat templates without a system role), or `auto` (system, moved to the user turn for good once a "
        "server is seen to drop it).")
    logprobs: Literal["auto", "on", "off"] = Field(
        "auto", description="Ask for token log-probabilities, from which verdict confidence is read. `auto`: ask, "
        "and stop for a server that rejects them, returns none, or (a local server) answers much slower with them.")
    server_concurrency: int | None = Field(
        None, ge=1, le=256, description="Requests in flight to one judge server at once, across judges and "
        "traces (the rest wait their turn; the timeout starts when a request is sent). Unset: what a local "
        "server says it serves at once (llama.cpp's `/props` total_slots; vLLM, known by its model list, 256, "
        "its default max_num_seqs; Ollama 1, its documented OLLAMA_NUM_PARALLEL default), else 1 for a local "
        "server (localhost, 127.x.x.x, ::1) and no limit otherwise.")
    server_notes: str | None = Field(
        None, description="File where what was learnt about each judge server and model is kept across "
        "processes (how it takes the schema, where the instructions go, speed, reply sizes). Unset: "
        "`$XDG_CACHE_HOME/veralith/servers.json` (else `~/.cache/veralith/servers.json`); `off`: learnt "
        "again by every process.")
    db_path: str = Field("veralith.db", description="SQLite database file (the store when `DB_URL` is unset).")
    db_url: str | None = Field(
        None, description="The store: `sqlite:///path/to/file.db` or `postgresql://user@host/db` (the `postgres` "
        "extra; a password is better given by PGPASSWORD or ~/.pgpass than in the URL). Unset: the SQLite file "
        "`DB_PATH`.")
    busy_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="How long a command waits for another process's SQLite write lock "
        "before it stops with one line saying so (nothing half-written). `log()` never waits for it.")
    batch_poll_s: float = Field(
        30.0, gt=0, le=3600, description="`veralith eval --batch` / `veralith batch collect`: the first wait "
        "between two looks at the OpenAI batches of a job; each wait without news is 1.5 times longer, up to "
        "ten times this.")
    batch_max_tries: int = Field(
        3, ge=1, le=10, description="`eval --batch`: how many times one request is sent in a batch before its "
        "judge call is recorded as failed (a request that failed, or was left unanswered by an expired batch, "
        "is re-sent alone).")
    batch_max_requests: int = Field(
        BATCH_API_MAX_REQUESTS, ge=1, le=BATCH_API_MAX_REQUESTS, description="`eval --batch`: the most requests "
        "one batch holds (the OpenAI Batch API takes up to 50,000); a round with more is sent as several batches. "
        "Lower it for a server with a smaller limit.")
    batch_max_bytes: int = Field(
        BATCH_API_MAX_BYTES, ge=65_536, le=BATCH_API_MAX_BYTES, description="`eval --batch`: the largest input "
        "file of one batch, in bytes (the OpenAI Batch API takes up to 200 MB); a round's requests are split to "
        "stay under it. Lower it for a server with a smaller limit.")
    evaluate: Literal["local", "remote"] = Field(
        "local", description="Who judges what `log()` records: `local`, a background worker in the logging "
        "process; `remote`, nobody here: `log()` only records, and `veralith worker` judges (fleet mode).")
    spool_dir: str | None = Field(
        None, description="Folder of `log()`'s local spool for a PostgreSQL store (default: a folder per database "
        "under ~/.cache/veralith/spool). A SQLite store keeps its spool beside the file.")
    cache: bool = Field(True, description="Cache judge replies (in-process LRU in front of SQLite).")
    cache_size: int = Field(1024, ge=0, description="Entries kept in the in-process LRU cache.")
    per_trace_budget_usd: float | None = Field(
        None, gt=0, description="Refuse a trace whose estimated judge cost exceeds this many USD.")
    explain: bool = Field(
        False, description="For each failing trace, one more judge call that writes what went wrong in that trace "
        "and the change to try, quoting the trace (`eval --explain`, `inspect --explain`, "
        "`evaluate(explain=True)`); priced, cached and counted by the budget guard. Off: no extra call.")
    sync: bool = Field(False, description="`log()` evaluates in the caller's thread instead of the background.")
    queue_size: int = Field(1000, ge=1, description="Background queue length; when full, traces stay pending.")
    shutdown_timeout_s: float = Field(
        10.0, ge=0, le=86400, description="The most the at-exit drain of background evaluations waits; what "
        "is left stays pending for `veralith resume`.")
    run: str | None = Field(
        None, min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$",  # one line, no control characters
        description="Run name given to traces from `log()`, `@trace` and the "
        "LangChain adapter that name none (`veralith runs`, `veralith compare`); unset: no run.")
    sufficiency_fallback: float = Field(
        1.0, ge=0, le=1, description="Sufficiency threshold used until a knowledge base is calibrated.")
    calibration_min_traces: int = Field(
        20, ge=1, description="complete_grounded traces a knowledge base needs before calibration.")
    calibration_percentile: float = Field(
        10.0, ge=0, le=100, description="Percentile of sufficiency_fraction used as the calibrated threshold.")
    labels_min: int = Field(
        30, ge=1, description="Reviewers' labels a figure needs before `veralith agreement` concludes from it, and a "
        "knowledge base needs before its sufficiency threshold is fitted to its labels (docs/review.md).")
    local_max_chars: int = Field(
        200_000, ge=1, description="The most characters the offline `local` judge reads in one call: the "
        "query with the response, or with the context. A longer trace is not judged by it: `indeterminate`, "
        "reason `input_too_large`.")
    stale_after_days: int = Field(
        365, ge=1, le=36500, description="How old a chunk may be, in days before the trace's as_of date, and still "
        "answer a question about now (\"current\", \"latest\", \"still\"): a claim resting only on older chunks is "
        "stale. (\"This year\" and \"this month\" ask for the calendar year or month instead.)")
    gate_fail_cells: tuple[str, ...] = Field(
        ("complete_ungrounded", "incomplete_grounded", "incomplete_ungrounded", "extra_grounded", "extra_ungrounded"),
        description="Failure cells that fail the quality gate, comma-separated (default: every cell but "
        "complete_grounded, which always passes). A cell left out passes; a trace without a cell stays "
        "indeterminate and a response without claims still fails. Applies when a trace is judged (veralith.policy).")
    gate_require_correct: bool = Field(
        False, description="When a trace has a reference answer, its quality gate also requires the correctness "
        "layer to be `correct` (every reference fact stated): `partly_correct` and `incorrect` fail, and a reference "
        "whose verdicts are missing makes the gate indeterminate. Off: only a response that contradicts the "
        "reference fails for it. Traces without a reference are never affected.")
    pricing: dict[str, dict[str, float]] | None = Field(
        None, description='JSON price overrides in USD per 1M tokens, e.g. '
        '{"my-model": {"input": 0.5, "cached_input": 0.25, "output": 1.5}}.')

    @field_validator("pricing")
    @classmethod
    def _check_pricing(cls, value: dict[str, dict[str, float]] | None) -> dict[str, dict[str, float]] | None:
        for model, prices in (value or {}).items():
            unknown = set(prices) - {"input", "cached_input", "output"}
            if unknown or "input" not in prices or "output" not in prices:
                raise ValueError(f"price of {model!r} needs 'input' and 'output' (and optionally "
                                 f"'cached_input'), got {sorted(prices)}")
            for kind, price in prices.items():
                # A negative or NaN price would silently corrupt every cost total and budget check.
                if not math.isfinite(price) or price < 0:
                    raise ValueError(f"price {kind!r} of {model!r} must be a finite number >= 0, got {price}")
        return value

    @field_validator("gate_fail_cells", mode="before")
    @classmethod
    def _split_gate_fail_cells(cls, value: Any) -> tuple[str, ...]:
        # "a, b" from the environment; the names are checked against the cells by veralith.policy.
        names = [n.strip() for n in value.split(",")] if isinstance(value, str) else list(value)
        cells = tuple(dict.fromkeys(n for n in names if n))
        if not cells:  # an empty variable must not silently let every trace pass
            raise ValueError("name at least one failure cell (unset the variable for the default)")
        return cells

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        shown = redact_url(value)
        problem = userinfo_problem(value)
        if problem is not None:
            raise ValueError(problem)
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
        except ValueError as exc:
            raise ValueError(f"{shown!r} is not a usable URL ({exc})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{shown!r} is not an http(s) URL such as http://127.0.0.1:8000/v1")
        return value

    @field_validator("db_url")
    @classmethod
    def _check_db_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme = value.split(":", 1)[0].lower()
        if scheme not in ("sqlite", "postgresql", "postgres") or "://" not in value:
            raise ValueError(f"{redact_url(value)!r} is not a store URL; use sqlite:///path/to/file.db or "
                             "postgresql://user@host:5432/dbname")
        return value

    def __repr_args__(self) -> Any:
        # The key is a SecretStr already; a password in a URL must be hidden the same way.
        for name, value in super().__repr_args__():
            yield name, (redact_url(value) if name in ("base_url", "db_url") and value else value)


def userinfo_problem(url: str) -> str | None:
    """Why a base URL carrying user info is refused (None when it carries none): the one rule for it.

    httpx would turn `user:password@` into `Authorization: Basic` in place of the key and print it
    in its own log line; a credential belongs in VERALITH_API_KEY, sent as a Bearer token.
    """
    if not has_userinfo(url):
        return None
    return (f"{redact_url(url)!r} carries user info (a user name, password or token before '@'), which "
            "Veralith never sends: remove it from the URL and put the credential in VERALITH_API_KEY")


def env_name(field: str) -> str:
    return f"VERALITH_{field.upper()}"


# Settings whose value may also come from the OpenAI SDK's own variables.
_SDK_FALLBACK = {"api_key": "OPENAI_API_KEY", "base_url": "OPENAI_BASE_URL"}


def _parse(field: str, raw: str) -> Any:
    annotation = str(Settings.model_fields[field].annotation)
    if annotation == "<class 'bool'>":
        lowered = raw.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ConfigError(f"{env_name(field)}={raw!r} is not a boolean; use one of 1/true/yes/on or 0/false/no/off")
    if field == "pricing":
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{env_name(field)} is not valid JSON: {exc}") from None
    if raw.strip() == "" and "None" in annotation:
        return None
    return raw.strip()


def load_settings(environ: Mapping[str, str] | None = None, *,
                  from_dotenv: Collection[str] | None = None) -> Settings:
    """Build Settings from an environment mapping (default: os.environ).

    `from_dotenv` names the variables that came from a `.env` file (default: those `load_dotenv_cwd`
    set, when reading os.environ). A `.env` that points the judge at another server without giving
    the key for it does not get the key from the environment (see `_keep_key_home`). Raises
    ConfigError for a value Veralith cannot use, or when the `.env` could not be read.
    """
    if environ is None and _DOTENV.error is not None:
        raise ConfigError(_DOTENV.error)
    env = os.environ if environ is None else environ
    dotenv_names = set(_DOTENV.names if from_dotenv is None and environ is None else from_dotenv or ())
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for field in Settings.model_fields:
        name = env_name(field)
        raw = env.get(name)
        if raw is None and field in _SDK_FALLBACK:
            name = _SDK_FALLBACK[field]
            raw = env.get(name)
        if raw is not None:
            values[field] = _parse(field, raw)
            sources[field] = name
    _keep_key_home(values, sources, dotenv_names)
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, from_env=True)) from None


def _explain(exc: ValidationError, *, from_env: bool) -> str:
    parts = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else "?"
        name = env_name(field) if from_env and field in Settings.model_fields else field
        # Pydantic echoes the input; for the base URL that could carry a password.
        message = redact(str(err["msg"]))
        parts.append(f"{name}: {message.removeprefix('Value error, ')}")
    return "; ".join(parts)


@dataclasses.dataclass
class _DotEnvState:
    """What `load_dotenv_cwd` found: the file, the variables it set, why it could not be read."""

    path: Path | None = None
    names: set[str] = dataclasses.field(default_factory=set)
    error: str | None = None
    notice: str | None = None   # said once by the judge client (veralith.llm.backends)


_DOTENV = _DotEnvState()


def _keep_key_home(values: dict[str, Any], sources: dict[str, str], dotenv_names: set[str]) -> None:
    """The rule for a `.env` that moves the judge server: it must also give the key for that server.

    When the base URL comes from the `.env` and the API key from the environment, the key is not
    used: an untrusted checkout's `.env` (a CI job, a cloned repository) must not be able to send
    the user's real OPENAI_API_KEY to a server of its choosing. A local server needs no key; a
    server that does gets one by setting VERALITH_API_KEY in the same file.
    """
    url_from, key_from = sources.get("base_url"), sources.get("api_key")
    if url_from in dotenv_names and key_from is not None and key_from not in dotenv_names:
        values.pop("api_key", None)
        where = _DOTENV.path or Path(".env")
        _DOTENV.notice = (f"{where} sets {url_from} but no API key, so {key_from} from the environment is not "
                          "sent to that server; set VERALITH_API_KEY in that file to send a key to it")


def dotenv_notice() -> str | None:
    """The one-line notice `_keep_key_home` left, if it withheld a key; None otherwise."""
    return _DOTENV.notice


def load_dotenv_cwd(cwd: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Put `.env` of the working directory (only) into os.environ without overriding what is set.

    Returns the variables it set. No climbing to parent folders: which file configures the run
    must be obvious from where the command runs. A file that cannot be read (not UTF-8, no
    permission) sets nothing; reading a setting then raises a ConfigError naming the file.
    """
    path = Path.cwd() if cwd is None else Path(cwd)
    dotenv = path / ".env"
    if not dotenv.is_file():
        return {}
    try:
        found = dotenv_values(dotenv)
    except UnicodeDecodeError as exc:
        _DOTENV.error = (f"{dotenv}: not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                         "save it as UTF-8")
        return {}
    except OSError as exc:
        _DOTENV.error = f"{dotenv}: cannot read ({exc.strerror or exc})"
        return {}
    added = {}
    for key, value in found.items():
        if value is not None and key not in os.environ:
            os.environ[key] = added[key] = value
    _DOTENV.path, _DOTENV.error = dotenv, None
    _DOTENV.names.update(added)
    return added


class _SettingsHandle:
    """The `settings` singleton: attribute access reads the current Settings; `override` replaces
    them for the current context only.

    Overrides live in a ContextVar: each thread and each asyncio task sees its own, they nest, and
    they always restore on exit. Work handed to another thread carries the caller's settings along
    (contextvars.copy_context, or `snapshot()` + `using()` for a long-lived worker).
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_base", None)
        object.__setattr__(self, "_error", None)
        object.__setattr__(self, "_var", contextvars.ContextVar("veralith_settings", default=None))
        object.__setattr__(self, "_lock", threading.Lock())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.current, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("settings are read-only; use `with settings.override(name=value):`")

    def __repr__(self) -> str:
        return f"settings({self.current!r})"

    @property
    def current(self) -> Settings:
        """The Settings in force here. Raises ConfigError when the environment is invalid."""
        local = self._var.get()
        if local is not None:
            return local
        if self._base is None:
            raise ConfigError(self._error or "settings were not loaded")
        return self._base

    def snapshot(self) -> Settings:
        """The Settings in force here, to hand to another thread with `using()`."""
        return self.current

    @contextlib.contextmanager
    def using(self, values: Settings) -> Iterator[Settings]:
        """Make an already validated Settings current in this context (see `snapshot`)."""
        token = self._var.set(values)
        try:
            yield values
        finally:
            self._var.reset(token)

    @contextlib.contextmanager
    def override(self, **changes: Any) -> Iterator[Settings]:
        unknown = sorted(set(changes) - set(Settings.model_fields))
        if unknown:
            raise ConfigError(f"unknown setting(s) {unknown}; known: {sorted(Settings.model_fields)}")
        current = self.current
        try:
            # Only the fields that were set are carried over, so "set by the user" survives an override.
            updated = Settings(**{**current.model_dump(include=current.model_fields_set), **changes})
        except ValidationError as exc:
            raise ConfigError(_explain(exc, from_env=False)) from None
        with self.using(updated):
            yield updated

    def reload(self, environ: Mapping[str, str] | None = None) -> Settings:
        """Re-read the environment (used by tests and by the CLI after it sets variables).

        Raises ConfigError for an invalid value; until a later reload succeeds, reading a setting
        raises it again.
        """
        with self._lock:
            try:
                loaded = load_settings(environ)
            except ConfigError as exc:
                object.__setattr__(self, "_base", None)
                object.__setattr__(self, "_error", str(exc))
                raise
            object.__setattr__(self, "_base", loaded)
            object.__setattr__(self, "_error", None)
        return loaded


load_dotenv_cwd()
settings = _SettingsHandle()
with contextlib.suppress(ConfigError):  # reported on first use, so that `--help` still works
    settings.reload()


def redact_configured(text: object) -> str:
    """`redact` with the configured API key as the secret: for messages that are stored or printed
    (judge errors, failure messages, CLI error lines)."""
    return redact(text, _configured_secrets())


def _configured_secrets() -> list[str]:
    try:
        if settings.api_key is not None:
            return [settings.api_key.get_secret_value()]
    except Exception:  # an invalid environment: there is no usable key to mask
        pass
    return []


# Every logger Veralith logs on (a test keeps this list equal to the getLogger calls in the package).
# A filter on a logger sees only that logger's own records, so each gets one: whatever handlers the
# host app attached, they receive records with the key, URL user info and password parameters masked.
LOGGERS = ("veralith", "veralith.cache", "veralith.llm", "veralith.llm.client", "veralith.llm.requests", "veralith.sdk",
           "veralith.store", "veralith.work")
SECRET_FILTER = SecretFilter(_configured_secrets)
for _name in LOGGERS:
    logging.getLogger(_name).addFilter(SECRET_FILTER)
