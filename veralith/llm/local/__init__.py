"""The `local` judge backend: offline, deterministic, pure Python, zero cost.

It answers the same task contracts as the OpenAI backend (veralith/llm/tasks.py) with lexical
heuristics and two small shipped logistic models (coefficients.json). Its accuracy is measured on
labelled data by benchmarks/judge_quality.py; docs/benchmarks.md has the figures, and `about`
says in one line what it can and cannot tell.

`LocalClient` is loaded on first use, so reading `veralith.llm.local.about` (the CLI's help, the
web view) does not load the judges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from veralith.llm.local.client import LocalClient

__all__ = ["LocalClient"]


def __getattr__(name: str) -> Any:
    if name == "LocalClient":
        from veralith.llm.local.client import LocalClient

        return LocalClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
