"""The OpenAI Batch API's files, line by line: input files cut to the service's rules, output and
error files read back.

Input: one {custom_id, method, url, body} line per request; one model per file (the service refuses
a file naming two: `model_mismatch`), at most VERALITH_BATCH_MAX_REQUESTS lines and
VERALITH_BATCH_MAX_BYTES bytes (the service's limits by default, veralith.config).

Output and error files: one {id, custom_id, response, error} line per request. `response` is
{status_code, request_id, body}: a 200 carries the chat completion; any other status carries the
error the synchronous endpoint would have answered, and is read the same way (`status_error`), so
the judge client decides what a 4xx means exactly as on the synchronous path. A line without a
response has `error` {code, message}: `batch_expired` or `batch_cancelled` (the batch ended before
the request ran), `request_timeout`; all three are sent again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import openai

from veralith.llm import retry

__all__ = ["BATCH_URL", "NOT_THE_INPUT", "Chunk", "Failure", "Read", "chunks", "failure", "read_lines",
           "status_error"]

BATCH_URL: Literal["/v1/chat/completions"] = "/v1/chat/completions"
# Codes of a failed batch whose cause is the service's or the organisation's state, not the file:
# sending the same requests again later can work. Any other code names something wrong in the input.
NOT_THE_INPUT = frozenset({"token_limit_exceeded", "rate_limit_exceeded", "server_error"})


@dataclass
class Chunk:
    """One batch's worth of requests: one model, within the limits; `data` is its input file."""

    model: str
    custom_ids: list[str]
    data: bytes


def chunks(requests: list[tuple[str, str]], *, max_requests: int,
           max_bytes: int) -> tuple[list[Chunk], list[tuple[str, str]]]:
    """(custom_id, body JSON) requests cut into batches of one model each, in order, each at most
    `max_requests` lines and `max_bytes` bytes; and the requests no batch can hold (custom_id, why)."""
    by_model: dict[str, list[tuple[str, bytes]]] = {}
    too_big: list[tuple[str, str]] = []
    for custom_id, body in requests:
        line = _input_line(custom_id, body)
        if len(line) > max_bytes:
            too_big.append((custom_id, f"the request is {len(line)} bytes, more than a batch's input file may hold "
                                       f"({max_bytes} bytes, VERALITH_BATCH_MAX_BYTES)"))
            continue
        by_model.setdefault(str(json.loads(body).get("model") or ""), []).append((custom_id, line))
    out: list[Chunk] = []
    for model, lines in by_model.items():
        names: list[str] = []
        parts: list[bytes] = []
        size = 0
        for custom_id, line in lines:
            if names and (len(names) >= max_requests or size + len(line) > max_bytes):
                out.append(Chunk(model, names, b"".join(parts)))
                names, parts, size = [], [], 0
            names.append(custom_id)
            parts.append(line)
            size += len(line)
        if names:
            out.append(Chunk(model, names, b"".join(parts)))
    return out, too_big


def _input_line(custom_id: str, body: str) -> bytes:
    # `body` is stored as compact JSON already: spliced in, not parsed and written again.
    head = json.dumps({"custom_id": custom_id, "method": "POST", "url": BATCH_URL}, separators=(",", ":"))
    return (head[:-1] + ',"body":' + body + "}\n").encode("utf-8")


@dataclass
class Read:
    """What a finished batch's files brought back: replies (custom_id, completion JSON), refusals
    (custom_id, response JSON {status_code, body}, why: a 4xx the judge client reads as it reads a
    synchronous one), and requests to send again (custom_id, why: a 5xx, a 429, an expiry, a cancel)."""

    replies: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)
    retry: list[tuple[str, str]] = field(default_factory=list)


def read_lines(sdk: openai.OpenAI, text: str, into: Read) -> None:
    """Sort the lines of an output or error file into `into`."""
    for raw in text.splitlines():
        if not raw.strip():
            continue
        item = json.loads(raw)
        name = str(item.get("custom_id") or "")
        response = item.get("response") or None
        if response is None:
            error = item.get("error") or {}
            into.retry.append((name, f"{error.get('code') or 'no reply'}: {error.get('message') or 'no reply'}"))
            continue
        status, body = response.get("status_code"), response.get("body")
        if status == 200 and isinstance(body, dict):
            into.replies.append((name, json.dumps(body, separators=(",", ":"), ensure_ascii=False)))
            continue
        exc = status_error(sdk, int(status or 500), body)
        why = f"HTTP {exc.status_code}: {_message(body) or exc.message}"
        if retry.retryable(exc):
            into.retry.append((name, why))
        else:
            into.refused.append((name, json.dumps({"status_code": exc.status_code, "body": body},
                                                  separators=(",", ":"), ensure_ascii=False), why))


class _LineResponse:
    """A batch line's response as the SDK's status errors look at one (no HTTP exchange behind it)."""

    def __init__(self, status_code: int) -> None:
        self.status_code, self.request = status_code, None
        self.headers: dict[str, str] = {}


def status_error(sdk: openai.OpenAI, status: int, body: Any) -> openai.APIStatusError:
    """The SDK's own error for a reply with this status and body, as the synchronous call gets it
    (the SDK's mapping of a status to its exception class, and its message)."""
    return sdk._make_status_error(f"Error code: {status} - {body}", body=body,
                                  response=cast(Any, _LineResponse(status)))


def _message(body: Any) -> str | None:
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if message else None


@dataclass
class Failure:
    """Why a batch failed as a whole (`batch.errors`): the service's words, whether the cause is in
    its input (sending it again cannot help), and the reason for each input line it names (1-based)."""

    reason: str
    in_input: bool
    by_line: dict[int, str] = field(default_factory=dict)


def failure(batch: Any) -> Failure:
    errors = list(getattr(batch.errors, "data", None) or []) if batch.errors is not None else []
    if not errors:
        return Failure("the service gave no reason", in_input=False)
    said = []
    by_line: dict[int, str] = {}
    for error in errors:
        text = f"{error.code or 'error'}{f' (line {error.line})' if error.line else ''}: {error.message or ''}".strip()
        said.append(text)
        if error.line:
            by_line[int(error.line)] = text
    return Failure("; ".join(said), in_input=any(e.code not in NOT_THE_INPUT for e in errors), by_line=by_line)
