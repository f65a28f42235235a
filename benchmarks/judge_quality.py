"""Cross-validated judge quality of the local backend on the labelled dev sets in ../shared/data.

    .venv/bin/python benchmarks/judge_quality.py [--data DIR] [--limit N] [--markdown]
    .venv/bin/python benchmarks/judge_quality.py --backend openai --limit N [--model NAME]

With `--backend openai` nothing is fitted: the first N records of each set go through
`veralith.evaluate(..., persist=False)` on the configured OpenAI-compatible judge (OPENAI_API_KEY or
VERALITH_BASE_URL; VERALITH_JUDGE_MODEL or --model), scored by the same trace-level rule, with the
word-overlap baseline beside it and the calls, tokens and USD spent (docs/backends.md).

Method (every figure printed is out of sample):

* Folds: 5-fold group cross-validation per set. Records that share a query and a context (a
  right/wrong answer pair, one source's six responses) are one group and stay in one fold.
* Each fold: the faithfulness and sufficiency models are fitted (benchmarks/local_fit.py `fit`:
  pooled maximum likelihood, set- and class-balanced, fixed L2) on the other four folds of all
  sets, and calibrated on those folds' out-of-fold scores (local_calibration.calibrated_fit); then
  the held-out records go through the public `veralith.evaluate(..., persist=False)` on the local
  backend with those coefficients swapped in (veralith.llm.local.model.override): the shipped
  decision code, not a copy of it.
* Trace-level decision against the set's label, scored by balanced accuracy (mean recall of the
  two classes; a constant answer scores 0.5):
  faithfulness sets, WiCE and RAGTruth: some claim is not supported  vs  hallucinated
  (WiCE: claim_label != supported, judged under the content-free stand-in query of
  local_fit.NO_QUERY, since the API refuses an empty query; RAGTruth/FaithBench: any span);
  sufficiency sets: some sub-question is insufficient  vs  not context_sufficient.
  For RAGTruth, response-level precision and recall are printed too.
* Word-overlap baseline, computed here on the same folds: faithfulness = share of the response's
  content words found in the context, sufficiency = share of the query's content words found in
  the context; flagged below a threshold. Three thresholds are reported (`baseline`): one pooled
  threshold per judge fitted on the training folds by the judge's own protocol, one chosen per set
  on its training folds, and one chosen per set in-sample (an upper bound, never a target).
* Target (issue 25): on every set the judge's balanced accuracy is at least MARGIN above the best
  cross-validated baseline (the better of the pooled and the per-set threshold); a set that misses
  it is printed "below baseline".
* Confidence (local_calibration.py): reliability diagrams of the out-of-fold confidences, and per
  set the share of traces flagged for review and the accuracy among those not flagged; the same on
  the golden traces of tests/golden with the shipped models (their gate is labelled); and what a
  review rule on these confidences could reach at the flag cap (local_calibration.review_frontier).
* Throughput: traces per CPU-second of evaluate() over every record with the shipped models, one
  process (one core), best of three passes, every cache emptied before each pass.

completeness_ragchecker_pairs is skipped: it has no retrieved context.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import local_calibration  # noqa: E402
import local_fit  # noqa: E402
from local_fit import F_SETS, S_SETS, K, Record, data_parser, log_loss, no_data, query_of  # noqa: E402

import veralith  # noqa: E402
from veralith.config import settings  # noqa: E402
from veralith.llm.local.grounding import FEATURES as F_FEATURES, rule_of  # noqa: E402
from veralith.llm.local.lexicon import content_terms  # noqa: E402
from veralith.llm.local.model import override  # noqa: E402
from veralith.models import EvaluationResult, Verdict  # noqa: E402

MARGIN = 0.02          # how far above the best cross-validated word-overlap baseline the judge must be
UNFLAGGED_RIGHT = 0.90  # among traces not flagged for review, the share whose call must be right ...
FLAGGED_AT_MOST = 0.50  # ... while flagging at most this share of all traces
RESPONSE_PRECISION = ("ragtruth_qa", "ragtruth_summary")
SPEED_TARGET = 200.0
SKIPPED = {"completeness_ragchecker_pairs": "no retrieved context (pairwise completeness against a reference)"}


def judged(name: str, row: dict) -> tuple[bool, EvaluationResult]:
    """The judge's trace-level call for one record (True = the failure the set labels), and its result."""
    result = veralith.evaluate(query_of(row), row["context"], row["response"], persist=False)
    if result.errors:
        raise RuntimeError(f"{name} {row['id']}: judge errors {result.errors}")
    if name in S_SETS:
        return any(j.verdict is Verdict.N for j in result.sufficiency), result
    return any(j.verdict is Verdict.N for j in result.faithfulness), result


