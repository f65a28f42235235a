"""One description of a diagnosis, in one vocabulary: what the web view's trace page and `veralith
inspect` say about a trace, as a pure function of its EvaluationResult.

The headline, the cell in words, each sub-question's row, each claim's label, the Completeness lines
and the fix all come from `describe(result)`, so they cannot disagree. The vocabulary follows the
classifier's rule (veralith.pipeline.classify): a sub-question counts as answered only when a
*grounded* claim answers it in full. So a wrong number is never "answered": its sub-question has "no
grounded answer", which is what puts the trace in an `incomplete_*` cell, and every place that
speaks of it says so in those words.

Words per coverage (a sub-question), per relation (a claim), per cell row and column are defined
here once. Texts from the trace (ids, chunk ids) are returned as plain strings: the caller escapes
them (Jinja2 autoescape, rich Text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from veralith.models import (
    NO_CELL,
    Coverage,
    EvaluationResult,
    FaithfulnessJudgment,
    Relation,
    SufficiencyLevel,
    Suggestion,
    ThresholdSource,
    Verdict,
)

__all__ = ["COVERAGE_LABEL", "RELATION_LABEL", "ClaimLine", "Description", "QuestionLine", "describe",
           "relation_words"]

# A sub-question's coverage as a short label: only "answered" covers it.
COVERAGE_LABEL = {Coverage.answered: "answered", Coverage.partial: "answered in part",
                  Coverage.ungrounded_answer: "no grounded answer", Coverage.declined: "declined",
                  Coverage.unanswered: "not answered"}
# A claim's relation to the context as a short label: every one but "grounded" makes the column ungrounded.
RELATION_LABEL = {Relation.supported: "grounded", Relation.unsupported: "unsupported",
                  Relation.contradicted: "contradicted", Relation.conflicting: "conflicting", Relation.stale: "stale"}
ROW_WORDS = {"complete": "every sub-question has a grounded answer",
             "incomplete": "some sub-question has no grounded answer",
             "extra": "every sub-question has a grounded answer, and some claim answers nothing that was asked"}
COLUMN_WORDS = {"grounded": "every claim is grounded in the context",
                "ungrounded": "some claim is not grounded in the context"}
# Gate reasons whose own summary (veralith.policy) already says what the trace did: a pass, a refusal
# judged by what it declines, a response with nothing to assess, a judge that failed.
_SUMMARY_REASONS = frozenset({"complete_grounded", "cell_allowed", "correct_refusal", "correct_partial_refusal",
                              "unnecessary_refusal", "refusal_with_extra_claims", "refusal_sufficiency_unknown",
                              "no_assessable_claims"})
_SHOWN = 3  # ids named in one sentence before "and N more"


@dataclass(frozen=True)
class QuestionLine:
    """One sub-question: its coverage as a label and why, and whether the context can answer it."""

    id: str
    text: str
    coverage: str                 # a Coverage value, or "unknown" when it was not judged
    label: str                    # COVERAGE_LABEL, or "not judged"
    why: str
    sufficient: bool | None       # the Sufficiency judge's verdict; None when not judged

    @property
    def covered(self) -> bool:
        return self.coverage == Coverage.answered.value

    @property
    def sentence(self) -> str:
        return f"{self.id}: {self.label} — {self.why}"


@dataclass(frozen=True)
class ClaimLine:
    """One claim: its relation as a label and in words, the sub-questions it answers, whether it is extra."""

    id: str
    text: str
    relation: str                 # a Relation value, or "unjudged"
    label: str                    # RELATION_LABEL, or "not judged"
    why: str                      # relation_words: "is contradicted by chunk c2", "is not supported by …"
    answers: tuple[str, ...] = ()
    extra: bool = False

    @property
    def grounded(self) -> bool:
        return self.relation == Relation.supported.value


@dataclass(frozen=True)
class Description:
    cell: str                     # the failure cell's value, or NO_CELL
    cell_words: str               # the cell in words ("" without a cell)
    headline: str                 # one sentence: what went wrong, or that nothing did
    questions: list[QuestionLine]
    claims: list[ClaimLine]
    completeness: list[str]       # the Completeness section's lines
    sufficiency: str              # the level, the fraction and the threshold in words ("" when not judged)
    fix: Suggestion | None
    review_flag: str = ""         # which review cut-off flagged (or would flag) it ("" when not recorded)


def describe(result: EvaluationResult) -> Description:
    """Everything a reader is told about `result`, in the one vocabulary of this module."""
    claims = _claims(result)
    by_id = {c.id: c for c in claims}
    questions = _questions(result, by_id)
    cell = result.failure_cell.value if result.failure_cell is not None else NO_CELL
    row, _, column = cell.partition("_")
    cell_words = f"{ROW_WORDS[row]}, and {COLUMN_WORDS[column]}" if cell != NO_CELL else ""
    return Description(cell=cell, cell_words=cell_words, headline=_headline(result, cell, questions, claims),
                       questions=questions, claims=claims, completeness=_completeness(result, questions, claims),
                       sufficiency=_sufficiency(result), fix=result.suggestion, review_flag=_review_flag(result))


def relation_words(judgment: FaithfulnessJudgment) -> str:
    """What a claim's relation to the context says, as a predicate that follows the claim's id
    ("k2 is contradicted by chunk c4"), naming the chunks it rests on."""
    grounds, against = judgment.grounding_chunk_ids, judgment.contradicting_chunk_ids
    if judgment.relation is Relation.supported:
        return f"is grounded in {_chunks(grounds)}" if grounds else "is grounded in the context"
    if judgment.relation is Relation.unsupported:
        return "is not supported by the context"
    if judgment.relation is Relation.contradicted:
        return f"is contradicted by {_chunks(against)}" if against else "is contradicted by the context"
    if judgment.relation is Relation.conflicting:
        which = f" ({_chunks(grounds)} for it, {_chunks(against)} against it)" if grounds and against else ""
        return f"rests on chunks that contradict each other{which}"
    later = f", changed later by {_chunks(against)}" if against else ""
    return "rests on out-of-date chunks" + (f" ({_chunks(grounds)})" if grounds else "") + later


# --- parts ------------------------------------------------------------------------------------------


def _claims(result: EvaluationResult) -> list[ClaimLine]:
    judged = {j.claim_id: j for j in result.faithfulness}
    comp = result.completeness
    extra = set(comp.extra_claim_ids) if comp else set()
    answers: dict[str, list[str]] = {}
    for q, ids in (comp.mappings.items() if comp else ()):
        for claim_id in ids:
            answers.setdefault(claim_id, []).append(q)
    out = []
    for claim in result.claims:
        j = judged.get(claim.id)
        out.append(ClaimLine(claim.id, claim.text, j.relation.value if j else "unjudged",
                             RELATION_LABEL[j.relation] if j else "not judged",
                             relation_words(j) if j else "not judged", tuple(answers.get(claim.id, ())),
                             claim.id in extra))
    return out


def _coverage(result: EvaluationResult) -> dict[str, Coverage]:
    """The diagnosis' coverage; for a result stored before it was recorded, the classifier's own rule."""
    if result.diagnosis is not None and result.diagnosis.coverage:
        return dict(result.diagnosis.coverage)
    comp = result.completeness
    if comp is None or not (result.faithfulness or not result.claims):
        return {}
    from veralith.pipeline.classify import coverage

    grounded = {j.claim_id for j in result.faithfulness if j.verdict is Verdict.Y}
    return coverage(result.sub_questions, grounded, comp)


def _questions(result: EvaluationResult, claims: dict[str, ClaimLine]) -> list[QuestionLine]:
    covered = _coverage(result)
    sufficient = {j.sub_question_id: j.verdict is Verdict.Y for j in result.sufficiency}
    comp = result.completeness
    out = []
    for q in result.sub_questions:
        how = covered.get(q.id)
        answering = [claims[c] for c in (comp.mappings.get(q.id, []) if comp else []) if c in claims]
        if how is None:
            out.append(QuestionLine(q.id, q.text, "unknown", "not judged", "not judged", sufficient.get(q.id)))
            continue
        out.append(QuestionLine(q.id, q.text, how.value, COVERAGE_LABEL[how], _why(how, answering),
                                sufficient.get(q.id)))
    return out


def _why(how: Coverage, answering: list[ClaimLine]) -> str:
    good = [c.id for c in answering if c.grounded]
    bad = [c for c in answering if not c.grounded]
    if how is Coverage.answered:
        also = "".join(f"; {c.id} also answers it but {c.why}" for c in bad[:_SHOWN])
        return f"by {_join(good)}{also}{_more(bad, 'ungrounded claim(s) also answer it')}"
    if how is Coverage.partial:
        return f"only in part, by {_join([c.id for c in answering])}"
    if how is Coverage.ungrounded_answer:
        return ("answered only by " + "; ".join(f"{c.id}, which {c.why}" for c in bad[:_SHOWN])
                + _more(bad, "ungrounded claim(s) answer it too"))
    if how is Coverage.declined:
        return "the response says the documents lack it"
    return "no claim answers it"


def _completeness(result: EvaluationResult, questions: list[QuestionLine], claims: list[ClaimLine]) -> list[str]:
    comp = result.completeness
    if comp is None:
        return []
    lines = [q.sentence for q in questions]
    for q, ids in comp.supports.items():
        if ids:
            lines.append(f"{_join(ids)} only back{'s' if len(ids) == 1 else ''} up the answer to {q} "
                         "(background or a caveat: neither an answer nor extra)")
    for gap, declined in comp.gaps.items():
        if declined:  # a gap may decline a detail of a sub-question that is answered all the same
            lines.append(f"{gap} says the documents lack what {_join(declined)} asks, in whole or in part")
    extra = [c.id for c in claims if c.extra]
    if extra:
        lines.append(f"{_join(extra)} {_verb(extra, 'answers', 'answer')} nothing that was asked (extra)")
    return lines


def _headline(result: EvaluationResult, cell: str, questions: list[QuestionLine], claims: list[ClaimLine]) -> str:
    """The policy's own sentence where it says it all (a pass, a refusal, a judge that failed);
    otherwise the cell's two halves for this trace: which sub-questions lack a grounded answer or
    which claims answer nothing asked, and which claims are not grounded."""
    if cell == NO_CELL or result.status.reason in _SUMMARY_REASONS:
        return result.status.summary
    row, _, column = cell.partition("_")
    named: set[str] = set()
    parts = []
    if row == "incomplete":
        parts += _uncovered(questions, claims, named)
    else:
        parts.append(ROW_WORDS["complete"])
        if row == "extra":
            extra = [c.id for c in claims if c.extra]
            parts[-1] += f", but {_join(extra)} {_verb(extra, 'answers', 'answer')} nothing that was asked"
    if column == "ungrounded":
        bad = [c for c in claims if not c.grounded and c.id not in named]
        parts += [f"{c.id} {c.why}" for c in bad[:_SHOWN]]
        if len(bad) > _SHOWN:
            parts.append(f"{len(bad) - _SHOWN} more claim(s) are not grounded")
    else:
        parts.append(COLUMN_WORDS["grounded"] if claims else "the response makes no claim")
    # A sentence may open with an id ("q2 is not answered"): ids keep their case. The status's note of
    # judges that failed (veralith.policy.status) stays on the end, as it reads there.
    text = "; ".join(parts) + "." + "".join(re.findall(r" \(Failed: [^)]*\)$", result.status.summary))
    return text[0].upper() + text[1:] if parts[0].startswith(ROW_WORDS["complete"]) else text


def _uncovered(questions: list[QuestionLine], claims: list[ClaimLine], named: set[str]) -> list[str]:
    """One clause per kind of uncovered sub-question; the ungrounded claims they name go into `named`."""
    parts = []
    lacking = [q for q in questions if q.coverage == Coverage.ungrounded_answer.value]
    for q in lacking[:_SHOWN]:
        parts.append(f"{q.id} has no grounded answer: {q.why}")
        named.update(c.id for c in claims if q.id in c.answers and not c.grounded)
    if len(lacking) > _SHOWN:
        parts.append(f"{len(lacking) - _SHOWN} more sub-question(s) have no grounded answer")
    for coverage, one, many in ((Coverage.unanswered, "is not answered", "are not answered"),
                                (Coverage.partial, "is answered only in part", "are answered only in part"),
                                (Coverage.declined, "is declined", "are declined")):
        ids = [q.id for q in questions if q.coverage == coverage.value]
        if ids:
            parts.append(f"{_join(ids)} {_verb(ids, one, many)}")
    return parts


def _sufficiency(result: EvaluationResult) -> str:
    d = result.diagnosis
    if d is None:
        return ""
    high = d.sufficiency_level is SufficiencyLevel.high
    source = (f"fitted to reviewers' labels on {d.threshold_labels} traces of this knowledge base"
              if d.threshold_labels else "calibrated from this knowledge base's own healthy traces"
              if d.threshold_source is ThresholdSource.calibrated else
              "the default until this knowledge base is calibrated")
    if d.sufficiency_fraction is None or not d.n_sub_questions:
        return ("LOW: the Sufficiency judge gave no verdict, so retrieval is taken to have fallen short "
                f"(threshold {d.threshold:.0%}, {source})")
    enough = sum(j.verdict is Verdict.Y for j in result.sufficiency)
    return (f"{'HIGH' if high else 'LOW'}: the context answers {enough} of {d.n_sub_questions} sub-question(s) "
            f"({d.sufficiency_fraction:.0%}), {'at or above' if high else 'below'} the {d.threshold:.0%} this "
            f"knowledge base needs ({source})")


def _review_flag(result: EvaluationResult) -> str:
    """Which cut-off the review flag used: fitted to labels or the default (veralith.store.review_cutoff)."""
    d = result.diagnosis
    if d is None or d.review_cutoff is None:
        return ""   # stored before the cut-off was recorded
    source = (f"fitted to reviewers' labels on {d.review_cutoff_labels} traces of this knowledge base"
              if d.review_cutoff_labels else "the default until this knowledge base has enough reviewers' labels")
    return f"a deciding verdict below {d.review_cutoff:.0%} confidence flags the trace ({source})"


def _join(ids: list[str]) -> str:
    shown = ids[:_SHOWN]
    more = f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else ""
    if len(shown) <= 1:
        return (shown[0] if shown else "none") + more
    return (", ".join(shown[:-1]) + (" and " + shown[-1] if not more else ", " + shown[-1])) + more


def _more(items: list[ClaimLine], what: str) -> str:
    return f"; {len(items) - _SHOWN} more {what}" if len(items) > _SHOWN else ""


def _verb(ids: list[str], one: str, many: str) -> str:
    return one if len(ids) == 1 else many


def _chunks(ids: list[str]) -> str:
    return ("chunk " if len(ids) == 1 else "chunks ") + ", ".join(ids)
