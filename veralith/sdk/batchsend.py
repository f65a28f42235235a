"""A Batch-API job's batches: sent (one model each, within the service's limits, recorded before
they are created), found again after a crash, and read back once finished.

Nothing is paid for twice: a batch's send is recorded, under an idempotency key also put in its
metadata, before its input file is uploaded and before it is created (veralith.work.batchsends).
A send whose batch id was never written (the process died, or the create got no answer) is looked
for on the service by that key (`recover`) before it is created again.

What a finished batch means for its requests (`gather`):

* `completed`, `expired`, `cancelled`: each line read (veralith.llm.batchlines): a reply kept; a 4xx
  kept as the service's answer (the judge client adapts the request, or records the call as failed,
  as on the synchronous path); a 5xx, a 429, `batch_expired`, `batch_cancelled` and any request the
  batch left unanswered sent again while VERALITH_BATCH_MAX_TRIES allows. So are the requests of an
  output file the service has deleted by now (30 days after it was made): their replies are lost.
* `failed` (its input failed validation): `batch.errors` kept on the send and on each request.
  When the cause is in the input (any code but the organisation's queue limits), sending it again
  would fail again: its requests are given up, and their calls fail with the service's reason;
  otherwise they are sent again, as a 5xx is.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from veralith.config import settings
from veralith.llm import batchlines, batchremote

__all__ = ["gather", "recover", "send"]

logger = logging.getLogger("veralith.sdk")


def send(sdk: Any, jobs: Any, job: str, requests: list[tuple[str, str]]) -> tuple[int, list[tuple[str, str, int]]]:
    """Send the job's new (custom_id, body) requests, as many batches as the limits need; (how many
    requests went out, (batch id, status, requests) of each batch created)."""
    current = settings.current
    parts, too_big = batchlines.chunks(requests, max_requests=current.batch_max_requests,
                                       max_bytes=current.batch_max_bytes)
    if too_big:
        jobs.drop_new(job, too_big)
    created: list[tuple[str, str, int]] = []
    for part in parts:
        key = "vl-" + secrets.token_hex(10)
        jobs.record_send(job, key, part.model, part.custom_ids, len(part.data))
        batch = _create(sdk, jobs, job, key, part.data, None)
        if batch is not None:
            created.append((str(batch.id), str(batch.status), len(part.custom_ids)))
    return sum(len(p.custom_ids) for p in parts), created


def recover(sdk: Any, jobs: Any, job: str) -> list[tuple[str, str]]:
    """Sends recorded but not known to be created: each found on the service by its key, or created
    now (its recorded input file reused); (batch id, status) of those found or created."""
    out: list[tuple[str, str]] = []
    for row in jobs.unsent(job):
        key = row["key"]
        batch = batchremote.find(sdk, key, since=float(row["recorded_at"]))
        if batch is not None:
            logger.warning("veralith: batch job %s: batch %s was created but never recorded (the process "
                           "stopped); it is collected, not sent again", job, batch.id)
            jobs.mark_sent(job, key, str(batch.id), str(batch.status))
        else:
            requests = jobs.send_requests(job, key)
            if not requests:   # nothing left under its key: no batch to make
                jobs.finish_send(key, "never created", None)
                continue
            whole, _ = batchlines.chunks(requests, max_requests=len(requests), max_bytes=1 << 62)
            batch = _create(sdk, jobs, job, key, whole[0].data, row["file_id"])
        if batch is not None:
            out.append((str(batch.id), str(batch.status)))
    return out


def _create(sdk: Any, jobs: Any, job: str, key: str, data: bytes, file_id: str | None) -> Any | None:
    """Upload the send's input file (unless it was) and create its batch; the batch, or None when
    the create got no answer (it is looked for by its key next round)."""
    if file_id is None:
        file_id = batchremote.upload(sdk, data, name=f"veralith-{job}-{key}.jsonl")
        jobs.send_file(key, file_id)
    batch = batchremote.create(sdk, file_id, job=job, key=key)
    if batch is not None:
        jobs.mark_sent(job, key, str(batch.id), str(batch.status))
    return batch


def gather(sdk: Any, jobs: Any, job: str) -> tuple[bool, list[tuple[str, str, int, int]]]:
    """Look at every batch of the job that is out, and read those that finished (module docstring);
    (whether any had, (id, status, requests done, requests) of each)."""
    news = False
    seen: list[tuple[str, str, int, int]] = []
    for row in jobs.open_sends(job):
        batch = batchremote.look(sdk, row["batch_id"])
        counts = batch.request_counts
        seen.append((str(batch.id), str(batch.status), counts.completed if counts else 0,
                     counts.total if counts else int(row["requests"])))
        if batch.status not in batchremote.FINISHED:
            jobs.note_status(row["key"], str(batch.status))
            continue
        news = True
        if batch.status == "failed":
            _failed(jobs, job, row["key"], batch)
        else:
            _read(sdk, jobs, job, row["key"], batch)
    return news, seen


def _read(sdk: Any, jobs: Any, job: str, key: str, batch: Any) -> None:
    tries = settings.current.batch_max_tries
    got = batchremote.outcome(sdk, batch)
    jobs.store_replies(job, key, got.replies)
    jobs.refuse(job, key, got.refused)
    jobs.retry_requests(job, key, got.retry, max_tries=tries)
    left = jobs.unanswered(job, key)
    note = None
    if got.gone:
        note = (f"its output ({', '.join(got.gone)}) is gone from the service, which deletes batch files 30 days "
                f"after they are made; {len(left)} requests without a reply are sent again")
        logger.warning("veralith: batch job %s: batch %s: %s", job, batch.id, note)
    elif batch.status != "completed":
        logger.warning("veralith: batch %s of job %s ended %s; its unanswered requests are sent again",
                       batch.id, job, batch.status)
    why = "its output file is gone" if got.gone else f"batch {batch.status}"
    jobs.retry_requests(job, key, [(name, why) for name in left], max_tries=tries)
    jobs.finish_send(key, str(batch.status), note)


def _failed(jobs: Any, job: str, key: str, batch: Any) -> None:
    why = batchlines.failure(batch)
    names = jobs.unanswered(job, key)   # in the order of the batch's input file (batchsends.send_requests)
    said = f"the Batch API refused batch {batch.id}: {why.reason}"
    reasons = [(name, f"the Batch API refused batch {batch.id}: {why.by_line[n]}" if n in why.by_line else said)
               for n, name in enumerate(names, start=1)]
    if why.in_input:
        logger.warning("veralith: batch job %s: %s; its %d requests are not sent again (see `veralith batch "
                       "status %s`)", job, said, len(names), job)
        jobs.give_up(job, key, reasons)
    else:
        logger.warning("veralith: batch job %s: %s; its requests are sent again", job, said)
        jobs.retry_requests(job, key, reasons, max_tries=settings.current.batch_max_tries)
    jobs.finish_send(key, "failed", why.reason)
