"""The fake batch server (tests/fake_batch_server.py) refuses what the Batch API refuses and returns
what it returns, through the real `openai` SDK: a fake kinder than the service would let a client
pass its tests and fail against the service."""

from __future__ import annotations

import json

import openai
import pytest
from fake_batch_server import batch_server  # noqa: F401


def _line(custom_id: str, model: str = "gpt-4o", url: str = "/v1/chat/completions", method: str = "POST") -> dict:
    return {"custom_id": custom_id, "method": method, "url": url,
            "body": {"model": model, "messages": [{"role": "user", "content": f"Say {custom_id}."}]}}


def _sdk(server) -> openai.OpenAI:
    return openai.OpenAI(api_key="test", base_url=server.base_url, max_retries=0)


def _batch(sdk, lines, *, purpose: str = "batch", raw: bytes | None = None, **create):
    data = raw if raw is not None else "".join(json.dumps(x) + "\n" for x in lines).encode()
    file = sdk.files.create(file=("in.jsonl", data, "application/jsonl"), purpose=purpose)
    args = {"input_file_id": file.id, "endpoint": "/v1/chat/completions", "completion_window": "24h", **create}
    return sdk.batches.create(**args)


def _errors(sdk, batch) -> list[tuple[str, int | None]]:
    seen = sdk.batches.retrieve(batch.id)
    assert seen.status == "failed" and seen.failed_at is not None
    return [(e.code, e.line) for e in seen.errors.data]


@pytest.mark.parametrize(("lines", "expected"), [
    ([_line("a"), _line("a")], [("duplicate_custom_id", 2)]),
    ([_line("a"), _line("b", model="gpt-4o-mini")], [("model_mismatch", 2)]),
    ([_line("a"), _line("b", url="/v1/embeddings")], [("url_mismatch", 2)]),
    ([_line("a", method="GET")], [("invalid_request", 1)]),
    ([], [("empty_file", None)]),
])
def test_a_file_the_service_refuses_fails_validation_with_its_reasons(batch_server, lines, expected):  # noqa: F811
    sdk = _sdk(batch_server)
    assert _errors(sdk, _batch(sdk, lines)) == expected


def test_the_limits_bad_lines_and_unbatched_models_fail_validation(batch_server):  # noqa: F811
    sdk = _sdk(batch_server)
    batch_server.max_requests, batch_server.max_bytes = 2, 1000
    assert _errors(sdk, _batch(sdk, [_line("a"), _line("b"), _line("c")])) == [("too_many_tasks", None)]
    assert _errors(sdk, _batch(sdk, [_line("x" * 1000)])) == [("file_too_large", None)]
    assert _errors(sdk, _batch(sdk, [], raw=b'{"custom_id": \n')) == [("invalid_json_line", 1)]
    batch_server.unbatchable = {"gpt-4o"}
    assert _errors(sdk, _batch(sdk, [_line("a")])) == [("model_not_found", 1)]


@pytest.mark.parametrize(("create", "purpose", "status"), [
    ({"completion_window": "1h"}, "batch", 400),
    ({"endpoint": "/v1/files"}, "batch", 400),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "batch", 400),
    ({"metadata": {"k" * 65: "v"}}, "batch", 400),
    ({"metadata": {"k": "v" * 513}}, "batch", 400),
    ({}, "fine-tune", 400),
    ({"input_file_id": "file-none"}, "batch", 404),
])
def test_a_create_the_service_refuses_is_refused_at_once(batch_server, create, purpose, status):  # noqa: F811
    sdk = _sdk(batch_server)
    with pytest.raises(openai.APIStatusError) as refused:
        _batch(sdk, [_line("a")], purpose=purpose, **create)
    assert refused.value.status_code == status
    assert not batch_server.batches


def test_statuses_and_line_shapes(batch_server):  # noqa: F811
    sdk = _sdk(batch_server)
    batch_server.refuses = {"gpt-4o": {"temperature"}}
    batch_server.fail = lambda body: 503 if "Say b." in json.dumps(body) else None
    lines = [_line("a"), _line("b"), {**_line("c"), "body": {**_line("c")["body"], "temperature": 0}}]
    made = _batch(sdk, lines, metadata={"veralith_send": "k1"})
    assert made.status == "validating"
    assert [sdk.batches.retrieve(made.id).status for _ in range(2)] == ["finalizing", "completed"]
    done = sdk.batches.retrieve(made.id)
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (3, 1, 2)
    out = [json.loads(x) for x in sdk.files.content(done.output_file_id).text.splitlines()]
    err = {x["custom_id"]: x for x in map(json.loads, sdk.files.content(done.error_file_id).text.splitlines())}
    assert out[0]["custom_id"] == "a" and out[0]["response"]["status_code"] == 200 and out[0]["error"] is None
    assert err["b"]["response"]["status_code"] == 503 and err["b"]["error"] is None
    assert err["c"]["response"]["status_code"] == 400
    assert "'temperature' is not supported" in err["c"]["response"]["body"]["error"]["message"]
    with pytest.raises(openai.BadRequestError):   # the synchronous endpoint refuses the same
        sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}], temperature=0)
    batch_server.expire_next, batch_server.cancel_next = 1, 1
    expired = _batch(sdk, [_line("d"), _line("e")])
    cancelled = _batch(sdk, [_line("f"), _line("g")])
    assert sdk.batches.retrieve(expired.id).status == "expired"
    assert [sdk.batches.retrieve(cancelled.id).status for _ in range(2)] == ["cancelling", "cancelled"]
    for batch, code in ((expired, "batch_expired"), (cancelled, "batch_cancelled")):
        seen = sdk.batches.retrieve(batch.id)
        (line,) = [json.loads(x) for x in sdk.files.content(seen.error_file_id).text.splitlines()]
        assert line["response"] is None and line["error"]["code"] == code
    listed = list(sdk.batches.list(limit=2))   # newest first, every page
    assert [b.id for b in listed] == [cancelled.id, expired.id, made.id]
    assert listed[-1].metadata == {"veralith_send": "k1"}
    batch_server.expire_files()
    with pytest.raises(openai.NotFoundError):
        sdk.files.content(done.output_file_id)
