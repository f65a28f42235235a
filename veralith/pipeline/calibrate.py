"""Calibrate: the sufficiency threshold a knowledge base has earned from its own history.

Among the stored, done traces of a knowledge base that landed in `complete_grounded`, the
`calibration_percentile`-th percentile (default 10th) of their sufficiency_fraction becomes the
threshold once there are at least `calibration_min_traces` (default 20) of them; until then the
strict `sufficiency_fallback` (default 1.0) applies. The percentile is numpy's default linear
interpolation, h = (n - 1) * p / 100 between the values at ranks floor(h) and floor(h) + 1
(veralith.store.calibration has the exact definition and the index it reads).

The threshold only picks the HIGH or LOW wording of a suggestion; it never moves a trace between
cells, so a young knowledge base being strict costs wording, not correctness.
"""

from __future__ import annotations

from sqlite_utils import Database

from veralith.config import settings
from veralith.models import ThresholdSource
from veralith.store.calibration import percentile_threshold

__all__ = ["current_threshold"]


def current_threshold(knowledge_base: str, db: Database | None = None) -> tuple[float, ThresholdSource]:
    """(threshold, source) for `knowledge_base`. With `db=None` the fallback, without touching disk."""
    if db is not None:
        found = percentile_threshold(db, knowledge_base, percentile=settings.calibration_percentile,
                                     min_traces=settings.calibration_min_traces)
        if found is not None:
            return found[0], ThresholdSource.calibrated
    return settings.sufficiency_fallback, ThresholdSource.fallback
