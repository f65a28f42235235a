"""Queue metrics (issue 35, Deliver 12): pending, running, stuck, dead-lettered, failed, oldest pending
age, judged per minute and judge errors, read from both stores, shown by `veralith stats` and served
as Prometheus text by `veralith worker --metrics-port` and `veralith serve`'s /metrics."""

from __future__ import annotations

import datetime as dt
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import subprocess_env
from store_support import is_sqlite, sql
from typer.testing import CliRunner
from work_support import claim, create_trace, mark_error

from veralith.store import TraceInput
from veralith.store.queue import dead_lettered, exposition, queue_figures, read_or_none

parser = pytest.importorskip("prometheus_client.parser")


def _trace(store, n: int = 0) -> int:
    return create_trace(store, TraceInput(query=f"Why {n}?", context=[], response="Because."), queued=False)


def _values(text: str) -> dict[str, float]:
    return {sample.name: sample.value for family in parser.text_string_to_metric_families(text)
            for sample in family.samples}


def _filled(store) -> list[int]:
    """Five pending traces, the oldest logged an hour ago; two of them claimed (one under a lease
    that died 10 minutes ago); one failed just now."""
    ids = [_trace(store, n) for n in range(5)]
    hour_ago = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)).isoformat(timespec="microseconds")
    sql(store, "UPDATE traces SET created_at = ? WHERE id = ?", [hour_ago, ids[0]])
    assert claim(store, ids[3]) and claim(store, ids[4])
    sql(store, "UPDATE traces SET lease_at = lease_at - 600 WHERE id = ?", [ids[4]])
    failed = _trace(store, 9)
    assert claim(store, failed) and mark_error(store, failed, "judge server down")
    return ids


def test_queue_figures_on_both_stores(store):
    _filled(store)
    figures = store.read(queue_figures)
    assert (figures.pending, figures.running, figures.stuck_running, figures.failed) == (3, 2, 1, 1)
    assert 3500 < figures.oldest_pending_age_s < 3700
    assert figures.judged_last_5m == 1 and figures.judge_errors_last_5m == 1   # the failed one, just now
    assert figures.judged_per_minute == pytest.approx(0.2)
    assert figures.dead_lettered == 0   # no dead-letter place in this schema yet, or an empty one


def test_an_empty_queue_has_no_age_and_no_pace(store):
    figures = store.read(queue_figures)
    assert (figures.pending, figures.running, figures.oldest_pending_age_s, figures.judged_per_minute) == (
        0, 0, None, 0.0)


def test_dead_letters_are_counted_when_the_place_exists(store):
    with store.connection() as db:
        present = bool(db.columns("dead_letters"))
    if not present:   # another change adds the table: until then the count is 0, not an error
        assert store.read(dead_lettered) == 0
        if not is_sqlite(store):
            return
        sql(store, "CREATE TABLE dead_letters (id INTEGER PRIMARY KEY, reason TEXT)")
    before = store.read(dead_lettered)
    sql(store, "INSERT INTO dead_letters (reason) VALUES ('a NUL in the query')"
        if not present else "SELECT 1")
    assert store.read(dead_lettered) == before + (0 if present else 1)


def test_the_exposition_is_prometheus_text_with_the_store_and_the_workers_figures(store):
    _filled(store)
    counters = {"veralith_worker_judged_total": ("Results stored.", 7)}
    text = exposition(lambda: read_or_none(store), lambda: counters).decode()
    values = _values(text)
    assert values["veralith_store_up"] == 1
    assert values["veralith_queue_pending"] == 3 and values["veralith_queue_stuck_running"] == 1
    assert values["veralith_queue_oldest_pending_age_seconds"] > 3500
    assert values["veralith_worker_judged_total"] == 7
    assert re.search(r"^# TYPE veralith_worker_judged(_total)? counter$", text, re.M)


def test_a_store_that_cannot_be_read_is_store_up_0_not_an_error():
    class Down:
        def read(self, fn):
            raise OSError("gone")

    values = _values(exposition(lambda: read_or_none(Down())).decode())
    assert values == {"veralith_store_up": 0}


def test_stats_shows_the_queue(store_url):
    from veralith.cli.app import app
    from veralith.store import open_store

    _filled(open_store(store_url))
    done = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["stats"])
    assert done.exit_code == 0, done.output
    assert "queue   pending 3 (oldest 60 min)  running 2, 1 stuck past the lease timeout" in done.output
    assert "dead-lettered 0  failed 1" in done.output and "0.2 judged/min, 1 with judge errors" in done.output


def test_the_worker_serves_its_metrics(store):
    from veralith.cli.metrics import serve_worker_metrics
    from veralith.work.worker import WorkerReport

    _filled(store)
    totals = WorkerReport(judged=4, failed=1, judge_errors=2)
    server, port = serve_worker_metrics(store, totals, "127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            values = _values(reply.read().decode())
        assert values["veralith_worker_judged_total"] == 4 and values["veralith_worker_judge_errors_total"] == 2
        assert values["veralith_queue_pending"] == 3
        totals.judged += 1   # read live at each scrape
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            assert _values(reply.read().decode())["veralith_worker_judged_total"] == 5
    finally:
        server.shutdown()
        server.server_close()


def test_veralith_worker_metrics_port_end_to_end(tmp_path):
    from veralith import log, shutdown

    log("Why?", ["Because."], "Because.", evaluate=False)
    shutdown(wait=True)
    env = subprocess_env(VERALITH_SPOOL_DIR=str(tmp_path / "spool"))
    proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "worker", "--metrics-port", "0"], env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("veralith worker: metrics at http://127.0.0.1:"), line
        url = line.split("metrics at ", 1)[1].strip()
        deadline = time.monotonic() + 60
        while True:   # until the logged trace is judged
            with urllib.request.urlopen(url, timeout=10) as reply:
                values = _values(reply.read().decode())
            if values.get("veralith_worker_judged_total") == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert values["veralith_worker_judged_total"] == 1 and values["veralith_queue_pending"] == 0
        assert values["veralith_judged_per_minute"] == pytest.approx(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_a_metrics_port_in_use_is_one_error_line_and_exit_2(tmp_path):
    import socket

    from veralith import evaluate

    evaluate("Why?", ["Because."], "Because.")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "veralith.cli", "worker", "--once", "--metrics-port", str(port)],
                              env=subprocess_env(VERALITH_SPOOL_DIR=str(tmp_path / "spool")), capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().startswith(f"error: cannot serve metrics on 127.0.0.1:{port}"), done.stderr
    assert "Traceback" not in done.stderr


def test_serve_metrics_is_behind_the_token_and_the_host_check(tmp_path):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from veralith import evaluate
    from veralith.config import settings
    from veralith.web import create_app

    evaluate("Why?", ["Because."], "Because.")
    token = "a-token-of-enough-length-1234"
    guarded = TestClient(create_app(settings.db_path, token=token), base_url="http://127.0.0.1:8765")
    assert guarded.get("/metrics").status_code == 401
    reply = guarded.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert _values(reply.text)["veralith_store_up"] == 1
    open_app = create_app(settings.db_path)
    assert TestClient(open_app, base_url="http://evil.example").get("/metrics").status_code == 403
    assert _values(TestClient(open_app, base_url="http://127.0.0.1:8765").get("/metrics").text)[
        "veralith_judged_per_minute"] == pytest.approx(0.2)
