"""`veralith serve` as a person reads it, in a real browser at a desktop window (1280×800) and on a
phone (390×844): the traces list shows cell, gate and why without sideways scrolling; the overview
leads to the worst traces in a click; a trace page's labels agree; compare pairs runs that share
traces, says when none do, groups its lists and links each side; runs are named as /compare names
them; a big trace stays a page; `serve --host 0.0.0.0` prints an address another machine can open.

The store: four `veralith eval` runs (local backend): #1 one big trace (a 20 KB response, a 9.5 KB
query), #2 the examples ("baseline"), #3 two records no other run has ("other"), #4 the changed
examples ("candidate"), with the examples' creation spread over twelve days.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CHROMIUM
from web_support import EXAMPLES, live_server, page_problems, run_eval

if not CHROMIUM.is_file():
    pytest.skip(f"needs {CHROMIUM} (Debian's chromium package; .ci/run installs it)", allow_module_level=True)
pytest.importorskip("starlette", reason="the web extra is not installed (pip install '.[web]')")
pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")

from veralith.web import create_app  # noqa: E402

WINDOWS = {"desktop": (1280, 800), "phone": (390, 844)}
BIG_QUERY = "Tell me everything about the catalogue items, their weights and the warehouses they ship from, "
OTHER = [{"id": "other-1", "knowledge_base": "other", "query": "Which river runs through Vienna?",
          "context": ["Vienna lies on the Danube."], "response": "The Danube runs through Vienna."},
         {"id": "other-2", "knowledge_base": "other", "query": "What is the tallest building in Vienna?",
          "context": ["The DC Tower 1 is the tallest building in Vienna."], "response": "The Stephansdom."}]


def _big_record() -> dict:
    def sentence(i: int) -> str:
        return (f"Item {i} of the catalogue weighs {i * 3 % 97} kilograms and ships from warehouse {i % 7} in "
                f"{('Leeds', 'Porto', 'Lyon', 'Graz')[i % 4]}.")
    return {"id": "big-1", "knowledge_base": "big", "query": (BIG_QUERY * 100)[:9800],
            "context": [" ".join(sentence(i) for i in range(k, k + 40)) for k in range(1, 400, 40)],
            "response": " ".join(sentence(i) for i in range(1, 400))[:20000]}


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("reader")
    db = folder / "web.db"
    for name, records in (("big", [_big_record()]), ("other", OTHER)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    run_eval(db, folder / "big.jsonl", args=("--run-name", "big"))
    run_eval(db, EXAMPLES, args=("--run-name", "baseline"))
    run_eval(db, folder / "other.jsonl", args=("--run-name", "other"))
    run_eval(db, EXAMPLES.with_name("traces_v2.jsonl"), args=("--run-name", "candidate"))
    with sqlite3.connect(db) as conn:   # the running totals follow a moved date (migrations/0008's triggers)
        conn.execute("UPDATE traces SET created_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', created_at,"
                     " printf('-%d days', id % 12)) WHERE knowledge_base NOT IN ('big', 'other')")
    return db


@pytest.fixture(scope="module")
def base_url(db) -> str:
    with live_server(create_app(db)) as url:
        yield url


@pytest.fixture(params=list(WINDOWS), ids=list(WINDOWS))
def window(request, browser):
    width, height = WINDOWS[request.param]
    context = browser.new_context(viewport={"width": width, "height": height})
    yield context.new_page()
    context.close()


def _id(db: Path, external_id: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT id FROM traces WHERE external_id = ?", [external_id]).fetchone()[0])


def _inside_the_window(page, selector: str) -> list[dict]:
    """The boxes of `selector`'s elements that are not wholly in view across (in the window and in any box
    that scrolls sideways around them, scrolled as the page opens) or are too narrow to read."""
    return page.eval_on_selector_all(selector, """(els) => els.map(e => {
        const r = e.getBoundingClientRect();
        let right = window.innerWidth, left = 0;
        for (let a = e.parentElement; a; a = a.parentElement) {
            if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(a).overflowX)) {
                const b = a.getBoundingClientRect(); right = Math.min(right, b.right); left = Math.max(left, b.left);
            }
        }
        return {left: r.left, right: r.right, width: r.width, seen_from: left, seen_to: right};
    }).filter(r => r.left < r.seen_from || r.right > r.seen_to + 0.5 || r.width < 150)""")


# --- 1. the traces list ----------------------------------------------------------------------------

def test_the_traces_list_shows_cell_gate_and_why_without_scrolling_sideways(window, base_url):
    window.goto(base_url + "/traces")
    rows = window.locator("table.traces tbody tr")
    assert rows.count() >= 14
    # The reason column: every row's box lies inside the window, wide enough to read, none scrolled out of view.
    assert window.locator("table.traces td.why").count() == rows.count()
    assert _inside_the_window(window, "table.traces td.why") == []
    box = window.locator("table.traces").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= window.viewport_size["width"]
    assert window.evaluate("() => document.documentElement.scrollWidth - window.innerWidth") <= 0
    failing = window.locator("table.traces tr", has=window.locator(".gate-fail")).first
    for part in (".badge", ".gate", "td.why"):
        cell = failing.locator(part)
        assert cell.is_visible() and cell.inner_text().strip(), part
        r = cell.bounding_box()
        assert r["x"] >= 0 and r["x"] + r["width"] <= window.viewport_size["width"], (part, r)
    assert re.search(r"contradicted|not supported|not answered", failing.locator("td.why").inner_text())


# --- 2. from the overview to the worst traces ------------------------------------------------------

def test_the_overview_leads_to_the_worst_traces(window, base_url):
    window.goto(base_url + "/")
    # Panels with the most failing results first.
    failing = [int(m.group(1).replace(",", "")) if (m := re.match(r"([\d,]+) failing", t)) else 0
               for t in window.locator("section.kb p.kb-links").all_inner_texts()]
    assert failing == sorted(failing, reverse=True) and failing[0] > 0
    window.locator("section.kb p.kb-links a", has_text="failing, worst first").first.click()
    window.wait_for_url("**/traces?*sort=worst*")
    assert "gate=fail" in window.url
    gates = window.locator("table.traces td.c-cell .gate").all_inner_texts()
    assert gates and set(gates) == {"fail"}
    # "failing only" and "worst first" on the traces page itself.
    window.goto(base_url + "/traces")
    window.get_by_role("link", name="failing only").click()
    window.wait_for_url("**/traces?gate=fail")
    assert set(window.locator("table.traces td.c-cell .gate").all_inner_texts()) == {"fail"}
    window.get_by_role("link", name="worst first").click()
    window.wait_for_url("**sort=worst**")
    cells = window.locator("table.traces td.c-cell .badge").all_inner_texts()
    order = ["incomplete_ungrounded", "complete_ungrounded", "extra_ungrounded", "incomplete_grounded",
             "extra_grounded", "indeterminate", "complete_grounded"]
    assert [order.index(c) for c in cells] == sorted(order.index(c) for c in cells)


def test_a_chart_bar_lists_the_traces_it_counts(window, base_url):
    window.goto(base_url + "/")
    bar = window.locator("section.kb svg.chart a").first
    label = bar.locator("title").text_content()
    assert window.get_by_role("link", name=label).count() >= 1      # its title is its accessible name
    cell = re.search(r": (\w+) \d+ of \d+", label).group(1)
    bar.click()
    window.wait_for_url("**/traces?*cell=*")
    assert "since=" in window.url and "until=" in window.url and "kb=" in window.url
    badges = window.locator("table.traces td.c-cell .badge").all_inner_texts()
    assert badges and set(badges) == {cell}


# --- 3. one trace: labels that agree ---------------------------------------------------------------

def test_a_wrong_number_reads_the_same_everywhere_on_its_page(window, base_url, db):
    """support-002 in run #4 states a 60-day return window; its chunk says 30 days."""
    window.goto(f"{base_url}/traces/{_id(db, 'support-002')}")
    headline = window.locator(".verdict .headline").inner_text()
    assert "q1 has no grounded answer" in headline and "contradicted by chunk policy-3" in headline
    assert "unanswered" not in headline.lower()
    assert window.locator("table.subq .coverage").all_inner_texts() == ["no grounded answer"]
    [line] = window.locator("ul.completeness li").all_inner_texts()
    assert line.startswith("q1: no grounded answer") and "answered (" not in line
    fix = window.locator(".fixes").inner_text()
    assert "unanswered" not in fix and "without a grounded answer" in fix
    sufficiency = window.locator("p.sufficiency").inner_text()
    assert "the context answers 1 of 1 sub-question" in sufficiency and "vs" not in sufficiency
    # The offline judge: one short line above the query, the whole note further down.
    judge = window.locator(".verdict .judge")
    assert len(judge.inner_text()) < 100 and judge.bounding_box()["height"] < 60
    assert "labelled sets" in window.locator("#judge").inner_text()


