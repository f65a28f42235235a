"""The worked examples of the judge prompts, as (input model, output) pairs, and their compact rendering.

The outputs validate against the task's output model and pass its checks (tests/test_prompts.py), so an
example never shows what a check refuses. They are rendered one line per item, empty fields left out:
what each item says, not how JSON spells it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from veralith.llm.schemas import (
    ChunkIn,
    ClaimIn,
    ClaimsInput,
    CompletenessInput,
    ExplainInput,
    FaithfulnessInput,
    FastInput,
    GapIn,
    JudgedClaimIn,
    JudgedSubQuestionIn,
    QuestionsInput,
    Sentence,
    SubQuestionIn,
    SufficiencyInput,
)

__all__ = ["EXAMPLES", "MORE", "example_text"]

_ACME = CompletenessInput(
    query="Who founded Acme and when, and is it profitable?",
    sub_questions=[SubQuestionIn(id="q1", text="Who founded Acme?"),
                   SubQuestionIn(id="q2", text="When was Acme founded?"),
                   SubQuestionIn(id="q3", text="Is Acme profitable?")],
    claims=[ClaimIn(id="k1", text="Acme was founded by Ruth Calder in 1947."),
            ClaimIn(id="k2", text="Calder was a chemist."),
            ClaimIn(id="k3", text="Acme's profit depends on the year."),
            ClaimIn(id="k4", text="Acme is a well-known brand.")],
    gaps=[GapIn(id="g1", text="where Acme was founded")])

_FAST_EXAMPLE = FastInput(
    query="How long is the X200 warranty, and who makes it?",
    sentences=[Sentence(id="S1", text="The X200 has a 36-month warranty."),
               Sentence(id="S2", text="I couldn't find who makes it.")],
    chunks=[ChunkIn(id="c0", text="Every X200 ships with a 24-month warranty.")])

_COMPLETENESS_OUT = {
    "claims": [{"claim_id": "k1", "role": "answers", "sub_question_ids": ["q1", "q2"]},
               {"claim_id": "k2", "role": "supports", "sub_question_ids": ["q1"]},
               {"claim_id": "k3", "role": "answers", "sub_question_ids": ["q3"]},
               {"claim_id": "k4", "role": "extra", "sub_question_ids": []}],
    "gaps": [{"gap_id": "g1", "sub_question_ids": []}],
    "sub_questions": [{"sub_question_id": "q1", "reasoning": "k1; k2 is background.", "status": "answered"},
                      {"sub_question_id": "q2", "reasoning": "k1.", "status": "answered"},
                      {"sub_question_id": "q3", "reasoning": "k3 only says it depends.", "status": "partial"}]}

EXAMPLES: dict[str, list[tuple[BaseModel, dict[str, Any]]]] = {
    "questions": [
        (QuestionsInput(query=_ACME.query),
         {"sub_questions": [{"id": q.id, "text": q.text} for q in _ACME.sub_questions]}),
    ],
    "claims": [
        (ClaimsInput(query="How long is the X200 warranty and does it cover the battery?",
                     response="",
                     sentences=[Sentence(id="S1", text="Per the manual, the X200 has a 24-month warranty."),
                                Sentence(id="S2", text="The manual doesn't say whether the battery is covered."),
                                Sentence(id="S3", text="There is no extended plan, it says."),
                                Sentence(id="S4", text="Let me know if you need anything else!")]),
         {"claims": [{"id": "k1", "source_sentence_ids": ["S1"], "text": "The X200 has a 24-month warranty.",
                      "note": "attributed to the manual"},
                     {"id": "k2", "source_sentence_ids": ["S3"], "text": "There is no extended X200 warranty plan.",
                      "note": "attributed to the manual"}],
          "gaps": [{"id": "g1", "source_sentence_ids": ["S2"], "text": "whether the X200 warranty covers the battery"}],
          "remarks": [{"id": "r1", "source_sentence_ids": ["S4"], "text": "Let me know if you need anything else!"}],
          "asks_clarification": False}),
    ],
    "sufficiency": [
        (SufficiencyInput(query="How many staff did Lumen have at the end of 2023, and who is its CEO?",
                          sub_questions=[SubQuestionIn(id="q1", text="How many staff did Lumen have at the end of "
                                                       "2023?"),
                                         SubQuestionIn(id="q2", text="Who is Lumen's CEO?")],
                          chunks=[ChunkIn(id="c0", text="Lumen ended 2022 with 120 staff."),
                                  ChunkIn(id="c1", text="In 2023 Lumen grew its headcount by 25%.")]),
         {"items": [{"sub_question_id": "q1",
                     "evidence": [{"chunk_id": "c0", "quote": "120 staff"}, {"chunk_id": "c1", "quote": "by 25%"}],
                     "missing_facts": [], "reasoning": "120 grown by 25% is 150.", "sufficient": "yes"},
                    {"sub_question_id": "q2", "evidence": [], "missing_facts": ["the CEO"],
                     "reasoning": "No chunk names a CEO.", "sufficient": "no"}]}),
    ],
    "faithfulness": [
        (FaithfulnessInput(query="What were 2023 sales, can children take Zorvex, and what does it cost now?",
                           chunks=[ChunkIn(id="c0", text="Sales for fiscal 2023 (to 30 September) were $383.3 "
                                           "billion.", source="annual-report.pdf"),
                                   ChunkIn(id="c1", text="Zorvex is not approved for children under 12."),
                                   ChunkIn(id="c2", text="As of 2021, Zorvex costs $40 a month.")],
                           claims=[ClaimIn(id="k1", text="Fiscal 2023 sales were about $383 billion.",
                                           context_note="attributed to the annual report"),
                                   ClaimIn(id="k2", text="Zorvex is not approved for anyone under 18."),
                                   ClaimIn(id="k3", text="Zorvex currently costs $40 a month.", cutoff="2024-05-01")],
                           as_of="2025-05-01"),
         {"items": [{"claim_id": "k1", "evidence": [{"chunk_id": "c0", "quote": "were $383.3 billion"}], "dates": [],
                     "reasoning": "383.3 is about 383, from the annual report.",
                     "relation": "supported", "contradicting_chunk_ids": []},
                    {"claim_id": "k2", "evidence": [{"chunk_id": "c1", "quote": "not approved for children under 12"}],
                     "dates": [], "reasoning": "Chunk c1 negates approval under 12 only, not 12 to 17.",
                     "relation": "unsupported", "contradicting_chunk_ids": []},
                    {"claim_id": "k3", "evidence": [{"chunk_id": "c2", "quote": "Zorvex costs $40 a month"}],
                     "dates": [{"chunk_id": "c2", "date": "2021", "quote": "As of 2021"}],
                     "reasoning": "Only c2 states it, and 2021 is before its cutoff.",
                     "relation": "stale", "contradicting_chunk_ids": []}]}),
    ],
    "completeness": [(_ACME, _COMPLETENESS_OUT)],
    "explain": [
        (ExplainInput(query="How long is the X200 warranty?", response="The X200 has a 36-month warranty.",
                      chunks=[ChunkIn(id="c0", text="The X200 comes with a 24-month limited warranty.",
                                      source="x200-manual.pdf")],
                      cell="complete_ungrounded", suggestion="Intrinsic hallucination",
                      sub_questions=[JudgedSubQuestionIn(id="q1", text="How long is the X200 warranty?",
                                                         coverage="ungrounded", sufficient="yes")],
                      claims=[JudgedClaimIn(id="k1", text="The X200 has a 36-month warranty.",
                                            relation="contradicted")]),
         {"quotes": [{"source": "chunk", "chunk_id": "c0", "quote": "24-month limited warranty"},
                     {"source": "response", "chunk_id": "", "quote": "36-month warranty"}],
          "missing_fact": "",
          "what_went_wrong": "k1 says 36 months, but chunk c0 (x200-manual.pdf) says 24 months: the generator "
                             "changed the figure it was given.",
          "change_to_try": "Tell the generator to copy durations and figures exactly from the chunk and cite "
                           "c0 for them; check the answer against x200-manual.pdf."}),
    ],
    "fast": [
        (_FAST_EXAMPLE,
         {"sub_questions": [{"id": "q1", "text": "How long is the X200 warranty?"},
                            {"id": "q2", "text": "Who makes the X200?"}],
          "sufficiency": [{"sub_question_id": "q1", "evidence": [{"chunk_id": "c0", "quote": "a 24-month warranty"}],
                           "missing_facts": [], "reasoning": "c0 gives the length.", "sufficient": "yes"},
                          {"sub_question_id": "q2", "evidence": [], "missing_facts": ["the X200 maker"],
                           "reasoning": "No chunk names a maker.", "sufficient": "no"}],
          "claims": [{"id": "k1", "source_sentence_ids": ["S1"], "text": "The X200 has a 36-month warranty.",
                      "note": ""}],
          "gaps": [{"id": "g1", "source_sentence_ids": ["S2"], "text": "who makes the X200"}],
          "remarks": [], "asks_clarification": False,
          "faithfulness": [{"claim_id": "k1", "evidence": [{"chunk_id": "c0", "quote": "a 24-month warranty"}],
                            "reasoning": "c0 says 24 months, not 36.", "relation": "contradicted",
                            "contradicting_chunk_ids": ["c0"]}],
          "completeness": {"claims": [{"claim_id": "k1", "role": "answers", "sub_question_ids": ["q1"]}],
                           "gaps": [{"gap_id": "g1", "sub_question_ids": ["q2"]}],
                           "sub_questions": [{"sub_question_id": "q1", "reasoning": "k1.", "status": "answered"},
                                             {"sub_question_id": "q2", "reasoning": "Only g1.",
                                              "status": "unanswered"}]}}),
    ],
}


# More worked examples, shown only where they make a call's static prefix long enough for the provider's
# prompt cache and that pays at the model's prices (veralith.llm.prefix): the cases the first example does
# not show (conflicting and contradicted, a hedge and a question back, a "no" beside a "yes", a partial).
MORE: dict[str, list[tuple[BaseModel, dict[str, Any]]]] = {
    "claims": [
        (ClaimsInput(query="Can I take ibuprofen with my blood pressure medicine?", response="",
                     sentences=[Sentence(id="S1", text="It depends on which medicine you take."),
                                Sentence(id="S2", text="Ibuprofen may raise blood pressure in some people, "
                                         "the leaflet says."),
                                Sentence(id="S3", text="Which one are you on?")]),
         {"claims": [{"id": "k1", "source_sentence_ids": ["S1"], "note": "",
                      "text": "Whether ibuprofen can be taken with blood pressure medicine depends on the medicine."},
                     {"id": "k2", "source_sentence_ids": ["S2"], "text": "Ibuprofen may raise blood pressure in some "
                      "people.", "note": "attributed to the leaflet"}],
          "gaps": [], "remarks": [], "asks_clarification": True}),
        (ClaimsInput(query="Which regions did Oren Foods enter in 2024?", response="",
                     sentences=[Sentence(id="S1", text="The report says Oren Foods entered no new regions in 2024."),
                                Sentence(id="S2", text="It doesn't mention the plans for 2025.")]),
         {"claims": [{"id": "k1", "source_sentence_ids": ["S1"], "text": "Oren Foods entered no new regions in 2024.",
                      "note": "attributed to the report"}],
          "gaps": [{"id": "g1", "source_sentence_ids": ["S2"], "text": "Oren Foods' plans for 2025"}],
          "remarks": [], "asks_clarification": False}),
    ],
    "sufficiency": [
        (SufficiencyInput(query="Does the Vela 3 support wireless charging, and what does it cost?",
                          sub_questions=[SubQuestionIn(id="q1", text="Does the Vela 3 support wireless charging?"),
                                         SubQuestionIn(id="q2", text="What does the Vela 3 cost?")],
                          chunks=[ChunkIn(id="c0", text="The Vela 3 charges over USB-C at up to 30 W."),
                                  ChunkIn(id="c1", text="Vela 3 prices start at 499 euros; the Pro costs 649 euros.")]),
         {"items": [{"sub_question_id": "q1", "evidence": [], "missing_facts": ["whether it charges wirelessly"],
                     "reasoning": "c0 names USB-C only; no chunk says wireless is absent or present.",
                     "sufficient": "no"},
                    {"sub_question_id": "q2", "evidence": [{"chunk_id": "c1", "quote": "Vela 3 prices start at 499 "
                                                            "euros"}],
                     "missing_facts": [], "reasoning": "c1 gives the base model's price.", "sufficient": "yes"}]}),
        (SufficiencyInput(query="When does the Brill Museum open on Mondays, and is entry free?",
                          sub_questions=[SubQuestionIn(id="q1", text="When does the Brill Museum open on Mondays?"),
                                         SubQuestionIn(id="q2", text="Is entry to the Brill Museum free?")],
                          chunks=[ChunkIn(id="c0", text="Brill Museum hours: Tuesday to Sunday, 10:00-18:00."),
                                  ChunkIn(id="c1", text="Entry is free for under-18s; adults pay 12 euros."),
                                  ChunkIn(id="c2", text="The Brill Museum opens at 09:00 every day.")]),
         {"items": [{"sub_question_id": "q1", "evidence": [], "missing_facts": ["one consistent Monday opening time"],
                     "reasoning": "c0 omits Mondays, c2 says every day at 09:00: they conflict.",
                     "sufficient": "no"},
                    {"sub_question_id": "q2", "evidence": [{"chunk_id": "c1", "quote": "free for under-18s; adults "
                                                            "pay 12 euros"}],
                     "missing_facts": [], "reasoning": "c1 settles it: free only for under-18s.",
                     "sufficient": "yes"}]}),
        (SufficiencyInput(query="Does the Kestrel app have any offline mode?",
                          sub_questions=[SubQuestionIn(id="q1", text="Does the Kestrel app have any offline mode?")],
                          chunks=[ChunkIn(id="c0", text="Kestrel syncs your notes across all your devices.")]),
         {"items": [{"sub_question_id": "q1", "evidence": [], "missing_facts": ["whether any offline mode exists"],
                     "reasoning": "No chunk states an offline mode or its absence.", "sufficient": "no"}]}),
    ],
    "faithfulness": [
        (FaithfulnessInput(query="How heavy is the Orla tablet, how big is its screen and how long does it last?",
                           chunks=[ChunkIn(id="c0", text="The Orla tablet weighs 480 g and has a 10-inch screen.",
                                           source="spec-sheet.pdf"),
                                   ChunkIn(id="c1", text="Orla review: 470 grams, 10-inch display, 9 hours of "
                                           "battery.")],
                           claims=[ClaimIn(id="k1", text="The Orla tablet weighs 480 g."),
                                   ClaimIn(id="k2", text="The Orla tablet has a 12-inch screen."),
                                   ClaimIn(id="k3", text="The Orla battery lasts about 9 hours.")]),
         {"items": [{"claim_id": "k1", "evidence": [{"chunk_id": "c0", "quote": "weighs 480 g"},
                                                    {"chunk_id": "c1", "quote": "470 grams"}], "dates": [],
                     "reasoning": "c0 says 480 g, c1 says 470 g.", "relation": "conflicting",
                     "contradicting_chunk_ids": ["c1"]},
                    {"claim_id": "k2", "evidence": [{"chunk_id": "c0", "quote": "a 10-inch screen"},
                                                    {"chunk_id": "c1", "quote": "10-inch display"}], "dates": [],
                     "reasoning": "Both chunks give 10 inches, not 12.", "relation": "contradicted",
                     "contradicting_chunk_ids": ["c0", "c1"]},
                    {"claim_id": "k3", "evidence": [{"chunk_id": "c1", "quote": "9 hours of battery"}], "dates": [],
                     "reasoning": "c1 gives 9 hours.", "relation": "supported", "contradicting_chunk_ids": []}]}),
    ],
    "completeness": [
        (CompletenessInput(query="How do I reset the Vela 3, and will I lose my photos?",
                           sub_questions=[SubQuestionIn(id="q1", text="How do I reset the Vela 3?"),
                                          SubQuestionIn(id="q2", text="Will resetting the Vela 3 delete my photos?")],
                           claims=[ClaimIn(id="k1", text="Holding power and volume-down for 10 seconds resets the "
                                           "Vela 3."),
                                   ClaimIn(id="k2", text="A reset erases the Vela 3's apps and settings."),
                                   ClaimIn(id="k3", text="Backing up data regularly is wise.")],
                           gaps=[GapIn(id="g1", text="whether photos on the memory card are deleted")]),
         {"claims": [{"claim_id": "k1", "role": "answers", "sub_question_ids": ["q1"]},
                     {"claim_id": "k2", "role": "answers", "sub_question_ids": ["q2"]},
                     {"claim_id": "k3", "role": "supports", "sub_question_ids": ["q2"]}],
          "gaps": [{"gap_id": "g1", "sub_question_ids": ["q2"]}],
          "sub_questions": [{"sub_question_id": "q1", "reasoning": "k1 gives the steps.", "status": "answered"},
                            {"sub_question_id": "q2", "reasoning": "k2 covers apps, g1 leaves photos open.",
                             "status": "partial"}]}),
        (CompletenessInput(query="Is the Kestrel app free?",
                           sub_questions=[SubQuestionIn(id="q1", text="Is the Kestrel app free?")],
                           claims=[ClaimIn(id="k1", text="Kestrel's price depends on the plan."),
                                   ClaimIn(id="k2", text="Kestrel was launched in 2019.")]),
         {"claims": [{"claim_id": "k1", "role": "answers", "sub_question_ids": ["q1"]},
                     {"claim_id": "k2", "role": "extra", "sub_question_ids": []}],
          "gaps": [],
          "sub_questions": [{"sub_question_id": "q1", "reasoning": "k1 says it depends, not whether a plan is free.",
                             "status": "partial"}]}),
        (CompletenessInput(query="What is the Vela 3's screen size?",
                           sub_questions=[SubQuestionIn(id="q1", text="What is the Vela 3's screen size?")],
                           claims=[ClaimIn(id="k1", text="The Vela 3 has a 6.1-inch screen.")],
                           gaps=[GapIn(id="g1", text="the Vela 3 Pro's screen size")]),
         {"claims": [{"claim_id": "k1", "role": "answers", "sub_question_ids": ["q1"]}],
          "gaps": [{"gap_id": "g1", "sub_question_ids": []}],
          "sub_questions": [{"sub_question_id": "q1", "reasoning": "k1 gives it; g1 is about another model.",
                             "status": "answered"}]}),
    ],
}


def example_text(task_name: str, *, timed: bool = True, more: int = 0, gaps: bool = True) -> str:
    """The task's worked examples as the system prompt shows them; not `timed`, without what is about time;
    without `gaps`, without the gaps of a completeness example (and its further examples that hold one);
    followed by the first `more` of the task's further examples (MORE)."""
    pairs = EXAMPLES[task_name] if timed else [_untimed(p, o) for p, o in EXAMPLES[task_name]]
    further = MORE.get(task_name, [])
    if not gaps:
        pairs = [_gapless(p, o) for p, o in pairs]
        further = [(p, o) for p, o in further if not getattr(p, "gaps", None)]
    pairs = pairs + further[:more]
    return "\n".join(f"Example:\n{_input_lines(payload)}\n→\n" + "\n".join(_output_lines(task_name, output))
                     for payload, output in pairs)


