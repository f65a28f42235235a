"""The web view at scale: server time of the traces page, a trace page and the overview over 1M traces.

    .venv/bin/python benchmarks/web_scale.py [--traces 1000000] [--db PATH | --pg] [--repeat 5]

Fills the database the way benchmarks/history_scale.py does (synthetic rolled-up rows over 5
knowledge bases, all cells and work states, spread over eleven months), then stores the example
records (examples/traces.jsonl, judged offline by the local backend) on top so trace pages have
real claims, evidence and sub-questions to render. Each page is requested in-process through
Starlette's test client (the whole server side: routing, queries, template, headers; no socket),
once to warm up and then `--repeat` times; the median and the worst are printed in milliseconds,
as JSON. An existing `--db` with enough rows is reused. `--pg` does the same on a throwaway PostgreSQL
server (Debian's package, started as the tests start one). Target: every traces and trace page under 300 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

TARGET_MS = 300


def add_examples(path: str) -> list[int]:
    """Judge and store the example records (local backend); return their trace ids."""
    import veralith
    from veralith.config import settings

    ids = []
    with settings.override(backend="local", db_url=path):
        for line in (REPO / "examples" / "traces.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            result = veralith.evaluate(record["query"], record["context"], record["response"],
                                       knowledge_base=record.get("knowledge_base", "default"))
            ids.append(result.trace_id)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--db", default=None)
    parser.add_argument("--pg", action="store_true", help="a throwaway PostgreSQL server instead of a SQLite file")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    server = None
    if args.pg:
        sys.path.insert(0, str(REPO / "tests"))
        from pg_server import PgServer
        server = PgServer()
        url = server.new_database()
    else:
        url = "sqlite:///" + (args.db or os.path.join(tempfile.mkdtemp(prefix="veralith-web-"), "web.db"))
    os.environ["VERALITH_DB_URL"] = url
    from veralith.config import settings

    settings.reload()
    try:
        measure(url, args.traces, args.repeat)
    finally:
        if server is not None:
            from veralith.store import _stores
            for opened in _stores.values():
                opened.close()
            server.stop()


def measure(url: str, traces: int, repeat: int) -> None:
    from history_scale import fill, timed
    from starlette.testclient import TestClient

    from veralith.store import open_store
    from veralith.web import create_app

    fill_s = fill(url, traces)
    store = open_store(url)
    with store.connection() as db:  # type: ignore[attr-defined]
        real = [r[0] for r in db.execute(
            "SELECT id FROM traces WHERE execution IS NOT NULL ORDER BY id DESC LIMIT 12").fetchall()]
    if not real:
        real = add_examples(url)
        with store.connection() as db:  # type: ignore[attr-defined]
            db.execute("ANALYZE")
    with store.connection() as db:  # type: ignore[attr-defined]
        n = int(db.execute("SELECT COUNT(*) FROM traces").fetchone()[0])
        middle = db.execute("SELECT id FROM traces ORDER BY id LIMIT 1 OFFSET ?", [n // 2]).fetchone()[0]

    # As a context manager: one event loop and worker pool for all requests, as under uvicorn.
    client = TestClient(create_app(url), base_url="http://127.0.0.1:8765").__enter__()
    trace = max(real)  # the newest: its "older" neighbour walks back over the synthetic million

    def page(url: str):
        def get() -> None:
            reply = client.get(url)
            assert reply.status_code == 200, (url, reply.status_code)
        return get

    cases = {
        "traces": "/traces",
        "traces_cell": "/traces?cell=extra_ungrounded",
        "traces_kb_cell": "/traces?kb=kb1&cell=complete_grounded",
        "traces_gate": "/traces?gate=indeterminate",
        "traces_kb_gate": "/traces?kb=kb3&gate=pass",
        "traces_day": "/traces?since=2026-06-14&until=2026-06-14",
        "traces_deep_page": f"/traces?before={middle}",
        "traces_text_common": "/traces?q=fine",
        "traces_text_rare": "/traces?q=number%20999999%20",
        "traces_worst_first": "/traces?sort=worst",
        "traces_kb_failing_worst_first": "/traces?kb=kb1&gate=fail&sort=worst",   # the overview's link
        "trace": f"/traces/{trace}",
        "trace_kb_filter": f"/traces/{trace}?kb=support",
        "trace_cell_filter": f"/traces/{trace}?cell=complete_ungrounded",
        "trace_text_filter": f"/traces/{trace}?q=warranty",
        "overview": "/",
    }
    figures: dict[str, object] = {"store": url.split(":", 1)[0], "stored_traces": n, "fill_s": round(fill_s, 1),
                                  "target_ms": TARGET_MS}
    if url.startswith("sqlite:///"):
        figures["db_mb"] = round(os.path.getsize(url[len("sqlite:///"):]) / 2**20)
    missed = []
    for name, target in cases.items():
        figures[name] = timed(page(target), repeat)
        if name.startswith("trace") and figures[name]["max_ms"] >= TARGET_MS:  # type: ignore[index]
            missed.append(name)
        figures[name]["url"] = target  # type: ignore[index]
    figures["missed_target"] = missed
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