# --- 4. compare --------------------------------------------------------------------------------------

def test_the_default_comparison_pairs_runs_that_share_traces_and_names_the_one_skipped(window, base_url):
    window.goto(base_url + "/compare")
    note = window.locator("p.picked").inner_text()
    assert "#4 candidate" in note and "#2 baseline" in note and "#3 other shares none" in note
    summary = window.locator("p.verdict")
    assert re.match(r"2 regression\(s\), 5 improvement\(s\), 0 indeterminate", summary.inner_text())
    # One run of text: no flex gap before ", 5 improvement(s)", and no line that starts with the comma.
    gap = window.evaluate("""() => {
        const p = document.querySelector('p.verdict'), strong = p.querySelector('strong');
        const node = strong.nextSibling, range = document.createRange();
        range.setStart(node, 0); range.setEnd(node, 1);
        const comma = range.getBoundingClientRect(), before = strong.getBoundingClientRect();
        return {gap: comma.left - before.right, same_line: Math.abs(comma.top - before.top) < 4};
    }""")
    assert gap["same_line"] and 0 <= gap["gap"] < 3, gap


def test_each_change_links_its_trace_and_the_earlier_outcome(window, base_url, db):
    window.goto(base_url + "/compare?a=baseline&b=candidate")
    row = window.locator("table.changes tr", has_text="support-002")
    links = row.locator("a")
    assert links.all_inner_texts() == [f"trace {_id(db, 'support-002')}", "A's outcome"]
    links.nth(1).click()
    window.wait_for_url("**#history")
    earlier = window.locator("table.history tbody tr").first
    assert "complete_grounded" in earlier.inner_text() and "pass" in earlier.inner_text()
    # The reason is read, not cut to its first letters: its box is wide and inside the window.
    window.goto(base_url + "/compare?a=baseline&b=candidate")
    assert _inside_the_window(window, "table.changes td.why") == []
    assert window.evaluate("() => document.documentElement.scrollWidth - window.innerWidth") <= 0


