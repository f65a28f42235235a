"""The offline sufficiency judge: verdicts a careful reader would give, independent of where in a
chunk the answer sits, with quotes taken verbatim from the chunks and confidences in [0, 1].
Every text here is invented; nothing needs the network or the shared data folder."""

from __future__ import annotations

import importlib
import itertools
import re

import pytest

from veralith.llm.local.evidence import ChunkIndex, sentences_of
from veralith.llm.local.sufficiency import FEATURES, active_model, question_features, sufficiency
from veralith.llm.tasks import SUFFICIENCY, ChunkIn, SubQuestionIn, SufficiencyInput

OBSERVATORY = ("The Lumora Observatory sits on a ridge above the town of Velmar. "
               "Visitors reach it by a cable car that runs every twenty minutes. "
               "The observatory's main telescope was built by the engineer Tamsin Okafor in 1962. "
               "Its dome was repainted white last spring. "
               "A small cafe serves hot soup to visitors after dark.")
CLOCKWORKS = ("The Marlow Clockworks was founded by Edda Vinter, a watchmaker from the hill town of Ostrava Nova. "
              "The workshop still repairs tower clocks for churches across the valley.")
FERRY = ("The Pellworth ferry sails to Dunmore Island from the old harbour. "
         "It carries forty cars and two hundred passengers on each crossing. "
         "Tickets are sold at the kiosk beside the pier.")
MUSEUM = ("The Harrowgate Museum was designed by the architect Ines Vargo. "
          "Its glass roof lets daylight into the sculpture hall.")


def judge(question: str, chunks: list[str]):
    payload = SufficiencyInput(query=question, sub_questions=[SubQuestionIn(id="q1", text=question)],
                               chunks=[ChunkIn(id=f"c{i}", text=t) for i, t in enumerate(chunks)])
    output, confidence = sufficiency(payload)
    assert SUFFICIENCY.check(payload, output) == []
    _assert_contract(payload, output, confidence)
    (item,) = output.items
    return item, confidence["q1"]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _assert_contract(payload, output, confidence) -> None:
    texts = {c.id: c.text for c in payload.chunks}
    assert [i.sub_question_id for i in output.items] == [q.id for q in payload.sub_questions]
    assert set(confidence) == {q.id for q in payload.sub_questions}
    for item in output.items:
        assert 0.0 <= confidence[item.sub_question_id] <= 1.0
        if item.sufficient == "yes":
            assert item.supporting_chunk_ids and not item.missing_facts
        else:
            assert not item.supporting_chunk_ids
        for ev in item.evidence:
            assert _flat(ev.quote) in _flat(texts[ev.chunk_id]), ev.quote
            assert len(ev.quote) <= 300 and not ev.quote.endswith("…")
        # Reasoning reads like a person's, not like a score dump.
        assert not re.search(r"score|threshold|\d\.\d\d", item.reasoning), item.reasoning
        assert item.reasoning.startswith("Sufficient:" if item.sufficient == "yes" else "Insufficient:")


def test_answer_in_the_middle_of_a_chunk_is_found():
    item, confidence = judge("Who built the main telescope of the Lumora Observatory?", [OBSERVATORY])
    assert item.sufficient == "yes"
    assert item.supporting_chunk_ids == ["c0"]
    assert any("Tamsin Okafor" in ev.quote for ev in item.evidence)
    assert confidence > 0.5


@pytest.mark.parametrize("question", [
    "Who built the main telescope of the Lumora Observatory?",
    "When was the main telescope of the Lumora Observatory built?",
    "What does the cafe at the Lumora Observatory serve?",
    "Which engineer designed the cable car to the Lumora Observatory?",
])
def test_shuffling_sentences_changes_neither_features_nor_verdict(question):
    sentences = list(sentences_of(OBSERVATORY))
    base_values = question_features(question, ChunkIndex(["c0"], [OBSERVATORY]))[0]
    base_item, base_conf = judge(question, [OBSERVATORY])
    for order in itertools.islice(itertools.permutations(sentences), 0, None, 7):
        text = " ".join(order)
        assert question_features(question, ChunkIndex(["c0"], [text]))[0] == base_values
        item, conf = judge(question, [text])
        assert item.sufficient == base_item.sufficient
        assert conf == pytest.approx(base_conf)


def test_entity_the_chunks_never_name_is_insufficient():
    item, _ = judge("Who designed the Brightwater Library?", [MUSEUM])
    assert item.sufficient == "no"
    assert "Brightwater" in item.reasoning
    assert item.missing_facts


def test_words_the_chunks_never_mention_count_against_sufficiency():
    # The chunk is about the ferry but says nothing of pets or a fee: the asked-about words are absent,
    # which raises p(insufficient) (the shipped weight is positive by SIGNS in train_local).
    index = ChunkIndex(["c0"], [FERRY])
    values = question_features("Does the Pellworth ferry charge a fee for pets?", index)[0]
    assert values["name_miss"] == 0.0 and values["word_miss"] > 0.5
    assert question_features("How many cars does the Pellworth ferry carry?", index)[0]["word_miss"] == 0.0
    model = active_model()
    assert model.weights[model.features.index("word_miss")] > 0
    assert model.probability(values) > model.probability(dict(values, word_miss=0.0))


