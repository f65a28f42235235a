"""`veralith serve`: a read-only, server-rendered web view of the history (optional extra `web`).

`create_app(db_path, token=None)` builds the ASGI application (veralith.web.app); the command
line (veralith.cli.serve) runs it with uvicorn. Starlette and Jinja2 are imported only here, never
by `import veralith`, so the core package works without the extra.
"""

from veralith.web.app import create_app

__all__ = ["create_app"]
