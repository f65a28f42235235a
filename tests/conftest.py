"""Shared fixtures. Every test runs offline, on a fresh temporary database, with default settings."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import pytest
from fake_openai_server import openai_server  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
# The optional shared folder (labelled data, an offline tiktoken cache) beside the checkout. Tests
# that need it skip with a reason when it is absent, so a fresh clone passes anywhere;
# VERALITH_SHARED_DIR=/nonexistent simulates that clone.
SHARED = Path(os.environ.get("VERALITH_SHARED_DIR") or REPO.parent / "shared")
DATA = SHARED / "data"


def data_file(name: str) -> Path:
    """A file of the shared data folder, or skip the calling test, naming what is missing."""
    path = DATA / name
    if not path.is_file():
        pytest.skip(f"needs {path}: labelled data from the optional shared folder, absent on this checkout")
    return path

# Tests never touch the network: no real key, no real base URL, tiktoken from the shared folder.
for _var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
    os.environ.pop(_var, None)
for _var in [v for v in os.environ if v.startswith("VERALITH_")]:
    os.environ.pop(_var)
# ... but for the shared folder's place, which the helpers (fake_openai_server) resolve the same way.
os.environ["VERALITH_SHARED_DIR"] = str(SHARED)
if (SHARED / "tiktoken").is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))

# What judge servers were found to do is kept in $XDG_CACHE_HOME/veralith/servers.json unless
# VERALITH_SERVER_NOTES says otherwise (each test sets its own, below); a subprocess that is given
# neither keeps it in a folder of this test session, never the user's.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="veralith-tests-cache-")

# A process keeps one spool and one id-counter descriptor open per store it logged to (one store in
# an application; a fresh temporary one per test here). A test process touches a few hundred
# stores, so lift the soft limit of open files (1,024 on many machines) to the hard limit.
if sys.platform != "win32":
    import resource

    _soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _hard == resource.RLIM_INFINITY or _soft < _hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (_hard if _hard != resource.RLIM_INFINITY else 65536, _hard))


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a Python subprocess that uses this test's store (its path, URL and spool
    folder) and the offline judge, with nothing else of Veralith's or OpenAI's from outside."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    for name in ("VERALITH_DB_PATH", "VERALITH_DB_URL", "VERALITH_SPOOL_DIR", "VERALITH_SERVER_NOTES"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    env.update({"VERALITH_BACKEND": "local", "PYTHONPATH": str(REPO), **extra})
    return env

@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """A private DB file, server notes file and settings re-read from a clean environment for each test."""
    from veralith.config import settings
    from veralith.llm.cancel import allow_calls
    from veralith.llm.server import forget_servers

    forget_servers()   # what a judge server was found to do (and its breaker) is per test
    allow_calls()      # a test that cancelled the judge calls does not cancel the next test's
    monkeypatch.setenv("VERALITH_DB_PATH", str(tmp_path / "veralith.db"))
    monkeypatch.setenv("VERALITH_SERVER_NOTES", str(tmp_path / "servers.json"))
    monkeypatch.setenv("VERALITH_BACKEND", "local")
    settings.reload()
    yield
    monkeypatch.undo()
    settings.reload()


# One initdb and one migrated template per test run, however many servers it starts (tests/pg_server.py):
# the controlling process names a folder here, which its xdist workers inherit; the first server
# saves its data folder in it, and every later one starts on a copy. The name does not start with
# VERALITH_, which this module clears.
_PG_SNAPSHOT_VAR = "PYTEST_VERALITH_PG_SNAPSHOT"


def pytest_configure(config):
    if not hasattr(config, "workerinput") and _PG_SNAPSHOT_VAR not in os.environ:
        folder = tempfile.mkdtemp(prefix="veralith-pg-snapshot-")
        if os.geteuid() == 0:   # the servers run as `postgres`, which copies in and out of it
            with contextlib.suppress(KeyError, LookupError, OSError):
                import shutil

                shutil.chown(folder, "postgres")
        os.environ[_PG_SNAPSHOT_VAR] = folder
        config._veralith_pg_snapshot = folder


def pytest_unconfigure(config):
    folder = getattr(config, "_veralith_pg_snapshot", None)
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(_PG_SNAPSHOT_VAR, None)


def _new_pg_server():
    """A running server: on a copy of the run's snapshot if there is one, else a fresh one whose data
    folder becomes the snapshot. A lock on the folder lets one process at a time save or copy it."""
    import fcntl

    pytest.importorskip("psycopg", reason="the `postgres` extra (psycopg) is not installed")
    from pg_server import PgServer

    if not os.environ.get(_PG_SNAPSHOT_VAR):
        return PgServer()
    folder = Path(os.environ[_PG_SNAPSHOT_VAR])
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "ready").exists():
            return PgServer(snapshot=folder / "data")
        server = PgServer()
        try:
            server.save_snapshot(folder)
            (folder / "ready").touch()
        except RuntimeError:   # no snapshot (a full disk?): every server runs initdb, as before
            pass
        return server


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL server for this test session (tests/pg_server.py); skips without the binaries."""
    server = _new_pg_server()
    yield server
    server.stop()


