"""`veralith serve` in a real browser: headless Chromium (Debian's package) driven by Playwright.

Each page is opened against a database filled by `veralith eval examples/traces.jsonl` (plus hostile
records, see web_support), and the tests check what a person sees: the charts, the filters, the
claims coloured by verdict, a claim's evidence marked inside its chunk. Hostile text must show as
text and no script may run: a payload that ran would set window.__xss, open a dialog, or leave a
live element in the DOM.

Screenshots are written to a temporary folder; with SCREENSHOTS_DIR=DIR (e.g. docs/img)
they go there instead, which is how the ones in docs/web.md are made. (Not a VERALITH_ variable:
conftest clears those so that no test sees the developer's settings.)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.is_file():
    pytest.skip(f"needs {CHROMIUM} (Debian's chromium package; .ci/run installs it)", allow_module_level=True)
pytest.importorskip("starlette", reason="the web extra is not installed (pip install '.[web]')")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")

from web_support import CLOSER, HOSTILE_KB, IMG, LINK, SCRIPT, filled_db, live_server, trace_id  # noqa: E402

from veralith.web import create_app  # noqa: E402

_SHOTS = os.environ.get("SCREENSHOTS_DIR")


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    return filled_db(tmp_path_factory.mktemp("webui"))


@pytest.fixture(scope="module")
def base_url(db) -> str:
    with live_server(create_app(db, page_size=8)) as url:
        yield url


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(_SHOTS) if _SHOTS else tmp_path_factory.mktemp("shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def no_script_ran(page) -> None:
    assert page.evaluate("() => window.__xss === undefined"), page.evaluate("() => window.__xss")
    assert page.dialogs == []
    live = page.evaluate("""() => ({
        scripts: document.querySelectorAll('script').length,
        handlers: [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length,
        js_links: document.querySelectorAll('a[href^="javascript:" i]').length,
        imgs: document.querySelectorAll('img').length})""")
    assert live == {"scripts": 0, "handlers": 0, "js_links": 0, "imgs": 0}


def test_overview_shows_each_knowledge_base_with_its_chart(page, base_url, shots):
    page.goto(base_url + "/")
    headings = page.locator("section.kb h2").all_inner_texts()
    for kb in ["engineering", "finance", "geography", "history", "science", "support", "hostile", HOSTILE_KB]:
        assert kb in headings
    # One SVG chart per knowledge base, with a bar per cell present and a pass-rate point.
    assert page.locator("section.kb svg.chart").count() == len(headings)
    support = page.locator("section.kb", has=page.get_by_role("link", name="support", exact=True))
    assert support.locator("rect.bar").count() == 3    # complete_grounded, complete_ungrounded, incomplete_ungrounded
    assert support.locator("circle.passdot").count() == 1
    assert support.locator("dd.passrate").inner_text() == "50%"
    assert "fallback" in support.locator("dd.threshold").inner_text()
    assert page.locator("table.cost tbody tr").count() == 1
    page.screenshot(path=str(shots / "overview.png"), full_page=True)
    no_script_ran(page)


def test_traces_filters_and_pages(page, base_url, shots):
    page.goto(base_url + "/traces")
    assert page.locator("table.traces tbody tr").count() == 8     # page_size
    page.get_by_role("link", name="older →").click()
    assert page.locator("table.traces tbody tr").count() == 6     # 12 examples + 2 hostile = 14
    page.get_by_role("link", name="← newer").click()
    assert page.locator("table.traces tbody tr").count() == 8
    # The filter form: a cell, then a knowledge base on top of it.
    page.select_option("select[name=cell]", "complete_grounded")
    page.get_by_role("button", name="Filter").click()
    cells = page.locator("table.traces tbody td.c-cell .badge").all_inner_texts()
    assert cells and set(cells) == {"complete_grounded"}
    page.select_option("select[name=kb]", "support")
    page.get_by_role("button", name="Filter").click()
    assert page.locator("table.traces tbody tr").count() == 2
    assert "kb=support" in page.url and "cell=complete_grounded" in page.url
    page.goto(base_url + "/traces?q=warranty")
    queries = page.locator("table.traces td.query").all_inner_texts()
    assert queries and all("warranty" in q.lower() for q in queries)
    page.goto(base_url + "/traces?gate=fail")
    page.screenshot(path=str(shots / "traces.png"), full_page=True)
    no_script_ran(page)


def test_trace_page_highlights_claims_and_opens_their_evidence(page, base_url, db, shots):
    tid = trace_id(db, "What is the warranty period for the X200")
    page.goto(f"{base_url}/traces/{tid}?kb=support")
    response = page.locator("p.response")
    assert response.locator("a.claim.rel-supported").inner_text() == "The X200 laptop comes with a two-year limited warranty"
    ungrounded = response.locator("a.claim.rel-unsupported")
    assert ungrounded.inner_text() == "The warranty also covers accidental drops and liquid spills"
    assert page.locator(".verdict .badge").inner_text() == "complete_ungrounded"
    assert page.locator(".verdict .gate").inner_text() == "fail"
    # No claim selected: no evidence panel is shown, only the hint.
    assert page.locator(".claim-detail:visible").count() == 0
    assert page.locator(".details .hint").is_visible()
    # Selecting the grounded claim shows its quote marked inside its chunk (CSS :target, no script).
    response.locator("a.claim.rel-supported").click()
    detail = page.locator(".claim-detail:visible")
    assert detail.count() == 1 and not page.locator(".details .hint").is_visible()
    assert detail.locator("blockquote mark").inner_text() == \
        "The X200 laptop comes with a two-year limited warranty covering manufacturing defects."
    # Sub-questions with sufficiency and coverage, and the fixes.
    row = page.locator("table.subq tbody tr").first
    assert "the whole query" in row.inner_text() and row.locator(".coverage").inner_text() == "answered"
    assert page.locator("ul.actions li").count() >= 2
    assert page.locator("section.usage").get_by_text("local").count() >= 1
    # Neighbours keep the filter.
    for link in page.locator("nav.neighbours a[rel]").all():
        assert link.get_attribute("href").endswith("?kb=support")
    page.screenshot(path=str(shots / "trace.png"), full_page=True)
    ungrounded.click()
    assert "not supported" in page.locator(".claim-detail:visible .reason").inner_text().lower() or \
        page.locator(".claim-detail:visible .label").inner_text() == "ungrounded"
    no_script_ran(page)


def test_evidence_quote_is_marked_inside_the_rest_of_its_chunk(page, base_url, db):
    page.goto(f"{base_url}/traces/{trace_id(db, 'How do I reset my password')}")
    page.locator("p.response a.claim").first.click()
    chunk = page.locator(".claim-detail:visible blockquote.chunk")
    assert chunk.locator("mark").inner_text() == \
        "To reset your password, open Settings, choose Security, and click Reset password."
    assert chunk.inner_text().endswith("We email you a link that stays valid for 30 minutes.")
    assert page.locator(".claim-detail:visible figcaption").inner_text() == "chunk kb-12 · help/account/password.md"


@pytest.mark.parametrize("query", ["What is the warranty of the Z9", "Who makes the Z9"])
def test_hostile_trace_renders_as_text_and_runs_nothing(page, base_url, db, query):
    tid = trace_id(db, query)
    page.goto(f"{base_url}/traces/{tid}")
    assert page.locator("h1").inner_text() == f"Trace {tid}"
    text = page.locator("main").inner_text()
    if query.startswith("What"):
        for payload in (SCRIPT, IMG, LINK):
            assert payload in page.locator("p.response").inner_text()
        assert SCRIPT in page.locator("p.query").inner_text()
        assert "javascript:alert('source')" in text            # a chunk source is text, never a link
        assert IMG in page.locator("section.metadata").inner_text()   # metadata keys too
    # The fake closing tags did not close anything: the page still has its later sections.
    assert CLOSER in text
    assert page.locator("section.metadata").count() == 1
    # Clicking every link a person can click on this page runs nothing either.
    for href in page.locator("main a").evaluate_all("els => els.map(e => e.getAttribute('href'))"):
        assert re.match(r"^(/|#)", href), href
    for claim in page.locator("p.response a.claim").all():
        claim.click()
    no_script_ran(page)


def test_hostile_knowledge_base_in_the_filter_form(page, base_url):
    page.goto(base_url + "/traces")
    page.select_option("select[name=kb]", HOSTILE_KB)
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/traces?*kb=*")  # the filtered page, not the one the click left
    assert page.locator("table.traces tbody tr").count() == 1
    assert page.locator("table.traces td.c-kb").inner_text() == HOSTILE_KB
    no_script_ran(page)
