"""Deciding a trace from the verdicts there are, when some items have none.

A judge call can come back with some items missing (no usable verdict even after the re-ask,
veralith.llm.salvage). The trace is not given up on: every way the missing verdicts could have gone
is tried, and what is the same in all of them is decided. One ungrounded claim makes the column
ungrounded whatever a missing claim would have been; a sub-question the judge called unanswered
leaves the row incomplete whatever a missing claim role would have been. What differs between them
is unknown: no cell, or no gate, and the errors name the missing items.

The ways a missing verdict can go:

* a claim's faithfulness: supported, or not;
* a sub-question's sufficiency: yes, or no;
* a claim's completeness role: it answers every sub-question, it only supports, or it is extra
  (coverage only grows with the answering claims, so "answers every one" and "answers none" bound
  every role in between);
* a gap's link: it declines every sub-question, or none;
* a sub-question's completeness status: answered, partial or unanswered.

Without anything missing there is one way, and `decide` is the plain classification. Above
MAX_COMBINATIONS ways nothing is decided.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from veralith.models import (
    Claim,
    CompletenessJudgment,
    CompletenessStatus,
    FailureCell,
    FaithfulnessJudgment,
    Gap,
    Relation,
    ResponseKind,
    SubQuestion,
    SufficiencyJudgment,
    SufficiencyLevel,
    Verdict,
)
from veralith.pipeline.classify import Classification, classify, response_kind, sufficiency_level
from veralith.policy import status

__all__ = ["MAX_COMBINATIONS", "Decision", "Judged", "Missing", "decide"]

MAX_COMBINATIONS = 4096


@dataclass(frozen=True)
class Missing:
    """Ids of the items a judge returned no usable verdict for (claim, gap and sub-question ids)."""

    sufficiency: tuple[str, ...] = ()
    faithfulness: tuple[str, ...] = ()
    completeness: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.sufficiency or self.faithfulness or self.completeness)


@dataclass(frozen=True)
class Judged:
    """One complete set of verdicts: the judges' own, with each missing one filled in one way."""

    sufficiency: list[SufficiencyJudgment] | None
    faithfulness: list[FaithfulnessJudgment] | None
    completeness: CompletenessJudgment | None


@dataclass(frozen=True)
class Decision:
    """What the verdicts decide. Fields that differ between the ways are None (unknown)."""

    classification: Classification
    kind: ResponseKind
    level: SufficiencyLevel
    fraction: float | None
    gate_decided: bool
    # A set of verdicts every decided field agrees with: the gate and the review are computed on it.
    example: Judged
    ways: int = 1


def decide(sub_questions: list[SubQuestion], claims: list[Claim], gaps: list[Gap], asks_clarification: bool,
           judged: Judged, missing: Missing, threshold: float) -> Decision:
    """What the judges' verdicts decide whatever the missing ones would have been (see the module doc)."""
    ways = list(_ways(sub_questions, claims, gaps, judged, missing))
    if not ways:   # too many to try: nothing that depends on a missing verdict is decided
        base = _outcome(sub_questions, claims, gaps, asks_clarification, judged, threshold)
        cls = Classification(None, None, None, None)
        return Decision(cls, base[1], SufficiencyLevel.low, None, False, judged, 0)
    outcomes = [_outcome(sub_questions, claims, gaps, asks_clarification, way, threshold) for way in ways]
    first_cls, first_kind, first_level, first_fraction, _ = outcomes[0]

    def agreed(values: Sequence[Any]) -> Any:
        return values[0] if all(v == values[0] for v in values) else None

    cells = [o[0].failure_cell for o in outcomes]
    cell = agreed(cells)
    coverage = {q: c for q, c in first_cls.coverage.items() if all(o[0].coverage.get(q) == c for o in outcomes)}
    cls = Classification(
        cell, agreed([o[0].faithfulness_fraction for o in outcomes]),
        agreed([o[0].n_uncovered_sub_questions for o in outcomes]), agreed([o[0].n_extra_claims for o in outcomes]),
        agreed([o[0].n_partial_sub_questions for o in outcomes]), coverage if cell is not None else {})
    level = agreed([o[2] for o in outcomes]) or SufficiencyLevel.low   # unknown reads as LOW, like a failed judge
    gate_decided = cell is not None and agreed([o[4] for o in outcomes]) is not None
    example = ways[0] if cell is None else next(w for w, o in zip(ways, outcomes, strict=True)
                                                if o[0].failure_cell == cell)
    return Decision(cls, agreed([o[1] for o in outcomes]) or first_kind, level,
                    agreed([o[3] for o in outcomes]), gate_decided, example, len(ways))


