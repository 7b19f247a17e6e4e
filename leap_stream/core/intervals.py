"""Prediction intervals calibrated online: split conformal on recent log residuals, per source.

Each prediction source (lineage prior, transfer, model, cold start) errs differently, so each
keeps its own rolling window of absolute log residuals; the interval is
``prediction x exp(+-q)`` with ``q`` the window's ``level`` quantile. Until a source has
``min_samples`` residuals it falls back to the pooled window, then to a wide default.

>>> intervals = ConformalIntervals(level=0.9, window=100, min_samples=10)
>>> for r in [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.10]:
...     intervals.learn_one("model", r)
>>> round(intervals.halfwidth("model"), 2)
0.09
"""

from __future__ import annotations

import math

import numpy as np
from river import stats

__all__ = ["ConformalIntervals"]

POOLED = "*"
REFRESH_EVERY = 32


class ConformalIntervals:
    """Rolling conformal half-widths (log scale) per prediction source."""

    def __init__(
        self,
        level: float = 0.9,
        window: int = 2000,
        min_samples: int = 50,
        default_halfwidth: float = math.log(2.0),
    ) -> None:
        self.level = level
        self.window = window
        self.min_samples = min_samples
        self.default_halfwidth = default_halfwidth
        self._quantiles: dict[str, stats.RollingQuantile] = {}
        self._counts: dict[str, int] = {}
        self._learned = 0
        self._cache: dict[tuple[str, ...], np.ndarray] = {}

    def learn_one(self, source: str, abs_log_residual: float) -> None:
        """Record how far off one prediction of ``source`` was (|log(actual / predicted)|)."""
        for key in (source, POOLED):
            quantile = self._quantiles.get(key)
            if quantile is None:
                quantile = self._quantiles[key] = stats.RollingQuantile(self.level, self.window)
            quantile.update(abs_log_residual)
            self._counts[key] = self._counts.get(key, 0) + 1
        self._learned += 1
        if self._learned % REFRESH_EVERY == 0:
            for sources in self._cache:
                self._cache[sources] = self._compute(sources)

    def halfwidths(self, sources: tuple[str, ...]) -> np.ndarray:
        """Half-widths of several sources at once, as an array in the same order.

        Read on every submission, so cached, and refreshed after every ``REFRESH_EVERY``
        residuals (a window of thousands barely moves in a few dozen). Refreshed when learning,
        not when read: the answer depends on the residuals learned, never on when it is asked,
        so a model rebuilt from the same residuals (a restarted worker) answers the same.
        """
        cached = self._cache.get(sources)
        if cached is None:
            cached = self._cache[sources] = self._compute(sources)
        return cached

    def _compute(self, sources: tuple[str, ...]) -> np.ndarray:
        return np.array([self.halfwidth(s) for s in sources])

    def halfwidth(self, source: str) -> float:
        """The interval's half-width on the log scale for a prediction of ``source``."""
        for key in (source, POOLED):
            if self._counts.get(key, 0) >= self.min_samples:
                return float(self._quantiles[key].get())
        return self.default_halfwidth