def _untimed(payload: BaseModel, output: dict[str, Any]) -> tuple[BaseModel, dict[str, Any]]:
    """A faithfulness example as a call where time cannot matter sees it: no date, no claim with a cutoff,
    and no chunk only such a claim cites (the other tasks' examples hold no time)."""
    if not isinstance(payload, FaithfulnessInput):
        return payload, output
    claims = [c for c in payload.claims if not c.cutoff]
    kept = {c.id for c in claims}
    items = [{k: v for k, v in i.items() if k != "dates"} for i in output["items"] if i["claim_id"] in kept]
    cited = {e["chunk_id"] for i in items for e in i["evidence"]} | {
        c for i in items for c in i["contradicting_chunk_ids"]}
    chunks = [c for c in payload.chunks if c.id in cited]
    return payload.model_copy(update={"claims": claims, "chunks": chunks, "as_of": None}), {"items": items}


def _gapless(payload: BaseModel, output: dict[str, Any]) -> tuple[BaseModel, dict[str, Any]]:
    """A completeness example as a call whose response states no gap sees it (the example's gap declines
    nothing asked, so no other item changes)."""
    if not isinstance(payload, CompletenessInput):
        return payload, output
    return payload.model_copy(update={"gaps": []}), {k: v for k, v in output.items() if k != "gaps"}


