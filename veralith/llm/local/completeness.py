"""Local completeness: which claims answer which sub-question, which only support an answer, which
sub-questions a gap statement declines, and how fully each sub-question is answered.

A claim *answers* a sub-question when it carries the sub-question's specific content and, for a
typed question (who, when, where, how many...), a value of that type the question itself does not
hold. Terms every sub-question shares (the subject a split query repeats) count for little, so a
claim lands on the sub-questions whose distinctive terms it uses; one claim may answer several. A
claim that shares the *new* content of an answering claim (words neither in the question nor
generic) *supports* that answer; anything else is extra, even when it mentions the question's
topic ("the filter should be replaced every six months" does not answer "how do I reset the
filter light?"). An instruction-like request ("summarise the passage", "tell me about X") is
answered by every on-topic claim. The completeness judge never sees the context.
"""

from __future__ import annotations

import re

from veralith.llm.local.decompose import gap_topic
from veralith.llm.local.evidence import Term, terms_of
from veralith.llm.local.lexicon import MONTHS, tokens
from veralith.llm.tasks import ClaimRole, CompletenessInput, CompletenessOutput, GapLink, SubQuestionStatus

__all__ = ["completeness"]

_TYPED = [
    ("number", re.compile(r"\bhow (?:many|much|long|old|far|big|large|tall|often|high|heavy)\b|"
                          r"\bwhat (?:percentage|number|amount|price|size|age|dose|dosage)\b|\bcost\b", re.I)),
    ("date", re.compile(r"\bwhen\b|\bwhat (?:date|day|month|year|time)\b|\bin which year\b|\bwhat year\b", re.I)),
    ("name", re.compile(r"\bwho(?:m|se)?\b", re.I)),
    ("place", re.compile(r"\bwhere\b|\bwhich (?:city|country|state|place|town|region)\b", re.I)),
]
_OPEN = re.compile(r"^\s*(?:summari[sz]e|describe|explain|tell me|give (?:me )?an? (?:overview|summary)|list|"
                   r"outline|what (?:do you know|can you tell me)|overview)\b", re.I)
_DEPENDS = re.compile(r"\b(?:it depends|depends on|depending on|varies|may vary|can vary)\b", re.I)
_ANSWERS = 0.5      # share of a sub-question's weighted distinctive terms an untyped answer must carry
_TYPED_ANSWERS = 0.34   # a typed answer also carries the value asked for, so it may say less of the question


def _kind(question: str) -> str | None:
    for name, pattern in _TYPED:
        if pattern.search(question):
            return name
    return None


def _has_value(kind: str, text: str, question_norms: set[str]) -> bool:
    for tok in tokens(text):
        if tok.norm in question_norms:
            continue
        if kind == "number" and tok.is_number:
            return True
        if kind == "date" and ((tok.is_number and len(tok.norm) == 4) or tok.norm in MONTHS):
            return True
        if kind in ("name", "place") and tok.is_capital:
            return True
    return False


_WHAT = re.compile(r"^\W*(?:what|which)\s+(.*)$", re.I)
_HOW_TO = re.compile(r"^\W*how\s+(?:do|does|can|could|should|would|to)\s+(?:(?:i|you|we|one|they|people)\s+)?(.*)$",
                     re.I)


def _focus(question: str) -> set[str]:
    """The word a question turns on: the thing asked for ("what *warranty*..."), the action asked
    about ("how do I *reset*..."), else its first plain content word ("when was the tower *completed*")."""
    for pattern in (_WHAT, _HOW_TO):
        match = pattern.match(question)
        if match:
            terms = [t for t in terms_of(match.group(1)) if not t.is_number]
            return {terms[0].norm} if terms else set()
    plain = [t for t in terms_of(question) if not (t.is_capital or t.is_number)]
    return {plain[0].norm} if plain else set()


def _share(claim: list[Term], terms: list[Term], distinct: dict[str, float]) -> float:
    total = sum(t.weight * distinct.get(t.norm, 1.0) for t in terms)
    if not total:
        return 0.0
    norms = {t.norm for t in claim}
    return sum(t.weight * distinct.get(t.norm, 1.0) for t in terms if t.norm in norms) / total


