"""The benchmark code behind docs/benchmarks.md's judge-quality figures: module layering and the
word-overlap baselines. Every text here is invented; nothing needs the network or the shared data."""

from __future__ import annotations

import ast
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import judge_quality  # noqa: E402
from local_fit import Record  # noqa: E402


def _imports(name: str) -> set[str]:
    tree = ast.parse((BENCH / f"{name}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_shared_fitting_code_imports_neither_script() -> None:
    # local_fit is the one module both scripts build on; an import back into either would bring
    # the circle back (judge_quality -> train_local -> judge_quality).
    assert not _imports("local_fit") & {"judge_quality", "train_local"}
    assert "train_local" not in _imports("judge_quality")
    assert "train_local" not in _imports("local_backend")


def _scored(n_pos: int, n_neg: int, name: str, pos_at: float, neg_at: float) -> list[tuple[float, bool, str]]:
    # Scores spread evenly around each class centre, so the two classes overlap a little.
    pos = [(pos_at + 0.3 * (i / max(n_pos - 1, 1) - 0.5), True, name) for i in range(n_pos)]
    neg = [(neg_at + 0.3 * (i / max(n_neg - 1, 1) - 0.5), False, name) for i in range(n_neg)]
    return pos + neg


def test_pooled_cut_sits_between_the_classes_whatever_their_sizes() -> None:
    balanced_cut = judge_quality._pooled_cut(_scored(50, 50, "a", 0.3, 0.7))
    assert balanced_cut == pytest.approx(0.5, abs=0.01)
    # Ten times more good records: class weighting keeps the cut where it was.
    assert judge_quality._pooled_cut(_scored(20, 200, "a", 0.3, 0.7)) == pytest.approx(balanced_cut, abs=0.01)


def test_pooled_cut_gives_each_set_the_same_weight() -> None:
    # A large set wants a cut near 0.5, a small one near 0.8: pooled, with equal set weights, the
    # cut lands between them, not on the large set's own.
    cut = judge_quality._pooled_cut(_scored(500, 500, "large", 0.3, 0.7) + _scored(5, 5, "small", 0.6, 1.0))
    assert 0.55 < cut < 0.75


def test_pooled_cut_never_flags_on_more_overlap() -> None:
    # Failures with more overlap than good answers: the fitted slope has the wrong sign, so nothing
    # is flagged rather than flagging the well-grounded answers.
    assert judge_quality._pooled_cut(_scored(30, 30, "a", 0.8, 0.2)) == -math.inf


def _record(name: str, response: str, positive: bool, fold: int) -> Record:
    row = {"query": "Where does the ferry sail?", "response": response,
           "context": ["The Pellworth ferry sails to Dunmore Island from the old harbour every morning."]}
    return Record(name, row, f"{name}-{fold}-{positive}", positive, fold=fold)


def test_baseline_reports_pooled_per_set_and_in_sample_thresholds() -> None:
    grounded = "The ferry sails to Dunmore Island from the old harbour."
    invented = "The Corvane airship departs Quillon Spire at dusk with lanterns."
    records = [_record(name, text, text is invented, k)
               for name in ("faithfulness_halueval_qa", "ragtruth_qa")
               for k in range(judge_quality.K) for text in (grounded, invented)]
    result = judge_quality.baseline(records)
    assert set(result) == {"faithfulness_halueval_qa", "ragtruth_qa"}
    for name, figures in result.items():
        assert set(figures) == {"pooled", "per_set", "in_sample"}, name
        # Perfectly separable by overlap: every protocol gets both classes right.
        assert figures == {"pooled": 1.0, "per_set": 1.0, "in_sample": 1.0}, name


def _write_sets(folder: Path) -> None:
    import json

    from local_fit import F_SETS

    context = ["The Pellworth ferry sails to Dunmore Island from the old harbour every morning. "
               "Tickets cost nine euros at the kiosk beside the pier."]
    answers = [("The ferry sails from the old harbour. Tickets cost nine euros.", False),
               ("The ferry sails from the new marina. Tickets cost twelve euros.", True)]
    for name in F_SETS:
        with (folder / f"{name}.dev.jsonl").open("w", encoding="utf-8") as handle:
            for i, (response, bad) in enumerate(answers):
                labels = {"claim_label": "not_supported" if bad else "supported"} if name == "claims_wice" \
                    else {"hallucinated": bad, "hallucinated_spans": [[0, len(response)]] if bad else []}
                row = {"id": f"{name}-{i}", "query": "" if name == "claims_wice" else "Where does the ferry sail from?",
                       "context": context, "response": response, "labels": labels}
                handle.write(json.dumps(row) + "\n")


def test_records_carry_the_judges_own_features_and_the_extras(tmp_path: Path) -> None:
    from local_fit import F_SETS, SPAN_SETS, faithfulness_records, query_of

    from veralith.llm.local.grounding import FEATURES, claim_features
    from veralith.llm.tasks import ClaimIn

    _write_sets(tmp_path)
    plain = faithfulness_records(tmp_path)
    extended = faithfulness_records(tmp_path, extra=lambda claim, query, ctx, a: {"probe": float(len(claim.text))})
    assert [r.set for r in plain] == [name for name in F_SETS for _ in range(2)]
    for r, e in zip(plain, extended, strict=True):
        assert r.x == e.x and not r.analyses          # the hook adds, never changes the fitted features
        assert len(e.analyses) == len(e.x) >= 2       # two sentences, two claims, one analysis each
        assert all("probe" in a.features for a in e.analyses)
        assert (r.labels is not None) == (r.set in SPAN_SETS)
        # Both answers share a query and a context: one group, one fold.
        assert r.fold == plain[plain.index(r) // 2 * 2].fold
    first = plain[0]
    texts = [c for c in first.row["context"]]
    feats = claim_features(ClaimIn(id="c1", text="The ferry sails from the old harbour."), query_of(first.row), texts)
    assert first.x[0] == [feats[f] for f in FEATURES]


def test_reliability_bins_count_confidence_against_being_right() -> None:
    import local_calibration

    bins = local_calibration.reliability([(0.95, True), (0.95, False), (1.0, True), (0.55, True), (0.05, False)])
    assert len(bins) == 10
    assert bins[9]["n"] == 3 and bins[9]["accuracy"] == pytest.approx(2 / 3)   # 1.0 falls in the top bin
    assert bins[5]["n"] == 1 and bins[0]["n"] == 1 and bins[0]["accuracy"] == 0.0
    assert bins[3]["n"] == 0 and bins[3]["accuracy"] is None


def test_a_trace_is_flagged_only_when_a_low_confidence_verdict_decides_its_call() -> None:
    import local_calibration

    from veralith.models import Claim, EvaluationResult, FaithfulnessJudgment, Relation, Status, Verdict

    def result(*judged: tuple[Relation, float]) -> EvaluationResult:
        claims = [Claim(id=f"k{i}", text="x") for i in range(1, len(judged) + 1)]
        faith = [FaithfulnessJudgment(claim_id=c.id, verdict=Verdict.Y if rel is Relation.supported else Verdict.N,
                                      relation=rel, reasoning="", confidence=conf)
                 for c, (rel, conf) in zip(claims, judged, strict=True)]
        return EvaluationResult(query="q", context=[], response="x", claims=claims, faithfulness=faith,
                                status=Status(execution="success", availability="assessed", quality_gate="pass",
                                              reason="r", summary="s"), backend="local", judge_model="m")

    ok, bad = Relation.supported, Relation.unsupported
    name = "ragtruth_qa"
    assert local_calibration.decision_flagged(name, result((ok, 0.95), (ok, 0.6)))      # a shaky pass
    assert not local_calibration.decision_flagged(name, result((ok, 0.6), (bad, 0.9)))  # the fail rests on 0.9
    assert local_calibration.decision_flagged(name, result((ok, 0.9), (bad, 0.55)))
    assert not local_calibration.decision_flagged(name, result((bad, 0.55), (bad, 0.6)))  # no single flip decides


def test_the_review_frontier_ranks_traces_by_how_sure_the_call_is() -> None:
    import local_calibration

    # A failure call is wrong only if every failing verdict is wrong and every passing one right.
    assert local_calibration.call_probability([(True, 0.6), (True, 0.7), (False, 0.9)]) == pytest.approx(
        1 - 0.4 * 0.3 * 0.9)
    assert local_calibration.call_probability([(False, 0.9), (False, 0.8), (False, None)]) == pytest.approx(0.72)
    # Surer calls are right: the surest half is all right, whichever ranking.
    traces = [dict(set="ragtruth_qa", fold=i % 5, right=conf >= 0.75, verdicts=[(False, conf)])
              for i, conf in enumerate(0.5 + 0.5 * j / 40 for j in range(40))]
    front = local_calibration.review_frontier(traces, cap=0.5, folds=5)
    assert front["independent"] == 1.0 and front["model"] == 1.0


def test_calibration_recovers_a_known_miscalibration() -> None:
    import random

    from local_fit import calibration

    rng = random.Random(7)
    # Scores twice as extreme as the truth: the true log-odds are half the score's.
    records, oof = [], {}
    for i in range(400):
        z = rng.uniform(-4, 4)
        y = rng.random() < 1 / (1 + math.exp(-z / 2))
        r = Record("set", {}, f"g{i}", y, [[0.0]], [y])
        records.append(r)
        oof[id(r)] = [1 / (1 + math.exp(-z))]
    fitted = calibration(records, oof)
    assert fitted["slope"] == pytest.approx(0.5, abs=0.15)
    assert abs(fitted["intercept"]) < 0.3
