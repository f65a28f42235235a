"""Traces and results stored now, by callers that may wait for the store: `veralith eval`,
`log(sync=True)`, `evaluate(persist=True)`.

`log()` itself never waits: it spools (veralith.work.spooler) and the shipper moves the trace in
(veralith.work.shipper). Both take their ids from the same allocator (veralith.work.ids), so an id
is never handed out twice, whichever way the trace came in.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

from veralith.errors import StoreError
from veralith.models import EvaluationResult
from veralith.store import repository
from veralith.usage import OutputSize
from veralith.work import claims, leases
from veralith.work.spooler import new_id

if TYPE_CHECKING:
    from veralith.store.protocol import Connected, TraceInput

__all__ = ["create", "store_result"]

_CLASH_RETRIES = 5


def create(store: Connected, trace: TraceInput, *, queued: bool = False, run: str | None = None,
           run_id: int | None = None) -> int:
    """Store a pending trace now (waiting for the store if need be); its id. `queued`: reserved for
    this process, which is about to evaluate it (no sweep takes it meanwhile). `run` files it under
    the SDK run of that name, `run_id` under an open run. DuplicateExternalId when the knowledge base
    already has a trace with `trace.external_id`."""
    ids = None
    for _ in range(_CLASH_RETRIES):
        trace_id = new_id(store.spool_url)
        try:
            store.write(repository.create_trace, trace, trace_id=trace_id, uid=secrets.token_hex(16),
                        owner=leases.mine() if queued else None, run=run, run_id=run_id)
            return trace_id
        except repository.IdClash:
            from veralith.work.spooler import spooler_for

            ids = ids or spooler_for(store.spool_url).ids
            ids.bump(trace_id)
    raise StoreError(f"could not find a free trace id in {store.url}")


def store_result(store: Connected, result: EvaluationResult, *, sizes: Sequence[OutputSize] = ()) -> int:
    """Write a result judged without a claim: a new trace (its id from the allocator), or the stored
    trace `result.trace_id` re-judged in place, refused (LeaseLost) while another process evaluates
    it. `sizes`: what its calls wrote, for the dry run. The trace id."""
    fresh = None if result.trace_id is not None else new_id(store.spool_url)
    return store.write(claims.save, result, held=False, new_id=fresh, sizes=sizes)