def predict(name: str, row: dict) -> bool:
    """The judge's trace-level call for one record: True = the failure the set labels."""
    return judged(name, row)[0]


def _norms(text: str) -> set[str]:
    return {t.norm for t in content_terms(text)}


def overlap_score(name: str, row: dict) -> float:
    """Share of the response's (sufficiency: the query's) content words that occur in the context."""
    context = set().union(*(_norms(c if isinstance(c, str) else str(c)) for c in row["context"])) \
        if row["context"] else set()
    words = _norms(row["query"] if name in S_SETS else row["response"])
    return len(words & context) / len(words) if words else 1.0


def balanced(pairs: list[tuple[bool, bool]]) -> tuple[float, float, float]:
    """(balanced accuracy, TPR, TNR) of (predicted, labelled) pairs."""
    pos = [p for p, y in pairs if y]
    neg = [p for p, y in pairs if not y]
    tpr = sum(pos) / len(pos) if pos else 0.0
    tnr = sum(not p for p in neg) / len(neg) if neg else 0.0
    return (tpr + tnr) / 2, tpr, tnr


def _threshold(scored: list[tuple[float, bool]]) -> float:
    """The overlap threshold (flag below it) with the best balanced accuracy on `scored`."""
    values = sorted({s for s, _ in scored})
    cuts = [values[0] - 1e-9] + [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)] + [values[-1] + 1e-9]
    best = max(balanced([(s < c, y) for s, y in scored])[0] for c in cuts)
    winners = [c for c in cuts if balanced([(s < c, y) for s, y in scored])[0] == best]
    return winners[len(winners) // 2]


def _pooled_cut(scored: list[tuple[float, bool, str]]) -> float:
    """One overlap threshold for every set, fitted like the judge's models: a one-feature logistic
    regression by plain maximum likelihood on the pooled records, each set and each class within a
    set carrying the same total weight, flagged where p >= 0.5 (i.e. below -bias / weight)."""
    x = np.array([v for v, _, _ in scored], dtype=float)
    y = np.array([float(lab) for _, lab, _ in scored])
    counts: dict[tuple[str, bool], int] = {}
    for _, lab, name in scored:
        counts[(name, lab)] = counts.get((name, lab), 0) + 1
    n_sets = len({name for _, _, name in scored})
    w = np.array([1.0 / (n_sets * 2 * counts[(name, lab)]) for _, lab, name in scored])
    theta = np.zeros(2)
    design = np.column_stack([np.ones_like(x), x])
    for _ in range(50):  # Newton-Raphson; two parameters converge in a handful of steps
        p = 1.0 / (1.0 + np.exp(-np.clip(design @ theta, -30, 30)))
        grad = design.T @ (w * (p - y))
        hess = (design * (w * p * (1 - p))[:, None]).T @ design + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    bias, slope = theta
    if slope >= 0:  # more overlap never raises p(failure); a degenerate fit flags nothing
        return -np.inf
    return float(-bias / slope)


def baseline(records: list[Record]) -> dict[str, dict[str, float]]:
    """Balanced accuracy of the word-overlap baseline per set, three ways (same folds as the judge):

    * "pooled": one threshold per judge (faithfulness sets together, sufficiency sets together),
      fitted on the pooled training folds by the judge's own protocol (`_pooled_cut`) and scored
      on the held-out fold: the judge's protocol applied to the overlap score.
    * "per_set": a threshold chosen for each set alone on its training folds (best balanced
      accuracy there), scored on the held-out fold.
    * "in_sample": the best threshold for each set chosen on all its records and scored on those
      same records: an upper bound no held-out method is held to.
    """
    scores = {id(r): overlap_score(r.set, r.row) for r in records}
    names = sorted({r.set for r in records})
    out: dict[str, dict[str, float]] = {name: {} for name in names}
    pooled: dict[str, list[tuple[bool, bool]]] = {name: [] for name in names}
    for family in (F_SETS, S_SETS):
        recs = [r for r in records if r.set in family]
        for k in range(K):
            train = [(scores[id(r)], r.positive, r.set) for r in recs if r.fold != k]
            if not train:
                continue
            cut = _pooled_cut(train)
            for r in recs:
                if r.fold == k:
                    pooled[r.set].append((scores[id(r)] < cut, r.positive))
    for name in names:
        recs = [r for r in records if r.set == name]
        pairs = []
        for k in range(K):
            train = [(scores[id(r)], r.positive) for r in recs if r.fold != k]
            held = [r for r in recs if r.fold == k]
            if not held or not train:
                continue
            cut = _threshold(train)
            pairs += [(scores[id(r)] < cut, r.positive) for r in held]
        scored = [(scores[id(r)], r.positive) for r in recs]
        cut = _threshold(scored)
        out[name] = {"pooled": balanced(pooled[name])[0], "per_set": balanced(pairs)[0],
                     "in_sample": balanced([(v < cut, y) for v, y in scored])[0]}
    return out


def cross_validate(data: Path, limit: int | None = None, f_records: list[Record] | None = None,
                   s_records: list[Record] | None = None, s_features: list[str] | None = None,
                   with_golden: bool = True) -> dict:
    if f_records is None:
        f_records = local_fit.faithfulness_records(data, limit)
    if s_records is None or s_features is None:
        s_records, s_features = local_fit.sufficiency_records(data, limit)
    predictions: dict[int, bool] = {}
    flagged: dict[int, bool] = {}
    truths: dict[str, list[tuple[float, bool]]] = {"faithfulness": [], "sufficiency": []}
    cv_loss: dict[str, list[float]] = {"faithfulness": [], "sufficiency": []}
    traces: list[dict] = []   # per held-out trace: its verdicts and whether the call is right (review_frontier)
    with settings.override(backend="local"):
        for k in range(K):
            f_spec = local_calibration.calibrated_fit([r for r in f_records if r.fold != k], F_FEATURES, rule_of)
            s_spec = local_calibration.calibrated_fit([r for r in s_records if r.fold != k], s_features)
            cv_loss["faithfulness"].append(log_loss([r for r in f_records if r.fold == k], f_spec))
            cv_loss["sufficiency"].append(log_loss([r for r in s_records if r.fold == k], s_spec))
            with override({"faithfulness": f_spec, "sufficiency": s_spec}):
                for r in f_records + s_records:
                    if r.fold != k:
                        continue
                    predictions[id(r)], result = judged(r.set, r.row)
                    flagged[id(r)] = local_calibration.decision_flagged(r.set, result)
                    traces.append(dict(set=r.set, fold=k, right=predictions[id(r)] == r.positive,
                                       verdicts=local_calibration.verdicts_of(r.set, result)))
                    judge = "sufficiency" if r.set in S_SETS else "faithfulness"
                    truths[judge] += local_calibration.verdict_truths(r.set, r.row, r.positive, result)
    speed = throughput([r for r in f_records + s_records])
    base = baseline(f_records + s_records)
    rows = []
    for name in F_SETS + S_SETS:
        recs = [r for r in f_records + s_records if r.set == name]
        if not recs:
            continue
        pairs = [(predictions[id(r)], r.positive) for r in recs]
        score, tpr, tnr = balanced(pairs)
        raised = sum(p for p, _ in pairs)
        caught = sum(p and y for p, y in pairs)
        best = max(base[name]["pooled"], base[name]["per_set"])
        calm = [p == y for r, (p, y) in zip(recs, pairs, strict=True) if not flagged[id(r)]]
        rows.append(dict(set=name, n=len(recs), balanced_accuracy=score, tpr=tpr, tnr=tnr, baseline=base[name],
                         best_baseline=best, margin=score - best, above=score >= best + MARGIN - 1e-9,
                         precision=caught / raised if raised else 0.0, recall=tpr, raised=raised,
                         flagged=sum(flagged[id(r)] for r in recs), unflagged=len(calm), unflagged_right=sum(calm)))
    golden = {}
    if with_golden:
        with settings.override(backend="local"):
            golden = local_calibration.golden(lambda q, c, resp: veralith.evaluate(q, c, resp, persist=False))
    return dict(rows=rows, traces=speed["traces"], seconds=speed["seconds"], traces_per_second=speed["per_second"],
                cv_log_loss={j: sum(v) / len(v) for j, v in cv_loss.items()},
                frontier=local_calibration.review_frontier(traces, FLAGGED_AT_MOST, K),
                reliability={j: local_calibration.reliability(v) for j, v in truths.items()}, golden=golden)


def throughput(records: list[Record], repeats: int = 3) -> dict:
    """Traces per CPU-second of evaluate() over every record with the shipped models, best of
    `repeats` passes, each with cold caches (CPU time of this process; the best pass is the one
    least disturbed by other load on the machine, as timeit reports it)."""
    best = None
    with settings.override(backend="local"):
        for _ in range(repeats):
            local_fit.clear_caches()
            started = time.process_time()
            for r in records:
                predict(r.set, r.row)
            elapsed = time.process_time() - started
            best = elapsed if best is None else min(best, elapsed)
    return dict(traces=len(records), seconds=best, per_second=len(records) / best if best else 0.0)


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.3f}" if whole else "-"


