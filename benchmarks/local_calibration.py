"""How far the local judge's confidence can be trusted, measured out of fold (used by judge_quality.py).

* Calibration: each model's confidence is its score mapped by Platt scaling fitted on out-of-fold
  scores (local_fit.calibration over local_fit.out_of_fold): inside a cross-validation fold, on
  scores of the training folds from models that did not see them; for the shipped model
  (train_local.py), on the 5-fold out-of-fold scores of every dev record.
* Reliability (10 bins): every verdict whose truth the labels settle, by its confidence, against
  how often it is right. Faithfulness: claims of span-annotated sets (a claim is unsupported iff it
  overlaps an annotated span), every claim of a response labelled faithful, and the one claim of a
  one-claim response labelled hallucinated. Sufficiency: every sub-question of a query labelled
  sufficient, and the one sub-question of a one-part query labelled insufficient.
* Flags on the dev sets: the labels say nothing of a trace's gate, only of the set's failure
  ("some claim is not supported", "some sub-question is insufficient"), so a trace counts as
  flagged by the rule `veralith.pipeline.review` applies to the gate: some verdict whose flip alone
  would change that call has confidence below REVIEW_BELOW. Reported: the share flagged, and how
  often the call is right among the traces not flagged.
* Flags on the golden traces (tests/golden, hand-written, with the expected gate): the pipeline's
  own `needs_review` and gate, with the shipped models.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from local_fit import S_SETS, SPAN_SETS, Record, calibration, fit, out_of_fold

from veralith.models import EvaluationResult, Relation, Verdict
from veralith.pipeline.review import REVIEW_BELOW

__all__ = ["BINS", "calibrated_fit", "decision_flagged", "golden", "reliability", "verdict_truths"]

BINS = 10
GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden"


def calibrated_fit(train: list[Record], features: list[str],
                   rule: Callable[[dict[str, float]], str | None] | None = None) -> dict:
    """`fit` on `train`, with its calibration fitted on out-of-fold scores of `train` itself."""
    spec = fit(train, features, rule=rule)
    spec["calibration"] = calibration(train, out_of_fold(train, features, rule))
    return spec


def _verdicts(name: str, result: EvaluationResult) -> list[tuple[bool, float | None]]:
    """(says failure, confidence) per verdict: per claim (faithfulness) or per sub-question."""
    if name in S_SETS:
        suff = {j.sub_question_id: j for j in result.sufficiency}
        return [(suff[q.id].verdict is Verdict.N, suff[q.id].confidence) for q in result.sub_questions if q.id in suff]
    faith = {j.claim_id: j for j in result.faithfulness}
    return [(faith[c.id].relation is not Relation.supported, faith[c.id].confidence)
            for c in result.claims if c.id in faith]


def verdict_truths(name: str, row: dict, positive: bool, result: EvaluationResult) -> list[tuple[float, bool]]:
    """(confidence, right) for each verdict of `result` whose truth the record's labels settle."""
    verdicts = _verdicts(name, result)
    if name in SPAN_SETS:
        spans = row["labels"].get("hallucinated_spans") or []
        truths: list[bool | None] = []
        for claim in result.claims:
            a, b = claim.char_start, claim.char_end
            truths.append(a is not None and b is not None and any(s < b and a < e for s, e, *_ in spans))
    elif not positive:
        truths = [False] * len(verdicts)
    else:
        truths = [True] if len(verdicts) == 1 else [None] * len(verdicts)
    return [(conf, says == truth) for (says, conf), truth in zip(verdicts, truths, strict=False)
            if truth is not None and conf is not None]


def decision_flagged(name: str, result: EvaluationResult) -> bool:
    """Is the trace-level call ("some verdict says failure") decided by a verdict below REVIEW_BELOW?"""
    verdicts = _verdicts(name, result)
    failing = [conf for says, conf in verdicts if says]
    if len(failing) > 1:
        return False          # no single flip changes the call
    deciding = failing if failing else [conf for _, conf in verdicts]
    return any(conf is not None and conf < REVIEW_BELOW for conf in deciding)


def reliability(pairs: list[tuple[float, bool]], bins: int = BINS) -> list[dict]:
    """Per confidence bin [lo, hi): verdicts, mean confidence, share right (None when empty)."""
    out = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [(c, ok) for c, ok in pairs if lo <= c < hi or (b == bins - 1 and c == 1.0)]
        out.append(dict(lo=lo, hi=hi, n=len(inside),
                        confidence=sum(c for c, _ in inside) / len(inside) if inside else None,
                        accuracy=sum(ok for _, ok in inside) / len(inside) if inside else None))
    return out


def golden(evaluate: Callable[[str, list, str], EvaluationResult]) -> dict[str, dict]:
    """On each golden file: traces, flagged (needs_review), gate right overall and among the unflagged."""
    out = {}
    for path in sorted(GOLDEN.glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        results = [(evaluate(r["query"], r["context"], r["response"]), r["expected"]["gate"]) for r in rows]
        unflagged = [res.status.quality_gate.value == gate for res, gate in results if not res.needs_review]
        out[path.stem] = dict(n=len(results), flagged=sum(res.needs_review for res, _ in results),
                              right=sum(res.status.quality_gate.value == gate for res, gate in results),
                              unflagged=len(unflagged), unflagged_right=sum(unflagged))
    return out
