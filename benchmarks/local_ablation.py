"""Candidate faithfulness features for the local judge, measured by the same pooled, group
cross-validation as benchmarks/judge_quality.py, and why the judge trails a per-set overlap threshold.

    .venv/bin/python benchmarks/local_ablation.py [--data DIR]

Each claim is analysed once by the shipped judge (grounding.analyse); the candidates below are
computed beside its features. For every feature set, each fold's model is fitted by
local_fit.fit (plain likelihood, pooled sets, fixed L2, sign constraints: a candidate may only
lower p(unsupported) when it measures evidence) and every held-out claim is decided by the shipped
grounding.decide; a response is flagged when some claim is not supported, as in judge_quality.py.
This is the judge's decision without the rest of the pipeline around it; the baseline row
reproduces judge_quality.py's figures.

Candidates (all computed per claim; the judge sees claims in batches, never a whole response):

* ov_claim   share of the claim's content words (the judge's canonical forms) found anywhere in the context
* ov_lex     the overlap baseline's own score for the claim alone (lexicon.content_terms)
* cov_chunk  weighted share of the claim's content words found in its best single chunk
* ov_sent    unweighted share of the claim's content words found in its best-aligned sentence
* any_absent some content word of the claim occurs nowhere in the context (1/0)
* n_absent   log(1 + number of such words)
* anchor_new for a claim that is not a bare answer: how much of the question surrounds the claim's
             new words (those the question lacks) where one sentence states them all (the judge's
             `anchor` feature, which it computes for bare answers only)
* resp_ov    the whole response's overlap score, given to each of its claims (an upper bound on
             what response-level overlap could add; not available to the judge, which sees batches)

Diagnostics printed after the table, per set: in how many responses of each class the rules
decide some claim (grounding.rule_of) and, on the span-annotated sets, how many of the claims they
decide lie inside an annotated span; the overlap baseline's best in-sample threshold, and its
pooled threshold per fold; then the ranking quality (AUC) of the judge's trace score
(the highest p(unsupported) over the response's claims, 1 for a claim a rule or an empty alignment
decides) and of the overlap score, and the judge's balanced accuracy if it, like the per-set
baseline, had a threshold chosen per set on the training folds. Neither is a shipped method.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge_quality import _pooled_cut, _threshold, balanced, overlap_score  # noqa: E402
from local_fit import F_SETS, SIGNS, SPAN_SETS, K, Record, data_parser, faithfulness_records, fit, no_data  # noqa: E402

from veralith.llm.local.align import Claim, Context, claim_of  # noqa: E402
from veralith.llm.local.grounding import _YES_NO, FEATURES, Analysis, _anchor, decide, rule_of  # noqa: E402
from veralith.llm.local.lexicon import content_terms  # noqa: E402
from veralith.llm.local.model import Logistic  # noqa: E402
from veralith.llm.tasks import ClaimIn  # noqa: E402

CANDIDATES = {"ov_claim": -1, "ov_lex": -1, "cov_chunk": -1, "ov_sent": -1, "any_absent": 1, "n_absent": 1,
              "resp_ov": -1, "anchor_new": -1}
TRIALS = [[], ["ov_claim"], ["ov_lex"], ["cov_chunk"], ["ov_sent"], ["any_absent"], ["n_absent"],
          ["ov_claim", "cov_chunk"], ["resp_ov"], ["anchor_new"]]
_context_words: dict[tuple[str, ...], set[str]] = {}


def candidates(claim: ClaimIn, query: str, ctx: Context, analysis: Analysis) -> dict[str, float]:
    """The candidate features of one claim (resp_ov is added per response in `main`)."""
    yes_no = bool(_YES_NO.match(claim.text)) and bool(query.strip())  # read as grounding.analyse reads it
    terms = claim_of(query if yes_no else claim.text).terms
    words = _context_words.get(ctx.texts)
    if words is None:
        _context_words.clear()  # records come one context at a time
        words = _context_words[ctx.texts] = {t.norm for text in ctx.texts for t in content_terms(text)}
    own = {t.norm for t in content_terms(claim.text)}
    out = {"ov_lex": len(own & words) / len(own) if own else 1.0}
    if not terms:
        return out | {"anchor_new": 1.0, "ov_claim": 1.0, "cov_chunk": 1.0, "ov_sent": 1.0, "any_absent": 0.0,
                      "n_absent": 0.0}
    total = sum(t.weight for t in terms)
    best = ctx.sentences[analysis.grounding[0]].norms if analysis.grounding else frozenset()
    absent = sum(ctx.has(t) == 0.0 for t in terms)
    asked = claim_of(query).norms if query.strip() else frozenset()
    new = tuple(t for t in terms if t.norm not in asked)
    anchor_new = 1.0
    if asked and new and not analysis.features["bare"]:
        anchor_new = _anchor(Claim(claim.text, new, new, frozenset(t.norm for t in new)), query, ctx)
    return out | {
        "anchor_new": anchor_new,
        "ov_claim": sum(t.norm in ctx.norms for t in terms) / len(terms),
        "cov_chunk": max((sum(t.weight for t in terms if t.norm in c) / total for c in ctx.chunk_norms), default=0.0),
        "ov_sent": sum(t.norm in best for t in terms) / len(terms),
        "any_absent": float(absent > 0),
        "n_absent": math.log1p(absent),
    }


def _subset(records: list[Record], features: list[str]) -> list[Record]:
    return [Record(r.set, r.row, r.group, r.positive, [[a.features[f] for f in features] for a in r.analyses],
                   r.labels, r.fold, r.analyses) for r in records]


def cross_validate(records: list[Record], features: list[str]) -> tuple[dict[str, float], dict[int, float], dict]:
    """Per set: CV balanced accuracy; per record: the held-out trace score; the last fold's spec."""
    subset = _subset(records, features)
    flagged: dict[int, bool] = {}
    score: dict[int, float] = {}
    spec: dict = {}
    for k in range(K):
        spec = fit([r for r in subset if r.fold != k], features, rule=rule_of)
        model = Logistic(spec)
        for r in subset:
            if r.fold != k:
                continue
            decisions = [decide(a, model) for a in r.analyses]
            flagged[id(r)] = any(d.relation != "supported" for d in decisions)
            score[id(r)] = max([1.0 if rule_of(a.features) or not a.grounding else d.p_unsupported
                                for a, d in zip(r.analyses, decisions, strict=True)], default=0.0)
    by_set = {name: balanced([(flagged[id(r)], r.positive) for r in subset if r.set == name])[0] for name in F_SETS}
    ordered = {id(r): score[id(s)] for r, s in zip(records, subset, strict=True)}
    return by_set, ordered, spec


