"""Shared by the web tests: a store filled the way a user fills it, and a live server on it.

`filled_db` runs the real command line (`veralith eval examples/traces.jsonl`, offline, local
backend) into a fresh file, then a second file of hostile records: markup, event handlers,
`javascript:` links and fake closing tags in every place trace text can reach a page (query,
response, chunk text and source, knowledge base, metadata keys and values). `filled_store` does
the same into any store (a PostgreSQL URL).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "traces.jsonl"

# Each payload sets window.__xss (or opens a dialog) if it ever runs.
SCRIPT = "<script>window.__xss = 'script'</script>"
IMG = "<img src=x onerror=\"window.__xss = 'img'\">"
LINK = "<a href=\"javascript:window.__xss = 'link'\">click me</a>"
CLOSER = "</p></blockquote></td></tr></table></main></textarea></title></style><script>alert('closer')</script>"
HOSTILE_KB = "kb\"><script>alert('kb')</script>"
HOSTILE = [
    {"id": "xss-1", "knowledge_base": "hostile",
     "query": f"What is the warranty of the Z9? {SCRIPT}",
     "context": [{"id": "z9", "source": "javascript:alert('source')",
                  "text": f"The Z9 has a three-year warranty. {IMG}"}],
     "response": f"The Z9 has a three-year warranty. {SCRIPT} It also ships with a free case. {IMG} {LINK} {CLOSER}",
     "metadata": {"channel": LINK, IMG: "key", "url": "javascript:alert('meta')"}},
    {"id": "xss-2", "knowledge_base": HOSTILE_KB,
     "query": f"Who makes the Z9? {CLOSER}",
     "context": [{"id": "maker", "text": f"The Z9 is made by Acme. {CLOSER}"}],
     "response": f"The Z9 is made by Acme. {CLOSER}"},
]
PAYLOAD_TEXTS = [SCRIPT, IMG, LINK, CLOSER]


def run_eval(db: Path | str, path: Path, spool: Path | None = None, args: tuple[str, ...] = ()) -> None:
    """`veralith eval path [args]` into `db`: a SQLite file, or a store URL (with log()'s spool in `spool`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    env.update(VERALITH_BACKEND="local")
    if isinstance(db, Path):
        env.update(VERALITH_DB_PATH=str(db))
    else:
        assert spool is not None, "a store URL needs a spool folder of the test's own"
        env.update(VERALITH_DB_URL=db, VERALITH_SPOOL_DIR=str(spool))
    done = subprocess.run([sys.executable, "-m", "veralith.cli", "eval", str(path), *args], env=env, cwd=path.parent,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def filled_db(folder: Path) -> Path:
    return filled_store(folder, folder / "web.db")


def filled_store(folder: Path, where: Path | str) -> Path | str:
    """`where` (a SQLite file or a store URL) filled with the examples, then the hostile records."""
    run_eval(where, EXAMPLES, folder / "spool")
    hostile = folder / "hostile.jsonl"
    hostile.write_text("".join(json.dumps(r) + "\n" for r in HOSTILE), encoding="utf-8")
    run_eval(where, hostile, folder / "spool")
    return where


def rows(where: Path | str, statement: str, params: list | tuple = ()) -> list[tuple]:
    """Rows of one SELECT on the store at `where` (a SQLite file or a store URL), read-only."""
    from store_support import sql

    from veralith.store import open_store

    return sql(open_store(where, read_only=True), statement, params)


def trace_id(db: Path | str, query_prefix: str) -> int:
    found = rows(db, "SELECT id FROM traces WHERE query LIKE ? ORDER BY id DESC LIMIT 1", [query_prefix + "%"])
    assert found, query_prefix
    return int(found[0][0])


@contextmanager
def live_server(app) -> Iterator[str]:
    """The app under uvicorn on a free loopback port, in a thread; yields its base URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


AXE = Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js"
# WCAG 2 A/AA and axe's best practices: what every page of the web view is held to.
AXE_RUN = """async () => (await axe.run(document, {
    runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice']}
})).violations.map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' ')
    + ' ' + (n.failureSummary || '').split('\\n').slice(0, 2).join(' '))}))"""


def page_problems(browser, base_url: str, paths: list[str], width: int, height: int) -> dict[str, object]:
    """axe-core's violations and any sideways scroll of each page at one window size, by path (empty:
    none). axe is injected into a context that bypasses the page's CSP, which forbids every script."""
    source = AXE.read_text(encoding="utf-8")
    context = browser.new_context(viewport={"width": width, "height": height}, bypass_csp=True)
    found: dict[str, object] = {}
    try:
        pg = context.new_page()
        for path in paths:
            pg.goto(base_url + path)
            overflow = pg.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            pg.add_script_tag(content=source)
            violations = pg.evaluate(AXE_RUN)
            if overflow > 0 or violations:
                found[path] = {"sideways_px": overflow, "axe": violations}
    finally:
        context.close()
    return found
