"""`veralith serve` over HTTP (no browser): read-only store access, keyset pages, filters, the token,
the Host check, security headers, escaping in the page source, and the command's refusals.

Tests taking `served` run against a SQLite file and a PostgreSQL database filled alike (the same
`veralith eval` runs); those taking `db` check what is the SQLite file's own (its bytes untouched,
its triggers, its read-only connection, the `--db` option).
The browser-level checks (what a person sees, scripts that must not run) are in test_web_browser.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from work_support import create_trace

pytest.importorskip("starlette", reason="the web extra is not installed (pip install '.[web]')")
pytest.importorskip("jinja2", reason="the web extra is not installed (pip install '.[web]')")

from starlette.testclient import TestClient  # noqa: E402
from store_support import sql  # noqa: E402
from typer.testing import CliRunner  # noqa: E402
from web_support import HOSTILE_KB, PAYLOAD_TEXTS, filled_db, filled_store, rows, trace_id  # noqa: E402

from veralith.cli.app import app as cli  # noqa: E402
from veralith.cli.serve import is_loopback  # noqa: E402
from veralith.errors import StoreError  # noqa: E402
from veralith.store import TraceInput, browse, open_store, ops  # noqa: E402
from veralith.store.sqlite import connect_readonly  # noqa: E402
from veralith.web import create_app  # noqa: E402
from veralith.web.app import CSP  # noqa: E402

LOCAL = "http://127.0.0.1:8765"
TOKEN = "s3cret-token-of-some-length"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    return filled_db(tmp_path_factory.mktemp("web"))


@pytest.fixture(scope="module")
def pg_db(pg_server, tmp_path_factory) -> str:
    """A PostgreSQL database filled as `db` is; its URL."""
    return str(filled_store(tmp_path_factory.mktemp("web-pg"), pg_server.new_database()))


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request) -> Path | str:
    """The filled SQLite file, then the filled PostgreSQL database (skipped without its binaries)."""
    return request.getfixturevalue("db" if request.param == "sqlite" else "pg_db")


def client(db: Path | str, base: str = LOCAL, **kw) -> TestClient:
    return TestClient(create_app(db, **kw), base_url=base, follow_redirects=False)


def reader(where: Path | str):
    """The store at `where`, opened read-only as `veralith serve` opens it."""
    return open_store(where, read_only=True)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def all_ids(where: Path | str) -> list[int]:
    return [r[0] for r in rows(where, "SELECT id FROM traces ORDER BY id DESC")]


# --- the store, read-only -------------------------------------------------------------------------

def test_readonly_connection_refuses_writes_and_missing_files(db, tmp_path):
    conn = connect_readonly(db)
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
        conn.execute("UPDATE traces SET knowledge_base = 'x'")
    with pytest.raises(StoreError, match="no database"):
        connect_readonly(tmp_path / "absent.db")
    assert not (tmp_path / "absent.db").exists()  # never created


def test_the_store_serve_opens_refuses_every_write(served):
    store = reader(served)
    before = all_ids(served)
    with pytest.raises(StoreError, match="read-only"):
        create_trace(store, TraceInput(query="q", context=[], response="r"))
    with pytest.raises(Exception, match="(?i)read-?only|query_only"):  # the database's own refusal, below the store
        sql(store, "UPDATE traces SET knowledge_base = 'x'")
    assert all_ids(served) == before


def test_a_database_behind_the_code_is_refused_not_migrated(tmp_path):
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as conn:
        conn.execute("CREATE TABLE t (x)")
    before = digest(old)
    with pytest.raises(StoreError, match="schema none"):
        connect_readonly(old)
    with pytest.raises(StoreError, match="schema none"):
        create_app(old)
    assert digest(old) == before


def test_a_postgres_database_behind_the_code_is_refused_not_migrated(pg_server):
    url = pg_server.new_database(migrated=False)
    with pytest.raises(StoreError, match="schema none"):
        create_app(url)
    import psycopg

    with psycopg.connect(url) as conn:  # nothing was created: no migration ran
        assert conn.execute("SELECT to_regclass('veralith_migrations'), to_regclass('traces')").fetchone() == (
            None, None)


_DAILY = ("SELECT day, knowledge_base, failure_cell, quality_gate, n, round(usd, 9), usd_unknown FROM trace_daily"
          " ORDER BY 1, 2, 3, 4")
_RECOUNT = ("SELECT substr(created_at, 1, 10), knowledge_base, COALESCE(failure_cell, ''), quality_gate, COUNT(*),"
            " round(COALESCE(SUM(usd), 0), 9), SUM(usd IS NULL) FROM traces WHERE quality_gate IS NOT NULL"
            " GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4")


def test_daily_totals_follow_every_write(db, tmp_path):
    """trace_daily (migrations/0008) always equals a recount of the traces, whatever is written."""
    import shutil

    copy = tmp_path / "daily.db"
    shutil.copy(db, copy)
    conn = sqlite3.connect(copy)
    assert conn.execute(_DAILY).fetchall() == conn.execute(_RECOUNT).fetchall() != []
    with conn:
        conn.execute("UPDATE traces SET failure_cell = 'extra_grounded', quality_gate = 'fail', usd = NULL"
                     " WHERE id IN (SELECT id FROM traces ORDER BY id LIMIT 3)")
        conn.execute("UPDATE traces SET created_at = '2020-01-02T00:00:00.000000+00:00' WHERE id = 4")
        conn.execute("UPDATE traces SET quality_gate = NULL, failure_cell = NULL, status = 'pending' WHERE id = 5")
        conn.execute("UPDATE traces SET lease_host = 'h' WHERE id = 6")   # not counted: no change
        conn.execute("DELETE FROM traces WHERE id IN (7, 8)")
    assert conn.execute(_DAILY).fetchall() == conn.execute(_RECOUNT).fetchall()
    assert ("2020-01-02",) in conn.execute("SELECT day FROM trace_daily").fetchall()
    conn.close()
    figures = reader(copy).read(ops.daily_figures, days=30)
    assert figures["days"][-1] == max(r[0] for r in sqlite3.connect(copy).execute("SELECT day FROM trace_daily"))
    assert len(figures["days"]) == 30 and "2020-01-02" not in figures["days"]


def test_keyset_pages_walk_every_trace_once_both_ways(served):
    store = reader(served)
    ids = all_ids(served)
    seen, page = [], store.read(ops.page_traces, browse.TraceFilter(), limit=5)
    assert page.newer is None
    pages = [page]
    while True:
        seen += [r["id"] for r in page.rows]
        if page.older is None:
            break
        page = store.read(ops.page_traces, browse.TraceFilter(), limit=5, before=page.older)
        pages.append(page)
    assert seen == ids
    # Back up from the last page with `after`: each page comes back as it was.
    for earlier, later in zip(pages[-2::-1], pages[:0:-1], strict=True):
        back = store.read(ops.page_traces, browse.TraceFilter(), limit=5, after=later.newer)
        assert [r["id"] for r in back.rows] == [r["id"] for r in earlier.rows]
        assert back.older == earlier.older


def test_filters_select_what_they_name(served):
    store = reader(served)
    for flt, check in [
        (browse.TraceFilter(cell="complete_grounded"), lambda r: r["failure_cell"] == "complete_grounded"),
        (browse.TraceFilter(gate="pass"), lambda r: r["quality_gate"] == "pass"),
        (browse.TraceFilter(kb="support"), lambda r: r["knowledge_base"] == "support"),
        (browse.TraceFilter(text="WARRANTY"), lambda r: "warranty" in r["query_preview"].lower()),
        (browse.TraceFilter(text="50%_"), lambda r: False),  # LIKE wildcards are literal
    ]:
        found = store.read(ops.page_traces, flt, limit=100).rows
        assert all(check(r) for r in found), flt
    assert store.read(ops.page_traces, browse.TraceFilter(text="warranty"), limit=100).rows
    today = store.read(ops.page_traces, browse.TraceFilter(), limit=1).rows[0]["created_at"][:10]
    import datetime as dt

    day = dt.date.fromisoformat(today)
    assert len(store.read(ops.page_traces, browse.TraceFilter(since=day, until=day), limit=100).rows) == len(all_ids(served))
    assert store.read(ops.page_traces, browse.TraceFilter(until=day - dt.timedelta(days=1)), limit=100).rows == []


def test_text_search_is_bounded_per_page_and_misses_nothing(served, monkeypatch):
    store = reader(served)
    flt = browse.TraceFilter(text="warranty")
    expected = [r["id"] for r in store.read(ops.page_traces, flt, limit=100).rows]
    assert len(expected) >= 2
    monkeypatch.setattr(browse, "SCAN_WINDOW", 3)       # each page looks at 3 ids at most
    seen, cuts, page = [], 0, store.read(ops.page_traces, flt, limit=100)
    while True:
        assert len(page.rows) <= 3
        seen += [r["id"] for r in page.rows]
        cuts += page.searched_to is not None
        if page.older is None:
            break
        page = store.read(ops.page_traces, flt, limit=100, before=page.older)
    assert seen == expected and cuts >= 3
    # Neighbours: a match beyond the window is not claimed absent; the search can go on.
    newest, oldest = expected[0], expected[-1]
    near = store.read(ops.neighbours, newest, flt)
    assert near.newer is None and not near.newer_unsearched
    if newest - oldest > 3 and expected[1] < newest - 3:
        assert near.older is None and near.older_unsearched
    html = client(served).get(f"/traces/{newest}", params={"q": "warranty"}).text
    assert "search older" in html or f'href="/traces/{expected[1]}?q=warranty"' in html


def test_neighbours_stay_inside_the_filter(served):
    store = reader(served)
    support = [r["id"] for r in store.read(ops.page_traces, browse.TraceFilter(kb="support"), limit=100).rows]
    assert len(support) >= 3
    middle = support[1]
    near = store.read(ops.neighbours, middle, browse.TraceFilter(kb="support"))
    assert (near.newer, near.older) == (support[0], support[2])
    assert store.read(ops.neighbours, support[0], browse.TraceFilter(kb="support")).newer is None
    assert store.read(ops.neighbours, support[-1], browse.TraceFilter(kb="support")).older is None


# --- pages over HTTP --------------------------------------------------------------------------------

def test_every_page_sends_the_strict_headers_and_leaves_the_file_untouched(served):
    before = digest(served) if isinstance(served, Path) else all_ids(served)
    c = client(served)
    tid = trace_id(served, "What is the warranty period")
    for url in ["/", "/traces", f"/traces/{tid}", "/traces?cell=complete_grounded&kb=support&q=x",
                "/static/app.css", "/missing", "/traces/99999", "/traces?gate=maybe", "/patterns"]:
        r = c.get(url)
        assert r.headers["content-security-policy"] == CSP, url
        assert "script-src 'none'" in CSP and "'unsafe-inline'" not in CSP
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
    assert c.get("/traces/99999").status_code == 404
    assert c.get(f"/traces/{2**63}").status_code == 404    # past a store's integers: no trace, not a 500
    assert c.get("/traces?gate=maybe").status_code == 400
    assert c.get("/traces?since=yesterday").status_code == 400
    assert c.get("/traces?before=1&after=2").status_code == 400
    for method in ("post", "put", "delete", "patch"):
        assert getattr(c, method)("/traces").status_code == 405
    assert (digest(served) if isinstance(served, Path) else all_ids(served)) == before


def test_pages_have_no_inline_script_or_style(served):
    c = client(served)
    for url in ["/", "/traces", f"/traces/{trace_id(served, 'What is the warranty period')}", "/compare",
                "/patterns"]:
        html = c.get(url).text
        assert "<script" not in html and "<style" not in html and " style=" not in html, url
        assert re.search(r"\son[a-z]+=", html) is None, url


def test_hostile_text_is_escaped_in_the_source(served):
    c = client(served)
    html = c.get(f"/traces/{trace_id(served, 'What is the warranty of the Z9')}").text
    assert "<script" not in html and "<img" not in html and 'href="javascript:' not in html
    assert "&lt;script&gt;window.__xss = &#39;script&#39;&lt;/script&gt;" in html
    listing = c.get("/traces").text
    assert "<script" not in listing and "&lt;script&gt;alert(&#39;kb&#39;)&lt;/script&gt;" in listing
    assert "<script" not in c.get("/").text
    # The hostile knowledge base round-trips through a filter link without breaking out of the attribute.
    r = c.get("/traces", params={"kb": HOSTILE_KB})
    assert r.status_code == 200 and "<script" not in r.text and "Who makes the Z9?" in r.text
    assert all(p not in r.text for p in PAYLOAD_TEXTS)


def test_pagination_links_carry_the_filter(served):
    c = client(served, page_size=3)
    html = c.get("/traces", params={"kb": "support"}).text
    older = re.search(r'href="(/traces\?[^"]*before=\d+)"', html)
    assert older and "kb=support" in older.group(1)
    second = c.get(older.group(1).replace("&amp;", "&")).text
    assert 'rel="prev"' in second and "kb=support" in second


def test_trace_page_links_neighbours_of_the_same_filter(served):
    c = client(served)
    support = [r["id"] for r in reader(served).read(ops.page_traces, browse.TraceFilter(kb="support"), limit=100).rows]
    html = c.get(f"/traces/{support[1]}", params={"kb": "support"}).text
    assert f'href="/traces/{support[0]}?kb=support"' in html
    assert f'href="/traces/{support[2]}?kb=support"' in html


def test_unevaluated_trace_shows_its_state(store_url, store):
    # A pending trace (logged, not yet judged) has no result: the page says so instead of failing.
    from veralith.models import ContextChunk

    tid = create_trace(store, TraceInput(query="Pending question <b>?</b>", context=[ContextChunk(id="c0", text="x")],
                                        response="not yet"))
    html = client(store_url).get(f"/traces/{tid}").text
    assert "no result" in html and "Pending question &lt;b&gt;?&lt;/b&gt;" in html


# --- runs and compare (when the schema records runs) ---------------------------------------------

def run_ids(where: Path | str) -> list[int]:
    return [r[0] for r in rows(where, "SELECT id FROM runs ORDER BY id")]


def test_run_filter_and_per_run_overview(served):
    examples, hostile = run_ids(served)       # web_support runs `veralith eval` twice
    c = client(served)
    store = reader(served)
    found = store.read(ops.page_traces, browse.TraceFilter(run=hostile), limit=100).rows
    assert sorted(r["knowledge_base"] for r in found) == sorted(["hostile", HOSTILE_KB])
    assert len(store.read(ops.page_traces, browse.TraceFilter(run=examples), limit=100).rows) == 12
    html = c.get("/traces", params={"run": hostile}).text
    assert html.count('href="/traces/') == 2 and f'<option value="{hostile}" selected>' in html
    overview = c.get("/").text
    assert f'href="/traces?run={examples}"' in overview and f'href="/traces?run={hostile}"' in overview
    assert overview.count('class="n passrate r-rate"') == 2
    assert c.get("/traces", params={"run": "one"}).status_code == 404          # a name no run has
    assert c.get("/traces", params={"run": "x" * 201}).status_code == 400


def test_compare_page_shows_the_comparison(served):
    examples, hostile = run_ids(served)
    c = client(served)
    html = c.get("/compare").text                 # default: the newest run and the one before (they share no trace)
    assert "Only in A: 12" in html and "Only in B: 2" in html
    # Two runs that share no trace: said, instead of "0 regression(s)" beside two unrelated pass rates.
    assert "Nothing to compare pair by pair" in html and "regression(s)" not in html and "Cell transitions" not in html
    assert "<script" not in html and "&lt;script&gt;" in html
    assert c.get("/compare", params={"a": examples, "b": 99}).status_code == 404


# --- token and host -------------------------------------------------------------------------------

def test_without_a_token_only_loopback_host_names_are_answered(served):
    db = served
    assert client(db, "http://localhost:9").get("/").status_code == 200
    assert client(db, "http://[::1]:9").get("/").status_code == 200
    assert client(db, "http://localhost:9").get("/", headers={"host": "LocalHost:9"}).status_code == 200  # any case
    # DNS rebinding: a page from attacker.example whose name now points at 127.0.0.1.
    r = client(db, "http://attacker.example:8765").get("/")
    assert r.status_code == 403 and "Veralith" not in r.text


def test_every_loopback_address_is_answered_without_a_token(db):
    """`serve --host 127.0.0.2` binds a loopback address: its own Host must be answered (issue 22, item 6)."""
    for host in ("127.0.0.2", "127.1.2.3", "[::1]"):
        assert client(db, f"http://{host}:9").get("/").status_code == 200, host
    for host in ("127.0.0.1.attacker.example", "0x7f000001", "2130706433"):  # names and numbers that are not IPs
        assert client(db, "http://localhost:9").get("/", headers={"host": f"{host}:9"}).status_code == 403, host


def test_serve_on_another_loopback_address_answers_its_own_host(db):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERALITH_")}
    proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "serve", "--db", str(db), "--host", "127.0.0.2",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.2:\d+/)", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        with urllib.request.urlopen(match.group(1) + "traces", timeout=5) as reply:
            assert reply.status == 200 and "Traces" in reply.read().decode()
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_token_is_checked_on_every_request(served):
    db = served
    c = client(db, "http://192.0.2.1:8765", token=TOKEN)
    for url in ["/", "/traces", "/static/app.css", "/missing"]:
        r = c.get(url)
        assert r.status_code == 401 and "Veralith" not in r.text, url
        assert r.headers["content-security-policy"] == CSP
    assert c.get("/", headers={"Authorization": "Bearer wrong-" + TOKEN}).status_code == 401
    assert c.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert c.get("/traces", params={"token": TOKEN[:-1]}).status_code == 401
    # The printed URL: ?token= is traded for an HttpOnly, SameSite=Strict cookie, and dropped from the address.
    r = c.get("/traces", params={"token": TOKEN, "kb": "support"})
    assert r.status_code == 303 and r.headers["location"] == "/traces?kb=support"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert c.get("/traces?kb=support").status_code == 200   # the client kept the cookie
    # The redirect never leaves the site, whatever the path looks like.
    r = client(db, "http://192.0.2.1:8765", token=TOKEN).get("http://192.0.2.1:8765//evil.example/x", params={"token": TOKEN})
    assert r.status_code == 303 and r.headers["location"] == "/evil.example/x"


def test_templates_and_static_files_ship_in_the_wheel():
    from fnmatch import fnmatch

    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")

    patterns = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["veralith"]
    web = Path(__file__).parents[1] / "veralith" / "web"
    files = [p.relative_to(web.parent).as_posix() for p in (web / "templates").iterdir()] + \
        [p.relative_to(web.parent).as_posix() for p in (web / "static").iterdir()]
    assert files and all(any(fnmatch(f, pat) for pat in patterns) for f in files)


# --- the command ----------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_serve_refuses_a_public_host_without_a_token(host, db, monkeypatch):
    monkeypatch.delenv("VERALITH_SERVE_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["serve", "--db", str(db), "--host", host])
    assert result.exit_code == 2
    assert "token" in result.output and "VERALITH_SERVE_TOKEN" in result.output


def test_serve_refuses_a_short_token_and_a_missing_database(db, tmp_path):
    result = CliRunner().invoke(cli, ["serve", "--db", str(db), "--host", "0.0.0.0", "--token", "short"])
    assert result.exit_code == 2 and "too short" in result.output
    result = CliRunner().invoke(cli, ["serve", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 1 and "no database" in result.output
    assert not (tmp_path / "none.db").exists()


def test_serve_on_a_port_in_use_says_so_and_exits_2(db):
    # uvicorn's own exit code (3) would read as "a check failed" (veralith.cli.exits).
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["serve", "--db", str(db), "--port", str(port)])
    assert result.exit_code == 2, result.output
    assert f"error: could not listen on 127.0.0.1:{port} (is the port in use?)" in result.output


def test_loopback_detection():
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "localhost.example.com", ""]))


def test_serve_command_end_to_end(served):
    """The real command: binds loopback, prints its address, answers with the headers, stops on SIGTERM.
    A file is named by --db; PostgreSQL by VERALITH_DB_URL, as a deployment configures it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERALITH_")}
    args = ["--db", str(served)] if isinstance(served, Path) else []
    if not isinstance(served, Path):
        env["VERALITH_DB_URL"] = served
    proc = subprocess.Popen([sys.executable, "-m", "veralith.cli", "serve", *args, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.1:\d+/)", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        if not isinstance(served, Path):
            assert "serving postgresql://***@127.0.0.1:" in line   # the URL's user and password never shown
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(match.group(1) + "traces", timeout=5) as reply:
                    assert reply.headers["Content-Security-Policy"] == CSP
                    assert "Traces" in reply.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)


