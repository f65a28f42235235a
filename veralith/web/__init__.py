"""`veralith serve`: a read-only, server-rendered web view of the history (optional extra `web`).

`create_app(db_path, token=None)` builds the ASGI application (veralith.web.app); the command
line (veralith.cli.serve) runs it with uvicorn. Starlette and Jinja2 load when `create_app` is first
looked up, never by `import veralith` or `import veralith.web.hosts`, so the core package and the
command line's own checks work without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from veralith.web.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from veralith.web.app import create_app

        return create_app
    raise AttributeError(f"module 'veralith.web' has no attribute {name!r}")
