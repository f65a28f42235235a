"""Stale claims (docs/concepts.md, "Stale claims"): dates read deterministically, the three rules on the
local backend and through the real SDK against the scripted server, the suggestion, the cell, and the
stale verdict with its dates stored on both stores, copied by `veralith migrate`, shown by inspect,
the web trace page and the JSON."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from fake_openai_server import task_of
from typer.testing import CliRunner
from work_support import save_result

from veralith.cli import app
from veralith.compare.reasons import failure_reason
from veralith.config import settings
from veralith.llm.dates import fresh_from, metadata_date, parse_label, periods, scope, written
from veralith.llm.temporal import asks_now
from veralith.models import FailureCell, FaithfulnessJudgment, Gate, Relation, SufficiencyLevel, Verdict
from veralith.pipeline.evaluate import evaluate
from veralith.pipeline.suggest import SUGGESTIONS, suggest
from veralith.store import open_store, ops, store_url
from veralith.work.migrate import copy as copy_history

TODAY = {"as_of": "2026-03-31"}
HARBOUR_Q = "Who is the current harbour master of Port Velloc?"
HARBOUR = "Updated: 2018-06-01. The harbour master of Port Velloc is Idris Carne."
HARBOUR_R = "The harbour master of Port Velloc is Idris Carne."
FEE_Q = "How much does entry to the Corrow museum cost?"
FEE_OLD, FEE_NEW = "In 2019, entry to the Corrow museum cost 8 pounds.", "In 2025, entry to the Corrow museum cost 11 pounds."


def _local(query, context, response, **kw):
    with settings.override(backend="local"):
        return evaluate(query, context, response, persist=False, metadata=TODAY, **kw)


def _only(result):
    assert len(result.faithfulness) == 1, result.faithfulness
    return result.faithfulness[0]


# ---------------------------------------------------------------- dates, deterministic

def test_periods_read_each_precision_and_skip_numbers_that_are_not_years():
    labels = [p.label for p in periods("On 14 March 2019, in Q3 2020, by June 2021, 2022-05-02, 2015-2018 and 1999.")]
    assert labels == ["2019-03-14", "2020-Q3", "2021-06", "2022-05-02", "2015..2018", "1999"]
    assert periods("It costs $2019, grew 2019% and weighs 3.2019 kg.") == ()
    assert periods("2019-02-30") == ()   # not a real day, and not read as anything else


def test_scope_written_and_metadata_dates():
    assert scope("In 2019, entry cost 8 pounds.")[1] == "In 2019"
    assert scope("The rate was 1.5% in 2021.")[0].label == "2021"
    assert scope("Founded in 1947, it has 500 staff today.") is None     # dates another fact
    assert written("Some text. Last revised 4 May 2021. More.")[0].label == "2021-05-04"
    assert written("No dating line, though 2020 appears.") is None
    assert metadata_date({"updated_at": "2024-02-03T10:00:00Z"}).label == "2024-02-03"
    assert metadata_date({"year": 2021}).label == "2021"
    assert metadata_date({"date": dt.date(2020, 1, 2)}).label == "2020-01-02"
    assert metadata_date({"author": "x", "date": "soon"}) is None
    assert parse_label("2019-Q3").end == dt.date(2019, 9, 30) and parse_label("2019-13") is None
    assert fresh_from("2026-03-31", 365) == "2025-03-31" and fresh_from(None, 365) is None


def test_now_words_name_the_period_they_ask_for():
    assert asks_now("Who is the current mayor?") == {"now"}
    assert asks_now("Is the museum still open?") == {"now"}
    assert asks_now("What did it cost this year?") == {"year"}
    assert asks_now("Who founded the guild?") == set()


# ---------------------------------------------------------------- the rules, local backend

def test_relative_word_with_an_old_chunk_is_stale_with_its_date_as_evidence():
    result = _local(HARBOUR_Q, [HARBOUR], HARBOUR_R)
    judged = _only(result)
    assert judged.relation is Relation.stale and judged.grounding_chunk_ids == ["c0"]
    assert [(d.chunk_id, d.date, d.quote) for d in judged.dates] == [("c0", "2018-06-01", "Updated: 2018-06-01")]
    assert "older than the question allows" in judged.reasoning and judged.confidence is None
    # Stale counts as ungrounded: the cell, the gate and the suggestion follow.
    assert result.failure_cell is FailureCell.incomplete_ungrounded and result.status.quality_gate is Gate.fail
    assert result.suggestion.title == "Stale answer" and "k1" in result.suggestion.summary


def test_the_window_is_the_setting_and_this_year_is_the_calendar_year():
    recent = "Updated: 2025-09-01. The harbour master of Port Velloc is Idris Carne."
    assert _only(_local(HARBOUR_Q, [recent], HARBOUR_R)).relation is Relation.supported
    with settings.override(stale_after_days=90):
        assert _only(_local(HARBOUR_Q, [recent], HARBOUR_R)).relation is Relation.stale
    q = "When does the Lindqvist bakery in Harrowgate open on weekdays this year?"
    ctx = ["In 2025, the Lindqvist bakery in Harrowgate opened at 07:00 on weekdays."]
    judged = _only(_local(q, ctx, "This year the Lindqvist bakery in Harrowgate opens at 07:00 on weekdays."))
    assert judged.relation is Relation.stale and "this year" in judged.reasoning


def test_a_chunks_metadata_date_counts_when_its_text_has_none():
    chunk = {"text": "The harbour master of Port Velloc is Idris Carne.", "metadata": {"last_updated": "2017-01-09"}}
    judged = _only(_local(HARBOUR_Q, [chunk], HARBOUR_R))
    assert judged.relation is Relation.stale
    assert [(d.date, d.quote) for d in judged.dates] == [("2017-01-09", "")]


def test_a_later_chunk_supersedes_an_earlier_one_and_the_latest_is_supported():
    stale = _only(_local(FEE_Q, [FEE_OLD, FEE_NEW], "Entry to the Corrow museum costs 8 pounds."))
    assert stale.relation is Relation.stale
    assert stale.grounding_chunk_ids == ["c0"] and stale.contradicting_chunk_ids == ["c1"]
    assert {d.chunk_id: d.date for d in stale.dates} == {"c0": "2019", "c1": "2025"}
    latest = _only(_local(FEE_Q, [FEE_OLD, FEE_NEW], "Entry to the Corrow museum costs 11 pounds."))
    assert latest.relation is Relation.supported and latest.contradicting_chunk_ids == []


def test_a_claim_about_the_time_its_chunk_speaks_of_is_not_stale():
    judged = _only(_local("What did entry to the Corrow museum cost in 2019?", [FEE_OLD, FEE_NEW],
                          "In 2019 entry to the Corrow museum cost 8 pounds."))
    assert judged.relation is Relation.supported


def test_nothing_dated_nothing_stale():
    undated = "The harbour master of Port Velloc is Idris Carne."
    assert _only(_local(HARBOUR_Q, [undated], HARBOUR_R)).relation is Relation.supported
    plain = "Who is the harbour master of Port Velloc?"        # dated chunk, but nothing asks about now
    judged = _only(_local(plain, [HARBOUR], HARBOUR_R))
    assert judged.relation is Relation.supported and judged.dates == []
    two = ["Entry to the Corrow museum cost 8 pounds.", "Entry to the Corrow museum cost 11 pounds."]
    assert _only(_local(FEE_Q, two, "Entry to the Corrow museum costs 8 pounds.")).relation is not Relation.stale


# ---------------------------------------------------------------- the LLM path, scripted server

def _openai(server):
    return settings.override(backend="openai", base_url=server.base_url, api_key="sk-test-key-never-shown")


def _scripted(faithfulness):
    """A responder for one sub-question and one claim; `faithfulness(body)` gives the faithfulness item."""
    def reply(body):
        task = task_of(body)
        if task == "questions":
            return {"sub_questions": [{"id": "q1", "text": "Who holds the post now?"}]}
        if task == "claims":
            return {"claims": [{"id": "c1", "source_sentence_ids": ["S1"], "note": "", "text": RESPONSE}],
                    "gaps": [], "asks_clarification": False}
        if task == "sufficiency":
            # Asked about now, with only an old chunk: not answerable, as faithfulness will find it stale.
            return {"items": [{"sub_question_id": "q1", "evidence": [], "missing_facts": ["a current source"],
                               "reasoning": "r", "sufficient": "no", "supporting_chunk_ids": []}]}
        if task == "faithfulness":
            return {"items": [faithfulness(body)]}
        return {"claims": [{"claim_id": "k1", "role": "answers", "sub_question_ids": ["q1"]}],
                "gaps": [], "sub_questions": [{"sub_question_id": "q1", "reasoning": "r", "status": "answered"}]}
    return reply


RESPONSE = "The harbour master of Port Velloc is Idris Carne."


def _item(relation, dates=(), grounding=("c0",), contradicting=(), quote="harbour master of Port Velloc is Idris"):
    return {"claim_id": "k1", "evidence": [{"chunk_id": "c0", "quote": quote}], "dates": list(dates),
            "reasoning": "r", "relation": relation, "grounding_chunk_ids": list(grounding),
            "contradicting_chunk_ids": list(contradicting)}


def _faith_bodies(server):
    return [b for b in server.requests if task_of(b) == "faithfulness"]


def test_the_llm_is_told_the_dates_and_its_stale_verdict_is_kept(openai_server):
    dated = {"chunk_id": "c0", "date": "2018-06-01", "quote": "Updated: 2018-06-01"}
    openai_server.responder = _scripted(lambda body: _item("stale", [dated]))
    chunk = {"text": HARBOUR, "metadata": {"date": "2018-06-01"}}
    with _openai(openai_server):
        result = evaluate(HARBOUR_Q, [chunk], RESPONSE, persist=False, metadata=TODAY)
    judged = _only(result)
    assert judged.relation is Relation.stale and [d.date for d in judged.dates] == ["2018-06-01"]
    assert result.failure_cell is FailureCell.incomplete_ungrounded and result.suggestion.title == "Stale answer"
    prompt = json.dumps(_faith_bodies(openai_server)[0]["messages"])
    assert "Today is 2026-03-31." in prompt and 'cutoff=\\"2025-03-31\\"' in prompt   # the claim's, per claim
    assert 'date=\\"2018-06-01\\"' in prompt or "2018-06-01" in prompt


def test_a_date_blind_llm_verdict_is_made_stale_by_the_shared_review(openai_server):
    openai_server.responder = _scripted(lambda body: _item("supported"))
    with _openai(openai_server):
        judged = _only(evaluate(HARBOUR_Q, [HARBOUR], RESPONSE, persist=False, metadata=TODAY))
    assert judged.relation is Relation.stale and judged.dates[0].quote == "Updated: 2018-06-01"
    assert judged.confidence is None


def test_a_claims_own_date_after_its_chunk_was_written_is_stale(openai_server):
    claim = "In 2024 the Eskvale ferry fare was 6 euros."
    chunk = "Published March 2021. The Eskvale ferry fare is 6 euros."

    def reply(body):
        out = _scripted(lambda b: _item("supported", quote="The Eskvale ferry fare is 6 euros"))(body)
        if task_of(body) == "claims":
            out["claims"][0]["text"] = claim
        return out
    openai_server.responder = reply
    with _openai(openai_server):
        judged = _only(evaluate("What was the Eskvale ferry fare in 2024?", [chunk], claim, persist=False,
                                metadata=TODAY))
    assert judged.relation is Relation.stale and "2024" in judged.reasoning
    assert [(d.date, d.quote) for d in judged.dates] == [("2021-03", "Published March 2021")]


def test_an_invented_date_quote_is_re_asked(openai_server):
    replies = iter([_item("stale", [{"chunk_id": "c0", "date": "2016", "quote": "Written in 2016"}]),
                    _item("stale", [{"chunk_id": "c0", "date": "2018-06-01", "quote": "Updated: 2018-06-01"}])])
    openai_server.responder = _scripted(lambda body: next(replies))
    with _openai(openai_server):
        judged = _only(evaluate(HARBOUR_Q, [HARBOUR], RESPONSE, persist=False, metadata=TODAY))
    assert len(_faith_bodies(openai_server)) == 2
    assert "date quote of k1 is not one span of chunk c0" in json.dumps(_faith_bodies(openai_server)[1]["messages"])
    assert judged.relation is Relation.stale and judged.dates[0].date == "2018-06-01"


def test_a_stale_verdict_on_a_fresh_chunk_is_re_asked(openai_server):
    fresh = "Updated: 2026-02-01. The harbour master of Port Velloc is Idris Carne."
    replies = iter([_item("stale", [{"chunk_id": "c0", "date": "2026-02-01", "quote": "Updated: 2026-02-01"}]),
                    _item("supported")])
    openai_server.responder = _scripted(lambda body: next(replies))
    with _openai(openai_server):
        judged = _only(evaluate(HARBOUR_Q, [fresh], RESPONSE, persist=False, metadata={"as_of": "2026-01-15"}))
    assert len(_faith_bodies(openai_server)) == 2 and judged.relation is Relation.supported


# ---------------------------------------------------------------- stored, copied, shown

def _stale_result():
    return _local(FEE_Q, [FEE_OLD, FEE_NEW], "Entry to the Corrow museum costs 8 pounds.")


def test_stale_verdict_and_dates_are_stored_and_copied(store, tmp_path):
    result = _stale_result()
    trace_id = save_result(store, result)
    back = store.read(ops.load_result, trace_id)
    assert back.faithfulness == result.faithfulness and _only(back).relation is Relation.stale
    target = open_store(f"sqlite:///{tmp_path / 'copy.db'}")
    copy_history(store, target)
    assert target.read(ops.load_result, trace_id).faithfulness == result.faithfulness


def test_inspect_web_and_json_show_the_stale_claim_and_its_dates(tmp_path):
    store = open_store()
    trace_id = save_result(store, _stale_result())
    shown = CliRunner(env={"COLUMNS": "160"}).invoke(app, ["inspect", str(trace_id)])
    assert shown.exit_code == 0, shown.output
    assert "stale" in shown.output and "changed later by" in shown.output and "dated" in shown.output
    assert "2019" in shown.output and "2025" in shown.output
    as_json = CliRunner().invoke(app, ["inspect", str(trace_id), "--json"])
    assert as_json.exit_code == 0, as_json.output
    judged = json.loads(as_json.output)["faithfulness"][0]
    assert judged["relation"] == "stale" and {d["date"] for d in judged["dates"]} == {"2019", "2025"}
    pytest.importorskip("starlette", reason="the web extra is not installed")
    from starlette.testclient import TestClient

    from veralith.web import create_app
    page = TestClient(create_app(store_url()), base_url="http://127.0.0.1").get(f"/traces/{trace_id}")
    assert page.status_code == 200
    assert "rel-stale" in page.text and "changed later by" in page.text and "is dated <strong>2019</strong>" in page.text


def test_a_partial_quote_is_dated_by_the_sentence_it_is_in(openai_server):
    def item(body):
        return _item("conflicting", grounding=("c0",), contradicting=("c1",),
                     quote="entry to the Corrow museum cost 8 pounds")
    openai_server.responder = _scripted(item)
    with _openai(openai_server):
        judged = _only(evaluate(FEE_Q, [FEE_OLD, FEE_NEW], "Entry to the Corrow museum costs 8 pounds.",
                                persist=False, metadata=TODAY))
    assert judged.relation is Relation.stale and judged.contradicting_chunk_ids == ["c1"]
    assert {(d.chunk_id, d.quote) for d in judged.dates} == {("c0", "In 2019"), ("c1", "In 2025")}


# ---------------------------------------------------------------- suggestion and reason line

def _judgment(claim_id, relation):
    return FaithfulnessJudgment(claim_id=claim_id, verdict=Verdict.Y if relation is Relation.supported else Verdict.N,
                                relation=relation, reasoning="r")


def test_stale_suggestion_replaces_the_cells_text_only_when_every_ungrounded_claim_is_stale():
    cell, level = FailureCell.complete_ungrounded, SufficiencyLevel.high
    only = suggest(cell, level, refusal=False,
                   faithfulness=[_judgment("k1", Relation.supported), _judgment("k2", Relation.stale)])
    assert only.title == "Stale answer" and "k2" in only.summary
    assert any("Filter retrieval by date" in a for a in only.actions)
    assert any("Re-index the corpus" in a for a in only.actions)
    mixed = suggest(cell, level, refusal=False,
                    faithfulness=[_judgment("k1", Relation.unsupported), _judgment("k2", Relation.stale)])
    assert mixed.title == SUGGESTIONS[(cell, level)].title
    assert any("k2" in a and "re-index the corpus" in a for a in mixed.actions)
    none = suggest(cell, level, refusal=False, faithfulness=[_judgment("k1", Relation.unsupported)])
    assert not any("out-of-date" in a for a in none.actions)


def test_reason_line_names_a_stale_claim():
    detail = {"bad_claims": [{"id": "k2", "text": "Entry costs 8 pounds.", "relation": "stale"}]}
    assert failure_reason(detail) == "k2 'Entry costs 8 pounds.' rests on out-of-date chunks"
