"""The Patterns page of `veralith serve` (/patterns) over HTTP, on a SQLite file and a PostgreSQL
database filled alike with tests/patterns_log.py's two-run log: the planted causes first, the
filters, escaping in the page source, the refusals, and an empty store. The browser checks (axe,
a phone's width) take /patterns with the other pages in test_web_layout.py."""

from __future__ import annotations

import re

import pytest
from work_support import save_result

pytest.importorskip("starlette", reason="the web extra is not installed (pip install '.[web]')")
pytest.importorskip("jinja2", reason="the web extra is not installed (pip install '.[web]')")

from patterns_log import BAD_SOURCE, MISSED_TERM, fill_two_runs, planted_log  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from veralith.store import ops
from veralith.web import create_app  # noqa: E402
from veralith.web.app import CSP  # noqa: E402

N = 600
HOSTILE = "<script>alert('doc')</script>[red]x[/red]"


def _fill(url: str) -> str:
    from conftest import _close_stores

    from veralith.store import open_store

    store = open_store(url)
    fill_two_runs(store, N)
    # A second knowledge base whose only bad document has a hostile name.
    for result in planted_log(3, start=9000, kb="other", bad_rate=1.0, stale_prices=True):
        chunks = [c.model_copy(update={"source": HOSTILE}) if c.source == BAD_SOURCE else c for c in result.context]
        save_result(store, result.model_copy(update={"context": chunks}))
    _close_stores()
    return url


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request, tmp_path_factory):
    if request.param == "postgres":
        server = request.getfixturevalue("pg_server")
        url = _fill(server.new_database())
        yield url
        server.drop_database(url)
    else:
        yield _fill("sqlite:///" + str(tmp_path_factory.mktemp("web-patterns") / "log.db"))


def client(where: str) -> TestClient:
    return TestClient(create_app(where), base_url="http://127.0.0.1:8765", follow_redirects=False)


def _sections(html: str) -> dict[str, list[str]]:
    """Section title -> the group names listed under it, in order."""
    out: dict[str, list[str]] = {}
    for part in html.split("<h2>")[1:]:
        title = part.split(":", 1)[0]
        out[title] = [re.sub(r"\s+", " ", k).strip() for k in re.findall(r"<h3>(.*?) <span", part, re.S)]
    return out


def test_the_page_shows_the_planted_causes_first(served):
    c = client(served)
    r = c.get("/patterns", params={"kb": "shop"})
    assert r.status_code == 200
    assert r.headers["content-security-policy"] == CSP
    html = r.text
    assert '<a href="/patterns" aria-current="page">Patterns</a>' in html
    sections = _sections(html)
    assert sections["Documents that contradict answers"][0] == BAD_SOURCE
    assert sections["Topics retrieval keeps missing"][0].split(" · ")[0] == MISSED_TERM
    assert sections["Moves into failing cells between runs"][0] == "complete_grounded → complete_ungrounded"
    assert re.search(r'<a href="/traces/\d+">trace \d+</a>', html)   # examples link to their traces
    assert "<script" not in html and "<style" not in html and " style=" not in html


def test_filters_narrow_the_scope(served):
    c = client(served)
    everything = c.get("/patterns").text
    assert f"of {N + 3} judged traces" in everything
    assert f"of {N} judged traces" in c.get("/patterns", params={"kb": "shop"}).text
    assert "No judged traces here" in c.get("/patterns", params={"since": "2999-01-01"}).text
    assert "No judged traces here" in c.get("/patterns", params={"until": "2000-01-01"}).text
    today = c.get("/patterns", params={"since": "2000-01-01", "until": "2999-12-31"}).text
    assert f"of {N + 3} judged traces" in today
    run = c.get("/patterns", params={"run": "1"})
    assert run.status_code == 200 and "judged again by a later run" in run.text


def test_hostile_document_names_are_escaped(served):
    html = client(served).get("/patterns", params={"kb": "other"}).text
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#39;doc&#39;)&lt;/script&gt;[red]x[/red]" in html


@pytest.mark.parametrize("query, status, message", [
    ({"since": "yesterday"}, 400, "since must be a date"),
    ({"run": "x"}, 404, "no run with id or name &#39;x&#39;"),     # a run is named as /compare names it
    ({"limit": "0"}, 400, "limit must be from 1 to 1000"),
    ({"run": "999"}, 404, "no run with id or name"),
])
def test_bad_filters_are_error_pages(served, query, status, message):
    r = client(served).get("/patterns", params=query)
    assert r.status_code == status and message in r.text


def test_an_empty_store_says_there_is_nothing_to_group(tmp_path):
    from veralith.store import open_store

    url = "sqlite:///" + str(tmp_path / "empty.db")
    open_store(url).read(ops.knowledge_bases)   # the first read creates and migrates the file
    r = client(url).get("/patterns")
    assert r.status_code == 200 and "No judged traces here: nothing to group" in r.text


def test_an_empty_section_says_a_group_needs_two_traces_and_what_fell_short(tmp_path):
    """The documented compare example: two documents contradict one claim each, two traces moved into
    two different cells; the page says why those sections have no group."""
    from pathlib import Path

    from typer.testing import CliRunner

    from veralith.cli import app
    from veralith.config import settings
    from veralith.store import store_url

    examples = Path(__file__).resolve().parents[1] / "examples"
    with settings.override(backend="local"):
        for name, path in (("baseline", "traces.jsonl"), ("candidate", "traces_v2.jsonl")):
            assert CliRunner().invoke(app, ["eval", str(examples / path), "--run-name", name]).exit_code == 0
    page = client(store_url()).get("/patterns")
    assert page.status_code == 200
    text = re.sub(r"\s+", " ", page.text)
    assert "None found: a group needs at least 2 failing traces; 2 document(s) contradict claims in fewer:" in text
    assert ("2 move(s) into failing cells have fewer: complete_grounded → complete_ungrounded (1), "
            "complete_grounded → incomplete_ungrounded (1)") in text
