"""The opt-in single-call mode (`--mode fast`, VERALITH_MODE=fast): one call per trace that decomposes
and judges at once, read back into exactly what the full mode's calls give the pipeline.

The reply (veralith.llm.tasks.FAST) is read whole by the client, like an extraction task: lenient JSON
reading, the decomposition checked, one re-ask with the problems when they fail. Its judged half is
then split per judge and settled item by item with that judge's own task and checks
(veralith.llm.salvage.settle), against the same inputs the full mode would have sent: an item that is
inconsistent (a quote not in its chunk, "yes" without a supporting chunk, an id given twice) becomes a
missing verdict, named in the result, which the pipeline decides around exactly as in the full mode.
There is no second round trip for it: that is the mode's point.

Claims are renumbered k1, k2, ... in reply order (as the full mode does), and the judged items that
name a claim by the reply's own id follow. Per-item confidence is not read in this mode (None).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from veralith.config import settings
from veralith.errors import JudgeCallError
from veralith.llm.base import CallResult, CallUsage, JudgeClient
from veralith.llm.calls import Batch, Steps
from veralith.llm.salvage import item_label, read_items, settle
from veralith.llm.tasks import FAST, ChunkIn, ClaimsOutput, FastInput, FastOutput, QuestionsOutput, Task
from veralith.models import ContextChunk, claim_id
from veralith.pipeline.decompose import Decomposition, claims_input, decomposition_of

__all__ = ["FastReply", "Mode", "ask_steps", "effective_mode", "verdicts"]

Mode = Literal["full", "fast"]


def effective_mode(client: JudgeClient, mode: str | None = None) -> Mode:
    """The mode a trace is judged in with `client` (`mode` defaults to settings.mode). The offline backend
    makes no paid calls and runs its heuristics per task, so a single call saves it nothing: it always
    runs (and labels its results) `full`."""
    wanted = mode or settings.mode
    return "fast" if wanted == "fast" and client.backend != "local" else "full"


@dataclass
class FastReply:
    parts: Decomposition
    output: FastOutput
    renamed: dict[str, str]     # the reply's claim id -> the claim's id in the result (k1, k2, ...)


def ask_steps(query: str, chunks: list[ContextChunk], response: str, as_of: str | None) -> Steps[FastReply]:
    """The single call (yielded as a pipeline stage, veralith.llm.calls: the sync path sends it, the
    async path awaits it), and the decomposition read off it; raises what the call raises."""
    said = claims_input(query, response)
    payload = FastInput(query=query, sentences=said.sentences, as_of=as_of,
                        chunks=[ChunkIn(id=c.id, text=c.text, source=c.source) for c in chunks])
    (outcome,) = yield Batch([(FAST, payload)])
    if isinstance(outcome, Exception):
        raise outcome
    call = outcome[0]
    out: FastOutput = call.output  # type: ignore[assignment]
    usage = CallUsage()
    usage.add(call.usage)
    parts = decomposition_of(response, said, QuestionsOutput(sub_questions=out.sub_questions),
                             ClaimsOutput(claims=out.claims, gaps=out.gaps, remarks=out.remarks,
                                          asks_clarification=out.asks_clarification),
                             usage=usage, repairs=list(call.repairs))
    parts.by_task = [(FAST.name, call.usage)]
    renamed = {c.id: claim_id(n) for n, c in enumerate(out.claims, 1)}
    return FastReply(parts, out, renamed)


def verdicts(task: Task, payload: BaseModel, reply: FastReply) -> CallResult:
    """One judge's items out of the reply, settled against `payload` (the input the full mode would
    send that judge) with the judge task's own checks; the bad items are `missing`, with why.

    Raises JudgeCallError when the reply holds no usable item for this judge at all.
    """
    section = _section(task.name, reply)
    reading = read_items(task, payload, json.dumps(section))
    output, bad = settle(task, payload, reading.items, reading.bad)
    if bad and not any(getattr(output, spec.field) for spec in task.items):
        raise JudgeCallError("malformed_reply", f"no usable {task.name} item in the single-call reply: " + "; ".join(
            [f"{item_label(k)}: {' / '.join(v)}" for k, v in bad.items()] + reading.general), attempts=1)
    return CallResult(output, CallUsage(), {}, missing={k[1]: "; ".join(v) for k, v in bad.items()},
                      repairs=list(reading.repairs))


def _section(task: str, reply: FastReply) -> dict[str, Any]:
    out, renamed = reply.output, reply.renamed

    def claims(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**i, "claim_id": renamed.get(i["claim_id"], i["claim_id"])} for i in items]

    if task == "sufficiency":
        return {"items": [i.model_dump(mode="json") for i in out.sufficiency]}
    if task == "faithfulness":
        return {"items": claims([i.model_dump(mode="json") for i in out.faithfulness])}
    data = out.completeness.model_dump(mode="json")
    return {**data, "claims": claims(data["claims"])}