def auc(pairs: list[tuple[float, bool]]) -> float:
    """Probability that a random failure scores above a random good response (ties count half)."""
    pos = [s for s, y in pairs if y]
    neg = [s for s, y in pairs if not y]
    if not pos or not neg:
        return float("nan")
    return float(np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg]))


def main(argv: list[str] | None = None) -> int:
    parser = data_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    if no_data(args.data):
        return 1
    SIGNS.update(CANDIDATES)
    records = faithfulness_records(args.data, extra=candidates)
    for r in records:
        whole = overlap_score(r.set, r.row)
        for a in r.analyses:
            a.features["resp_ov"] = whole
    short = [name.split("_", 1)[-1][:10] for name in F_SETS]
    print(f"{'features':28s} " + " ".join(f"{s:>10s}" for s in short) + "       mean  candidate weights")
    base_scores: dict[int, float] = {}
    for trial in TRIALS:
        by_set, scores, spec = cross_validate(records, FEATURES + trial)
        if not trial:
            base_scores = scores
        weights = {f: w for f, w in zip(spec["features"], spec["weights"], strict=True) if f in trial}
        print(f"{'+'.join(trial) or 'shipped features':28s} " + " ".join(f"{by_set[n]:10.3f}" for n in F_SETS)
              + f" {np.mean(list(by_set.values())):10.4f}  " + ", ".join(f"{f} {w:+.3f}" for f, w in weights.items()))
    print("\nper set: responses in which some claim is decided by the absent / contradiction rule (failures | good);"
          " best overlap threshold in-sample")
    for name in F_SETS:
        recs = [r for r in records if r.set == name]
        fired = {(rule, y): sum(any(rule_of(a.features) == rule for a in r.analyses) for r in recs if r.positive == y)
                 for rule in ("absent", "contradiction") for y in (True, False)}
        cut = _threshold([(overlap_score(name, r.row), r.positive) for r in recs])
        print(f"{name:34s} absent {fired[('absent', True)]:3d} | {fired[('absent', False)]:3d}   contradiction "
              f"{fired[('contradiction', True)]:3d} | {fired[('contradiction', False)]:3d}   threshold {cut:.3f}")
    print("span-annotated sets: claims the rule decides, inside | outside an annotated span")
    for name in sorted(SPAN_SETS):
        claims = [(rule_of(a.features), label) for r in records if r.set == name and r.labels is not None
                  for a, label in zip(r.analyses, r.labels, strict=True)]
        print(f"{name:34s} " + "   ".join(f"{rule} {sum(k == rule and y for k, y in claims):3d} | "
                                          f"{sum(k == rule and not y for k, y in claims):3d}"
                                          for rule in ("absent", "contradiction")))
    pooled = [_pooled_cut([(overlap_score(r.set, r.row), r.positive, r.set) for r in records if r.fold != k])
              for k in range(K)]
    print("pooled overlap threshold per fold (judge_quality.baseline): " + ", ".join(f"{c:.3f}" for c in pooled))
    print("\nper set: AUC of the judge's trace score | AUC of the overlap score | judge with a per-set threshold "
          "(CV; diagnostic only)")
    for name in F_SETS:
        recs = [r for r in records if r.set == name]
        pairs = []
        for k in range(K):
            # flag above the cut: _threshold flags below, so the scores are negated
            cut = _threshold([(-base_scores[id(r)], r.positive) for r in recs if r.fold != k])
            pairs += [(-base_scores[id(r)] < cut, r.positive) for r in recs if r.fold == k]
        print(f"{name:34s} {auc([(base_scores[id(r)], r.positive) for r in recs]):.3f} | "
              f"{auc([(-overlap_score(name, r.row), r.positive) for r in recs]):.3f} | {balanced(pairs)[0]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