def _outcome(sub_questions: list[SubQuestion], claims: list[Claim], gaps: list[Gap], asks_clarification: bool,
             judged: Judged, threshold: float) -> tuple[Classification, ResponseKind, SufficiencyLevel,
                                                         float | None, tuple[FailureCell | None, str, str]]:
    cls = classify(sub_questions, claims, judged.faithfulness, judged.completeness)
    kind = response_kind(claims, gaps, judged.completeness, asks_clarification)
    level, fraction = sufficiency_level(judged.sufficiency, len(sub_questions), threshold)
    suff = judged.sufficiency
    sufficient = None if suff is None else {j.sub_question_id: j.verdict is Verdict.Y for j in suff}
    st = status(errors=[], failure_cell=cls.failure_cell, response_kind=kind, n_claims=len(claims),
                coverage=cls.coverage, sufficient=sufficient, n_extra_claims=cls.n_extra_claims or 0)
    return cls, kind, level, fraction, (cls.failure_cell, st.quality_gate.value, st.reason)


def _ways(sub_questions: list[SubQuestion], claims: list[Claim], gaps: list[Gap], judged: Judged,
          missing: Missing) -> Iterator[Judged]:
    """Every complete set of verdicts (see the module doc); nothing when there are too many."""
    faith, suff, comp = judged.faithfulness, judged.sufficiency, judged.completeness
    sq_ids = [q.id for q in sub_questions]
    f_ids = [c.id for c in claims if c.id in missing.faithfulness] if faith is not None else []
    s_ids = [q for q in sq_ids if q in missing.sufficiency] if suff is not None else []
    c_claims = [c.id for c in claims if c.id in missing.completeness] if comp is not None else []
    c_gaps = [g.id for g in gaps if g.id in missing.completeness] if comp is not None else []
    c_sqs = [q for q in sq_ids if q in missing.completeness] if comp is not None else []
    choices: list[list[tuple[str, str, Any]]] = (
        [[("f", i, True), ("f", i, False)] for i in f_ids]
        + [[("s", i, True), ("s", i, False)] for i in s_ids]
        + [[("role", i, "answers"), ("role", i, "supports"), ("role", i, "extra")] for i in c_claims]
        + [[("gap", i, True), ("gap", i, False)] for i in c_gaps]
        + [[("status", i, s) for s in CompletenessStatus] for i in c_sqs])
    count = 1
    for options in choices:
        count *= len(options)
    if count > MAX_COMBINATIONS:
        return
    for combination in itertools.product(*choices):
        yield _filled(sub_questions, claims, judged, combination)


def _filled(sub_questions: list[SubQuestion], claims: list[Claim], judged: Judged,
            combination: tuple[tuple[str, str, Any], ...]) -> Judged:
    faith, suff, comp = judged.faithfulness, judged.sufficiency, judged.completeness
    chosen = {(kind, i): value for kind, i, value in combination}
    if faith is not None:
        by_id = {j.claim_id: j for j in faith}
        faith = [by_id.get(c.id) or _faithfulness(c.id, chosen[("f", c.id)]) for c in claims
                 if c.id in by_id or ("f", c.id) in chosen]
    if suff is not None:
        by_q = {j.sub_question_id: j for j in suff}
        suff = [by_q.get(q.id) or SufficiencyJudgment(sub_question_id=q.id, reasoning="(missing)",
                                                      verdict=Verdict.Y if chosen[("s", q.id)] else Verdict.N)
                for q in sub_questions if q.id in by_q or ("s", q.id) in chosen]
    if comp is not None and any(kind in ("role", "gap", "status") for kind, _ in chosen):
        comp = _completeness(comp, [q.id for q in sub_questions], chosen)
    return replace(judged, faithfulness=faith, sufficiency=suff, completeness=comp)


def _faithfulness(claim_id: str, supported: bool) -> FaithfulnessJudgment:
    return FaithfulnessJudgment(claim_id=claim_id, verdict=Verdict.Y if supported else Verdict.N,
                                relation=Relation.supported if supported else Relation.unsupported,
                                reasoning="(missing)")


def _completeness(comp: CompletenessJudgment, sq_ids: list[str], chosen: dict[tuple[str, str], Any]
                  ) -> CompletenessJudgment:
    mappings = {q: list(comp.mappings.get(q, [])) for q in sq_ids}
    extra = list(comp.extra_claim_ids)
    gaps = {g: list(qs) for g, qs in comp.gaps.items()}
    statuses = dict(comp.statuses)
    for (kind, item), value in chosen.items():
        if kind == "role" and value == "answers":
            for q in sq_ids:
                mappings[q].append(item)
        elif kind == "role" and value == "extra":
            extra.append(item)
        elif kind == "gap":
            gaps[item] = list(sq_ids) if value else []
        elif kind == "status":
            statuses[item] = value
    uncovered = [q for q in sq_ids if statuses.get(q) is not CompletenessStatus.answered]
    return comp.model_copy(update={"mappings": mappings, "extra_claim_ids": extra, "gaps": gaps,
                                   "statuses": statuses, "uncovered_sub_question_ids": uncovered})

