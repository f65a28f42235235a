"""What OpenAI's Batch API refuses, and the shapes of what it returns: the rules of
tests/fake_batch_server.py, from the API reference and the `openai` SDK's own types
(types/batch.py, batch_create_params.py, batch_error.py, file_create_params.py).

At create (HTTP 400 at once): an input file that does not exist (404) or was not uploaded with
purpose `batch`; an endpoint the service does not batch; a `completion_window` other than `24h`;
metadata of more than 16 pairs, a key over 64 characters or a value over 512, or a value that is no
string.

At validation (the batch goes `failed`, its `errors.data` naming code, line and message): an empty
file; a line that is not a JSON object (`invalid_json_line`); a line without custom_id, method,
url or body, or whose method is not POST (`invalid_request`); a line whose url is not the batch's
endpoint (`url_mismatch`); a custom_id seen before in the file (`duplicate_custom_id`); a second
model in one file (`model_mismatch`); more than 50,000 requests (`too_many_tasks`); more than
200 MB (`file_too_large`: the limit is the reference's, the code this fake's own); a model the
service does not batch (`model_not_found`). The documented limits are the defaults; a test or a
benchmark may lower them.
"""

from __future__ import annotations

import json
import time
from typing import Any

__all__ = ["ENDPOINTS", "MAX_BYTES", "MAX_REQUESTS", "batch_object", "create_problem", "error_line", "output_line",
           "validate"]

ENDPOINTS = ("/v1/responses", "/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/moderations",
             "/v1/images/generations", "/v1/images/edits", "/v1/videos")
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1000 * 1000
EXPIRED = "This request could not be executed before the completion window expired."
CANCELLED = "This request was not executed because the batch was cancelled."


def create_problem(body: dict[str, Any], file: dict[str, Any] | None) -> tuple[int, str] | None:
    """(HTTP status, message) when POST /v1/batches is refused at once, else None."""
    if file is None or file.get("deleted"):
        return 404, f"No such File object: {body.get('input_file_id')}"
    if file["purpose"] != "batch":
        return 400, f"The input file {body['input_file_id']} must be uploaded with purpose 'batch'"
    if body.get("endpoint") not in ENDPOINTS:
        return 400, f"Invalid value for 'endpoint': {body.get('endpoint')!r}"
    if body.get("completion_window") != "24h":
        return 400, "Invalid value for 'completion_window': only '24h' is supported"
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict) or len(metadata) > 16:
        return 400, "Invalid 'metadata': at most 16 key-value pairs"
    for key, value in metadata.items():
        if len(key) > 64 or not isinstance(value, str) or len(value) > 512:
            return 400, f"Invalid 'metadata': key {key[:70]!r} (keys up to 64 characters, values strings up to 512)"
    return None


def validate(data: bytes, endpoint: str, *, max_requests: int, max_bytes: int,
             unbatchable: set[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the file's request lines, the validation errors: empty when it passes)."""
    def error(code: str, message: str, line: int | None = None, param: str | None = None) -> dict[str, Any]:
        return {"code": code, "message": message, "line": line, "param": param}

    if len(data) > max_bytes:
        return [], [error("file_too_large", f"The input file is {len(data)} bytes; a batch takes up to {max_bytes}.")]
    text = data.decode("utf-8", "replace")
    rows = [x for x in text.splitlines() if x.strip()]
    if not rows:
        return [], [error("empty_file", "The batch input file is empty.")]
    lines, errors, seen, models = [], [], set(), {}
    for n, raw in enumerate(rows, start=1):
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            errors.append(error("invalid_json_line", "This line is not parseable as valid JSON.", n))
            continue
        missing = [k for k in ("custom_id", "method", "url", "body") if not isinstance(line, dict) or k not in line]
        if missing or not isinstance(line["body"], dict) or line["method"] != "POST":
            errors.append(error("invalid_request", f"Line {n} needs custom_id, method POST, url and a body object.",
                                n, missing[0] if missing else "method"))
            continue
        if line["url"] != endpoint:
            errors.append(error("url_mismatch", f"The url {line['url']!r} does not match the batch's endpoint "
                                f"{endpoint!r}.", n, "url"))
        if line["custom_id"] in seen:
            errors.append(error("duplicate_custom_id", "The custom_id for this request is a duplicate of another "
                                "request; it must be unique within a batch.", n, "custom_id"))
        seen.add(line["custom_id"])
        models.setdefault(str(line["body"].get("model")), n)
        lines.append(line)
    if len(models) > 1:
        model, n = list(models.items())[1]
        errors.append(error("model_mismatch", f"The model {model!r} differs from the file's first model "
                            f"{next(iter(models))!r}; a batch's requests must all use one model.", n, "body.model"))
    for model, n in models.items():
        if model in unbatchable:
            errors.append(error("model_not_found", f"The model `{model}` does not exist or is not available "
                                "in the Batch API.", n, "body.model"))
    if len(rows) > max_requests:
        errors.append(error("too_many_tasks", f"The batch holds {len(rows)} requests; the limit is {max_requests}."))
    return lines, errors


def batch_object(batch_id: str, body: dict[str, Any], model: str | None) -> dict[str, Any]:
    """A batch just created (status `validating`), every field of types/batch.py present."""
    now = int(time.time())
    return {"id": batch_id, "object": "batch", "endpoint": body["endpoint"], "errors": None, "model": model,
            "input_file_id": body["input_file_id"], "completion_window": body["completion_window"],
            "status": "validating", "output_file_id": None, "error_file_id": None, "created_at": now,
            "in_progress_at": None, "expires_at": now + 24 * 3600, "finalizing_at": None, "completed_at": None,
            "failed_at": None, "expired_at": None, "cancelling_at": None, "cancelled_at": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0}, "metadata": body.get("metadata"),
            "usage": None}


def output_line(req_id: str, custom_id: str, status: int, body: dict[str, Any]) -> dict[str, Any]:
    """A line of a request that ran: 200 and the completion (output file), or another status and the
    error body the synchronous endpoint would have sent (error file)."""
    return {"id": req_id, "custom_id": custom_id, "error": None,
            "response": {"status_code": status, "request_id": f"req-{req_id}", "body": body}}


def error_line(req_id: str, custom_id: str, code: str) -> dict[str, Any]:
    """A line of a request that never ran: `batch_expired` or `batch_cancelled` (error file)."""
    message = {"batch_expired": EXPIRED, "batch_cancelled": CANCELLED}.get(code, code)
    return {"id": req_id, "custom_id": custom_id, "response": None, "error": {"code": code, "message": message}}
