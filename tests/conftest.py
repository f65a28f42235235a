"""Shared fixtures. Every test runs offline, on a fresh temporary database, with default settings."""

from __future__ import annotations

import os
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
if (SHARED / "tiktoken").is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """A private DB file and settings re-read from a clean environment for each test."""
    from veralith.config import settings

    monkeypatch.setenv("VERALITH_DB_PATH", str(tmp_path / "veralith.db"))
    monkeypatch.setenv("VERALITH_BACKEND", "local")
    settings.reload()
    yield
    monkeypatch.undo()
    settings.reload()


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
SLOW_MODULES = frozenset({"test_web_browser", "test_web_layout", "test_crash_safety", "test_concurrency",
                          "test_sample_app", "test_cli_progress"})
SLOW_TESTS = frozenset({
    "test_11_invalid_setting_is_one_line_and_help_still_works", "test_concurrent_first_connections_migrate_once",
    "test_threads_opening_a_fresh_file_at_once_all_get_a_connection", "test_python_blocks_run",
    "test_quickstart_inspect_screen_is_what_inspect_prints", "test_a_new_process_on_the_same_database_hits_too",
    "test_flaky_server_every_trace_done_or_carrying_its_judge_error", "test_13_cli_edge_inputs_are_messages_not_tracebacks",
    "test_serve_command_end_to_end", "test_2_dotenv_is_read_from_the_working_directory_only",
    "test_5_exit_with_a_hung_judge_waits_at_most_the_shutdown_timeout",
    "test_serve_on_another_loopback_address_answers_its_own_host",
    "test_a_rerun_after_an_outage_judges_again_and_never_passes_the_gate",
    "test_ctrl_c_keeps_finished_traces_leaves_the_rest_pending_and_resume_finishes_them",
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__ in SLOW_MODULES or getattr(item, "originalname", item.name) in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
