"""The OpenAI Batch API, as `veralith eval --batch` uses it: upload an input file, create a batch,
find it again, look at it, read what came back. Through the openai SDK (files + batches endpoints)
and nothing else; what the files hold is veralith.llm.batchlines'.

A batch is created with its idempotency key in its metadata (`veralith_send`) and without the SDK's
own retries: a create whose answer was lost may still have made the batch, and a retry would make a
second one, paid twice. Such a batch is found again by its key (`find`, listing the batches).

The service's failures are read once here (`_service`): unreachable, timing out or answering 5xx
or 429 after the SDK's retries, it is down (JudgeServerDown: a collect stops, the job waits);
any other refusal is a JudgeCallError naming the status and the service's words.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import openai

from veralith.config import redact_configured, settings
from veralith.errors import JudgeCallError, JudgeServerDown
from veralith.llm import retry
from veralith.llm.batchlines import BATCH_URL, Read, read_lines
from veralith.redact import redact_url

__all__ = ["FINISHED", "SEARCH_MARGIN_S", "Outcome", "connect", "create", "find", "look", "outcome", "upload"]

# Batch states after which nothing more will come back.
FINISHED = frozenset({"completed", "expired", "cancelled", "failed"})
# How far before a send was recorded its batch may have been created, by the service's clock.
SEARCH_MARGIN_S = 3600.0
_PLACEHOLDER_KEY = "veralith-no-key"


def connect() -> openai.OpenAI:
    """An SDK client for the configured server (the key handed to the SDK only)."""
    current = settings.current
    key = current.api_key.get_secret_value() if current.api_key else None
    return openai.OpenAI(api_key=key or _PLACEHOLDER_KEY, base_url=current.base_url, timeout=current.timeout_s,
                         max_retries=current.max_retries)


@contextlib.contextmanager
def _service(doing: str) -> Iterator[None]:
    """The SDK's errors of one call to the files or batches endpoints, as Veralith's (module doc)."""
    shown = redact_url(settings.current.base_url) or "api.openai.com"   # as the judge server is named
    try:
        yield
    except openai.APIStatusError as exc:
        said = redact_configured(exc.message)
        if retry.retryable(exc):
            raise JudgeServerDown(shown, f"{doing}: HTTP {exc.status_code}: {said}",
                                  retry_after_s=settings.current.batch_poll_s) from None
        raise JudgeCallError(retry.kind(exc), f"the Batch API at {shown} refused to {doing}: HTTP "
                             f"{exc.status_code}: {said}") from None
    except openai.APIConnectionError as exc:
        raise JudgeServerDown(shown, f"cannot {doing}: {redact_configured(exc.message)}",
                              retry_after_s=settings.current.batch_poll_s) from None


def upload(sdk: openai.OpenAI, data: bytes, *, name: str) -> str:
    """Upload one batch's input file (purpose `batch`); its file id."""
    with _service("upload a batch input file"):
        uploaded = sdk.files.create(file=(name, data, "application/jsonl"), purpose="batch")
    return str(uploaded.id)


def create(sdk: openai.OpenAI, file_id: str, *, job: str, key: str) -> Any | None:
    """Create the batch of an uploaded input file, its key in its metadata, sent once; the batch, or
    None when no answer came (it may exist: `find` it before creating it again)."""
    once = sdk.with_options(max_retries=0)
    try:
        with _service("create a batch"):
            return once.batches.create(input_file_id=file_id, endpoint=BATCH_URL, completion_window="24h",
                                       metadata={"veralith_job": job, "veralith_send": key})
    except JudgeServerDown:
        return None


def find(sdk: openai.OpenAI, key: str, *, since: float) -> Any | None:
    """The batch whose metadata holds this send key, among those created since `since` (unix time,
    less SEARCH_MARGIN_S for the clocks' difference), newest first; None when there is none."""
    with _service("list batches"):
        for batch in sdk.batches.list(limit=100):   # the SDK fetches the next page as the loop needs it
            if (batch.metadata or {}).get("veralith_send") == key:
                return batch
            if batch.created_at < since - SEARCH_MARGIN_S:
                return None
    return None


def look(sdk: openai.OpenAI, batch_id: str) -> Any:
    """The batch as the server sees it now (status, request counts, file ids, errors)."""
    with _service("look at a batch"):
        return sdk.batches.retrieve(batch_id)


@dataclass
class Outcome(Read):
    """A finished batch's files, read (batchlines.Read), and the files the service no longer has."""

    gone: list[str] = field(default_factory=list)


def outcome(sdk: openai.OpenAI, batch: Any) -> Outcome:
    """Read a finished batch's output and error files. A file deleted meanwhile (the service deletes
    batch files 30 days after they were made) is named in `gone`; its requests stay unanswered."""
    found = Outcome()
    for file_id in (batch.output_file_id, batch.error_file_id):
        if not file_id:
            continue
        with _service("read a batch's output"):
            try:
                text: str | None = sdk.files.content(file_id).text
            except openai.NotFoundError:
                text = None
        if text is None:
            found.gone.append(str(file_id))
            continue
        read_lines(sdk, text, found)
    return found
