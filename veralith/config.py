"""Configuration: read once at import from the environment (and `.env`), held by `settings`.

Every setting is an environment variable `VERALITH_<NAME>`; `OPENAI_API_KEY` and `OPENAI_BASE_URL`
are honoured the way the OpenAI SDK honours them. A wrong value fails at import with the variable's
name, so a typo never turns into a silent default.

    from veralith.config import settings
    settings.judge_model                      # 'gpt-4o'
    with settings.override(batch_size=1):     # validated; restored on exit, also on exception
        ...
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from dotenv import load_dotenv
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from veralith.errors import VeralithError

__all__ = ["ConfigError", "Settings", "env_name", "load_settings", "settings"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(VeralithError, ValueError):
    """A setting has a value Veralith cannot use; the message names the variable."""


class Settings(BaseModel):
    """All tunables. Field descriptions are the documentation (docs/configuration.md is generated)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    backend: Literal["auto", "openai", "local"] = Field(
        "auto", description="Judge backend: `openai` (any OpenAI-compatible server), `local` (offline "
        "heuristics) or `auto` (openai when an API key or base URL is configured, else local).")
    judge_model: str = Field("gpt-4o", description="Model name sent to the OpenAI-compatible server.")
    base_url: str | None = Field(
        None, description="Base URL of an OpenAI-compatible server (vLLM, Ollama, llama.cpp, Azure...). "
        "Falls back to OPENAI_BASE_URL.")
    api_key: SecretStr | None = Field(
        None, description="API key for the judge server. Falls back to OPENAI_API_KEY. Never stored, "
        "logged or printed.")
    batch_size: int = Field(6, ge=1, le=50, description="Items (claims or sub-questions) per judge call.")
    concurrency: int = Field(4, ge=1, le=256, description="Traces evaluated in parallel by `veralith eval`.")
    timeout_s: float = Field(60.0, gt=0, description="Per-call timeout in seconds for the judge server.")
    max_retries: int = Field(
        3, ge=0, le=20, description="Retries with backoff on 429/5xx/timeouts (Retry-After honoured).")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of judge calls.")
    db_path: str = Field("veralith.db", description="SQLite database file.")
    cache: bool = Field(True, description="Cache judge replies (in-process LRU in front of SQLite).")
    cache_size: int = Field(1024, ge=0, description="Entries kept in the in-process LRU cache.")
    per_trace_budget_usd: float | None = Field(
        None, gt=0, description="Refuse a trace whose estimated judge cost exceeds this many USD.")
    sync: bool = Field(False, description="`log()` evaluates in the caller's thread instead of the background.")
    queue_size: int = Field(1000, ge=1, description="Background queue length; when full, traces stay pending.")
    sufficiency_fallback: float = Field(
        1.0, ge=0, le=1, description="Sufficiency threshold used until a knowledge base is calibrated.")
    calibration_min_traces: int = Field(
        20, ge=1, description="complete_grounded traces a knowledge base needs before calibration.")
    calibration_percentile: float = Field(
        10.0, ge=0, le=100, description="Percentile of sufficiency_fraction used as the calibrated threshold.")
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
        return value


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


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build Settings from an environment mapping (default: os.environ)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for field in Settings.model_fields:
        raw = env.get(env_name(field))
        if raw is None and field in _SDK_FALLBACK:
            raw = env.get(_SDK_FALLBACK[field])
        if raw is not None:
            values[field] = _parse(field, raw)
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, from_env=True)) from None


def _explain(exc: ValidationError, *, from_env: bool) -> str:
    parts = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else "?"
        name = env_name(field) if from_env and field in Settings.model_fields else field
        parts.append(f"{name}: {err['msg']}")
    return "invalid configuration: " + "; ".join(parts)


class _SettingsHandle:
    """The `settings` singleton: attribute access reads the current Settings; `override` swaps it.

    Overrides are process-wide (not per thread) because background workers must see what the
    caller configured; they nest and always restore on exit.
    """

    def __init__(self, current: Settings) -> None:
        object.__setattr__(self, "_current", current)
        object.__setattr__(self, "_lock", threading.RLock())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._current, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("settings are read-only; use `with settings.override(name=value):`")

    def __repr__(self) -> str:
        return f"settings({self._current!r})"

    @property
    def current(self) -> Settings:
        return self._current

    @contextlib.contextmanager
    def override(self, **changes: Any) -> Iterator[Settings]:
        unknown = sorted(set(changes) - set(Settings.model_fields))
        if unknown:
            raise ConfigError(f"unknown setting(s) {unknown}; known: {sorted(Settings.model_fields)}")
        with self._lock:
            previous = self._current
            try:
                updated = Settings(**{**previous.model_dump(), **changes})
            except ValidationError as exc:
                raise ConfigError(_explain(exc, from_env=False)) from None
            object.__setattr__(self, "_current", updated)
        try:
            yield updated
        finally:
            with self._lock:
                object.__setattr__(self, "_current", previous)

    def reload(self, environ: Mapping[str, str] | None = None) -> Settings:
        """Re-read the environment (used by tests and by the CLI after it sets variables)."""
        with self._lock:
            object.__setattr__(self, "_current", load_settings(environ))
        return self._current


load_dotenv(override=False)
settings = _SettingsHandle(load_settings())
