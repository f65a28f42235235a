"""`veralith serve` in a real browser, for what a person sees beyond security: the compare form keeps
the runs it was asked for, a trace shows its history, text keeps its line breaks and right-to-left
marks, every page fits a 390 px phone without scrolling sideways, and axe-core finds no
accessibility violation on any page (WCAG 2 A/AA rules, contrast included).

axe-core is vendored under tests/vendor/axe-core (MPL-2.0, its licence beside it): nothing is
downloaded at test time. It is injected into a context that bypasses the page's Content-Security-
Policy, which forbids every script, the page's own included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CHROMIUM
from web_support import EXAMPLES, live_server, page_problems, run_eval

if not CHROMIUM.is_file():
    pytest.skip(f"needs {CHROMIUM} (Debian's chromium package; .ci/run installs it)", allow_module_level=True)
pytest.importorskip("starlette", reason="the web extra is not installed (pip install '.[web]')")
pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")

from veralith.web import create_app  # noqa: E402

pytestmark = pytest.mark.slow
LAYOUT = {"id": "layout-1", "knowledge_base": "layout",
          "query": "Which two lines?\r\nSay both.",
          "context": ["First page.\fSecond page.", "مرحبا\u200f بالعالم (the store's Arabic greeting)"],
          "response": "Line one.\r\nLine two. مرحبا\u200f بالعالم\fAfter the form feed. Spoof: \u202eevil"}


def _eval(db: Path, path: Path, *args: str) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERALITH_", "OPENAI_"))}
    env.update(VERALITH_DB_PATH=str(db), VERALITH_BACKEND="local")
    done = subprocess.run([sys.executable, "-m", "veralith.cli", "eval", str(path), *args], env=env,
                          cwd=path.parent, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 2), done.stderr


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("layout")
    db = folder / "web.db"
    _eval(db, EXAMPLES, "--run-name", "baseline")
    # same ids: re-judged in place; failing ones explained (the explanation section is laid out and checked too)
    _eval(db, EXAMPLES.with_name("traces_v2.jsonl"), "--run-name", "candidate", "--explain")
    layout = folder / "layout.jsonl"
    layout.write_text(json.dumps(LAYOUT) + "\n", encoding="utf-8")
    run_eval(db, layout)
    return db


@pytest.fixture(scope="module")
def base_url(db) -> str:
    with live_server(create_app(db, page_size=8)) as url:
        yield url


def _trace_with_history(db: Path) -> int:
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT trace_id FROM trace_history ORDER BY id LIMIT 1").fetchone()
    assert row is not None, "the candidate run re-judged no trace"
    return int(row[0])


def _layout_trace(db: Path) -> int:
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT id FROM traces WHERE external_id = 'layout-1'").fetchone()[0])


def _selected(page) -> tuple[str, str]:
    return (page.eval_on_selector("select[name=a]", "s => s.options[s.selectedIndex].text"),
            page.eval_on_selector("select[name=b]", "s => s.options[s.selectedIndex].text"))


def test_the_compare_form_keeps_named_runs_and_resubmits_the_same_comparison(page, base_url):
    page.goto(base_url + "/compare?a=baseline&b=candidate")
    assert _selected(page) == ("#1 baseline", "#2 candidate")
    verdict = page.inner_text("p.verdict")
    with page.expect_navigation():
        page.click("form.filters button[type=submit]")
    assert "a=1" in page.url and "b=2" in page.url  # the form sends the runs by id
    assert _selected(page) == ("#1 baseline", "#2 candidate")
    assert page.inner_text("p.verdict") == verdict and "regression" in verdict


def test_comparing_a_run_with_itself_says_so(page, base_url):
    page.goto(base_url + "/compare?a=candidate&b=2")
    assert "same run" in page.inner_text("p.verdict")
    assert page.locator("table.changes").count() == 0


def test_a_trace_page_shows_its_earlier_outcomes(page, base_url, db):
    page.goto(f"{base_url}/traces/{_trace_with_history(db)}")
    rows = page.locator("table.history tbody tr")
    assert rows.count() >= 1
    assert page.locator("table.history td .badge, table.history td .status").count() >= 1


def test_line_breaks_and_direction_marks_are_layout_and_overrides_stay_escaped(page, base_url, db):
    page.goto(f"{base_url}/traces/{_layout_trace(db)}")
    response = page.inner_text("p.response")
    assert "Line one.\nLine two." in response and "\nAfter the form feed." in response
    assert "\u200f" in response and "\\u200f" not in response
    assert "\\u202e" in response and "\u202e" not in response       # an override can spoof: written out
    body = page.inner_text("main")
    assert "\\x0d" not in body and "\\x0c" not in body
    assert "Which two lines?\nSay both." in page.inner_text("p.query")


def _pages(db: Path) -> list[str]:
    return ["/", "/traces", "/traces?sort=faith", "/traces?sort=worst", "/traces?gate=fail",
            "/traces?run=candidate", f"/traces/{_trace_with_history(db)}", f"/traces/{_layout_trace(db)}",
            f"/traces/{_trace_with_history(db)}?claims=all", "/compare", "/compare?a=1&b=1", "/traces/999999",
            "/traces?gate=nope", "/traces?run=nope", "/patterns", "/patterns?run=candidate",
            "/patterns?since=2999-01-01"]


@pytest.mark.parametrize("width, height", [(1280, 800), (390, 844)])
def test_every_page_fits_its_window_and_axe_finds_no_violation(browser, base_url, db, width, height):
    """No sideways scroll and no axe-core violation (WCAG 2 A/AA rules, contrast included) on any page,
    on a desktop window and on a phone."""
    found = page_problems(browser, base_url, _pages(db), width, height)
    assert not found, json.dumps(found, indent=1, ensure_ascii=False)[:6000]
