"""`veralith serve`: the read-only web view (veralith.web) under uvicorn.

Safe by default: it binds 127.0.0.1; any host that is not a loopback address needs a token
(`--token` or VERALITH_SERVE_TOKEN) and the command refuses to start without one. Starlette,
Jinja2 and uvicorn come with the optional `web` extra and are imported only when the command
runs, so the rest of the command line works without them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import threading
import webbrowser
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

import typer
from rich.console import Console

from veralith.cli import render
from veralith.cli.exits import ExitCode, fail
from veralith.web.hosts import is_loopback, is_wildcard, reachable_addresses

__all__ = ["MIN_TOKEN_CHARS", "TOKEN_ENV", "is_loopback", "serve_command"]

TOKEN_ENV = "VERALITH_SERVE_TOKEN"
MIN_TOKEN_CHARS = 16   # shorter tokens are refused: guessable by anyone who can reach the port


def _fail(message: str, code: ExitCode = ExitCode.ERROR) -> typer.Exit:
    return fail(message, code)


def serve_command(
    db: Annotated[Path | None, typer.Option(
        "--db", metavar="FILE", help="Database file (default: the configured store, VERALITH_DB_URL or "
        "VERALITH_DB_PATH).", show_default=False)] = None,
    host: Annotated[str, typer.Option(
        metavar="HOST", help="Address to listen on. Anything but a loopback address needs a token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(
        min=0, max=65535, metavar="N", help="Port to listen on (0: any free port).")] = 8765,
    token: Annotated[str | None, typer.Option(
        metavar="TOKEN", help=f"Require this token on every request (or set {TOKEN_ENV}; the variable keeps it out "
        "of the process list). Required for a non-loopback --host.", show_default=False)] = None,
    open_browser: Annotated[bool, typer.Option("--open", help="Open the overview in the default browser.")] = False,
    review: Annotated[bool, typer.Option("--review", help="Let reviewers label traces from the trace page and see "
                                         "a review queue: the view's only writes (POST, same origin, a CSRF "
                                         "token per session, the token when one is set).")] = False,
) -> None:
    """Browse the stored history in a web browser: overview, traces, one trace's evidence (read-only)."""
    from veralith.config import settings  # noqa: F401 - loads .env, which may hold the token

    token = token or os.environ.get(TOKEN_ENV) or None
    if not is_loopback(host) and not token:
        raise _fail(f"--host {host} would let other machines read the traces; give a token with --token or "
                    f"{TOKEN_ENV} (for example {TOKEN_ENV}={secrets.token_urlsafe(24)}), or keep the default "
                    "--host 127.0.0.1")
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise _fail(f"the token is too short to protect anything: use at least {MIN_TOKEN_CHARS} characters "
                    f"({TOKEN_ENV})")
    try:
        import uvicorn

        from veralith.web import create_app
    except ImportError as exc:
        raise _fail(f"`veralith serve` needs the web extra ({exc.name} is missing): "
                    "pip install 'veralith-rag[web]' (in a checkout: pip install '.[web]')") from None
    from veralith.store import open_store, store_url

    where = store_url(db)  # --db, else the configured store: a SQLite file or PostgreSQL (VERALITH_DB_URL)
    if where.startswith("sqlite:///") and not Path(where[len("sqlite:///"):]).exists():
        raise _fail(f"no database at {where[len('sqlite:///'):]} (run `veralith eval FILE.jsonl` first, or pass --db)",
                    ExitCode.NOT_FOUND)
    app = create_app(where, token=token, review=review)  # a store it cannot read: StoreError, exit 2 (VeralithGroup)
    served = open_store(where, read_only=True).url  # a password masked

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            server_header=False, proxy_headers=False)
    server = uvicorn.Server(config)
    out = Console(highlight=False)

    def announce() -> None:
        # Called once the socket is bound, so port 0 shows the port actually chosen. A wildcard --host
        # (0.0.0.0, ::) is no address a browser can open: name this machine's own instead.
        bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
        names = reachable_addresses(host) or ["THIS-MACHINE"]
        url = f"http://{names[0]}:{bound}/"
        out.print(render.literal(f"Veralith is serving {served} read-only at {url} (Ctrl-C stops it)"), soft_wrap=True)
        if is_wildcard(host):
            others = "".join(f", http://{name}:{bound}/" for name in names[1:])
            out.print(render.literal(f"listening on every address of this machine ({host}){others}"
                                     + ("; put this machine's name or address in place of THIS-MACHINE"
                                        if names == ["THIS-MACHINE"] else "")), soft_wrap=True)
        if token:
            # The browser trades ?token= for a cookie and drops it from the address bar.
            out.print(render.literal(f"open {url}?token={quote(token)} once in your browser"), soft_wrap=True)
        sys.stdout.flush()
        if open_browser:
            webbrowser.open(url + (f"?token={quote(token)}" if token else ""))

    # uvicorn has no public "started" hook for a bare ASGI app: poll server.started from a thread.
    def _watch() -> None:
        while not server.should_exit:
            if server.started:
                announce()
                return
            threading.Event().wait(0.05)

    threading.Thread(target=_watch, daemon=True, name="veralith-serve-announce").start()
    try:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how it is meant to stop
            server.run()
    except SystemExit:
        # uvicorn exits with its own code (3, which here means "quality gate failed") when it
        # cannot bind; say what happened and exit as any other bad invocation does.
        if server.started:
            raise
    if not server.started:
        raise _fail(f"could not listen on {host}:{port} (is the port in use?)")