def _chunk_line(c: ChunkIn) -> str:
    return f"chunk {c.id}" + (f" ({c.source})" if c.source else "") + (f" dated {c.date}" if c.date else "") + \
        f' "{c.text}"'


def _input_lines(payload: BaseModel) -> str:
    """An example's input as short lines (no block tags: the examples are ours, not data)."""
    lines: list[str] = []
    if isinstance(payload, ExplainInput):
        return "\n".join([*(_chunk_line(c) for c in payload.chunks),
                          f'question: "{payload.query}"', f'response: "{payload.response}"',
                          f"cell: {payload.cell} (suggestion: {payload.suggestion})",
                          *(f'{q.id} "{q.text}" {q.coverage}, chunks sufficient: {q.sufficient}'
                            for q in payload.sub_questions),
                          *(f'claim {c.id} "{c.text}" {c.relation}' for c in payload.claims)])
    if isinstance(payload, FaithfulnessInput) and payload.as_of:
        lines.append(f"today: {payload.as_of}")
    if isinstance(payload, SufficiencyInput | FaithfulnessInput | FastInput):
        lines += [_chunk_line(c) for c in payload.chunks]
    lines.append(f'question: "{getattr(payload, "query", "")}"')
    if isinstance(payload, ClaimsInput | FastInput):
        lines.append(" ".join(f'{s.id} "{s.text}"' for s in payload.sentences))
    if isinstance(payload, SufficiencyInput | CompletenessInput):
        lines.append(" ".join(f'{q.id} "{q.text}"' for q in payload.sub_questions))
    if isinstance(payload, FaithfulnessInput | CompletenessInput):
        lines += [f'claim {c.id} "{c.text}"' + (f" note: {c.context_note}" if c.context_note else "")
                  + (f" cutoff: {c.cutoff}" if c.cutoff else "") for c in payload.claims]
    if isinstance(payload, CompletenessInput):
        lines += [f'gap {g.id} "{g.text}"' for g in payload.gaps]
    return "\n".join(lines)