# --- the trace list, compare limits, failures, favicon ----------------------------------------------

def test_the_trace_list_counts_sorts_and_says_why(db):
    c = client(db)
    html = c.get("/traces").text
    total = len(all_ids(db))
    assert f"{total} traces." in html
    assert "not supported by any chunk" in html or "contradicted by chunk" in html  # the failing claim
    assert f"{len(all_ids(db))} traces" not in c.get("/traces", params={"gate": "fail"}).text  # a filtered count
    # Faithfulness, lowest first, walked page by page with the cursor the next link carries.
    seen, url, pages = [], "/traces?sort=faith", 0
    while url and pages < 20:
        page = c.get(url.replace("&amp;", "&")).text
        seen += [int(i) for i in re.findall(r'<td class="c-id"><a href="/traces/(\d+)', page)]
        found = re.search(r'<a rel="next" href="([^"]+)"', page)
        url, pages = (found.group(1) if found else None), pages + 1
    assert sorted(seen) == sorted(all_ids(db)) and len(seen) == len(set(seen))
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        faith = dict(conn.execute("SELECT id, COALESCE(faithfulness_fraction, 2.0) FROM traces").fetchall())
    assert [faith[i] for i in seen] == sorted(faith[i] for i in seen)
    assert c.get("/traces", params={"sort": "nope"}).status_code == 400
    assert c.get("/traces", params={"sort": "faith", "cursor": "x_1"}).status_code == 400


