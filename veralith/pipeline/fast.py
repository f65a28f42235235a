"""The opt-in single-call mode (`--mode fast`, VERALITH_MODE=fast): one call per trace that decomposes
and judges at once, read back into exactly what the full mode's calls give the pipeline.

The call is laid out so that what the question and the chunks alone decide comes first: the user
message's part 1 holds the question and the chunks (with their dates and the cutoff for now, as every
judge is shown them, veralith.llm.frames), part 2 the response; the schema (veralith.llm.schemas.FastOutput)
has the sub-questions and sufficiency written before the response's claims. Without chunks the schema
asks for no sufficiency or faithfulness list (the pipeline decides both in code, as the full mode does).

The reply (veralith.llm.tasks.FAST) is read whole by the client, like an extraction task: lenient JSON
reading, the decomposition checked, one re-ask with the problems when they fail. Its judged half is
then split per judge and settled item by item with that judge's own task and checks
(veralith.llm.salvage.settle), against the same inputs the full mode would have sent. The bad items of
all three judges are asked again once, together, in one more request that continues the conversation
(`fast_reask`: what is wrong with each and the fix); an item still bad after it becomes a missing
verdict, named in the result, which the pipeline decides around exactly as in the full mode.

Claims are renumbered k1, k2, ... in reply order (as the full mode does), and the judged items that
name a claim by the reply's own id follow. Per-item confidence is not read in this mode (None).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from veralith.config import settings
from veralith.errors import JudgeCallError, JudgeServerDown
from veralith.llm.base import CallResult, CallUsage, JudgeClient
from veralith.llm.calls import Batch, Outcome, Steps
from veralith.llm.dates import fresh_from
from veralith.llm.frames import chunks_in
from veralith.llm.salvage import Key, Reading, item_label, read_items, settle
from veralith.llm.tasks import FAST, FAST_REASK, ClaimsOutput, FastInput, FastReaskInput, QuestionsOutput, Task
from veralith.models import ContextChunk, claim_id
from veralith.pipeline.decompose import Decomposition, claims_input, decomposition_of

__all__ = ["FastReply", "Mode", "ask_steps", "effective_mode", "verdict_steps"]

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
    output: Any                 # FastOutput, or FastBareOutput without chunks
    renamed: dict[str, str]     # the reply's claim id -> the claim's id in the result (k1, k2, ...)
    payload: FastInput


def ask_steps(query: str, chunks: list[ContextChunk], response: str, as_of: str | None) -> Steps[FastReply]:
    """The single call (yielded as a pipeline stage, veralith.llm.calls: the sync path sends it, the
    async path awaits it), and the decomposition read off it; raises what the call raises."""
    said = claims_input(query, response)
    payload = FastInput(query=query, sentences=said.sentences, as_of=as_of, chunks=chunks_in(chunks),
                        fresh_from=fresh_from(as_of, settings.stale_after_days))
    (outcome,) = yield Batch([(FAST, payload)])
    if isinstance(outcome, Exception):
        raise outcome
    call = outcome[0]
    out = call.output
    usage = CallUsage()
    usage.add(call.usage)
    parts = decomposition_of(response, said, QuestionsOutput(sub_questions=out.sub_questions),  # type: ignore[attr-defined]
                             ClaimsOutput(claims=out.claims, gaps=out.gaps, remarks=out.remarks,  # type: ignore[attr-defined]
                                          asks_clarification=out.asks_clarification),  # type: ignore[attr-defined]
                             usage=usage, repairs=list(call.repairs))
    parts.by_task = [(FAST.name, call.usage)]
    renamed = {c.id: claim_id(n) for n, c in enumerate(out.claims, 1)}  # type: ignore[attr-defined]
    return FastReply(parts, out, renamed, payload)


@dataclass
class _Judge:
    task: Task
    payload: BaseModel
    reading: Reading
    good: dict[Key, dict[str, Any]]
    bad: dict[Key, list[str]]


def verdict_steps(reply: FastReply, judges: list[tuple[Task, BaseModel]]) -> Steps[tuple[list[Outcome], CallUsage]]:
    """Each judge's verdicts out of the reply, settled against its payload (the input the full mode would
    send it), the bad items of all of them asked again once in one request: an outcome per judge, and
    what the re-ask cost (nothing without one). A judge with no usable item at all is a JudgeCallError."""
    states = []
    for task, payload in judges:
        reading = read_items(task, payload, json.dumps(_section(task.name, reply.output, reply.renamed)))
        _, bad = settle(task, payload, reading.items, reading.bad)
        states.append(_Judge(task, payload, reading, {k: v for k, v in reading.items.items() if k not in bad}, bad))
    spent = CallUsage()
    if any(s.bad for s in states):
        outcome = yield Batch([(FAST_REASK, _reask(reply, states))])
        again: dict[str, Any] = {}
        if isinstance(outcome[0], JudgeServerDown):
            raise outcome[0]
        if isinstance(outcome[0], Exception):
            note = f"the re-ask failed: {outcome[0]}"[:300]
            used = getattr(outcome[0], "usage", None)
            spent.add(used if isinstance(used, CallUsage) else CallUsage())
        else:
            again, note = outcome[0][0].output.model_dump(mode="json"), "no usable item for it in the re-ask either"
            spent.add(outcome[0][0].usage)
        for state in states:
            _merge(state, reply, again, note)
    now = time.perf_counter()
    return [_result(s, now) for s in states], spent


def _merge(state: _Judge, reply: FastReply, again: dict[str, Any], note: str) -> None:
    """The judge's bad items replaced by what the re-ask gave for them, where that is usable."""
    if not state.bad:
        return
    section = _section(state.task.name, again, reply.renamed) if state.task.name in again else {}
    second = read_items(state.task, state.payload, json.dumps(section), only=set(state.bad))
    state.reading.repairs += second.repairs
    still = {k: [*v, note] for k, v in state.bad.items() if k not in second.items and k not in second.bad}
    _, state.bad = settle(state.task, state.payload, {**state.good, **second.items}, {**still, **second.bad})
    state.good = {k: v for k, v in {**state.good, **second.items}.items() if k not in state.bad}