def test_two_runs_that_share_no_trace_say_so(window, base_url):
    window.goto(base_url + "/compare?a=other&b=candidate")
    assert "Nothing to compare pair by pair" in window.locator("p.verdict").inner_text()
    assert window.locator("text=regression(s)").count() == 0
    assert window.locator("h2", has_text="Only in A: 2").count() == 1


def test_changes_are_grouped_by_what_failed(window, base_url):
    window.goto(base_url + "/compare?a=baseline&b=candidate")
    section = window.locator("section.changes-list", has=window.locator("h2", has_text="Improvements"))
    groups = section.locator("h3.group").all_inner_texts()
    counts = [int(g.rsplit(": ", 1)[1]) for g in groups]
    assert sum(counts) == 5 and counts == sorted(counts, reverse=True)
    assert groups[0].startswith("a claim no chunk supports")


# --- 5. runs named as /compare names them ------------------------------------------------------------

def test_traces_and_patterns_take_a_run_by_name(window, base_url):
    window.goto(base_url + "/traces?run=candidate")
    selected = window.eval_on_selector("select[name=run]", "s => s.options[s.selectedIndex].text")
    assert selected == "#4 candidate" and window.locator("table.traces tbody tr").count() >= 8
    window.goto(base_url + "/patterns?run=candidate")
    assert window.locator("h1").inner_text() == "Failure patterns"
    assert window.eval_on_selector("select[name=run]", "s => s.options[s.selectedIndex].text") == "#4 candidate"
    assert window.goto(base_url + "/traces?run=no-such-run").status == 404


