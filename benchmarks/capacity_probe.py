"""Is the local faithfulness judge short of model capacity, or of information? Same features, two
model classes, measured side by side.

The shipped features (grounding.FEATURES) of every claim of the faithfulness dev sets, on the same
group folds as benchmarks/judge_quality.py, fitted three ways with scikit-learn: a logistic
regression and gradient-boosted trees of depth 2 and 3 (which can learn any interaction between
features, such as "a bare answer's coverage means more than a sentence's"). To compare model classes
on equal terms, all three get the same simple setup, which is *not* the shipped one: a claim of a
set labelled per response takes its response's label (no noisy-OR bag likelihood), the judge's rules
(a name or figure found nowhere, a contradiction) are left out, and a response is flagged when some
claim has p >= 0.5. Records carry the judge's weighting (each set, and each class within a set, the
same total weight). So only the rows' differences mean something, not their level against
judge_quality.py's table.

Needs scikit-learn, which the project does not depend on; run it in the environment of
benchmarks/embedding_probe.py:

    /tmp/probe/bin/python benchmarks/capacity_probe.py
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge_quality import balanced  # noqa: E402
from local_fit import F_SETS, K, Record, _weights, data_parser, faithfulness_records, no_data  # noqa: E402


def instances(records: list[Record], weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, label, weight) per claim; a response's weight is shared by its claims."""
    x, y, w = [], [], []
    for r, weight in zip(records, weights, strict=True):
        labels = r.labels if r.labels is not None else [r.positive] * len(r.x)
        for row, label in zip(r.x, labels, strict=True):
            x.append(row)
            y.append(label)
            w.append(weight / len(r.x))
    return np.array(x), np.array(y), np.array(w)


def cross_validate(records: list[Record], make: Callable[[], Any]) -> list[float]:
    """Balanced accuracy per set (F_SETS order), each fold fitted on the other four."""
    usable = [r for r in records if r.x]
    weights = _weights(usable)
    flagged: dict[int, bool] = {}
    for k in range(K):
        train = [(r, w) for r, w in zip(usable, weights, strict=True) if r.fold != k]
        x, y, w = instances([r for r, _ in train], np.array([w for _, w in train]))
        mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
        model = make()
        model.fit((x - mean) / scale, y, sample_weight=w / w.mean())
        for r in records:
            if r.fold == k:
                flagged[id(r)] = bool(r.x) and bool(
                    (model.predict_proba((np.array(r.x) - mean) / scale)[:, 1] >= 0.5).any())
    return [balanced([(flagged[id(r)], r.positive) for r in records if r.set == name])[0] for name in F_SETS]


def main(argv: list[str] | None = None) -> int:
    parser = data_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    if no_data(args.data):
        return 1
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    records = faithfulness_records(args.data)
    models: list[tuple[str, Callable[[], Any]]] = [
        ("logistic regression", lambda: LogisticRegression(C=10, max_iter=2000)),
        ("boosted trees, depth 2", lambda: HistGradientBoostingClassifier(max_depth=2, max_iter=200,
                                                                          learning_rate=0.05, random_state=0)),
        ("boosted trees, depth 3", lambda: HistGradientBoostingClassifier(max_depth=3, max_iter=300,
                                                                          learning_rate=0.05, random_state=0)),
    ]
    print("| model | " + " | ".join(F_SETS) + " | mean |\n" + "|---" * (len(F_SETS) + 2) + "|")
    for label, make in models:
        scores = cross_validate(records, make)
        print(f"| {label} | " + " | ".join(f"{s:.3f}" for s in scores) + f" | {np.mean(scores):.4f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