def render(report: dict) -> str:
    """The report as Markdown tables (docs/benchmarks.md pastes them as printed)."""
    rows = report["rows"]
    lines = ["| set | n | balanced acc. (5-fold CV) | TPR (failure caught) | TNR (good passed) | "
             "overlap, pooled threshold (CV) | overlap, per-set threshold (CV) | "
             "overlap, per-set threshold (in-sample) | judge − best CV overlap | "
             f"at least {MARGIN:.2f} above it |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r["baseline"]
        lines.append(f"| {r['set']} | {r['n']} | **{r['balanced_accuracy']:.3f}** | {r['tpr']:.3f} | {r['tnr']:.3f} | "
                     f"{b['pooled']:.3f} | {b['per_set']:.3f} | {b['in_sample']:.3f} | {r['margin']:+.3f} | "
                     f"{'yes' if r['above'] else '**below baseline**'} |")
    for name, why in SKIPPED.items():
        lines.append(f"| {name} | - | skipped: {why} | | | | | | | |")
    above = sum(r["above"] for r in rows)
    lines += ["", f"Above the best cross-validated word-overlap baseline by {MARGIN:.2f} or more on {above} of "
              f"{len(rows)} sets; below baseline: {', '.join(r['set'] for r in rows if not r['above']) or 'none'}.",
              "", "| set | responses flagged | response-level precision | response-level recall |", "|---|---|---|---|"]
    for r in rows:
        if r["set"] in RESPONSE_PRECISION:
            lines.append(f"| {r['set']} | {r['raised']} of {r['n']} | {r['precision']:.3f} | {r['recall']:.3f} |")
    lines += ["", "Confidence on the dev sets (out of fold): a trace is flagged when a verdict that decides its call "
              "is below the review threshold.", "",
              "| set | traces | flagged | share flagged | not flagged | call right among not flagged |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['set']} | {r['n']} | {r['flagged']} | {_share(r['flagged'], r['n'])} | {r['unflagged']} | "
                     f"{_share(r['unflagged_right'], r['unflagged'])} |")
    n, fl = sum(r["n"] for r in rows), sum(r["flagged"] for r in rows)
    calm, calm_right = sum(r["unflagged"] for r in rows), sum(r["unflagged_right"] for r in rows)
    lines.append(f"| **all sets** | {n} | {fl} | {_share(fl, n)} | {calm} | {_share(calm_right, calm)} |")
    met = calm and calm_right / calm >= UNFLAGGED_RIGHT and n and fl / n <= FLAGGED_AT_MOST
    lines.append(f"\nTarget: right among not flagged >= {UNFLAGGED_RIGHT:.2f} with at most {FLAGGED_AT_MOST:.0%} "
                 f"flagged, over all sets: {'met' if met else 'missed'}.")
    front = report["frontier"]
    lines.append(f"\nWhat a review rule on these confidences could reach: with {FLAGGED_AT_MOST:.0%} flagged, "
                 f"the call is right on {front['independent']:.3f} of the other traces when they are ranked by "
                 f"the probability that the call is right (verdicts independent), {front['model']:.3f} when "
                 "ranked by a trace-level model fitted out of fold (local_calibration.review_frontier).")
    if report["golden"]:
        lines += ["", "Golden traces (tests/golden, hand-written, gate labelled; shipped models, not fitted on them):",
                  "", "| file | traces | flagged (needs_review) | share flagged | gate right | "
                  "gate right among not flagged |", "|---|---|---|---|---|---|"]
        for name, g in report["golden"].items():
            lines.append(f"| {name} | {g['n']} | {g['flagged']} | {_share(g['flagged'], g['n'])} | "
                         f"{_share(g['right'], g['n'])} | {_share(g['unflagged_right'], g['unflagged'])} "
                         f"({g['unflagged_right']} of {g['unflagged']}) |")
    for judge, bins in report["reliability"].items():
        lines += ["", f"Reliability of {judge} verdicts (out of fold; verdicts whose truth the labels settle):", "",
                  "| confidence | verdicts | mean confidence | share right |", "|---|---|---|---|"]
        for b in bins:
            shown = (f"{b['confidence']:.3f} | {b['accuracy']:.3f}" if b["n"] else "- | -")
            lines.append(f"| {b['lo']:.1f}–{b['hi']:.1f} | {b['n']} | {shown} |")
    speed = report["traces_per_second"]
    lines += ["", f"Throughput (shipped models, best of 3 cold passes): {report['traces']} traces in "
              f"{report['seconds']:.1f} CPU-s = {speed:.0f} traces/s on one core (target {SPEED_TARGET:.0f}: "
              f"{'met' if speed >= SPEED_TARGET else 'missed'}).",
              "Cross-validated log-loss (held-out folds, same weighting as the fit): " +
              ", ".join(f"{j} {v:.3f}" for j, v in report["cv_log_loss"].items()) + "."]
    return "\n".join(lines)


def with_llm(data: Path, limit: int | None, model: str | None) -> str:
    """Score the configured LLM judge on the first `limit` records of each set (nothing fitted)."""
    from veralith.observability.cost import CostScope

    lines = [f"{'set':34s} {'n':>4s} {'bal.acc':>8s} {'TPR':>6s} {'TNR':>6s} {'overlap@best':>12s}"]
    overrides = {"backend": "openai", **({"judge_model": model} if model else {})}
    with settings.override(**overrides), CostScope() as spent:
        for name in [*F_SETS, *S_SETS]:
            rows = local_fit.rows_of(data, name)[:limit]
            pairs = [(predict(name, row), local_fit.positive(name, row)) for row in rows]
            score, tpr, tnr = balanced(pairs)
            # No training folds here: the overlap threshold is the best one on these same records, a
            # bar the judge must clear even when the baseline is given the advantage.
            scored = [(overlap_score(name, row), local_fit.positive(name, row)) for row in rows]
            cut = _threshold(scored)
            over = balanced([(v < cut, y) for v, y in scored])[0]
            lines.append(f"{name:34s} {len(pairs):4d} {score:8.3f} {tpr:6.3f} {tnr:6.3f} {over:12.3f}")
    usd = "unknown" if spent.usd is None else f"${spent.usd:.4f}"
    lines.append(f"spent: {spent.calls} calls, {spent.input_tokens} input / {spent.output_tokens} output tokens, {usd}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = data_parser(__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="records per set (default: all)")
    parser.add_argument("--markdown", action="store_true", help="accepted for older commands: the report is "
                        "Markdown tables either way (pasted into docs/benchmarks.md)")
    parser.add_argument("--backend", choices=("local", "openai"), default="local",
                        help="local: cross-validate the offline judges; openai: score the configured LLM judge")
    parser.add_argument("--model", default=None, help="judge model for --backend openai (else VERALITH_JUDGE_MODEL)")
    parser.add_argument("--reference", action="store_true", help="context recall and answer correctness against "
                        "reference answers (SQuAD 2.0, ClapNQ, RAGChecker pairs): benchmarks/reference_quality.py")
    args = parser.parse_args(argv)
    if no_data(args.data):
        return 1
    if args.reference:
        import reference_quality

        print(reference_quality.report(args.data, args.limit))
        return 0
    if args.backend == "openai":
        print(with_llm(args.data, args.limit, args.model))
        return 0
    report = cross_validate(args.data, args.limit)
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
