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
* What any flag could reach (`review_frontier`): the traces ranked by how sure the judge is of the
  call, and the call's accuracy among the surest share that a flag cap leaves unflagged. Two
  rankings: the probability that the call is right with the verdicts' confidences taken as
  independent (`call_probability`), and a trace-level logistic model over the shape of the verdicts
  fitted out of fold on the same group folds. Neither is a shipped rule: they say whether a better
  review rule on these confidences could meet the target.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
from local_fit import L2, S_SETS, SPAN_SETS, Record, calibration, fit, out_of_fold

from veralith.llm.local.grounding import OVERLAP_ONLY
from veralith.models import EvaluationResult, Relation, Verdict
from veralith.pipeline.review import REVIEW_BELOW

__all__ = ["BINS", "call_probability", "calibrated_fit", "decision_flagged", "golden", "reliability",
           "review_frontier", "verdict_truths", "verdicts_of"]

BINS = 10
GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden"


def calibrated_fit(train: list[Record], features: list[str],
                   rule: Callable[[dict[str, float]], str | None] | None = None) -> dict:
    """`fit` on `train`, with its calibration fitted on out-of-fold scores of `train` itself."""
    spec = fit(train, features, rule=rule)
    spec["calibration"] = calibration(train, out_of_fold(train, features, rule))
    return spec


def verdicts_of(name: str, result: EvaluationResult) -> list[tuple[bool, float | None]]:
    """(says failure, confidence) per verdict: per claim (faithfulness) or per sub-question."""
    if name in S_SETS:
        suff = {j.sub_question_id: j for j in result.sufficiency}
        return [(suff[q.id].verdict is Verdict.N, suff[q.id].confidence) for q in result.sub_questions if q.id in suff]
    faith = {j.claim_id: j for j in result.faithfulness}
    return [(faith[c.id].relation is not Relation.supported, faith[c.id].confidence)
            for c in result.claims if c.id in faith]


def verdict_truths(name: str, row: dict, positive: bool, result: EvaluationResult) -> list[tuple[float, bool]]:
    """(confidence, right) for each verdict of `result` whose truth the record's labels settle."""
    verdicts = verdicts_of(name, result)
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
    verdicts = verdicts_of(name, result)
    failing = [conf for says, conf in verdicts if says]
    if len(failing) > 1:
        return False          # no single flip changes the call
    deciding = failing if failing else [conf for _, conf in verdicts]
    return any(conf is not None and conf < REVIEW_BELOW for conf in deciding)


def call_probability(verdicts: list[tuple[bool, float | None]]) -> float:
    """P(the trace-level call is right), the verdicts' confidences taken as independent: a failure
    call is wrong only when every verdict saying failure is wrong and every other one right; a call
    of no failure is right only when every verdict is. Verdicts of unknown confidence are left out."""
    failing = [c for says, c in verdicts if says and c is not None]
    passing = [c for says, c in verdicts if not says and c is not None]
    if failing:
        return 1.0 - math.prod(1.0 - c for c in failing) * math.prod(passing)
    return math.prod(passing)


def _shape(name: str, verdicts: list[tuple[bool, float | None]]) -> list[float]:
    """Trace-level features of the frontier model: nothing about the set but which judge made the call."""
    known = [(says, c) for says, c in verdicts if c is not None]
    p = min(max(call_probability(verdicts), 1e-4), 1 - 1e-4)
    fails = float(any(says for says, _ in known))
    suff = float(name in S_SETS)
    return [math.log(p / (1 - p)), fails, suff, fails * suff, math.log1p(len(known)),
            min((c for _, c in known), default=1.0),
            sum(not says and abs(c - OVERLAP_ONLY) < 1e-9 for says, c in known) / max(len(known), 1)]


def _logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Weighted maximum likelihood with the fit's fixed L2 on standardised features (Newton steps)."""
    mu, sd = x.mean(0), x.std(0) + 1e-9
    z = np.hstack([np.ones((len(x), 1)), (x - mu) / sd])
    penalty = L2 * np.diag(np.r_[0.0, np.ones(z.shape[1] - 1)])
    b = np.zeros(z.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-z @ b))
        b -= np.linalg.solve((z * (w * p * (1 - p))[:, None]).T @ z + penalty, z.T @ (w * (p - y)) + penalty @ b)
    return lambda new: 1 / (1 + np.exp(-np.hstack([np.ones((len(new), 1)), (new - mu) / sd]) @ b))


def review_frontier(traces: list[dict], cap: float, folds: int) -> dict[str, float]:
    """The call's accuracy among the (1 - cap) share of traces the judge is surest of, ranked by
    `call_probability` and by the out-of-fold trace-level model. Each trace: set, fold, verdicts,
    right (is the call right). The model weighs each set equally, as the judge's fit does."""
    right = np.array([float(t["right"]) for t in traces])
    x = np.array([_shape(t["set"], t["verdicts"]) for t in traces])
    fold = np.array([t["fold"] for t in traces])
    sizes: dict[str, int] = {}
    for t in traces:
        sizes[t["set"]] = sizes.get(t["set"], 0) + 1
    w = np.array([1.0 / sizes[t["set"]] for t in traces])
    w *= len(w) / w.sum()
    model = np.zeros(len(traces))
    for k in range(folds):
        model[fold == k] = _logistic(x[fold != k], right[fold != k], w[fold != k])(x[fold == k])
    keep = len(traces) - int(cap * len(traces))
    out = {}
    for name, score in (("independent", np.array([call_probability(t["verdicts"]) for t in traces])),
                        ("model", model)):
        surest = np.argsort(-score, kind="stable")[:keep]
        out[name] = float(right[surest].mean()) if keep else 0.0
    return out


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