# --- 6. the overview's lists and labels ---------------------------------------------------------------

def test_the_overview_bounds_its_cost_list_and_labels_read_on_a_phone(window, base_url):
    window.goto(base_url + "/")
    assert window.locator("section.costs > table.cost tbody tr").count() == 7
    assert window.locator("details.more-days table.cost tbody tr").count() == 5
    assert not window.locator("details.more-days table.cost").is_visible()
    # Chart labels as rendered: at least 11 px high on a desktop window and on a phone.
    sizes = window.evaluate("""() => [...document.querySelectorAll('svg.chart text.axis')].map(t => {
        const svg = t.ownerSVGElement, scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
        return parseFloat(getComputedStyle(t).fontSize) * scale; })""")
    assert sizes and min(sizes) >= 11, min(sizes)
    # Every run shows its pass rate, cells and cost inside the window.
    for part in ("td.r-rate", "td.r-cells", "td.r-cost"):
        for box in window.locator(f"table.runlist {part}").evaluate_all("els => els.map(e => e.getBoundingClientRect())"):
            assert box["width"] > 0 and box["left"] >= 0 and box["right"] <= window.viewport_size["width"], part


# --- 7. a big trace -----------------------------------------------------------------------------------

def test_a_big_trace_stays_a_page_with_a_skip_link_to_its_claims(window, base_url, db):
    reply = window.goto(f"{base_url}/traces/{_id(db, 'big-1')}")
    assert len(reply.body()) < 300_000
    assert window.locator("ol.claims li").count() == 50
    assert "list every claim" in window.locator("p.left-out").inner_text()
    # The query is shown once: the sub-question that is all of it says so instead of repeating it.
    assert window.locator("main").inner_text().count(BIG_QUERY.strip()) < 20
    assert window.locator("table.subq td").nth(1).inner_text() == "the whole query"
    window.keyboard.press("Tab")
    assert window.evaluate("() => document.activeElement.className") == "skip"
    window.keyboard.press("Enter")
    window.keyboard.press("Tab")
    assert "claim" in window.evaluate("() => document.activeElement.className")
    window.goto(f"{base_url}/traces/{_id(db, 'big-1')}?claims=all")
    assert window.locator("ol.claims li").count() > 200


# --- 8. serve on every address ----------------------------------------------------------------------

def test_serve_on_every_address_prints_one_another_machine_can_open(browser, db):
    """One server for both window sizes: it takes seconds to start."""
    from veralith.web.hosts import reachable_addresses

    token = "a-token-long-enough-for-the-test"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERALITH_")}
    proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "serve", "--db", str(db), "--host", "0.0.0.0",
                             "--port", "0", "--token", token], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        first, second, third = (proc.stdout.readline() for _ in range(3))
        url = re.search(r"at (http://\S+/) ", first)
        assert url, (first, proc.stderr.read() if proc.poll() is not None else "")
        host = url.group(1).split("/")[2].rsplit(":", 1)[0]
        assert host not in ("0.0.0.0", "[::]") and "every address" in second and f"?token={token}" in third
        if not reachable_addresses("0.0.0.0"):
            pytest.skip("this machine has no address but loopback: nothing another machine could open")
        assert host == reachable_addresses("0.0.0.0")[0]
        for width, height in WINDOWS.values():
            context = browser.new_context(viewport={"width": width, "height": height})
            window, deadline = context.new_page(), time.monotonic() + 10
            while True:
                try:
                    window.goto(f"{url.group(1)}?token={token}")
                    break
                except Exception:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            assert window.locator("h1").inner_text() == "Overview" and "token" not in window.url
            context.close()
    finally:
        proc.terminate()
        proc.wait(10)


