"""Backend selection: which judge client serves an evaluation (DESIGN §5).

Kept apart from client.py so choosing the offline backend never imports the openai SDK.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading

from veralith.config import ConfigError, settings
from veralith.llm.base import JudgeClient

__all__ = ["forget_clients", "get_client", "resolve_backend"]

log = logging.getLogger("veralith")

_clients: dict[str, JudgeClient] = {}
_clients_lock = threading.Lock()
_notice_given = False
_dotenv_notice_given = False


def forget_clients() -> None:
    """Drop the clients get_client() keeps, and what the judge servers were found to do (their habits and
    circuit breakers, veralith.llm.server): the next call starts as a new process would."""
    from veralith.llm.server import forget_servers

    with _clients_lock:
        _clients.clear()
    forget_servers()


def resolve_backend(backend: str | None = None) -> str:
    """The backend that serves an evaluation: "openai" or "local" (the one rule for `auto`).

    `backend` defaults to settings.backend; `auto` is openai when an API key or a base URL is
    configured, else local. Raises ConfigError for an unknown name. Picking openai without a key or
    server is not an error here (an estimate needs no server); get_client refuses it.
    """
    current = settings.current
    choice = backend or current.backend
    if choice not in ("auto", "openai", "local"):
        raise ConfigError(f"unknown backend {choice!r}; use one of auto, openai, local (VERALITH_BACKEND)")
    if choice == "auto":
        return "openai" if _configured() else "local"
    return choice


def _configured() -> bool:
    current = settings.current
    return current.api_key is not None or bool(current.base_url)


def _say_dotenv_notice() -> None:
    """Once per process: the `.env` moved the judge server, and the environment's key stays home."""
    global _dotenv_notice_given
    from veralith.config import dotenv_notice

    notice = dotenv_notice()
    if notice is not None and not _dotenv_notice_given:
        _dotenv_notice_given = True
        log.warning("veralith: %s", notice)


def get_client(backend: str | None = None) -> JudgeClient:
    """The judge client for `backend` (default: settings.backend), configured from `settings`.

    OpenAI clients are reused per configuration, so connection pools and the JSON-mode fallback
    persist across evaluations.
    """
    global _notice_given
    current = settings.current
    choice = resolve_backend(backend)
    if choice == "local" and (backend or current.backend) == "auto" and not _notice_given:
        _notice_given = True
        # logging's last-resort handler prints this one line to stderr even when logging is unconfigured.
        from veralith.llm.local.about import about

        log.warning("veralith: no OPENAI_API_KEY or VERALITH_BASE_URL configured; using the %s "
                    "(set VERALITH_BACKEND=local to silence this notice)", about())
    if choice == "local":
        from veralith.llm.local import LocalClient  # lazy: the openai path never loads the heuristics
        return LocalClient()
    _say_dotenv_notice()
    if not _configured():
        raise ConfigError("backend 'openai' needs an API key or a server: set OPENAI_API_KEY (or "
                          "VERALITH_API_KEY), or VERALITH_BASE_URL for a local OpenAI-compatible server; "
                          "`--backend local` (VERALITH_BACKEND=local) works offline without either")
    secret = current.api_key.get_secret_value() if current.api_key else ""
    ident = json.dumps([current.judge_model, current.decomposer_model, current.base_url,
                        hashlib.sha256(secret.encode()).hexdigest(), current.timeout_s, current.max_retries,
                        current.temperature])
    with _clients_lock:
        if ident not in _clients:
            if len(_clients) >= 16:   # settings overrides in long test runs: keep the map small
                _clients.clear()
            from veralith.llm.cache import get_cache
            from veralith.llm.client import OpenAIClient  # lazy: the local path never loads the openai SDK
            from veralith.observability.pricing import price_usd

            _clients[ident] = OpenAIClient(cache=get_cache(), price=price_usd)
        return _clients[ident]
