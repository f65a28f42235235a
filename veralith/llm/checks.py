"""The checks of each task's reply beyond its schema: ids echoed, labels consistent with their own fields,
quotes that are quotes, numbers and dates where they come from. Each problem is made by a rule of the
task's contract (veralith.llm.rules, veralith.llm.contract), so what a check holds a reply to is what the
prompt told the model, and a re-ask says what is wrong and what the rule wants instead.

A problem names the item it belongs to, so the OpenAI backend keeps the good items of a judge's reply and
re-asks only the bad ones; the extraction tasks (questions, claims) and explain are checked whole.
"""

from __future__ import annotations

import re

from veralith.llm import rules as r
from veralith.llm.dates import parse_label
from veralith.llm.rules import Problem
from veralith.llm.schemas import (
    ClaimsInput,
    ClaimsOutput,
    CompletenessInput,
    CompletenessOutput,
    Evidence,
    ExplainInput,
    ExplainOutput,
    FaithfulnessInput,
    FaithfulnessOutput,
    FastBareOutput,
    FastInput,
    FastOutput,
    QuestionsInput,
    QuestionsOutput,
    SufficiencyInput,
    SufficiencyOutput,
)
from veralith.llm.stale_check import stale_problems
from veralith.llm.text import QUOTE_MAX_WORDS, quote_in, word_count

__all__ = ["QUOTE_NOT_FOUND", "check_claims", "check_completeness", "check_explain", "check_faithfulness",
           "check_fast", "check_questions", "check_sufficiency"]

QUOTE_NOT_FOUND = "is not in the trace"   # the words every invented-quote problem of explain carries

_ALPHA = re.compile(r"[^\W\d_]", re.UNICODE)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _number(text: str) -> str:
    """A number as written, minus separators and leading zeros ("07:15" and "7:15" are one time)."""
    return re.sub(r"(?<!\d)0+(?=\d)", "", text.replace(",", ""))


def _numbers(text: str) -> set[str]:
    return {_number(n) for n in _NUMBER.findall(text)}


def _ids(label: str, expected: list[str], got: list[str]) -> list[Problem]:
    problems = [r.ITEM_TWICE(i, label=label) for i in sorted({i for i in got if got.count(i) > 1})]
    problems += [r.ITEM_MISSING(i, label=label) for i in expected if i not in got]
    extra = sorted(set(got) - set(expected))
    return problems + ([r.ID_UNKNOWN(None, label=label, ids=extra)] if extra else [])


def _known(owner: str, what: str, got: list[str], allowed: set[str] | dict[str, str],
           rule: r.Rule = r.KNOWN_IDS) -> list[Problem]:
    unknown = sorted(set(got) - set(allowed))
    return [rule(owner, what=what, ids=unknown)] if unknown else []


def _quote(owner: str | None, what: str, quote: str, source: str, source_name: str) -> list[Problem]:
    n = word_count(quote)
    if n > QUOTE_MAX_WORDS:
        return [r.QUOTE_LONG(owner, what=what, n=n)]
    return [] if quote_in(quote, source) else [r.QUOTE_SPAN(owner, what=what, source=source_name)]


def _evidence(owner: str, evidence: list[Evidence], chunks: dict[str, str]) -> list[Problem]:
    problems = _known(owner, "evidence", [e.chunk_id for e in evidence], chunks)
    for e in evidence:
        if e.chunk_id in chunks:
            problems += _quote(owner, f"the evidence quote of {owner}", e.quote, chunks[e.chunk_id],
                               f"chunk {e.chunk_id}")
    return problems


def check_questions(inp: QuestionsInput, out: QuestionsOutput) -> list[Problem]:
    ids = [q.id for q in out.sub_questions]
    problems = [r.QUESTION_IDS(i, label="sub-question") for i in sorted({i for i in ids if ids.count(i) > 1})]
    if inp.query.strip() and not out.sub_questions:
        problems.append(r.AT_LEAST_ONE(None))
    return problems + [r.QUESTION_WORDS(q.id, what=f"sub-question {q.id}") for q in out.sub_questions
                       if not _ALPHA.search(q.text)]


