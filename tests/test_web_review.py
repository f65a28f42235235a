"""Review in the web view: off without `serve --review` (every POST 405), and with it a label is taken
only by POST from the same origin with the session's CSRF token (and the token when one is set);
label text is escaped wherever it is shown. Both stores."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

pytest.importorskip("starlette", reason="the web extra is not installed (pip install '.[web]')")
pytest.importorskip("jinja2", reason="the web extra is not installed (pip install '.[web]')")

from starlette.testclient import TestClient  # noqa: E402
from web_support import PAYLOAD_TEXTS  # noqa: E402

from veralith.cli import app as cli  # noqa: E402
from veralith.store import (
    open_store,  # noqa: E402
    ops,
)
from veralith.store.labels import current  # noqa: E402
from veralith.web import create_app  # noqa: E402

both = pytest.mark.usefixtures("store_url")
BASE = "http://127.0.0.1:8765"
ORIGIN = {"origin": BASE}
TOKEN = "a-long-enough-test-token-0123456789"


def _judged(tmp_path) -> int:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "fr", "query": "When did World War II end?",
                                "context": ["World War II ended in 1945."],
                                "response": "World War II ended in 1950."}) + "\n", encoding="utf-8")
    assert CliRunner().invoke(cli, ["eval", str(path)]).exit_code in (0, 1)
    return open_store().read(ops.resolve, "fr")


def _client(store_url: str, **kwargs) -> TestClient:
    return TestClient(create_app(store_url, **kwargs), base_url=BASE)


def _form(client: TestClient, trace_id: int, **headers) -> str:
    page = client.get(f"/traces/{trace_id}", headers=headers)
    assert page.status_code == 200
    return re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text).group(1)


@both
def test_without_review_every_post_is_405_and_no_form_is_shown(store_url, tmp_path):
    trace_id = _judged(tmp_path)
    client = _client(store_url)
    for path in (f"/traces/{trace_id}/labels", f"/traces/{trace_id}", "/review", "/"):
        assert client.post(path, data={"part": "gate:", "value": "pass"}, headers=ORIGIN).status_code == 405 \
            or path == "/review"
    assert client.post("/review", headers=ORIGIN).status_code in (404, 405)
    assert 'name="csrf"' not in client.get(f"/traces/{trace_id}").text
    assert open_store().read(current) == []


@both
def test_a_label_from_the_trace_page_is_stored_and_shown_escaped(store_url, tmp_path):
    trace_id = _judged(tmp_path)
    client = _client(store_url, review=True)
    csrf = _form(client, trace_id)
    for hostile in PAYLOAD_TEXTS:
        done = client.post(f"/traces/{trace_id}/labels", headers=ORIGIN, follow_redirects=False,
                           data={"csrf": csrf, "part": "gate:", "value": "pass", "reviewer": hostile, "note": hostile})
        assert done.status_code == 303 and done.headers["location"] == f"/traces/{trace_id}#labels"
    page = client.get(f"/traces/{trace_id}").text
    for hostile in PAYLOAD_TEXTS:
        assert hostile not in page
    assert "<script>" not in page.split('id="labels"')[1]
    [label] = open_store().read(current)
    assert (label.target, label.value, label.judged) == ("gate", "pass", "fail")
    assert "Review" in client.get("/review").text
    assert client.get(f"/traces/{trace_id}/labels").status_code == 405    # the write route is POST only


@both
@pytest.mark.parametrize("case", ["no csrf", "wrong csrf", "no cookie", "other origin", "no origin", "null origin",
                                  "other scheme"])
def test_a_write_that_fails_a_check_is_refused(store_url, tmp_path, case):
    trace_id = _judged(tmp_path)
    client = _client(store_url, review=True)
    csrf = _form(client, trace_id)
    data = {"csrf": csrf, "part": "gate:", "value": "pass", "reviewer": "ann"}
    headers = dict(ORIGIN)
    if case == "no csrf":
        del data["csrf"]
    elif case == "wrong csrf":
        data["csrf"] = "0" * 64
    elif case == "no cookie":
        client.cookies.clear()
    elif case == "other origin":
        headers = {"origin": "http://evil.example"}
    elif case == "no origin":
        headers = {}
    elif case == "null origin":
        headers = {"origin": "null"}
    elif case == "other scheme":
        headers = {"origin": "https://127.0.0.1:8765"}
    refused = client.post(f"/traces/{trace_id}/labels", data=data, headers=headers, follow_redirects=False)
    assert refused.status_code == 403, refused.text
    assert open_store().read(current) == []


@both
def test_with_a_token_a_write_needs_it_and_a_referer_can_stand_for_origin(store_url, tmp_path):
    trace_id = _judged(tmp_path)
    client = _client(store_url, review=True, token=TOKEN)
    bearer = {"authorization": f"Bearer {TOKEN}"}
    csrf = _form(client, trace_id, **bearer)
    data = {"csrf": csrf, "part": "gate:", "value": "fail", "reviewer": "ann"}
    assert client.post(f"/traces/{trace_id}/labels", data=data, headers=ORIGIN).status_code == 401
    done = client.post(f"/traces/{trace_id}/labels", data=data, follow_redirects=False,
                       headers={**bearer, "referer": f"{BASE}/traces/{trace_id}"})
    assert done.status_code == 303
    assert [x.value for x in open_store().read(current)] == ["fail"]


@both
def test_a_bad_label_is_a_400_and_nothing_is_stored(store_url, tmp_path):
    trace_id = _judged(tmp_path)
    client = _client(store_url, review=True)
    csrf = _form(client, trace_id)
    for data in ({"part": "claim:k9", "value": "supported", "reviewer": "a"},
                 {"part": "gate:", "value": "maybe", "reviewer": "a"},
                 {"part": "gate:", "value": "pass", "reviewer": ""}):
        out = client.post(f"/traces/{trace_id}/labels", data={"csrf": csrf, **data}, headers=ORIGIN)
        assert out.status_code == 400 and out.text.startswith("not stored:")
    assert open_store().read(current) == []
