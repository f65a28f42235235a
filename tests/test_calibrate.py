"""Per-knowledge-base calibration of the sufficiency threshold, on each store."""

from __future__ import annotations

import statistics

import pytest
from store_support import scalar, sql
from test_store import make_result
from work_support import claim, save_result

from veralith.config import settings
from veralith.models import FailureCell, ThresholdSource
from veralith.pipeline import calibrate
from veralith.store import ops
from veralith.store.calibration import linear_percentile, rank_of

# 25 fractions, stored shuffled; sorted, ranks 2 and 3 hold 0.5 and 0.75.
FRACTIONS = [0.0, 0.25, 0.5, 0.75] + [0.8 + i / 100 for i in range(21)]


def current_threshold(kb, store=None):
    """The orchestrator's threshold: the store's calibration, or the fallback without one."""
    return calibrate.current_threshold(kb) if store is None else store.read(ops.current_threshold, kb)


def fill(store, fractions, *, kb="docs", cell=FailureCell.complete_grounded):
    for f in reversed(fractions):
        save_result(store, make_result(cell, sufficiency_fraction=f, knowledge_base=kb))
    return store


def test_25_complete_grounded_traces_give_the_exact_10th_percentile(store):
    db = fill(store, FRACTIONS)
    # h = (25 - 1) * 10 / 100 = 2.4: 0.5 + 0.4 * (0.75 - 0.5) = 0.6, as numpy.percentile(x, 10)
    assert current_threshold("docs", db) == (0.6, ThresholdSource.calibrated)
    assert statistics.quantiles(FRACTIONS, n=10, method="inclusive")[0] == pytest.approx(0.6, abs=1e-15)


def test_19_traces_are_not_enough(store):
    db = fill(store, FRACTIONS[:19])
    assert current_threshold("docs", db) == (1.0, ThresholdSource.fallback)
    fill(store, FRACTIONS[19:20])
    assert current_threshold("docs", db)[1] is ThresholdSource.calibrated  # the 20th calibrates


def test_only_done_complete_grounded_traces_of_the_same_kb_count(store):
    db = fill(store, FRACTIONS)
    fill(store, [0.01] * 30, kb="other")
    fill(store, [0.01] * 30, cell=FailureCell.complete_ungrounded)
    fill(store, [0.01] * 30, cell=None)
    assert current_threshold("docs", db) == (0.6, ThresholdSource.calibrated)
    assert current_threshold("other", db) == (0.01, ThresholdSource.calibrated)
    # A trace being re-evaluated (running) drops out until its new result is stored.
    lowest = scalar(store, "SELECT id FROM traces WHERE knowledge_base = 'docs' AND sufficiency_fraction = 0")
    sql(store, "UPDATE traces SET status = 'pending', lease_pid = NULL WHERE id = ?", [lowest])
    assert claim(store, lowest)
    assert current_threshold("docs", db)[0] == pytest.approx(0.75 + 0.3 * (0.8 - 0.75))


def test_settings_drive_percentile_minimum_and_fallback(store):
    db = fill(store, FRACTIONS[:10])
    with settings.override(calibration_min_traces=10, calibration_percentile=50):
        # h = 9 * 50 / 100 = 4.5: halfway between ranks 4 (0.8) and 5 (0.81)
        assert current_threshold("docs", db) == (0.805, ThresholdSource.calibrated)
    with settings.override(sufficiency_fallback=0.4):
        assert current_threshold("docs", db) == (0.4, ThresholdSource.fallback)


def test_without_a_database_the_fallback_is_used_and_nothing_is_written(tmp_path):
    assert current_threshold("docs") == (1.0, ThresholdSource.fallback)
    assert not (tmp_path / "veralith.db").exists()


@pytest.mark.parametrize("n,p,rank", [(25, 10, 2), (20, 10, 1), (1, 10, 0), (11, 100, 10), (11, 0, 0)])
def test_rank_definition(n, p, rank):
    assert rank_of(n, p) == rank


def test_interpolation_matches_the_numpy_default():
    data = sorted([0.13, 0.77, 0.5, 0.99, 0.31, 0.62, 0.05])
    for p in (0, 10, 25, 50, 90, 100):
        lo = rank_of(len(data), p)
        hi = min(lo + 1, len(data) - 1)
        h = (len(data) - 1) * p / 100
        assert linear_percentile(data[lo], data[hi], len(data), p) == pytest.approx(
            data[lo] + (h - lo) * (data[hi] - data[lo]), abs=1e-15)
