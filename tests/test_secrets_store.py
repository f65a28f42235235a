"""A store's password never leaves (issue 35, fault 11): not through the log shipper's lines in the
host app's logging, psycopg's own log lines, `veralith worker`, `stats`, `migrate`, nor the web view,
whether it is given as user info (postgresql://u:pw@…) or as a parameter (?password=, sslpassword=,
passfile=, or key=value in a libpq DSN)."""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import subprocess_env
from typer.testing import CliRunner

from veralith.config import LOGGERS, settings
from veralith.redact import redact, redact_url

REPO = Path(__file__).resolve().parents[1]
SECRET = "Hunter2-db-secret"


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])   # closed again: nothing listens there


def dead_url(port: int | None = None) -> str:
    """A PostgreSQL URL carrying the password both ways, on a port where nothing listens."""
    return (f"postgresql://vl:{SECRET}@127.0.0.1:{port or _dead_port()}/veralith"
            f"?password={SECRET}&sslpassword={SECRET}&connect_timeout=1")


# ---------------------------------------------------------------- the rule

@pytest.mark.parametrize("text", [
    f"postgresql://vl:{SECRET}@db/v",
    f"postgresql://db/v?password={SECRET}",
    f"postgresql://db/v?sslmode=require&sslpassword={SECRET}&x=1",
    f"postgresql://db/v?passfile=/home/{SECRET}/.pgpass",
    f"host=db password={SECRET} dbname=v",
    f"host=db password = '{SECRET} with spaces \\' and a quote' dbname=v",
    f"could not connect (PASSWORD={SECRET})",
])
def test_password_parameters_are_masked_like_user_info(text):
    assert SECRET not in redact(text) and SECRET not in str(redact_url(text))
    assert "***" in redact(text)


def test_what_is_not_a_password_parameter_is_left_alone():
    assert redact("postgresql://db/v?sslmode=require&user=vl") == "postgresql://db/v?sslmode=require&user=vl"
    assert redact("the password field was empty") == "the password field was empty"
    masked = redact(f"host=db password={SECRET} dbname=v")
    assert masked.endswith(" dbname=v")   # the value ends at the next space


def test_every_veralith_logger_masks_its_records():
    names = set()
    for path in (REPO / "veralith").rglob("*.py"):
        for match in re.finditer(r"getLogger\((\"[^\"]+\"|__name__)\)", path.read_text()):
            literal = match.group(1)
            names.add(literal.strip('"') if literal != "__name__"
                      else ".".join(path.relative_to(REPO).with_suffix("").parts))
    assert names <= set(LOGGERS), f"add {sorted(names - set(LOGGERS))} to veralith.config.LOGGERS"


