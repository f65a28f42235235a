"""The /agreement page of `veralith serve`: what `veralith agreement` shows, from the same computation, read-only
(no --review needed), escaped, under the strict CSP with no script; and the trace page says which review cut-off
flagged the trace. Both stores, over HTTP (the real browser: tests/test_web_reader.py)."""

from __future__ import annotations

import html
import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("starlette", reason="the web extra is not installed (pip install '.[web]')")
pytest.importorskip("jinja2", reason="the web extra is not installed (pip install '.[web]')")

from starlette.testclient import TestClient  # noqa: E402
from test_judge_gate import RECORDS  # noqa: E402

from veralith.cli import app as cli  # noqa: E402
from veralith.review.report import row, rows  # noqa: E402
from veralith.store import open_store, ops  # noqa: E402
from veralith.web import create_app  # noqa: E402
from veralith.web.app import CSP  # noqa: E402

both = pytest.mark.usefixtures("store_url")
BASE = "http://127.0.0.1:8765"
HOSTILE_KB = '<script>alert("kb")</script>'


def _labelled(tmp_path) -> CliRunner:
    runner = CliRunner(env={"COLUMNS": "200"})
    path = tmp_path / "t.jsonl"
    records = [*RECORDS, dict(RECORDS[1], id="h", knowledge_base=HOSTILE_KB)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert runner.invoke(cli, ["eval", str(path)]).exit_code in (0, 1)
    for args in (["fr", "--claim", "k2", "contradicted", "--gate", "fail", "--cell", "complete_ungrounded"],
                 ["ww2", "--gate", "pass"], ["bad", "--gate", "pass"], ["h", "--gate", "fail"]):
        assert runner.invoke(cli, ["label", *args, "--by", "<b>ann</b>", "--note", "<img src=x>"]).exit_code == 0
    return runner


@both
def test_the_agreement_page_shows_what_the_command_shows(store_url, tmp_path):
    runner = _labelled(tmp_path)
    client = TestClient(create_app(store_url), base_url=BASE)    # no --review: the page only reads
    page = client.get("/agreement")
    assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
    assert "<script" not in page.text.lower().replace("&lt;script", "") and "<img" not in page.text
    text = html.unescape(page.text)
    data = json.loads(runner.invoke(cli, ["agreement", "--json"]).output)
    assert f"labels on {data['traces']} traces" in text
    for name, found in rows(data):      # every row of the command's table, with the same figures
        cells = row(name.strip(), found)
        assert name.strip() in text and all(c in text for c in cells[1:] if c), cells
    assert "too few to conclude" in text and "gate, not flagged" in text          # under LABELS_MIN; by the flag
    assert ">label \\ judge<" in page.text and "<caption>gate</caption>" in page.text   # confusion matrices
    assert "gate" in data["judges"] and data["judges"]["gate"]["labels"] == 4
    assert "&lt;script&gt;alert(" in client.get("/agreement").text                   # a kb name, escaped
    only = html.unescape(client.get("/agreement", params={"kb": HOSTILE_KB}).text)
    assert "1 labels on 1 traces" in only
    assert "No labels yet" in client.get("/agreement", params={"since": "2999-01-01"}).text
    assert client.get("/agreement", params={"since": "not a date"}).status_code == 400
    assert client.post("/agreement").status_code == 405
    assert 'href="/agreement"' in client.get("/").text                                 # in the nav and overview
    assert "agreement with reviewers" in client.get("/").text


@both
def test_without_labels_the_page_says_how_to_give_some_and_the_trace_page_names_the_cutoff(store_url, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(RECORDS[1]) + "\n", encoding="utf-8")
    assert CliRunner().invoke(cli, ["eval", str(path)]).exit_code in (0, 1)
    client = TestClient(create_app(store_url), base_url=BASE)
    assert "No labels yet: give some with" in client.get("/agreement").text
    trace_id = open_store().read(ops.resolve, RECORDS[1]["id"])
    shown = " ".join(html.unescape(client.get(f"/traces/{trace_id}").text).split())
    assert "Review flag</strong> a deciding verdict below 70% confidence flags the trace (the default until" in shown
    overview = html.unescape(client.get("/").text)
    assert "review cut-off" in overview and "0.70" in overview
