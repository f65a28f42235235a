"""Calibrate: the sufficiency threshold a knowledge base has earned from its own history.

Among the stored, done traces of a knowledge base that landed in `complete_grounded`, the
`calibration_percentile`-th percentile (default 10th) of their sufficiency_fraction becomes the
threshold once there are at least `calibration_min_traces` (default 20) of them; until then the
strict `sufficiency_fallback` (default 1.0) applies. The percentile is numpy's default linear
interpolation, h = (n - 1) * p / 100 between the values at ranks floor(h) and floor(h) + 1.
The rule itself is `veralith.store.calibration.calibrate`, where the store's `stats` uses it too.

The threshold only picks the HIGH or LOW wording of a suggestion; it never moves a trace between
cells, so a young knowledge base being strict costs wording, not correctness.
"""

from __future__ import annotations

from veralith.config import settings
from veralith.models import ThresholdSource
from veralith.store.calibration import CalibrationData, calibrate

__all__ = ["current_threshold"]


def current_threshold(knowledge_base: str, store: CalibrationData | None = None) -> tuple[float, ThresholdSource]:
    """(threshold, source) for `knowledge_base` from `store` (any Store). With None the
    fallback, without touching disk."""
    if store is None:
        return settings.sufficiency_fallback, ThresholdSource.fallback
    found = calibrate(store, knowledge_base)
    return found.threshold, found.source
