"""`veralith serve --review` in a real browser (headless Chromium, Playwright): a reviewer records a
label from the trace page's form, with no script on the page; hostile reviewer and note texts show as
text and run nothing; the review pages pass axe-core and fit a phone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CHROMIUM

if not CHROMIUM.is_file():
    pytest.skip(f"needs {CHROMIUM} (Debian's chromium package; .ci/run installs it)", allow_module_level=True)
pytest.importorskip("starlette", reason="the web extra is not installed (pip install '.[web]')")
pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")

from web_support import IMG, SCRIPT, filled_db, live_server, page_problems, rows, trace_id  # noqa: E402

from veralith.web import create_app  # noqa: E402


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    return filled_db(tmp_path_factory.mktemp("review"))


@pytest.fixture(scope="module")
def base_url(db) -> str:
    with live_server(create_app(db, review=True)) as url:
        yield url


def test_a_label_is_recorded_from_the_trace_page_and_shown_as_text(page, base_url, db):
    tid = trace_id(db, "What is the warranty of the Z9?")
    page.goto(f"{base_url}/traces/{tid}")
    form = page.locator("section#labels form")
    form.locator("select[name=part]").select_option(value="gate:")
    form.locator("select[name=value]").select_option(value="pass")
    form.locator("input[name=reviewer]").fill(SCRIPT)
    form.locator("input[name=note]").fill(IMG)
    form.get_by_role("button", name="Record label").click()
    page.wait_for_url(f"{base_url}/traces/{tid}#labels")
    shown = page.locator("section#labels table").inner_text()
    assert SCRIPT in shown and IMG in shown                 # as text
    assert page.evaluate("() => window.__xss === undefined")
    assert page.locator("section#labels img, section#labels script").count() == 0
    assert page.dialogs == [] and page.csp_reports == []
    stored = rows(db, "SELECT target, value, reviewer, note FROM labels WHERE trace_id = ?", [tid])
    assert [tuple(r) for r in stored] == [("gate", "pass", SCRIPT, IMG)]


@pytest.mark.parametrize("width, height", [(1280, 800), (390, 844)])
def test_the_review_pages_fit_and_axe_finds_no_violation(browser, base_url, db, width, height):
    tid = trace_id(db, "What is the warranty of the Z9?")
    found = page_problems(browser, base_url, ["/review", f"/traces/{tid}"], width, height)
    assert not found, json.dumps(found, indent=1, ensure_ascii=False)[:6000]
