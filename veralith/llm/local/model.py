"""The shipped logistic models: coefficients live in coefficients.json beside this file.

benchmarks/train_local.py fits them on the dev split of ../shared/data and writes that file;
the judges only read it. Keeping the numbers in data (not code) makes a retrain a one-file diff.
`override` swaps other coefficients in for a block of code, so a cross-validation fold is scored
by the very code the shipped judge runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

__all__ = ["Logistic", "load", "override"]

_PATH = Path(__file__).with_name("coefficients.json")
_override: dict[str, Logistic] | None = None


class Logistic:
    """p = sigmoid(bias + sum(w * (x - mean) / scale)); `threshold` is where a verdict flips.

    `calibrated(p)` is p mapped by the calibration fitted on out-of-fold scores (Platt scaling on
    the logit: sigmoid(intercept + slope * logit(p))): the probability used as a verdict's
    confidence. The verdict itself is taken on `p` and `threshold`.
    """

    def __init__(self, spec: dict) -> None:
        self.features: list[str] = list(spec["features"])
        self.weights: list[float] = [float(w) for w in spec["weights"]]
        self.bias = float(spec["bias"])
        self.means: list[float] = [float(v) for v in spec.get("means", [0.0] * len(self.features))]
        self.scales: list[float] = [float(v) or 1.0 for v in spec.get("scales", [1.0] * len(self.features))]
        self.threshold = float(spec.get("threshold", 0.5))
        self.version = str(spec.get("version", "1"))
        # Measured precision of verdicts a judge takes by rule rather than by the score (by rule
        # name); used as their confidence when the score alone would not have flagged the item.
        self.rules: dict[str, float] = {k: float(v) for k, v in spec.get("rules", {}).items()}
        calibration = spec.get("calibration") or {"slope": 1.0, "intercept": 0.0}
        self.slope, self.intercept = float(calibration["slope"]), float(calibration["intercept"])

    def probability(self, values: dict[str, float]) -> float:
        z = self.bias
        for name, w, mean, scale in zip(self.features, self.weights, self.means, self.scales, strict=False):
            z += w * (values.get(name, mean) - mean) / scale
        return _sigmoid(z)

    def calibrated(self, p: float) -> float:
        """`p` (from `probability`) as calibrated on out-of-fold scores; `p` itself when uncalibrated."""
        if self.slope == 1.0 and self.intercept == 0.0:
            return p
        p = min(max(p, _EPS), 1.0 - _EPS)
        return _sigmoid(self.intercept + self.slope * math.log(p / (1.0 - p)))


_EPS = 1e-9
_Z_MAX = 40.0   # exp() of more would overflow; the probability is 0 or 1 to double precision anyway


def _sigmoid(z: float) -> float:
    z = max(-_Z_MAX, min(_Z_MAX, z))
    return 1.0 / (1.0 + math.exp(-z))


@lru_cache(maxsize=1)
def _shipped() -> dict[str, Logistic]:
    spec = json.loads(_PATH.read_text(encoding="utf-8"))
    return {name: Logistic(model) for name, model in spec["models"].items()}


def load() -> dict[str, Logistic]:
    """The models by judge name ("faithfulness", "sufficiency"); the file is read once per process."""
    return _override if _override is not None else _shipped()


@contextmanager
def override(specs: dict[str, dict]) -> Iterator[None]:
    """Use these model specs (by judge name) instead of the shipped ones inside the block.

    Judges not named keep their shipped model. Not thread-safe: meant for the benchmark scripts,
    which score one fold at a time in one thread.
    """
    global _override
    previous = _override
    merged = dict(_shipped())
    merged.update({name: Logistic(spec) for name, spec in specs.items()})
    _override = merged
    try:
        yield
    finally:
        _override = previous
