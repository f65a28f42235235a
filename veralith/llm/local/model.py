"""The shipped logistic models: coefficients live in coefficients.json beside this file.

benchmarks/train_local.py fits them on the dev split of ../shared/data and writes that file;
the judges only read it. Keeping the numbers in data (not code) makes a retrain a one-file diff.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

__all__ = ["Logistic", "load"]

_PATH = Path(__file__).with_name("coefficients.json")


class Logistic:
    def __init__(self, spec: dict) -> None:
        self.features: list[str] = list(spec["features"])
        self.weights: list[float] = [float(w) for w in spec["weights"]]
        self.bias = float(spec["bias"])
        self.means: list[float] = [float(v) for v in spec.get("means", [0.0] * len(self.features))]
        self.scales: list[float] = [float(v) or 1.0 for v in spec.get("scales", [1.0] * len(self.features))]
        self.threshold = float(spec["threshold"])
        self.version = str(spec.get("version", "1"))

    def probability(self, values: dict[str, float]) -> float:
        z = self.bias
        for name, w, mean, scale in zip(self.features, self.weights, self.means, self.scales):
            z += w * (values[name] - mean) / scale
        z = max(-40.0, min(40.0, z))
        return 1.0 / (1.0 + math.exp(-z))


@lru_cache(maxsize=1)
def load() -> dict[str, Logistic]:
    """The shipped models by judge name ("faithfulness", "sufficiency"); read once per process."""
    spec = json.loads(_PATH.read_text(encoding="utf-8"))
    return {name: Logistic(model) for name, model in spec["models"].items()}