# --- every page of this store, at both window sizes ----------------------------------------------------

@pytest.mark.parametrize("size", list(WINDOWS), ids=list(WINDOWS))
def test_every_page_here_fits_and_axe_finds_no_violation(browser, base_url, db, size):
    big = _id(db, "big-1")
    # The pages only this store has (test_web_layout checks the others): 12 days of cost, the grouped
    # comparison and the one of two runs that share nothing, a big trace, a wrong number.
    pages = ["/", "/traces?gate=fail&sort=worst", "/compare", "/compare?a=other&b=candidate", f"/traces/{big}",
             f"/traces/{_id(db, 'support-002')}"]
    found = page_problems(browser, base_url, pages, *WINDOWS[size])
    assert not found, json.dumps(found, indent=1, ensure_ascii=False)[:6000]


# --- the agreement page, over labelled traces --------------------------------------------------------

@pytest.fixture(scope="module")
def labelled_url(db, tmp_path_factory) -> str:
    """This store copied, with a reviewer's gate and cell labels on every judged trace (one gate in four
    disagreeing), served with VERALITH_LABELS_MIN at 5 so the fitted threshold and cut-off are shown."""
    import shutil

    from veralith.config import settings
    from veralith.review.verdicts import make_label
    from veralith.store import open_store, ops
    from veralith.store.labels import add_labels

    copy = tmp_path_factory.mktemp("labelled") / "web.db"
    shutil.copy(db, copy)
    store = open_store(copy)
    with sqlite3.connect(copy) as conn:
        ids = [int(r[0]) for r in conn.execute("SELECT id FROM traces WHERE status = 'done' ORDER BY id")]
    labels = []
    for n, tid in enumerate(ids):
        result, info = store.read(ops.load_result, tid), store.read(ops.trace_info, tid)
        gate = result.status.quality_gate.value
        flipped = {"pass": "fail", "fail": "pass"}.get(gate, "fail") if n % 4 == 0 else gate
        for target, value in (("gate", flipped), ("cell", result.failure_cell.value if result.failure_cell
                                                   else "no_cell")):
            labels.append(make_label(result, target, "", value, reviewer='<img src=x onerror="window.__xss=1">',
                                     note="<script>window.__xss=1</script>", evaluated_at=info.evaluated_at))
    store.write(add_labels, labels)
    # The server answers on its own threads, which a context's override would not reach: the environment.
    before = os.environ.get("VERALITH_LABELS_MIN")
    os.environ["VERALITH_LABELS_MIN"] = "5"
    settings.reload()
    try:
        with live_server(create_app(copy)) as url:
            yield url
    finally:
        if before is None:
            os.environ.pop("VERALITH_LABELS_MIN", None)
        else:
            os.environ["VERALITH_LABELS_MIN"] = before
        settings.reload()


@pytest.mark.parametrize("size", list(WINDOWS), ids=list(WINDOWS))
def test_the_agreement_page_fits_and_axe_finds_no_violation(browser, labelled_url, size):
    found = page_problems(browser, labelled_url, ["/agreement", "/agreement?kb=support", "/"], *WINDOWS[size])
    assert not found, json.dumps(found, indent=1, ensure_ascii=False)[:6000]


def test_the_agreement_page_reads_in_a_browser_with_no_script(browser, labelled_url):
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        window = context.new_page()
        window.goto(labelled_url + "/")
        window.get_by_role("navigation", name="Main").get_by_role("link", name="Agreement").click()
        assert window.locator("h1").inner_text() == "Judge–human agreement"
        table = window.get_by_role("region", name="Agreement per judge").inner_text()
        assert "gate" in table and "cell" in table and "95 % interval" in table
        assert window.locator("table.matrix caption").all_inner_texts()[:2] == ["cell", "gate"]
        fitted = window.locator("ul.fitted").inner_text()
        assert "review cut-off" in fitted and "out of fold (5 folds by trace" in fitted
        assert window.evaluate("() => window.__xss === undefined") and window.locator("main script").count() == 0
    finally:
        context.close()