def test_when_question_without_any_date_near_its_words_is_insufficient():
    item, _ = judge("When did the Pellworth ferry start sailing to Dunmore Island?", [FERRY])
    assert item.sufficient == "no"
    assert "date" in item.reasoning
    # The same passage with the date stated is enough.
    dated = FERRY + " The Pellworth ferry started sailing to Dunmore Island in May 1931."
    item, _ = judge("When did the Pellworth ferry start sailing to Dunmore Island?", [dated])
    assert item.sufficient == "yes"


def test_a_question_about_a_period_is_answered_by_a_span_of_time():
    question = "What is the return period for the Halden kettle?"
    kettle = "The Halden kettle can be returned within 30 days of delivery, in its original box."
    item, confidence = judge(question, [kettle])
    assert item.sufficient == "yes" and confidence > 0.5
    worded = "The Halden kettle comes with a two-year return window for unused units."
    assert judge(question, [worded])[0].sufficient == "yes"
    # A period with no span of time given is still not enough.
    vague = "The Halden kettle can be returned in its original box; ask the shop about the return period."
    assert judge(question, [vague])[0].sufficient == "no"


@pytest.mark.parametrize("question, chunk", [
    ("How long does express shipping take?", "Express shipping arrives the next day."),
    ("How long does a refund take?", "Refunds are issued immediately once the parcel is scanned."),
    ("How long does the Pellworth ferry take?", "The Pellworth ferry crosses overnight and docks at dawn."),
    ("How often are the Halden servers backed up?", "The Halden servers are backed up daily."),
    ("When does an express order arrive?", "An express order arrives the next day."),
])
def test_a_span_of_time_in_words_is_a_value_of_time(question, chunk):
    # No digit, yet an answer: "no chunk gives a number" would contradict the very sentence a
    # faithful answer quotes.
    item, _ = judge(question, [chunk])
    assert item.sufficient == "yes", item.reasoning
    assert "no chunk gives" not in item.reasoning


def test_a_length_of_time_never_given_is_still_missing():
    harbour = "The Pellworth ferry sails to Dunmore Island from the old harbour. Tickets are sold beside the pier."
    item, _ = judge("How long does the Pellworth ferry take?", [harbour])
    assert item.sufficient == "no"
    assert item.reasoning.startswith("Insufficient: no chunk gives a length or duration anywhere near")


def test_a_value_in_the_sentence_after_the_subject_is_near_it():
    # The heading names the subject and the next sentence gives the time without repeating it: the
    # chunk does give a time, so no reason may say it does not (the verdict may still be "no": the
    # question's other words are never used).
    policy = "Absence policy, Corvane Studios. Staff who are ill must notify their team lead by 9:30."
    item, _ = judge("By what time do I report sickness at Corvane Studios?", [policy])
    assert "no chunk gives" not in item.reasoning, item.reasoning


def test_who_question_answered_by_a_name_is_sufficient():
    item, confidence = judge("Who founded the Marlow Clockworks?", [CLOCKWORKS])
    assert item.sufficient == "yes"
    assert "a name" in item.reasoning
    assert any("Edda Vinter" in ev.quote for ev in item.evidence)
    assert 0.5 < confidence <= 1.0


@pytest.mark.xfail(reason="known limit: a missing name is only a soft signal in the fitted model (a 'who' can be "
                          "answered by 'a group of monks'), so full coverage of the question's words still wins",
                   strict=False)
def test_the_question_s_own_words_are_not_an_answer():
    # The only capitalised words near "founded" are the question's own: no founder is named.
    item, _ = judge("Who founded the Marlow Clockworks?",
                    ["The Marlow Clockworks was founded to repair tower clocks for the churches of the valley."])
    assert item.sufficient == "no"


def test_empty_context_is_insufficient_with_full_confidence():
    for chunks in ([], ["", "  \n "]):
        item, confidence = judge("Who founded the Marlow Clockworks?", chunks)
        assert item.sufficient == "no" and confidence == 1.0
        assert item.evidence == [] and item.supporting_chunk_ids == []


def test_irrelevant_chunk_is_insufficient_and_relevant_chunk_is_cited():
    item, _ = judge("Who founded the Marlow Clockworks?", [FERRY, CLOCKWORKS])
    assert item.sufficient == "yes" and item.supporting_chunk_ids == ["c1"]
    item, _ = judge("Who founded the Marlow Clockworks?", [FERRY])
    assert item.sufficient == "no"


