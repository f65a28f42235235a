"""Fit the local backend's two logistic models and write veralith/llm/local/coefficients.json.

    .venv/bin/python benchmarks/train_local.py [--data DIR] [--dry-run] [--no-cv]

The data, the folds and the fit live in benchmarks/local_fit.py (shared with judge_quality.py);
this script fits on every dev record, calibrates each model's confidence on the out-of-fold scores
of the same 5 group folds (local_fit.out_of_fold, local_fit.calibration: each record scored by a
model fitted without it), and writes the file.

Instances, labels, weighting, sign constraints and the fixed L2 penalty are described there.

After writing the coefficients it prints the 5-fold group cross-validated figures of
benchmarks/judge_quality.py (`--no-cv` skips that). Deterministic: the same data gives the same file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_fit import (  # noqa: E402
    F_FEATURES,
    REPO,
    K,
    calibration,
    data_parser,
    faithfulness_records,
    fit,
    log_loss,
    no_data,
    out_of_fold,
    sufficiency_records,
)

from veralith.llm.local.grounding import rule_of  # noqa: E402

OUT = REPO / "veralith" / "llm" / "local" / "coefficients.json"


def main(argv: list[str] | None = None) -> int:
    parser = data_parser("fit the local backend's logistic models")
    parser.add_argument("--dry-run", action="store_true", help="print, do not write coefficients.json")
    parser.add_argument("--no-cv", dest="cv", action="store_false", help="skip the cross-validated report")
    args = parser.parse_args(argv)
    if no_data(args.data):
        return 1
    f_records = faithfulness_records(args.data)
    s_records, s_features = sufficiency_records(args.data)
    models = {"faithfulness": fit(f_records, F_FEATURES, rule=rule_of), "sufficiency": fit(s_records, s_features)}
    for judge, records, features, rule in (("faithfulness", f_records, F_FEATURES, rule_of),
                                           ("sufficiency", s_records, s_features, None)):
        models[judge]["calibration"] = calibration(records, out_of_fold(records, features, rule, k=K))
    for judge, spec in models.items():
        records = f_records if judge == "faithfulness" else s_records
        print(f"{judge}: fitted on {sum(len(r.x) for r in records)} instances (in-sample log-loss "
              f"{log_loss(records, spec):.3f}, not a result)")
        for name, weight in zip(spec["features"], spec["weights"], strict=False):
            print(f"    {name:12s} {weight:+.3f}")
        for name, precision in spec.get("rules", {}).items():
            print(f"    rule {name}: measured precision {precision:.3f} (its verdicts' confidence)")
        cal = spec["calibration"]
        print(f"    confidence: sigmoid({cal['intercept']:+.3f} {cal['slope']:+.3f} * logit(p)), fitted out of fold")
    if not args.dry_run:
        OUT.write_text(json.dumps({"trained_by": "benchmarks/train_local.py", "models": models}, indent=1) + "\n",
                       encoding="utf-8")
        print(f"wrote {OUT.relative_to(REPO)}")
    if args.cv:
        import judge_quality  # noqa: PLC0415 (benchmarks/ is on sys.path when run as a script)

        report = judge_quality.cross_validate(args.data, f_records=f_records, s_records=s_records,
                                              s_features=s_features)
        print(judge_quality.render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
