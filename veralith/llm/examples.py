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

__all__ = ["EXAMPLES", "example_text"]

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
                     "missing_facts": [], "reasoning": "120 grown by 25% is 150.", "sufficient": "yes",
                     "supporting_chunk_ids": ["c0", "c1"]},
                    {"sub_question_id": "q2", "evidence": [], "missing_facts": ["the CEO"],
                     "reasoning": "No chunk names a CEO.", "sufficient": "no", "supporting_chunk_ids": []}]}),
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
                     "relation": "supported", "grounding_chunk_ids": ["c0"], "contradicting_chunk_ids": []},
                    {"claim_id": "k2", "evidence": [{"chunk_id": "c1", "quote": "not approved for children under 12"}],
                     "dates": [], "reasoning": "Chunk c1 negates approval under 12 only, not 12 to 17.",
                     "relation": "unsupported", "grounding_chunk_ids": [], "contradicting_chunk_ids": []},
                    {"claim_id": "k3", "evidence": [{"chunk_id": "c2", "quote": "Zorvex costs $40 a month"}],
                     "dates": [{"chunk_id": "c2", "date": "2021", "quote": "As of 2021"}],
                     "reasoning": "Only c2 states it, and 2021 is before its cutoff.",
                     "relation": "stale", "grounding_chunk_ids": ["c2"], "contradicting_chunk_ids": []}]}),
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
                           "missing_facts": [], "reasoning": "c0 gives the length.", "sufficient": "yes",
                           "supporting_chunk_ids": ["c0"]},
                          {"sub_question_id": "q2", "evidence": [], "missing_facts": ["the X200 maker"],
                           "reasoning": "No chunk names a maker.", "sufficient": "no", "supporting_chunk_ids": []}],
          "claims": [{"id": "k1", "source_sentence_ids": ["S1"], "text": "The X200 has a 36-month warranty.",
                      "note": ""}],
          "gaps": [{"id": "g1", "source_sentence_ids": ["S2"], "text": "who makes the X200"}],
          "remarks": [], "asks_clarification": False,
          "faithfulness": [{"claim_id": "k1", "evidence": [{"chunk_id": "c0", "quote": "a 24-month warranty"}],
                            "reasoning": "c0 says 24 months, not 36.", "relation": "contradicted",
                            "grounding_chunk_ids": [], "contradicting_chunk_ids": ["c0"]}],
          "completeness": {"claims": [{"claim_id": "k1", "role": "answers", "sub_question_ids": ["q1"]}],
                           "gaps": [{"gap_id": "g1", "sub_question_ids": ["q2"]}],
                           "sub_questions": [{"sub_question_id": "q1", "reasoning": "k1.", "status": "answered"},
                                             {"sub_question_id": "q2", "reasoning": "Only g1.",
                                              "status": "unanswered"}]}}),
    ],
}


def example_text(task_name: str, *, timed: bool = True) -> str:
    """The task's worked examples as the system prompt shows them; not `timed`, without what is about time."""
    pairs = EXAMPLES[task_name] if timed else [_untimed(p, o) for p, o in EXAMPLES[task_name]]
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
        c for i in items for c in i["grounding_chunk_ids"] + i["contradicting_chunk_ids"]}
    chunks = [c for c in payload.chunks if c.id in cited]
    return payload.model_copy(update={"claims": claims, "chunks": chunks, "as_of": None}), {"items": items}


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
                + f"{i['reasoning']} → {i['sufficient']}"
                + (f" [{_ids(i['supporting_chunk_ids'])}]" if i["supporting_chunk_ids"] else "") for i in out["items"]]
    if task_name == "faithfulness":
        return [f"{i['claim_id']}: " + (f"{_quotes(i['evidence'])}; " if i["evidence"] else "")
                + (f"dates {_dates(i['dates'])}; " if i.get("dates") else "")
                + f"{i['reasoning']} → {i['relation']}"
                + (f", grounding [{_ids(i['grounding_chunk_ids'])}]" if i["grounding_chunk_ids"] else "")
                + (f", contradicting [{_ids(i['contradicting_chunk_ids'])}]" if i["contradicting_chunk_ids"] else "")
                for i in out["items"]]
    if task_name == "explain":
        return ([f"quote ({q['source']} {q['chunk_id']}) \"{q['quote']}\"".replace(" )", ")") for q in out["quotes"]]
                + ([f"missing_fact: {out['missing_fact']}"] if out["missing_fact"] else [])
                + [f"what_went_wrong: {out['what_went_wrong']}", f"change_to_try: {out['change_to_try']}"])
    return ([f"{c['claim_id']} → {c['role']}" + (f" {_ids(c['sub_question_ids'])}" if c["sub_question_ids"] else "")
             for c in out["claims"]]
            + [f"{g['gap_id']} → declines {_ids(g['sub_question_ids']) or 'nothing asked'}" for g in out["gaps"]]
            + [f"{q['sub_question_id']}: {q['reasoning']} → {q['status']}" for q in out["sub_questions"]])