def completeness(payload: CompletenessInput) -> CompletenessOutput:
    sqs = {sq.id: sq.text for sq in payload.sub_questions}
    sq_terms = {q: terms_of(text) for q, text in sqs.items()}
    counts: dict[str, int] = {}
    for terms in sq_terms.values():
        for norm in {t.norm for t in terms}:
            counts[norm] = counts.get(norm, 0) + 1
    # A term in every one of several sub-questions (their shared subject) does not tell them apart.
    distinct = {n: (0.3 if len(sqs) > 1 and c == len(sqs) else 1.0) for n, c in counts.items()}
    claim_terms = {c.id: terms_of(c.text) for c in payload.claims}
    asked = {t.norm for terms in sq_terms.values() for t in terms}
    role: dict[str, tuple[str, list[str], str]] = {}
    open_sqs = [q for q, text in sqs.items() if _OPEN.match(text)]
    for claim in payload.claims:
        answered = []
        for q, text in sqs.items():
            if q in open_sqs:
                continue   # see below: an open request is answered by every on-topic claim
            kind = _kind(text)
            share = _share(claim_terms[claim.id], sq_terms[q], distinct)
            if kind is not None:
                if share >= _TYPED_ANSWERS and _has_value(kind, claim.text, {t.norm for t in sq_terms[q]}):
                    answered.append(q)
            elif share >= _ANSWERS:
                answered.append(q)
        if not answered and claim.context_note and len(sqs) == 1:
            # A bare answer ("six", "Argentina") answers the one question it was given for.
            answered = list(sqs)
        if answered:
            role[claim.id] = ("answers", answered, "carries what " + ", ".join(answered) + " asks for")
    if open_sqs and payload.claims:
        # "Summarise the passage" shares no words with a good summary: the lead claim answers it, and
        # so does every claim that shares specific content with the request or an answering claim;
        # only an island ("I love pizza") is extra.
        on_topic = [payload.claims[0].id]
        for _ in range(3):
            for claim in payload.claims:
                if claim.id in on_topic:
                    continue
                mine = {t.norm for t in claim_terms[claim.id] if t.weight >= 1.0}
                near = {t.norm for c in on_topic for t in claim_terms[c]} | {t.norm for q in open_sqs
                                                                            for t in sq_terms[q]}
                if mine & near:
                    on_topic.append(claim.id)
        for cid in on_topic:
            targets = role.get(cid, ("answers", [], ""))[1] + open_sqs
            role[cid] = ("answers", targets, "on the topic of the request")
    # Support: a claim about what a sub-question turns on, or sharing the new content (not the
    # question's words) of an answer, backs that answer up.
    focus = {q: _focus(text) for q, text in sqs.items()}
    for _ in range(3):
        for claim in payload.claims:
            if claim.id in role:
                continue
            norms = {t.norm for t in claim_terms[claim.id]}
            about = [q for q in sqs if focus[q] & norms and q not in open_sqs]
            if about:
                role[claim.id] = ("supports", about, "adds detail on what " + ", ".join(about) + " asks about")
                continue
            mine = {t.norm: t for t in claim_terms[claim.id] if t.norm not in asked}
            for other, (_, targets, _) in list(role.items()):
                shared = [mine[t.norm] for t in claim_terms[other] if t.norm in mine]
                if any(t.weight >= 1.0 for t in shared) or len(shared) >= 2:
                    role[claim.id] = ("supports", list(targets), f"adds detail to {other}")
                    break
    items = [ClaimRole(claim_id=c.id, reasoning=role.get(c.id, ("", [], "answers nothing that was asked"))[2],
                       role=role.get(c.id, ("extra", [], ""))[0],  # type: ignore[arg-type]
                       sub_question_ids=role.get(c.id, ("", [], ""))[1])
             for c in payload.claims]
    answering = {q: [c for c, (r, targets, _) in role.items() if r == "answers" and q in targets] for q in sqs}
    links = []
    for gap in payload.gaps:
        topic = terms_of(gap_topic(gap.text))
        hit = [q for q in sqs if _share(topic, sq_terms[q], distinct) > 0] if topic else []
        # A gap naming nothing ("I couldn't find more") declines whatever is left unanswered.
        links.append(GapLink(gap_id=gap.id, sub_question_ids=hit if topic else [q for q in sqs if not answering[q]]))
    statuses = []
    for q in sqs:
        texts = [c.text for c in payload.claims if c.id in answering[q]]
        if not texts:
            statuses.append(SubQuestionStatus(sub_question_id=q, reasoning="no claim answers it", status="unanswered"))
        elif all(_DEPENDS.search(t) for t in texts):
            statuses.append(SubQuestionStatus(sub_question_id=q, reasoning="answered only with what it depends on",
                                              status="partial"))
        else:
            statuses.append(SubQuestionStatus(sub_question_id=q, reasoning="answered by " + ", ".join(answering[q]),
                                              status="answered"))
    return CompletenessOutput(claims=items, gaps=links, sub_questions=statuses)