def _result(state: _Judge, finished: float) -> Outcome:
    output, bad = settle(state.task, state.payload, state.good, state.bad)
    if bad and not any(getattr(output, spec.field) for spec in state.task.items):
        return JudgeCallError("malformed_reply", f"no usable {state.task.name} item in the single-call reply: "
                              + "; ".join([f"{item_label(k)}: {' / '.join(v)}" for k, v in bad.items()]
                                          + state.reading.general), attempts=2)
    return CallResult(output, CallUsage(), {}, missing={k[1]: "; ".join(v) for k, v in bad.items()},
                      repairs=list(state.reading.repairs)), finished


def _reask(reply: FastReply, states: list[_Judge]) -> FastReaskInput:
    """The re-ask: every bad item of every judge, named as the reply named it, with what is wrong."""
    back = {ours: theirs for theirs, ours in reply.renamed.items() if ours != theirs}
    lines = [f"{s.task.name} {_theirs(item_label(k), back)}: {_theirs(' / '.join(v), back)}"
             for s in states for k, v in s.bad.items()]
    sections = tuple(dict.fromkeys(s.task.name for s in states if s.bad))
    content = json.dumps(reply.output.model_dump(mode="json"), ensure_ascii=False)
    return FastReaskInput(fast=reply.payload, reply=content, problems=tuple(lines), sections=sections)


def _theirs(text: str, back: dict[str, str]) -> str:
    """Our claim ids (k1, ...) in `text` as the reply's own, where it numbered claims otherwise."""
    return re.sub(r"\bk\d+\b", lambda m: back.get(m.group(), m.group()), text) if back else text


def _section(task: str, out: Any, renamed: dict[str, str]) -> dict[str, Any]:
    """One judge's part of a reply (a model or the re-ask's dict), its claim ids renamed to the result's."""
    data = out if isinstance(out, dict) else out.model_dump(mode="json")

    def claims(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**i, "claim_id": renamed.get(str(i.get("claim_id")), i.get("claim_id"))} if isinstance(i, dict)
                else i for i in items]

    if task == "sufficiency":
        return {"items": data.get("sufficiency", [])}
    if task == "faithfulness":
        return {"items": claims(data.get("faithfulness", []))}
    section = data.get("completeness") or {}
    return {**section, "claims": claims(section.get("claims", []))}
