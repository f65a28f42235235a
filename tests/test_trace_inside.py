"""@trace with a bare response: the context comes from an argument (`context_arg`), from
`veralith.context(...)`, or from what inner loggers hand over; every trace records the call's duration."""

from __future__ import annotations

import asyncio
import time

import pytest

import veralith
from veralith.sdk import handoff
from veralith.sdk.log import shutdown
from veralith.sdk.trace import TraceWarning, trace
from veralith.store import open_store, ops

DOCS = [{"text": "Acme was founded in 1947.", "id": "d1", "rank": 1, "score": 0.9},
        {"text": "Acme sells anvils.", "id": "d2", "rank": 2, "score": 0.4}]


@pytest.fixture(autouse=True)
def _fresh_worker():
    shutdown(wait=True)
    yield
    shutdown(wait=True)


def stored() -> list[tuple]:
    """(query, chunk texts, response, app latency) of every stored trace, oldest first."""
    shutdown(wait=True)
    store = open_store()
    out = []
    for row in reversed(open_store().read(ops.list_traces)):
        found = store.read(ops.load_input, row["id"])
        out.append((found.query, [c.text for c in found.context], found.response, found.app_latency_ms))
    return out


def test_context_arg_takes_the_context_from_an_argument():
    @trace(context_arg="docs")
    def generate(question: str, docs: list) -> str:
        time.sleep(0.02)
        return "Acme was founded in 1947."

    assert generate("When was Acme founded?", DOCS) == "Acme was founded in 1947."
    (query, texts, response, latency), = stored()
    assert (query, texts, response) == ("When was Acme founded?", [d["text"] for d in DOCS],
                                        "Acme was founded in 1947.")
    assert set(latency) == {"total"} and latency["total"] >= 20
    stored_chunks = open_store().read(ops.load_input, open_store().read(ops.list_traces)[0]["id"]).context
    assert [(c.id, c.rank, c.score) for c in stored_chunks] == [("d1", 1, 0.9), ("d2", 2, 0.4)]


def test_context_arg_must_name_a_parameter_and_be_passed():
    with pytest.raises(ValueError, match="context_arg 'nope' is not a parameter"):
        trace(context_arg="nope")(lambda question, docs: "a")
    with pytest.raises(TypeError, match="context_arg must be a str"):
        trace(context_arg=3)

    @trace(context_arg="docs")
    def generate(question: str, docs: list | None = None) -> str:
        return "answer"

    with pytest.warns(TraceWarning, match="context argument 'docs' was not passed"):
        assert generate("q?") == "answer"
    assert stored() == []


def test_a_pair_still_wins_over_context_arg():
    @trace(context_arg="docs")
    def generate(question: str, docs: list):
        return "answer", ["the returned chunk"]

    assert generate("q?", DOCS) == "answer"
    assert stored()[0][1] == ["the returned chunk"]


def test_veralith_context_inside_a_traced_call_is_its_context():
    @trace
    def answer(question: str) -> str:
        with veralith.context(DOCS):
            return "Acme was founded in 1947."

    assert answer("When was Acme founded?") == "Acme was founded in 1947."
    assert stored()[0][:3] == ("When was Acme founded?", [d["text"] for d in DOCS], "Acme was founded in 1947.")


def test_veralith_context_checks_its_chunks_before_the_block_runs():
    ran = []
    with pytest.raises(TypeError, match="context must be a list"), veralith.context("one text"):
        ran.append(1)
    with pytest.raises(ValueError, match="query must not be empty"), veralith.context(DOCS, query=" "):
        ran.append(1)
    assert ran == []
    with veralith.context(DOCS, query="When?") as chunks:
        assert [c.id for c in chunks] == ["d1", "d2"] and handoff.marked().query == "When?"
    assert handoff.marked() is None


def test_a_bare_response_with_nothing_retrieved_warns_naming_the_ways_out():
    @trace
    def answer(question: str) -> str:
        return "just text"

    with pytest.warns(TraceWarning, match=r"veralith.context\(...\).*context_arg"):
        assert answer("q?") == "just text"
    assert stored() == []


def test_what_inner_loggers_hand_over_is_used_and_their_timings_summed():
    class Reply:  # a framework's response object: the caller gets it back untouched
        text = "Acme was founded in 1947."

    reply = Reply()

    @trace
    def answer(question: str):
        collector = handoff.current()
        collector.add(handoff.Handed(source="one", context=DOCS[:1], retrieval_ms=5.0, generation_ms=20.0))
        collector.add(handoff.Handed(source="two", context=DOCS, answer=reply.text, retrieval_ms=7.0))
        return reply

    assert answer("When was Acme founded?") is reply
    (query, texts, response, latency), = stored()
    assert texts == [d["text"] for d in DOCS]  # merged, the chunk seen twice kept once
    assert response == reply.text
    assert latency["retrieval"] == 12.0 and latency["generation"] == 20.0 and latency["total"] >= 0


def test_an_inner_traced_call_hands_its_trace_to_the_outer_bare_one():
    @trace
    def retrieve_and_answer(question: str):
        return "inner answer", DOCS

    @trace
    async def answer(question: str) -> str:
        await asyncio.sleep(0)
        return "outer: " + retrieve_and_answer(question)

    assert asyncio.run(answer("When?")) == "outer: inner answer"
    (query, texts, response, _), = stored()  # one call, one trace: the outer one, with the inner's context
    assert (query, texts, response) == ("When?", [d["text"] for d in DOCS], "outer: inner answer")


def test_a_stream_takes_its_context_from_inside_too():
    @trace
    def stream(question: str):
        with veralith.context(DOCS):
            yield from ["Acme was ", "founded in 1947."]

    assert list(stream("When?")) == ["Acme was ", "founded in 1947."]
    (query, texts, response, latency), = stored()
    assert (texts, response) == ([d["text"] for d in DOCS], "Acme was founded in 1947.") and "total" in latency


def test_the_collector_is_private_to_each_concurrent_call():
    @trace
    async def answer(question: str) -> str:
        with veralith.context([f"chunk for {question}"]):
            await asyncio.sleep(0.01)
            return f"answer to {question}"

    async def main():
        await asyncio.gather(*(answer(f"q{i}?") for i in range(5)))

    asyncio.run(main())
    assert sorted((q, texts) for q, texts, _, _ in stored()) == [(f"q{i}?", [f"chunk for q{i}?"]) for i in range(5)]