def test_the_text_filter_matches_external_ids_and_metadata(db):
    c = client(db)
    assert "xss-2" in c.get("/traces", params={"q": "xss-2"}).text               # an external id
    by_meta = c.get("/traces", params={"q": "javascript:alert('meta')"}).text   # a metadata value
    ids = re.findall(r'<td class="c-id"><a href="/traces/(\d+)', by_meta)
    assert ids == [str(trace_id(db, "What is the warranty of the Z9"))]


def test_compare_lists_are_limited_like_the_cli(db):
    c = client(db)
    runs = open_store(db, read_only=True).read(ops.run_labels)
    a, b = str(runs[-1][0]), str(runs[0][0])
    limited = c.get("/compare", params={"a": a, "b": b, "limit": 1}).text
    assert "more (<a href=" in limited
    assert "more (<a href=" not in c.get("/compare", params={"a": a, "b": b, "limit": 0}).text


def test_a_database_that_cannot_be_read_is_an_error_page_not_a_traceback(db, tmp_path, monkeypatch):
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    c = client(copy)

    def locked(*args, **kwargs):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(ops, "page_traces", locked)
    r = c.get("/traces")
    # The store words it (veralith.store.errors.sqlite_error): locked past the busy timeout, try again.
    assert r.status_code == 503 and "Database unavailable" in r.text and "locked by another process" in r.text
    assert r.headers["content-security-policy"] == CSP and "Traceback" not in r.text

    def vanished(*args, **kwargs):  # what the store raises for a file that is gone
        raise StoreError(f"no database at {copy}")

    monkeypatch.setattr(ops, "trace_row", vanished)
    r = c.get("/traces/1")
    assert r.status_code == 503 and "no database at" in r.text and "Traceback" not in r.text


