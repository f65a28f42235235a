"""The golden suite's scripted judge for the single-call mode: the very labels `test_golden.oracle_client`
gives the five calls of the full mode, written as the one reply of the `fast` task.

Each part of the reply is what that task's scripted responder answers for the input the full mode
would send it (built here from the fast input and the parts before it), so both modes see the same
labels and any difference in cell or gate comes from how a mode reads its replies.
"""

from __future__ import annotations

from typing import Any

from fakes import FakeClient
from test_golden import oracle_client

from veralith.llm.tasks import (
    ChunkIn,
    ClaimIn,
    ClaimsInput,
    CompletenessInput,
    FaithfulnessInput,
    FastInput,
    GapIn,
    QuestionsInput,
    SubQuestionIn,
    SufficiencyInput,
)

__all__ = ["fast_oracle_client", "fast_reply"]


def fast_reply(full: FakeClient, payload: FastInput) -> dict[str, Any]:
    """The `fast` reply made of `full`'s scripted answers to the five tasks."""
    answer = full._responders
    asked = answer["questions"](QuestionsInput(query=payload.query))
    said = answer["claims"](ClaimsInput(query=payload.query, response=" ".join(s.text for s in payload.sentences),
                                        sentences=payload.sentences)) if payload.sentences else {
        "claims": [], "gaps": [], "asks_clarification": False}
    sqs = [SubQuestionIn(id=q["id"], text=q["text"]) for q in asked["sub_questions"]]
    claims = [ClaimIn(id=c["id"], text=c["text"]) for c in said["claims"]]
    gaps = [GapIn(id=g["id"], text=g["text"]) for g in said["gaps"]]
    chunks: list[ChunkIn] = list(payload.chunks)
    sufficiency = answer["sufficiency"](SufficiencyInput(query=payload.query, sub_questions=sqs, chunks=chunks)
                                        )["items"] if chunks and sqs else []
    faithfulness = answer["faithfulness"](FaithfulnessInput(query=payload.query, claims=claims, chunks=chunks)
                                          )["items"] if chunks and claims else []
    completeness = answer["completeness"](CompletenessInput(query=payload.query, sub_questions=sqs, claims=claims,
                                                            gaps=gaps)) if sqs and claims else {
        "claims": [], "gaps": [], "sub_questions": []}
    judged = {"sufficiency": sufficiency, "faithfulness": faithfulness} if chunks else {}   # no chunks: no lists
    return {**asked, **said, "remarks": said.get("remarks", []), **judged, "completeness": completeness}


def fast_oracle_client(trace: dict) -> FakeClient:
    """A fake judge that answers the `fast` task (and, for comparison, the five others) from the oracle."""
    full = oracle_client(trace)
    return full.respond("fast", lambda payload: fast_reply(full, payload))