def test_long_sentences_are_quoted_verbatim_and_cut_at_300_characters():
    long_sentence = ("The Marlow Clockworks was founded by Edda Vinter, " + "who travelled widely, " * 20
                     + "and settled in the valley.")
    item, _ = judge("Who founded the Marlow Clockworks?", ["Preface  text.\n\n" + long_sentence])
    for ev in item.evidence:
        assert len(ev.quote) <= 300
        assert _flat(ev.quote) in _flat(long_sentence)


def test_quotes_stay_verbatim_when_sentences_are_glued_together():
    glued = "The Marlow Clockworks repairs tower clocks.It was founded by Edda Vinter in 1911.Its shop is small."
    item, _ = judge("What does the Marlow Clockworks repair?", [glued])   # a "yes": its quotes are its evidence
    assert item.sufficient == "yes" and item.evidence
    assert all(_flat(ev.quote) in _flat(glued) for ev in item.evidence)


def test_several_sub_questions_each_get_an_item_and_a_confidence():
    payload = SufficiencyInput(query="Who founded the Marlow Clockworks, and what does the Lumora cafe serve?",
                               sub_questions=[SubQuestionIn(id="q1", text="Who founded the Marlow Clockworks?"),
                                              SubQuestionIn(id="q2", text="What does the Lumora cafe serve?"),
                                              SubQuestionIn(id="q3", text="Who designed the Brightwater Library?")],
                               chunks=[ChunkIn(id="a", text=CLOCKWORKS), ChunkIn(id="b", text=OBSERVATORY)])
    output, confidence = sufficiency(payload)
    assert SUFFICIENCY.check(payload, output) == []
    _assert_contract(payload, output, confidence)
    verdicts = {i.sub_question_id: i.sufficient for i in output.items}
    assert verdicts["q1"] == "yes" and verdicts["q3"] == "no"


def test_features_follow_the_declared_list_and_the_model_matches_it():
    values, best, window, terms = question_features("Who founded the Marlow Clockworks?",
                                                    ChunkIndex(["c0"], [CLOCKWORKS]))
    assert set(FEATURES) <= set(values) and best == [0] and "Edda Vinter" in window and terms
    assert all(isinstance(values[f], float) for f in FEATURES)
    model = active_model()   # the shipped model must be fitted on exactly these features
    assert model.features == FEATURES and len(model.weights) == len(model.means) == len(FEATURES)


def test_deterministic():
    first = judge("When was the main telescope of the Lumora Observatory built?", [OBSERVATORY])
    second = judge("When was the main telescope of the Lumora Observatory built?", [OBSERVATORY])
    assert first[0].model_dump() == second[0].model_dump() and first[1] == second[1]


def test_a_shipped_model_over_other_features_fails_loudly(monkeypatch):
    from veralith.llm.local.model import Logistic

    # The package re-exports the function `sufficiency` under the module's own name.
    module = importlib.import_module("veralith.llm.local.sufficiency")
    stale = Logistic({"features": ["cov_first"], "weights": [1.0], "bias": 0.0, "threshold": 0.5, "version": "old"})
    monkeypatch.setattr(module, "load", lambda: {"sufficiency": stale})
    with pytest.raises(RuntimeError, match="train_local"):
        active_model()


def test_the_issue_s_trace_is_sufficient_and_healthy():
    import veralith

    result = veralith.evaluate("How long does express shipping take?", ["Express shipping arrives the next day."],
                               "Express shipping arrives the next day.", persist=False)
    (item,) = result.sufficiency
    assert (result.failure_cell.value, item.verdict.value) == ("complete_grounded", "Y"), item.reasoning
    assert result.diagnosis.sufficiency_level.value == "high"
    assert result.suggestion.title == "Healthy answer"   # not "on thin retrieval": no advice to raise retrieval-K


def test_no_sufficiency_reason_denies_what_a_grounded_answer_quotes():
    """Over the golden and example traces: where every claim answering a sub-question is grounded in a
    chunk, the sufficiency judge may still find the context thin (its reading is lexical), but it never
    says that no chunk gives the kind of value asked for: the grounded claim's chunk gives one."""
    import json
    from pathlib import Path

    import veralith
    from veralith.models import Verdict

    repo = Path(__file__).resolve().parents[1]
    files = [repo / "tests" / "golden" / "traces.jsonl", repo / "tests" / "golden" / "holdout.jsonl",
             repo / "examples" / "traces.jsonl", repo / "examples" / "traces_v2.jsonl"]
    denied, checked = [], 0
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            result = veralith.evaluate(row["query"], row["context"], row["response"], persist=False)
            grounded = {j.claim_id for j in result.faithfulness if j.verdict is Verdict.Y}
            for item in result.sufficiency:
                answering = result.completeness.mappings.get(item.sub_question_id, [])
                if answering and set(answering) <= grounded:
                    checked += 1
                    if "no chunk gives" in item.reasoning:
                        denied.append((row.get("id"), item.sub_question_id, item.reasoning))
    assert checked > 50 and denied == []