def check_claims(inp: ClaimsInput, out: ClaimsOutput) -> list[Problem]:
    problems: list[Problem] = []
    sentences = {s.id: s.text for s in inp.sentences}
    for label, items in (("claim", out.claims), ("gap", out.gaps), ("remark", out.remarks)):
        ids = [i.id for i in items]
        problems += [r.UNIQUE_IDS(i, label=label) for i in sorted({i for i in ids if ids.count(i) > 1})]
        for item in items:
            problems += _known(item.id, "source_sentence_ids", item.source_sentence_ids, sentences, r.SENTENCE_IDS)
            if sentences and not item.source_sentence_ids:
                problems.append(r.CITES(item.id, label=label))
            if not _ALPHA.search(item.text):
                problems.append(r.ITEM_WORDS(item.id, what=f"{label} {item.id}"))
    for claim in out.claims:
        if claim.source_sentence_ids:
            problems += _claim_numbers(inp, sentences, claim.id, claim.text, claim.source_sentence_ids)
    if not inp.sentences and (out.claims or out.gaps or out.remarks):
        problems.append(r.EMPTY_RESPONSE(None))
    return problems


def _claim_numbers(inp: ClaimsInput, sentences: dict[str, str], owner: str, text: str,
                   cited: list[str]) -> list[Problem]:
    """Extraction must not invent details (FActScore's guard): a number in a claim comes from the
    sentences it cites, or from the question that resolves its references."""
    have = _numbers(" ".join(sentences.get(i, "") for i in cited) + " " + inp.query)
    missing = [n for n in dict.fromkeys(_NUMBER.findall(text)) if _number(n) not in have]
    where = {n: [i for i, s in sentences.items() if i not in cited and _number(n) in _numbers(s)] for n in missing}
    uncited = [n for n in missing if where[n]]
    invented = [n for n in missing if not where[n]]
    problems = []
    if uncited:
        problems.append(r.NUMBER_UNCITED(owner, numbers=uncited,
                                         sentences=sorted({i for n in uncited for i in where[n]}, key=_order)))
    if invented:
        problems.append(r.NUMBER_INVENTED(owner, numbers=invented))
    return problems


def _order(sentence_id: str) -> tuple[int, str]:
    digits = re.sub(r"\D", "", sentence_id)
    return (int(digits) if digits else 0, sentence_id)


def check_sufficiency(inp: SufficiencyInput, out: SufficiencyOutput) -> list[Problem]:
    chunks = {c.id: c.text for c in inp.chunks}
    problems = _ids("sub-question", [q.id for q in inp.sub_questions], [i.sub_question_id for i in out.items])
    cutoffs = {q.id: q.cutoff for q in inp.sub_questions}
    dates = {c.id: c.date for c in inp.chunks}
    for item in out.items:
        sq = item.sub_question_id
        # The chunks a verdict rests on are the ones its evidence quotes (schemas.SufficiencyItem), so
        # checking the quotes checks them: each a known chunk, each quote one span of it.
        problems += _evidence(sq, item.evidence, chunks)
        problems += [rule(sq) for rule, bad in (
            ((r.EVIDENCE_FOR_YES, not item.evidence), (r.MISSING_FOR_YES, item.missing_facts))
            if item.sufficient == "yes" else
            ((r.EVIDENCE_FOR_NO, item.evidence), (r.MISSING_FOR_NO, not item.missing_facts))) if bad]
        if item.sufficient == "yes" and cutoffs.get(sq):
            problems += _current(sq, str(cutoffs[sq]), item.supporting_chunk_ids, dates)
    return problems


def _current(sq: str, cutoff: str, supporting: list[str], dates: dict[str, str | None]) -> list[Problem]:
    """A "yes" for a sub-question about now: some supporting chunk is undated or dated on or after its cutoff."""
    cut = parse_label(cutoff)
    periods = {c: parse_label(dates[c] or "") for c in supporting if c in dates}
    if cut is None or not periods or any(p is None or p.end >= cut.start for p in periods.values()):
        return []
    dated = ", ".join(f"{c} {p.label}" for c, p in periods.items() if p is not None)
    return [r.CURRENT_SUPPORT(sq, cutoff=cut.label, dated=dated)]


def check_faithfulness(inp: FaithfulnessInput, out: FaithfulnessOutput) -> list[Problem]:
    chunks = {c.id: c.text for c in inp.chunks}
    claims = {c.id: c for c in inp.claims}
    problems = _ids("claim", list(claims), [i.claim_id for i in out.items])
    for item in out.items:
        cid, rel = item.claim_id, item.relation
        # Its grounding chunks are the ones its evidence quotes (schemas.FaithfulnessItem): checked with the quotes.
        problems += _known(cid, "contradicting_chunk_ids", item.contradicting_chunk_ids, chunks)
        problems += _evidence(cid, item.evidence, chunks)
        problems += stale_problems(cid, item, claims.get(cid), inp)
        grounding, against = bool(item.grounding_chunk_ids), bool(item.contradicting_chunk_ids)
        for rule, bad in ((r.GROUNDING_FOR_LABEL, rel in ("supported", "conflicting", "stale") and not grounding),
                          (r.CONTRADICTING_FOR_LABEL, rel in ("contradicted", "conflicting") and not against),
                          (r.NO_CONTRADICTING, rel in ("unsupported", "supported") and against)):
            if bad:
                problems.append(rule(cid, relation=rel))
    return problems