def test_a_favicon_is_served(db):
    r = client(db).get("/favicon.ico")
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml") and b"<svg" in r.content
    assert '<link rel="icon" href="/static/favicon.svg"' in client(db).get("/").text


# --- a large comparison: grouped by reason, never-judged pairs left out ------------------------------

def _two_eval_runs(path: Path, n: int) -> None:
    """Two eval runs of `n` traces (external ids big-1 … big-n) judged in place: A passes them all
    (the first 12 never judged in A: pending), B fails 300 of the rest with three kinds of reason."""
    open_store(path).read(ops.knowledge_bases)  # migrated
    now = "2026-01-01T00:00:00.000000+00:00"
    why = ["k1 'It costs {i} euros.' contradicted by chunk price-1"] * 200 + \
          ["k2 'It ships on day {i}.' not supported by any chunk"] * 70 + \
          ["q2 'When does item {i} ship?' not answered (the context does answer it)"] * 30
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO runs (id, name, source, started_at, ended_at) VALUES (?, ?, 'eval', ?, ?)",
                         [(1, "a", now, now), (2, "b", now, now)])
        conn.executemany("INSERT INTO traces (id, created_at, updated_at, status, knowledge_base, query, response,"
                         " external_id) VALUES (?, ?, ?, 'done', 'kb', ?, 'r', ?)",
                         [(i, now, now, f"q{i}", f"big-{i}") for i in range(1, n + 1)])
        rows = []
        for i in range(1, n + 1):
            a = (None, None, "pending", None) if i <= 12 else ("complete_grounded", "pass", "done", None)
            fails = 12 < i <= 312
            b = ("incomplete_ungrounded", "fail", "done", why[i - 13].format(i=i)) if fails else \
                ("complete_grounded", "pass", "done", None)
            rows += [(1, i, f"big-{i}", "kb", *a[:3], a[3], f"q{i}"), (2, i, f"big-{i}", "kb", *b[:3], b[3], f"q{i}")]
        conn.executemany("INSERT INTO run_traces (run_id, trace_id, external_id, knowledge_base, failure_cell,"
                         " quality_gate, status, reason, query) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def test_a_large_comparison_is_grouped_by_reason_and_leaves_out_pairs_never_judged(tmp_path):
    path = tmp_path / "big.db"
    _two_eval_runs(path, 1200)
    html = client(path).get("/compare", params={"a": "a", "b": "b"}).text
    regressions = html.split("<h2>Regressions (pass → fail): 300</h2>")[1].split("<h2>")[0]
    groups = re.findall(r'<h3 class="group">([^<:]+): (\d+)</h3>', regressions)
    assert groups == [("a claim the context contradicts", "200"), ("a claim no chunk supports", "70"),
                      ("a sub-question not answered (the context does answer it)", "30")]
    assert regressions.count("<tr><td") == 30 and "… and 190 more of this kind" in regressions
    keys = re.findall(r'<span class="key">(big-\d+)</span>', regressions)
    assert keys[:3] == ["big-13", "big-14", "big-15"]            # id order, not text order (big-1, big-10, …)
    # The 12 pairs run A never judged: listed apart, left out of every paired figure, and said.
    assert "Not judged in A or B: 12" in html and "12 never judged in A or B" in html
    assert "0 indeterminate change(s)" in html and "pass rate (1188 pairs judged pass or fail in both)" in html
    everything = client(path).get("/compare", params={"a": "a", "b": "b", "limit": 0}).text
    assert everything.split("<h2>Regressions")[1].split("<h2>")[0].count("<tr><td") == 300


def test_worst_first_walks_failing_traces_worst_cell_first_page_by_page(served):
    from veralith.models import CELLS_BY_SEVERITY

    c, url, seen = client(served, page_size=4), "/traces?sort=worst", []
    while url:
        html = c.get(url).text
        seen += re.findall(r'<td class="c-cell"><span class="badge(?: cell-\w+)?">(\w+)</span>\s*'
                           r'(?:<span class="gate gate-(\w+)">)?', html)
        found = re.search(r'<a rel="next" href="([^"]+)"', html)
        url = found.group(1).replace("&amp;", "&") if found else None
    assert len(seen) == len(all_ids(served))       # every trace once, across pages
    gates = ["fail", "indeterminate", "pass", ""]
    rank = [(gates.index(gate), CELLS_BY_SEVERITY.index(cell)) for cell, gate in seen]
    assert rank == sorted(rank) and seen[0][1] == "fail"
