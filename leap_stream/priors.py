"""Prior throughput of a lineage: what earlier attempts of the same training job measured.

A lineage's state is a plain dict (JSON-able, so a changelog-backed table can hold it):
``{hardware_type or "*": [residual_sum, weight, count, last_time_ms]}``. Each succeeded attempt
adds its residual, ``log(measured) - log(model prediction)``, to the entry of the hardware it ran
on and to the lineage-wide entry ``"*"``, both decayed by age (half-life
``HALF_LIFE_DAYS``). A residual captures what the model cannot see: the job's own efficiency.

The offset added to a prediction is a shrunk, recency-weighted mean: on hardware the lineage has
run on, that hardware's own residuals (lineage x hardware effects included); elsewhere, the
lineage-wide mean, transferred through the model.

>>> state = update_prior(None, "H100-SXM", residual=0.2, time_ms=0)
>>> state = update_prior(state, "H100-SXM", residual=0.3, time_ms=3_600_000)
>>> offsets, same = prior_offsets(state, {"H100-SXM": 0, "MI300X": 1}, 2, now_ms=7_200_000)
>>> offsets.round(3).tolist(), same.tolist()
([0.244, 0.233], [True, False])
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = [
    "HALF_LIFE_DAYS",
    "LINEAGE_KEY",
    "lineage_offset",
    "prior_offsets",
    "update_prior",
]

HALF_LIFE_DAYS = 14.0
LINEAGE_KEY = "*"
# Shrinkage (pseudo-observations of residual zero): the ratio of measurement noise to the spread
# of true offsets. Small on the same hardware (a repeat measures almost the same thing), larger
# across hardware (lineage x hardware effects do not transfer).
SHRINK_SAME_HARDWARE = 0.05
SHRINK_TRANSFER = 0.15
_DAY_MS = 86_400_000.0


def _decay(entry: list[float], now_ms: float) -> float:
    return 0.5 ** (max(now_ms - entry[3], 0.0) / _DAY_MS / HALF_LIFE_DAYS)


def _mean(entry: list[float] | None, now_ms: float, shrink: float) -> float:
    if entry is None:
        return 0.0
    d = _decay(entry, now_ms)
    return entry[0] * d / (entry[1] * d + shrink)


def update_prior(
    state: dict[str, list[float]] | None, hardware: str, residual: float, time_ms: float
) -> dict[str, list[float]]:
    """Add one measured residual of ``hardware`` to a lineage's state (a new dict if None)."""
    state = {} if state is None else state
    for key in (hardware, LINEAGE_KEY):
        entry = state.get(key)
        if entry is None:
            state[key] = [residual, 1.0, 1, time_ms]
        else:
            d = _decay(entry, time_ms)
            state[key] = [entry[0] * d + residual, entry[1] * d + 1.0, entry[2] + 1, time_ms]
    return state


def lineage_offset(state: dict[str, list[float]] | None, now_ms: float) -> float:
    """The lineage-wide offset (log scale): how much better this job runs than the model thinks."""
    if not state:
        return 0.0
    return _mean(state.get(LINEAGE_KEY), now_ms, SHRINK_TRANSFER)


def prior_offsets(
    state: dict[str, list[float]] | None, index: Mapping[str, int], n: int, now_ms: float
) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (log scale) for ``n`` candidates, and whether each comes from the same hardware.

    ``index`` maps a hardware type to its candidate position; types not in it are ignored.
    """
    if not state:
        return np.zeros(n), np.zeros(n, dtype=bool)
    offsets = np.full(n, _mean(state.get(LINEAGE_KEY), now_ms, SHRINK_TRANSFER))
    same = np.zeros(n, dtype=bool)
    for name, entry in state.items():  # a handful of entries: cheaper than one per candidate
        i = index.get(name)
        if i is not None:
            offsets[i] = _mean(entry, now_ms, SHRINK_SAME_HARDWARE)
            same[i] = True
    return offsets, same