def check_completeness(inp: CompletenessInput, out: CompletenessOutput) -> list[Problem]:
    sq_ids = [q.id for q in inp.sub_questions]
    problems = _ids("claim", [c.id for c in inp.claims], [i.claim_id for i in out.claims])
    problems += _ids("gap", [g.id for g in inp.gaps], [g.gap_id for g in out.gaps])
    problems += _ids("sub-question", sq_ids, [s.sub_question_id for s in out.sub_questions])
    answered_by: dict[str, list[str]] = {q: [] for q in sq_ids}
    named_by: dict[str, list[str]] = {q: [] for q in sq_ids}   # claims that name it in another role
    for item in out.claims:
        cid = item.claim_id
        problems += _known(cid, "sub_question_ids", item.sub_question_ids, set(sq_ids))
        if item.role == "extra" and item.sub_question_ids:
            problems.append(r.EXTRA_NAMES_NONE(cid))
        if item.role != "extra" and not item.sub_question_ids:
            problems.append(r.ROLE_NAMES_SOME(cid, role=item.role))
        for q in item.sub_question_ids:
            (answered_by if item.role == "answers" else named_by).setdefault(q, []).append(cid)
    for gap in out.gaps:
        problems += _known(gap.gap_id, "sub_question_ids", gap.sub_question_ids, set(sq_ids))
    for status in out.sub_questions:
        sq = status.sub_question_id
        # A status and the roles of the claims it rests on disagree: either side may be the wrong one,
        # so the problem belongs to both.
        if status.status in ("answered", "partial") and not answered_by.get(sq):
            problem = r.STATUS_NEEDS_ANSWER(sq, status=status.status)
            problems += [Problem(owner, problem.rule, problem.text) for owner in (sq, *named_by.get(sq, []))]
        if status.status == "unanswered" and answered_by.get(sq):
            problem = r.UNANSWERED_HAS_NONE(sq, claims=answered_by[sq])
            problems += [Problem(owner, problem.rule, problem.text) for owner in (sq, *answered_by[sq])]
    return problems


def check_explain(inp: ExplainInput, out: ExplainOutput) -> list[Problem]:
    chunks = {c.id: c.text for c in inp.chunks}
    problems: list[Problem] = []
    for n, q in enumerate(out.quotes, 1):
        if not _ALPHA.search(q.quote) and not _NUMBER.search(q.quote):
            problems.append(r.HAS_WORDS(None, what=f"quote {n}"))
        elif word_count(q.quote) > QUOTE_MAX_WORDS:
            problems.append(r.QUOTE_LONG(None, what=f"quote {n}", n=word_count(q.quote)))
        elif q.source == "response" and not quote_in(q.quote, inp.response):
            problems.append(r.QUOTE_NOT_IN_RESPONSE(None, n=n))
        elif q.source == "chunk" and q.chunk_id not in chunks:
            problems.append(r.QUOTE_CHUNK_UNKNOWN(None, n=n, chunk=repr(q.chunk_id[:40])))
        elif q.source == "chunk" and not quote_in(q.quote, chunks[q.chunk_id]):
            problems.append(r.QUOTE_NOT_IN_CHUNK(None, n=n, chunk=q.chunk_id))
    if not out.quotes and not out.missing_fact.strip():
        problems.append(r.EXPLAIN_EVIDENCE(None))
    return problems + [r.HAS_WORDS(None, what=name) for name in ("what_went_wrong", "change_to_try")
                       if not _ALPHA.search(getattr(out, name))]


def check_fast(inp: FastInput, out: FastOutput | FastBareOutput) -> list[Problem]:
    """The extraction half only, checked whole as the two decomposition tasks check theirs. The judged
    half is read item by item afterwards (veralith.pipeline.fast) with each judge task's own checks, so
    one inconsistent verdict costs that verdict (after one re-ask), not the call."""
    response = " ".join(s.text for s in inp.sentences)
    problems = check_questions(QuestionsInput(query=inp.query), QuestionsOutput(sub_questions=out.sub_questions))
    return problems + check_claims(ClaimsInput(query=inp.query, response=response, sentences=inp.sentences),
                                   ClaimsOutput(claims=out.claims, gaps=out.gaps, remarks=out.remarks,
                                                asks_clarification=out.asks_clarification))
