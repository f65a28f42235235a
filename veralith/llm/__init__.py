"""Judge backends. `get_client()` picks one from settings (auto → openai when configured, else local)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veralith.llm.base import JudgeClient

__all__ = ["get_client"]


def get_client(backend: str | None = None) -> JudgeClient:
    """The judge client for `backend` (default: settings.backend); see veralith.llm.backends.get_client."""
    # Imported on first use so `import veralith` does not load the openai SDK.
    from veralith.llm.backends import get_client as resolve

    return resolve(backend)
