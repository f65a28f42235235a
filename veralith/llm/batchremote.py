"""The OpenAI Batch API, as `veralith eval --batch` uses it: upload requests, start a batch, look at
it, read what came back. Through the openai SDK (files + batches endpoints) and nothing else.

A batch's input is a JSONL file of {custom_id, method, url, body} lines uploaded with purpose
"batch"; its output file has one {custom_id, response: {status_code, body}, error} line per request
answered, its error file one per request that failed. A batch that expired (not done within its
24 h window) or was cancelled still has the output of the requests it finished.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import openai

from veralith.config import settings
from veralith.llm.batchreplay import BATCH_URL

__all__ = ["FINISHED", "Outcome", "connect", "look", "outcome", "submit"]

# Batch states after which nothing more will come back.
FINISHED = frozenset({"completed", "expired", "cancelled", "failed"})
_PLACEHOLDER_KEY = "veralith-no-key"


def connect() -> openai.OpenAI:
    """An SDK client for the configured server (the key handed to the SDK only)."""
    current = settings.current
    key = current.api_key.get_secret_value() if current.api_key else None
    return openai.OpenAI(api_key=key or _PLACEHOLDER_KEY, base_url=current.base_url, timeout=current.timeout_s,
                         max_retries=current.max_retries)


def submit(sdk: openai.OpenAI, requests: list[tuple[str, str]], *, job: str) -> str:
    """Upload (custom_id, body JSON) requests as one batch input file and start the batch; its id."""
    lines = [json.dumps({"custom_id": name, "method": "POST", "url": BATCH_URL, "body": json.loads(body)},
                        separators=(",", ":"), ensure_ascii=False) for name, body in requests]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    uploaded = sdk.files.create(file=(f"veralith-{job}.jsonl", data, "application/jsonl"), purpose="batch")
    batch = sdk.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h",
                               metadata={"veralith_job": job})
    return str(batch.id)


def look(sdk: openai.OpenAI, batch_id: str) -> Any:
    """The batch as the server sees it now (status, request counts, file ids)."""
    return sdk.batches.retrieve(batch_id)


@dataclass
class Outcome:
    """What a finished batch brought back: replies (custom_id, completion JSON) and failures
    (custom_id, why); requests it holds neither for were left unanswered (expired, cancelled)."""

    replies: list[tuple[str, str]] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)


def outcome(sdk: openai.OpenAI, batch: Any) -> Outcome:
    """Read a finished batch's output and error files."""
    found = Outcome()
    for file_id in (batch.output_file_id, batch.error_file_id):
        if not file_id:
            continue
        for line in sdk.files.content(file_id).text.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            name = str(item.get("custom_id") or "")
            response = item.get("response") or {}
            if response.get("status_code") == 200 and isinstance(response.get("body"), dict):
                found.replies.append((name, json.dumps(response["body"], separators=(",", ":"),
                                                       ensure_ascii=False)))
            else:
                error = item.get("error") or (response.get("body") or {}).get("error") or {}
                why = error.get("message") if isinstance(error, dict) else str(error)
                found.failures.append((name, f"HTTP {response.get('status_code', '?')}: {why or 'no reply'}"))
    return found