def _ids(ids: list[str]) -> str:
    return ", ".join(ids)


def _quotes(evidence: list[dict[str, str]]) -> str:
    return ", ".join(f'{e["chunk_id"]} "{e["quote"]}"' for e in evidence)


def _dates(dates: list[dict[str, str]]) -> str:
    return ", ".join(f'{d["chunk_id"]} {d["date"]} "{d["quote"]}"' for d in dates)


def _output_lines(task_name: str, out: dict[str, Any]) -> list[str]:
    """One line per output item, empty fields left out."""
    if task_name == "fast":   # the steps' lines, in reply order
        return (_output_lines("questions", out) + _output_lines("sufficiency", {"items": out["sufficiency"]})
                + _output_lines("claims", out) + _output_lines("faithfulness", {"items": out["faithfulness"]})
                + _output_lines("completeness", out["completeness"]))
    if task_name == "questions":
        return [f"{q['id']} {q['text']}" for q in out["sub_questions"]]
    if task_name == "claims":
        return ([f"{c['id']} [{_ids(c['source_sentence_ids'])}] {c['text']}" + (f" (note: {c['note']})" if c["note"]
                                                                              else "") for c in out["claims"]]
                + [f"{g['id']} [{_ids(g['source_sentence_ids'])}] gap: {g['text']}" for g in out["gaps"]]
                + [f"{r['id']} [{_ids(r['source_sentence_ids'])}] remark: {r['text']}" for r in out["remarks"]])
    if task_name == "sufficiency":
        return [f"{i['sub_question_id']}: " + (f"{_quotes(i['evidence'])}; " if i["evidence"] else "")
                + (f"missing: {'; '.join(i['missing_facts'])}; " if i["missing_facts"] else "")
                + f"{i['reasoning']} → {i['sufficient']}" for i in out["items"]]
    if task_name == "faithfulness":
        return [f"{i['claim_id']}: " + (f"{_quotes(i['evidence'])}; " if i["evidence"] else "")
                + (f"dates {_dates(i['dates'])}; " if i.get("dates") else "")
                + f"{i['reasoning']} → {i['relation']}"
                + (f", contradicting [{_ids(i['contradicting_chunk_ids'])}]" if i["contradicting_chunk_ids"] else "")
                for i in out["items"]]
    if task_name == "explain":
        return ([f"quote ({q['source']} {q['chunk_id']}) \"{q['quote']}\"".replace(" )", ")") for q in out["quotes"]]
                + ([f"missing_fact: {out['missing_fact']}"] if out["missing_fact"] else [])
                + [f"what_went_wrong: {out['what_went_wrong']}", f"change_to_try: {out['change_to_try']}"])
    return ([f"{c['claim_id']} → {c['role']}" + (f" {_ids(c['sub_question_ids'])}" if c["sub_question_ids"] else "")
             for c in out["claims"]]
            + [f"{g['gap_id']} → declines {_ids(g['sub_question_ids']) or 'nothing asked'}"
               for g in out.get("gaps", [])]
            + [f"{q['sub_question_id']}: {q['reasoning']} → {q['status']}" for q in out["sub_questions"]])