@pytest.fixture
def own_pg_server(tmp_path, monkeypatch):
    """A PostgreSQL server of this test's own (it may stop and start it: an outage), with a fresh
    database made the configured store and this test's own spool folder."""
    from veralith.config import settings

    server = _new_pg_server()
    try:
        server.url = server.new_database()
        monkeypatch.setenv("VERALITH_DB_URL", server.url)
        monkeypatch.setenv("VERALITH_SPOOL_DIR", str(tmp_path / "spool"))
        settings.reload()
        yield server
    finally:
        if "veralith.sdk.log" in sys.modules:
            sys.modules["veralith.sdk.log"].shutdown(wait=False)
        _close_stores()
        server.stop()


@pytest.fixture
def pg_url(pg_server, tmp_path, monkeypatch):
    """A fresh, migrated PostgreSQL database made the configured store (VERALITH_DB_URL), with this
    test's own spool folder; its URL."""
    from veralith.config import settings

    url = pg_server.new_database()
    monkeypatch.setenv("VERALITH_DB_URL", url)
    monkeypatch.setenv("VERALITH_SPOOL_DIR", str(tmp_path / "pg-spool"))
    settings.reload()
    yield url
    _close_stores()
    pg_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path):
    """Each store in turn as the configured one: the test's SQLite file, then a fresh PostgreSQL
    database (skipped without the server binaries). Tests of store behaviour take this (or `store`)
    so that they run against both."""
    if request.param == "postgres":
        yield request.getfixturevalue("pg_url")
    else:
        from veralith.store import store_url as configured

        yield configured()
        _close_stores()


@pytest.fixture
def store(store_url):
    """The configured store (see `store_url`), opened for writing."""
    from veralith.store import open_store

    return open_store(store_url)


def _close_stores():
    """Close what tests opened (PostgreSQL pools hold connections) and forget it."""
    import sys

    from veralith import store as store_package
    from veralith.work.claims import renewer

    if "veralith.sdk.log" in sys.modules:  # log()'s threads use the stores: stop them first
        sys.modules["veralith.sdk.log"].shutdown(wait=True, timeout=30)

    # A test that claims a trace and never finishes it leaves the lease with the process's renewer,
    # which would reopen the closed store's pool every few seconds for the rest of the session.
    for key in renewer.held():
        while key in renewer.held():
            renewer.drop(key)
    for opened in list(store_package._stores.values()):
        opened.close()
    store_package._stores.clear()
# The web view's browser tests (test_web_browser.py, test_web_layout.py): Debian's Chromium driven by
# Playwright, never `playwright install` (no browser download). Those modules skip without either.
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A page that records every dialog a payload might open and every CSP report."""
    context = browser.new_context(viewport={"width": 1200, "height": 900}, java_script_enabled=True)
    pg = context.new_page()
    pg.dialogs = []
    pg.csp_reports = []
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    pg.on("console", lambda m: pg.csp_reports.append(m.text) if "Content Security Policy" in m.text else None)
    yield pg
    context.close()


# `pytest -m "not slow"` is the quick loop. Slow: whole modules that start processes, servers or a
# browser, and single tests that take seconds (benchmarked with `--durations`; see CONTRIBUTING.md).
SLOW_MODULES = frozenset({"test_web_browser", "test_web_layout", "test_web_reader", "test_crash_safety", "test_concurrency",
                          "test_sample_app", "test_cli_progress", "test_fleet", "test_log_spool", "test_server_down"})
SLOW_TESTS = frozenset({
    "test_11_invalid_setting_is_one_line_and_help_still_works", "test_concurrent_first_connections_migrate_once",
    "test_threads_opening_a_fresh_file_at_once_all_get_a_connection", "test_python_blocks_run",
    "test_a_new_process_on_the_same_database_hits_too",
    "test_flaky_server_every_trace_done_or_carrying_its_judge_error", "test_13_cli_edge_inputs_are_messages_not_tracebacks",
    "test_serve_command_end_to_end", "test_2_dotenv_is_read_from_the_working_directory_only",
    "test_5_exit_with_a_hung_judge_waits_at_most_the_shutdown_timeout",
    "test_serve_on_another_loopback_address_answers_its_own_host",
    "test_a_rerun_after_an_outage_judges_again_and_never_passes_the_gate",
    "test_ctrl_c_keeps_finished_traces_leaves_the_rest_pending_and_resume_finishes_them",
    "test_killed_while_waiting_then_collected_loses_nothing_and_judges_once",
    "test_killed_between_creating_a_batch_and_recording_it_nothing_is_sent_twice",
})


# The files that take longest, longest first (per-file test time of `--durations -n 2`, 2026-12-02). xdist hands
# whole files to its workers in collection order (`--no-loadscope-reorder` in pyproject.toml), so these
# start first and the short files fill in around them: a long file started last would keep one core
# busy minutes after the other had finished. Order only: no test depends on it.
LONGEST_FIRST = ("test_fleet", "test_ids", "test_batch_api", "test_work_faults", "test_batch_service",
                 "test_log_spool", "test_web_reader", "test_store_errors", "test_concurrency", "test_reliability",
                 "test_docs", "test_store", "test_exit_codes", "test_web", "test_web_layout", "test_dead_letters",
                 "test_secrets_store", "test_patterns", "test_crash_safety", "test_secrets", "test_cli_ids",
                 "test_cache", "test_cli_openai", "test_local_servers", "test_cli_list", "test_sample_app",
                 "test_web_review", "test_import_bounded", "test_server_down")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__ in SLOW_MODULES or getattr(item, "originalname", item.name) in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.module.__name__, len(rank)))   # stable: files stay whole
