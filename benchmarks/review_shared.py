"""The offline judge against the sufficiency dev sets of ../shared/data, taken as if they were a
team's labels: each record judged and stored, its answerability recorded as a reviewer's sufficiency
label (with the code `veralith label` runs), then `veralith agreement`'s figures and the sufficiency
threshold fitted to the labels.

    .venv/bin/python benchmarks/review_shared.py [--data DIR] [--limit N]

Method (nothing is scored on what it was fitted on):

* The shipped sufficiency model was fitted on these dev records, so it is not used: as in
  benchmarks/judge_quality.py, 5 group folds; for each, the sufficiency model is fitted (with its
  calibration) on the other four folds, and the held-out records are judged with it
  (veralith.llm.local.model.override) and stored in knowledge base `<set>`. (Only the sufficiency
  verdicts are labelled here, and they do not depend on the faithfulness model.)
* A label is given only where it means one thing: a query the judge reads as one sub-question gets
  `sufficiency q1` = Y when the set says the context answers it, N when not. Queries split into
  several sub-questions are left unlabelled and counted (a set's label is about the whole query).
* The sufficiency threshold fitted to the labels is scored out of fold (veralith.store.calibration
  .cross_validated: 5 folds by trace), beside the threshold from the judge's own verdicts.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import local_calibration  # noqa: E402
import local_fit  # noqa: E402
from local_fit import S_SETS, K, data_parser, no_data, query_of  # noqa: E402


def main() -> int:
    parser = data_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="records per set (default: all)")
    args = parser.parse_args()
    if no_data(args.data):
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(VERALITH_DB_PATH=str(Path(tmp) / "shared.db"), VERALITH_BACKEND="local",
                          VERALITH_SPOOL_DIR=str(Path(tmp) / "spool"))
        import veralith
        from veralith.cli.agreeing import calibration_figures, labelled_pairs
        from veralith.config import settings
        from veralith.llm.local.model import override
        from veralith.review.agreement import agreement
        from veralith.review.verdicts import make_label
        from veralith.store import open_store
        from veralith.store.labels import add_labels

        settings.reload()
        s_records, s_features = local_fit.sufficiency_records(args.data, args.limit)
        store = open_store()
        labels, split = [], {name: 0 for name in S_SETS}
        for k in range(K):
            s_spec = local_calibration.calibrated_fit([r for r in s_records if r.fold != k], s_features)
            with override({"sufficiency": s_spec}):
                for r in s_records:
                    if r.fold != k:
                        continue
                    result = veralith.evaluate(query_of(r.row), r.row["context"], r.row["response"] or "",
                                               knowledge_base=r.set)
                    if len(result.sub_questions) != 1:
                        split[r.set] += 1
                        continue
                    labels.append(make_label(result, "sufficiency", "q1", "N" if r.positive else "Y",
                                             reviewer=f"{r.set} annotators", source="jsonl"))
        store.write(add_labels, labels)
        with settings.override(labels_min=30):
            report = {"split_left_unlabelled": split, "calibration": store.read(calibration_figures)}
            for name in S_SETS:
                pairs = labelled_pairs(store, kb=name)
                report[name] = agreement(pairs, min_labels=30).to_json()["judges"].get("sufficiency")
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
