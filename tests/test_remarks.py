"""Conversational sentences (advice on how to go about it, encouragement, offers to help) are kept
as remarks: shown by inspect and the web view, stored, never graded, on both backends. And the
English rules of the offline decomposer: product codes are names, number words are figures, split
sub-questions stand alone as grammatical questions."""

from __future__ import annotations

import pytest
from test_openai_client import client_for

import veralith
from veralith.cli import render
from veralith.llm.local.decompose import split_query
from veralith.llm.tasks import CLAIMS, ClaimsInput, Sentence
from veralith.models import Gate
from veralith.store import ops

CONTEXT = ["Water a cactus every two weeks in summer and once a month in winter."]
QUERY = "How often should I water my cactus?"
RESPONSE = ("Water it every two weeks in summer and monthly in winter. Find what works best for you and stick "
            "with it. I hope this helps!")


def test_advice_and_offers_are_remarks_not_graded_claims():
    result = veralith.evaluate(QUERY, CONTEXT, RESPONSE, persist=False)
    assert [c.text for c in result.claims] == ["Water it every two weeks in summer and monthly in winter."]
    assert [r.text for r in result.remarks] == ["Find what works best for you and stick with it.",
                                                "I hope this helps!"]
    assert {j.claim_id for j in result.faithfulness} == {c.id for c in result.claims}
    assert result.status.quality_gate is Gate.pass_, "a remark is neither extra nor ungrounded"
    assert all(r.char_start is not None and r.text.startswith(RESPONSE[r.char_start:r.char_end])
               for r in result.remarks), "each remark is located in the response"


def test_an_instruction_that_answers_the_question_stays_a_claim():
    result = veralith.evaluate("How do I fix a cracked phone screen?",
                               ["A cracked screen can be replaced at an authorised repair shop."],
                               "Take it to an authorised repair shop to replace the screen.", persist=False)
    assert [c.text for c in result.claims] == ["Take it to an authorised repair shop to replace the screen."]
    assert result.remarks == []


def test_remarks_are_stored_and_shown_by_inspect():
    result = veralith.evaluate(QUERY, CONTEXT, RESPONSE)
    from veralith.store import open_store

    stored = open_store().read(ops.load_result, result.trace_id)
    assert stored.remarks == result.remarks and stored == result
    from rich.console import Console

    console = Console(width=120, record=True, color_system=None)
    console.print(render.result_view(stored))
    shown = console.export_text()
    assert "remark (not graded): Find what works best for you and stick with it." in shown


def test_the_openai_backend_returns_remarks_and_the_prompt_asks_for_them(openai_server):
    sentences = [Sentence(id="S1", text="It is 330 metres tall."), Sentence(id="S2", text="Good luck with the trip!")]
    openai_server.enqueue({"claims": [{"id": "k1", "source_sentence_ids": ["S1"], "text": "It is 330 metres tall.",
                                       "note": ""}], "gaps": [],
                           "remarks": [{"id": "r1", "source_sentence_ids": ["S2"], "text": "Good luck with the trip!"}],
                           "asks_clarification": False})
    out = client_for(openai_server).run(CLAIMS, ClaimsInput(query="How tall is it?", response="", sentences=sentences))
    assert [r.text for r in out.output.remarks] == ["Good luck with the trip!"]
    request = openai_server.requests[0]
    assert "remarks" in request["response_format"]["json_schema"]["schema"]["required"]
    assert "Remark (r1, ...)" in request["messages"][0]["content"]


def test_a_reply_without_remarks_still_reads():
    from veralith.llm.tasks import ClaimsOutput

    assert ClaimsOutput.model_validate({"claims": [], "gaps": [], "asks_clarification": False}).remarks == []


@pytest.mark.parametrize("query, expected", [
    ("Who founded Acme, and when?", ["Who founded Acme?", "When was Acme founded?"]),
    ("When and where is the market held?", ["When is the market held?", "Where is the market held?"]),
    ("Who built the bridges and when?", ["Who built the bridges?", "When were the bridges built?"]),
    ("What happened, and where?", ["What happened, and where?"]),     # no grammatical split: kept whole
    ("What is the boiling point of ethanol, and what is its freezing point?",
     ["What is the boiling point of ethanol?", "What is ethanol's freezing point?"]),
    ("Which company makes the X300 and what does it cost?", ["Which company makes the X300?",
                                                             "What does the X300 cost?"]),
    ("Who wrote Hamlet and when did he write it?", ["Who wrote Hamlet?",
                                                    "When did the person who wrote Hamlet write Hamlet?"]),
])
def test_split_sub_questions_stand_alone_as_grammatical_questions(query, expected):
    assert split_query(query) == expected


def test_a_product_code_is_a_name_not_a_figure_or_a_date():
    refusal = veralith.evaluate("What is the price of the X300?",
                                ["The X300 comes with a two-year warranty covering parts and labour."],
                                "The documents don't say.", persist=False)
    assert refusal.status.reason == "correct_refusal", refusal.status
    dated = veralith.evaluate("When did the X200 launch?", ["The X200 is sold in three colours."],
                              "It launched in 2019.", persist=False)
    assert dated.sufficiency[0].verdict.value == "N"   # "X200" is no date


@pytest.mark.parametrize("context, response", [
    ("The office is on the twelfth floor.", "The office is on the 12th floor."),
    ("A box holds a dozen eggs.", "A box holds 12 eggs."),
    ("A box holds 12 eggs.", "A box holds twelve eggs."),
    ("He is 12 years old.", "Twelve."),
])
def test_number_words_are_the_figures_they_name(context, response):
    result = veralith.evaluate("How many?" if "box" in context else "Which floor or age?", [context], response,
                               persist=False)
    assert [j.relation.value for j in result.faithfulness] == ["supported"]


def test_the_web_view_shows_remarks_and_what_the_offline_judge_is(tmp_path, monkeypatch):
    pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'veralith[web]')")
    pytest.importorskip("jinja2", reason="the web extra is not installed (pip install 'veralith[web]')")
    from starlette.testclient import TestClient

    from veralith.config import settings
    from veralith.llm.local.about import about
    from veralith.web import create_app

    result = veralith.evaluate(QUERY, CONTEXT, RESPONSE)
    page = TestClient(create_app(settings.db_path), base_url="http://127.0.0.1:8765").get(
        f"/traces/{result.trace_id}")
    assert page.status_code == 200
    assert "Find what works best for you and stick with it." in page.text
    assert "shown, not graded" in page.text
    assert about().split(":")[0] in page.text


def test_the_cli_help_stats_and_first_run_name_the_offline_judge(caplog):
    from typer.testing import CliRunner

    from veralith.cli.app import app as cli
    from veralith.llm.local.about import ABOUT

    runner = CliRunner()
    assert "offline judge" in " ".join(runner.invoke(cli, ["--help"]).output.split())
    veralith.evaluate(QUERY, CONTEXT, RESPONSE)
    stats = runner.invoke(cli, ["stats"])
    assert stats.exit_code == 0 and "judge: offline judge" in " ".join(stats.output.split())
    import veralith.llm.backends as backends
    from veralith.config import settings

    backends._notice_given = False
    with settings.override(backend="auto"), caplog.at_level("WARNING", logger="veralith"):
        backends.get_client()
    assert ABOUT in caplog.text
