"""Tests of leap_stream.core.intervals:

rolling quantile per source, pooled fallback, cache refresh.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from leap_stream.core.intervals import REFRESH_EVERY, ConformalIntervals


def test_default_before_min_samples() -> None:
    intervals = ConformalIntervals(min_samples=5, default_halfwidth=0.7)
    assert intervals.halfwidth("model") == 0.7
    for _ in range(4):
        intervals.learn_one("model", 0.1)
    assert intervals.halfwidth("model") == 0.7  # 4 < 5, pooled has 4 too
    intervals.learn_one("model", 0.1)
    assert intervals.halfwidth("model") == pytest.approx(0.1)
    assert ConformalIntervals().halfwidth("model") == pytest.approx(math.log(2.0))


def test_the_level_quantile_of_the_window() -> None:
    rng = np.random.default_rng(3)
    values = rng.exponential(0.2, 300)
    intervals = ConformalIntervals(level=0.8, window=100, min_samples=10)
    for v in values:
        intervals.learn_one("model", float(v))
    # the 80% quantile (linear interpolation) of the last 100 residuals only
    assert intervals.halfwidth("model") == pytest.approx(np.quantile(values[-100:], 0.8))
    assert intervals.halfwidth("model") != pytest.approx(np.quantile(values, 0.8))


def test_old_residuals_leave_the_window() -> None:
    intervals = ConformalIntervals(level=0.9, window=10, min_samples=1)
    for _ in range(10):
        intervals.learn_one("model", 1.0)
    assert intervals.halfwidth("model") == pytest.approx(1.0)
    for _ in range(10):
        intervals.learn_one("model", 0.05)
    assert intervals.halfwidth("model") == pytest.approx(0.05)


def test_each_source_keeps_its_own_window() -> None:
    intervals = ConformalIntervals(level=0.5, window=100, min_samples=3)
    for r in (0.01, 0.02, 0.03):
        intervals.learn_one("lineage_prior", r)
    for r in (1.0, 2.0, 3.0):
        intervals.learn_one("cold_start", r)
    assert intervals.halfwidth("lineage_prior") == pytest.approx(0.02)
    assert intervals.halfwidth("cold_start") == pytest.approx(2.0)


def test_a_sparse_source_falls_back_to_the_pooled_window() -> None:
    intervals = ConformalIntervals(level=0.5, window=100, min_samples=3)
    for r in (0.1, 0.2, 0.3):
        intervals.learn_one("model", r)
    intervals.learn_one("cold_start", 5.0)  # one residual: too few on its own
    pooled = float(np.quantile([0.1, 0.2, 0.3, 5.0], 0.5))
    assert intervals.halfwidth("cold_start") == pytest.approx(pooled)
    assert intervals.halfwidth("lineage_prior") == pytest.approx(pooled)  # never seen
    assert intervals.halfwidth("model") == pytest.approx(0.2)


def test_halfwidths_is_in_the_order_asked() -> None:
    intervals = ConformalIntervals(level=0.5, window=100, min_samples=1, default_halfwidth=9.0)
    intervals.learn_one("model", 0.5)
    intervals.learn_one("cold_start", 1.5)
    got = intervals.halfwidths(("cold_start", "model"))
    assert got.tolist() == pytest.approx([1.5, 0.5])


def test_halfwidths_cache_refreshes_after_refresh_every_residuals() -> None:
    sources = ("lineage_prior", "model", "cold_start")
    intervals = ConformalIntervals(level=0.5, window=1000, min_samples=1, default_halfwidth=0.9)
    assert intervals.halfwidths(sources).tolist() == [0.9, 0.9, 0.9]
    for _ in range(REFRESH_EVERY):
        intervals.learn_one("model", 0.25)
    fresh = [intervals.halfwidth(s) for s in sources]
    assert fresh == pytest.approx([0.25, 0.25, 0.25])  # prior, cold fall back to the pool
    assert intervals.halfwidths(sources).tolist() == pytest.approx(fresh)
    # between refreshes the cached answer may lag, but never by REFRESH_EVERY residuals
    for _ in range(REFRESH_EVERY):
        intervals.learn_one("lineage_prior", 0.01)
    assert intervals.halfwidths(sources).tolist() == pytest.approx(
        [intervals.halfwidth(s) for s in sources]
    )
    assert intervals.halfwidths(sources)[0] == pytest.approx(0.01)
