"""The risk that a configuration runs out of memory on a hardware type, learned from outcomes.

Eligibility (:mod:`leap_stream.core.eligibility`) keeps a type when the catalog's memory estimate
(:mod:`leap_stream.core.memory`) fits its usable memory. The estimate cannot know a job's
recompute choices, its allocator's fragmentation or a vendor runtime's reserve, so near the
limit some eligible types cannot run it; a first choice that cannot run costs a failed attempt.

:class:`MemoryRisk` learns, per model family, how often an attempt at a given **memory ratio**
(estimated need / usable memory) ran out of memory: every succeeded attempt is one that fit, every
``failure_reason = "oom"`` one that did not. Ratios are binned on a log scale; each bin's rate is
a Beta-smoothed mean, pooled with the all-families bin and, before any data, a prior that trusts
the estimate (a few percent just under the limit, nearly nothing well below it).

>>> risk = MemoryRisk()
>>> round(float(risk.predict_many("dense_llm", [0.3, 0.95])[0]), 3)
0.0
>>> for _ in range(40):
...     risk.learn_one("dense_llm", 0.95, out_of_memory=True)
...     risk.learn_one("dense_llm", 0.95, out_of_memory=False)
>>> [round(float(p), 2) for p in risk.predict_many("dense_llm", [0.3, 0.95])]
[0.0, 0.49]
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numba
import numpy as np

__all__ = ["MemoryRisk"]

# Bin edges of the memory ratio: fine near the limit, where the risk lives.
EDGES = np.array([0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0, 1.1, 1.25])
_EDGES = EDGES.tolist()  # (bisect's, for one ratio: numpy's searchsorted costs more there)
# Before any outcome: the estimate is trusted, less so near the limit (per bin, EDGES order
# with one more below and one above).
PRIOR_RATE = np.array([0.0, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.3, 0.6, 0.9])
# Pseudo-attempts of the prior (and of the all-families rate, for a family): few enough that a
# handful of failures at a ratio moves the risk there.
PRIOR_WEIGHT = 10.0
_ALL = "*"
_NO_COUNTS = np.zeros((2, 0))  # a key with no outcome yet: its level is skipped


class MemoryRisk:
    """Probability of an out-of-memory failure by family and memory ratio (see the module
    docstring)."""

    def __init__(self) -> None:
        # family -> [failures, attempts] per bin
        self._counts: dict[str, np.ndarray] = {}
        self.failures = 0

    def learn_one(self, family: str, ratio: float, *, out_of_memory: bool) -> None:
        """One attempt at this memory ratio: it ran out of memory, or it fit."""
        if not math.isfinite(ratio):
            return
        b = bisect.bisect_right(_EDGES, ratio)
        for key in (family, _ALL):
            counts = self._counts.get(key)
            if counts is None:
                counts = self._counts[key] = np.zeros((2, len(EDGES) + 1))
            counts[0, b] += out_of_memory
            counts[1, b] += 1.0
        self.failures += out_of_memory

    def rates(self, family: str) -> np.ndarray:
        """The out-of-memory rate of each bin for ``family``."""
        counts = self._counts
        return _pooled_rates(counts.get(_ALL, _NO_COUNTS), counts.get(family, _NO_COUNTS))

    def predict_many(self, family: str, ratios: Sequence[float] | np.ndarray) -> np.ndarray:
        """Out-of-memory probability at each memory ratio (NaN or infinite ratio: 0)."""
        return bin_probabilities(np.asarray(ratios, dtype=float), self.rates(family))


# Compiled: a dozen numpy calls on arrays of ten bins and a few dozen candidates, once a
# submission. Element by element the same arithmetic in the same order, so the same bits.
@numba.njit(cache=True)
def _pooled_rates(everyone: np.ndarray, family: np.ndarray) -> np.ndarray:
    """Each bin's rate: the prior, pooled with every family's outcomes, then with the family's
    (``[failures, attempts]`` per bin; no columns: none yet)."""
    rate = PRIOR_RATE.copy()
    for counts in (everyone, family):
        if counts.shape[1]:
            for b in range(rate.shape[0]):
                rate[b] = (counts[0, b] + PRIOR_WEIGHT * rate[b]) / (counts[1, b] + PRIOR_WEIGHT)
    return rate


@numba.njit(cache=True)
def bin_probabilities(ratios: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Each ratio's bin's rate (0 where the ratio is not finite)."""
    p = np.zeros(ratios.shape[0])
    for i in range(ratios.shape[0]):
        if np.isfinite(ratios[i]):
            p[i] = rate[np.searchsorted(EDGES, ratios[i], side="right")]
    return p
