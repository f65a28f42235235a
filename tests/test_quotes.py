"""A quote is a quote (issue 35, fault 14): one contiguous span of its source after whitespace is normalised,
never pieces joined with "...", and a date is read only from a date written inside such a span. One function
says whether a text is a quote of a source (veralith.llm.text.quote_span); every check of a quote uses it."""

from __future__ import annotations

from fake_openai_server import task_of

from veralith.config import settings
from veralith.models import Relation
from veralith.pipeline.evaluate import evaluate

REFUNDS = "Refunds are accepted within 30 days. Exchanges are accepted within 90 days."


def _openai(server):
    return settings.override(backend="openai", base_url=server.base_url, api_key="sk-test", judge_model="gpt-4o",
                             cache=False, max_retries=0)


def _bodies(server, task: str) -> list[dict]:
    return [b for b in server.requests if task_of(b) == task]


def test_a_spliced_explanation_quote_is_refused(openai_server):
    spliced = {"quotes": [{"source": "chunk", "chunk_id": "c0", "quote": "Refunds are accepted within ... 90 days."}],
               "missing_fact": "", "what_went_wrong": "k1 says 90 days.", "change_to_try": "Copy the figure."}
    contradicted = {"items": [{"claim_id": "k1", "evidence": [], "dates": [], "reasoning": "c0 says 30.",
                               "relation": "contradicted", "grounding_chunk_ids": [], "contradicting_chunk_ids": ["c0"]}]}
    openai_server.responder = lambda body: {"explain": spliced, "faithfulness": contradicted}.get(task_of(body))
    with _openai(openai_server), settings.override(explain=True):
        result = evaluate("How long do I have to ask for a refund?", [REFUNDS], "Refunds are accepted within 90 days.",
                          persist=False)
    assert len(_bodies(openai_server, "explain")) == 2      # refused, asked again, refused again
    assert result.explanation.quotes == [] and result.explanation.dropped.startswith("explanation dropped")


def test_letters_picked_across_a_chunk_are_no_quote(openai_server):
    chunk = "Price list for the Velloc ferry: 6 euros a crossing."
    items = iter([[{"chunk_id": "c0", "quote": "P...r...i...c...e"}], [{"chunk_id": "c0", "quote": "6 euros"}]])
    openai_server.responder = lambda body: {"items": [
        {"claim_id": "k1", "evidence": next(items), "dates": [], "reasoning": "r", "relation": "supported",
         "grounding_chunk_ids": ["c0"], "contradicting_chunk_ids": []}]} if task_of(body) == "faithfulness" else None
    with _openai(openai_server):
        result = evaluate("What does the Velloc ferry cost?", [chunk], "The Velloc ferry costs 6 euros a crossing.",
                          persist=False)
    asked = _bodies(openai_server, "faithfulness")
    assert len(asked) == 2 and "is not one span of chunk c0" in asked[1]["messages"][-1]["content"]
    assert [e.quote for e in result.faithfulness[0].evidence] == ["6 euros"]


def test_a_stale_date_is_read_only_from_a_date_inside_one_span_of_the_chunk(openai_server):
    chunk = "Price list: the Velloc ferry costs 6 euros. Call 555-2031 to book."
    for quote in ("Price list ... 2031", "2031"):    # spliced; a year read out of a phone number
        before = len(_bodies(openai_server, "faithfulness"))
        replies = iter([[{"chunk_id": "c0", "date": "2031", "quote": quote}], []])

        def reply(body: dict, replies=replies) -> dict | None:
            if task_of(body) != "faithfulness":
                return None
            dates = next(replies)
            return {"items": [{"claim_id": "k1", "evidence": [{"chunk_id": "c0", "quote": "costs 6 euros"}],
                               "dates": dates, "reasoning": "r", "relation": "stale" if dates else "supported",
                               "grounding_chunk_ids": ["c0"], "contradicting_chunk_ids": []}]}

        openai_server.responder = reply
        with _openai(openai_server):
            result = evaluate("What does the Velloc ferry cost now?", [chunk], "The Velloc ferry costs 6 euros.",
                              persist=False, metadata={"as_of": "2036-01-01"})
        asked = _bodies(openai_server, "faithfulness")[before:]
        assert len(asked) == 2, quote                    # refused, and asked again
        assert result.faithfulness[0].relation is Relation.supported


def test_one_function_says_what_is_a_quote():
    from veralith.llm.dates import quoted_periods
    from veralith.llm.text import quote_span

    text = "Refunds are  accepted\nwithin 30 days. Call 555-2031. In 2019, prices rose."
    assert quote_span("accepted within 30", text) == (13, 31)            # whitespace aside, offsets of the source
    assert quote_span("“accepted within 30”", "“accepted within 30”") == (0, 20)
    assert quote_span("Refunds are accepted within ... 30 days.", text) is None
    assert quote_span("", text) is None
    assert quoted_periods("555-2031", text) == () and quoted_periods("2031", text) == ()
    assert [p.label for p in quoted_periods("In 2019, prices rose.", text) or ()] == ["2019"]
    assert quoted_periods("In 2019 ... rose.", text) is None
