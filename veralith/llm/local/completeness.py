"""Local completeness: which sub-questions does each claim address?

A claim addresses a sub-question when they share meaningful content terms. Terms that every
sub-question shares (the subject a split query repeats) count for little, so a claim lands on the
sub-question whose distinctive terms it uses. A claim that shares nothing with the query but
elaborates on an on-topic claim follows that claim, so an ordinary answer's supporting sentences
are not "extra"; only a claim with no content in common with the query or the answer is extra.
The completeness judge never sees the context, so "on topic" is judged against the answer itself.
"""

from __future__ import annotations

from veralith.llm.local.evidence import Term, terms_of
from veralith.llm.tasks import CompletenessInput, CompletenessItem, CompletenessOutput

__all__ = ["completeness"]

_RELATIVE = 0.6  # a claim also maps to sub-questions scoring at least this share of its best one


def _overlap(claim: list[Term], norms: set[str], distinct: dict[str, float]) -> float:
    return sum(t.weight * distinct.get(t.norm, 1.0) for t in claim if t.norm in norms)


def completeness(payload: CompletenessInput) -> CompletenessOutput:
    sq_terms = {sq.id: {t.norm for t in terms_of(sq.text)} for sq in payload.sub_questions}
    counts: dict[str, int] = {}
    for norms in sq_terms.values():
        for norm in norms:
            counts[norm] = counts.get(norm, 0) + 1
    # A term in every sub-question does not tell them apart.
    distinct = {norm: 1.0 / n for norm, n in counts.items()}
    claim_terms = {c.id: terms_of(c.text) for c in payload.claims}
    mapping: dict[str, list[str]] = {}
    why: dict[str, str] = {}
    for claim in payload.claims:
        scores = {sq_id: _overlap(claim_terms[claim.id], norms, distinct) for sq_id, norms in sq_terms.items()}
        top = max(scores.values(), default=0.0)
        if top > 0:
            mapping[claim.id] = [sq_id for sq_id, s in scores.items() if s >= _RELATIVE * top]
            why[claim.id] = "shares content terms with " + ", ".join(mapping[claim.id])
        elif claim.context_note and len(sq_terms) == 1:
            # A bare answer ("six", "Argentina") answers the one question it was given for.
            mapping[claim.id] = list(sq_terms)
            why[claim.id] = "a bare answer to the only sub-question"
    single = len(sq_terms) == 1
    if single and not mapping and payload.claims:
        # One instruction-like question ("Summarise the passage") shares no words with its answer:
        # the answer's first claim is taken to address it, and the rest follow by elaboration.
        first = payload.claims[0].id
        mapping[first] = list(sq_terms)
        why[first] = "the answer's lead claim for the only sub-question"
    # Elaboration: a claim sharing content with an on-topic claim inherits its mapping. With a single
    # sub-question any shared specific word will do (only an island is extra); with several, a
    # name, a number or two terms are needed to tell which part it elaborates.
    for _ in range(3):
        for claim in payload.claims:
            if claim.id in mapping:
                continue
            mine = {t.norm: t for t in claim_terms[claim.id]}
            for other_id, sqs in list(mapping.items()):
                shared = [mine[t.norm] for t in claim_terms[other_id] if t.norm in mine]
                specific = [t for t in shared if t.weight >= 1.0]
                if (single and specific) or len(shared) >= 2 or any(t.is_capital or t.is_number for t in shared):
                    mapping[claim.id] = list(sqs)
                    why[claim.id] = f"elaborates on {other_id}"
                    break
    items = [CompletenessItem(claim_id=c.id, sub_question_ids=mapping.get(c.id, []),
                              reasoning=why.get(c.id, "shares no content with the query or the on-topic claims"))
             for c in payload.claims]
    covered = {sq for ids in mapping.values() for sq in ids}
    uncovered = [sq.id for sq in payload.sub_questions if sq.id not in covered]
    extra = [c.id for c in payload.claims if not mapping.get(c.id)]
    reasoning = (f"{len(payload.sub_questions) - len(uncovered)} of {len(payload.sub_questions)} sub-questions are "
                 f"addressed by some claim; {len(extra)} claim(s) address nothing asked.")
    return CompletenessOutput(reasoning=reasoning, items=items)
