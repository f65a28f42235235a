"""An in-process fake judge client for pipeline tests: script replies per task, read the history."""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from veralith.errors import JudgeCallError
from veralith.llm.base import CallResult, CallUsage
from veralith.llm.tasks import Task
from veralith.llm.text import clip_quote

# A scripted evidence quote that stands for the first words of the chunk it names (FakeClient fills it in),
# for replies written before the chunks are known.
CHUNK_START = "<the first words of the chunk>"


class FakeClient:
    backend = "fake"
    model = "fake-model"

    def __init__(self, concurrent: bool = True) -> None:
        self.concurrent = concurrent
        self._queues: dict[str, deque] = defaultdict(deque)
        self._responders: dict[str, Callable[[Any], Any]] = {}
        self.history: list[tuple[str, BaseModel]] = []
        self._lock = threading.Lock()

    def prompt_version(self, task: str) -> str:
        return f"fake-{task}-1"

    def enqueue(self, task: str, reply: Any, confidence: dict[str, float] | None = None) -> FakeClient:
        """reply: an output model instance, a dict for it, or an exception to raise; `confidence`
        is what a backend that knows its certainty would report (item id -> probability)."""
        self._queues[task].append((reply, confidence or {}))
        return self

    def respond(self, task: str, fn: Callable[[Any], Any]) -> FakeClient:
        """Compute replies from the payload when nothing is queued."""
        self._responders[task] = fn
        return self

    def calls(self, task: str) -> list[BaseModel]:
        return [p for t, p in self.history if t == task]

    def run(self, task: Task, payload: BaseModel) -> CallResult:
        with self._lock:
            self.history.append((task.name, payload))
            reply, confidence = self._queues[task.name].popleft() if self._queues[task.name] else (None, {})
        if reply is None:
            if task.name not in self._responders:
                raise AssertionError(f"no scripted reply for {task.name}")
            reply = self._responders[task.name](payload)
        if isinstance(reply, BaseException):
            raise reply
        reply = _quoted(reply, payload)
        output = reply if isinstance(reply, BaseModel) else task.output_for(payload).model_validate(reply)
        problems = task.check(payload, output)
        if problems:
            raise JudgeCallError("malformed_reply", "; ".join(problems))
        return CallResult(output, CallUsage(model=self.model, calls=1, input_tokens=100, output_tokens=10, usd=0.001),
                          dict(confidence))


def _quoted(reply: Any, payload: BaseModel) -> Any:
    """`reply` with each CHUNK_START quote replaced by the first words of the chunk it names."""
    chunks = {c.id: c.text for c in getattr(payload, "chunks", None) or []}
    if not chunks or not isinstance(reply, dict | list):
        return reply
    text = json.dumps(reply)
    if CHUNK_START not in text:
        return reply

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if node.get("quote") == CHUNK_START and node.get("chunk_id") in chunks:
                return {**node, "quote": clip_quote(chunks[node["chunk_id"]])}
            return {k: walk(v) for k, v in node.items()}
        return [walk(v) for v in node] if isinstance(node, list) else node

    return walk(reply)


def supported(claim_id: str, chunk: str = "c0") -> dict:
    return {"claim_id": claim_id, "evidence": [], "reasoning": "stated", "relation": "supported",
            "grounding_chunk_ids": [chunk], "contradicting_chunk_ids": []}


def unsupported(claim_id: str) -> dict:
    return {"claim_id": claim_id, "evidence": [], "reasoning": "not stated", "relation": "unsupported",
            "grounding_chunk_ids": [], "contradicting_chunk_ids": []}


def suff(sq_id: str, yes: bool, chunk: str = "c0") -> dict:
    return {"sub_question_id": sq_id, "evidence": [{"chunk_id": chunk, "quote": CHUNK_START}] if yes else [],
            "missing_facts": [] if yes else ["f"], "reasoning": "r", "sufficient": "yes" if yes else "no",
            "supporting_chunk_ids": [chunk] if yes else []}


def decomposition(client: FakeClient, sub_questions: list[str], claims: list[tuple[str, list[str]]],
                  gaps: list[tuple[str, list[str]]] = (), asks: bool = False) -> FakeClient:
    """Script both decomposition calls: sub-questions q1.., claims c1.. and gaps g1.. with their sentences."""
    client.enqueue("questions", {"sub_questions": [{"id": f"q{i + 1}", "text": t} for i, t in enumerate(sub_questions)]})
    client.enqueue("claims", {
        "claims": [{"id": f"c{i + 1}", "source_sentence_ids": s, "text": t, "note": ""} for i, (t, s) in enumerate(claims)],
        "gaps": [{"id": f"g{i + 1}", "source_sentence_ids": s, "text": t} for i, (t, s) in enumerate(gaps)],
        "asks_clarification": asks})
    return client


def mapping(pairs: dict[str, list[str]], sqs: list[str] | None = None, roles: dict[str, str] | None = None,
            statuses: dict[str, str] | None = None, gaps: dict[str, list[str]] | None = None) -> dict:
    """A completeness reply: claim -> sub-questions it answers (role `answers`, or `roles[claim]`;
    none: extra); statuses default to answered when an answering claim exists, else unanswered."""
    roles = roles or {}
    sqs = sqs if sqs is not None else sorted({q for qs in pairs.values() for q in qs})
    role_of = {c: roles.get(c, "answers" if q else "extra") for c, q in pairs.items()}
    answered = {q for c, qs in pairs.items() if role_of[c] == "answers" for q in qs}
    statuses = {q: (statuses or {}).get(q, "answered" if q in answered else "unanswered") for q in sqs}
    return {"claims": [{"claim_id": c, "role": role_of[c], "sub_question_ids": q} for c, q in pairs.items()],
            "gaps": [{"gap_id": g, "sub_question_ids": q} for g, q in (gaps or {}).items()],
            "sub_questions": [{"sub_question_id": q, "reasoning": "r", "status": st} for q, st in statuses.items()]}


class DictCache(dict):
    """A reply cache in a dict, shaped like veralith.llm.cache (values come back as JSON copies)."""

    def get(self, key):
        value = super().get(key)
        return None if value is None else json.loads(json.dumps(value))

    def put(self, key, value, **meta):
        self[key] = value