def test_a_host_handler_sees_a_logged_password_masked_traceback_included(caplog):
    caplog.set_level(logging.DEBUG)
    log = logging.getLogger("veralith.work")
    log.warning("could not move spooled traces into %s", f"postgresql://vl:{SECRET}@db/v?password={SECRET}")
    try:
        raise RuntimeError(f"libpq: missing '=' after 'postgresql://vl:{SECRET}@db' in connection info")
    except RuntimeError:
        log.exception("veralith: could not move spooled traces into the store")
    assert "could not move spooled traces" in caplog.text
    assert SECRET not in caplog.text and all(SECRET not in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------- a host app logging into a dead store

APP = """
import logging, sys, time
{setup}
import veralith
for i in range(3):
    veralith.log(f"Why {{i}}?", ["Because."], "Because.")
time.sleep(4.0)   # the shipper tries the store (and psycopg's pool its connections) several times
print("left", veralith.shutdown(wait=False), flush=True)
"""


# (Each takes ~35 s: at exit the shipper is still inside its 10 s wait for a connection.)
@pytest.mark.parametrize("setup", ["", "logging.basicConfig(level=logging.DEBUG)"])
def test_a_host_app_logging_into_an_unreachable_store_never_prints_the_password(tmp_path, setup):
    pytest.importorskip("psycopg_pool")
    env = subprocess_env(VERALITH_DB_URL=dead_url(), VERALITH_SPOOL_DIR=str(tmp_path / "spool"),
                         VERALITH_SHUTDOWN_TIMEOUT_S="1")
    done = subprocess.run([sys.executable, "-c", APP.format(setup=setup)], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "left" in done.stdout
    assert SECRET not in done.stdout + done.stderr
    # psycopg's pool lines about Veralith's pool ("error connecting in 'veralith'") are not the host's:
    # none at the levels a host normally runs (no configuration at all: Python's last-resort handler).
    if "DEBUG" not in setup:
        assert "error connecting" not in done.stderr and "psycopg" not in done.stderr, done.stderr
    else:
        assert "***" in done.stderr   # the shipper's debug line names the store, masked


def test_the_host_apps_own_psycopg_pool_still_logs(caplog):
    pytest.importorskip("psycopg_pool")
    from veralith.store.postgres import _quiet_pool_logs

    _quiet_pool_logs()
    caplog.set_level(logging.WARNING)
    logging.getLogger("psycopg.pool").warning("error connecting in %r: %s", "the-hosts-pool", "refused")
    logging.getLogger("psycopg.pool").warning("error connecting in %r: %s", "veralith", "refused")
    assert "the-hosts-pool" in caplog.text and "'veralith'" not in caplog.text


# ---------------------------------------------------------------- commands

@pytest.fixture
def fast_connect(monkeypatch):
    """A store that cannot be reached says so after 1 s, not the 10 s a real command waits."""
    pytest.importorskip("psycopg_pool")
    monkeypatch.setattr("veralith.store.postgres._CONNECT_TIMEOUT_S", 1)


def _cli(*args: str):
    from veralith.cli.app import app

    return CliRunner(env={"COLUMNS": "200"}).invoke(app, list(args))


def test_stats_worker_and_migrate_name_an_unreachable_store_without_its_password(fast_connect, caplog,
                                                                                   monkeypatch, tmp_path):
    caplog.set_level(logging.DEBUG)
    url = dead_url()
    from veralith import evaluate

    evaluate("Why?", ["Because."], "Because.")   # a SQLite history to copy
    migrate = _cli("migrate", "--to", url)
    monkeypatch.setenv("VERALITH_DB_URL", url)
    monkeypatch.setenv("VERALITH_SPOOL_DIR", str(tmp_path / "spool"))
    settings.reload()
    stats = _cli("stats")
    worker = _cli("worker", "--once")
    for name, done in (("stats", stats), ("worker", worker), ("migrate", migrate)):
        assert done.exit_code != 0, (name, done.output)
        assert "127.0.0.1" in done.output, (name, done.output)   # it does name the store
        assert SECRET not in done.output, (name, done.output)
    assert SECRET not in caplog.text


def test_a_worker_on_a_live_store_shows_its_url_masked(pg_url, monkeypatch):
    # The tests' server trusts local connections, so the password is accepted and ignored.
    url = pg_url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@") + f"?password={SECRET}"
    monkeypatch.setenv("VERALITH_DB_URL", url)
    settings.reload()
    done = _cli("worker", "--once")
    assert done.exit_code == 0, done.output
    assert "judging the traces of postgresql://***@" in done.output and "password=***" in done.output
    assert SECRET not in done.output


# ---------------------------------------------------------------- the web view

def test_web_pages_mask_a_password_in_a_stored_error_and_in_a_store_error(tmp_path):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient
    from work_support import claim, create_trace, mark_error

    from veralith.store import TraceInput, open_store
    from veralith.web import create_app

    store = open_store()
    trace_id = create_trace(store, TraceInput(query="Why?", context=[], response="Because."))
    assert claim(store, trace_id)
    # As a version that masked only the user info would have stored it.
    mark_error(store, trace_id, f"cannot reach postgresql://***@db/v?password={SECRET}")
    client = TestClient(create_app(settings.db_path), base_url="http://127.0.0.1:8765")
    page = client.get(f"/traces/{trace_id}")
    assert page.status_code == 200 and "cannot reach" in page.text and SECRET not in page.text

    from veralith.web.app import _Pages

    pages = _Pages(store, page_size=10)
    shown = pages.render("error.html", 503, page="", title="Database unavailable",
                         message=f"cannot reach PostgreSQL at host=db password={SECRET}")
    assert SECRET not in shown.body.decode() and "password=***" in shown.body.decode()


def test_subprocess_worker_error_line(tmp_path):
    """`veralith worker` as a supervisor runs it: one error line on stderr, no password, no psycopg noise."""
    pytest.importorskip("psycopg_pool")
    env = subprocess_env(VERALITH_DB_URL=dead_url(), VERALITH_SPOOL_DIR=str(tmp_path / "spool"))
    done = subprocess.run([sys.executable, "-m", "veralith.cli", "worker", "--once"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert SECRET not in done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error: cannot reach PostgreSQL at postgresql://***@"), textwrap.shorten(
        done.stderr, 500)
    assert "error connecting" not in done.stderr
