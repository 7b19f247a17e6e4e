"""The baseline the published system replaced: a lookup table of median measured throughput.

One entry per (model type, hardware type, device count): the median of the most recent
``window`` measured throughputs. It predicts only where it has an entry and abstains elsewhere.

>>> table = LookupTable()
>>> for x in (100.0, 120.0, 110.0):
...     table.learn_one("resnet", "H100-SXM", 8, x)
>>> table.predict_one("resnet", "H100-SXM", 8), table.predict_one("resnet", "H100-SXM", 16)
(110.0, None)
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["LookupTable"]


class LookupTable:
    """Median measured throughput per (model_type, hardware_type, num_devices)."""

    def __init__(self, window: int = 64) -> None:
        self.window = window
        # key -> its recent throughputs, oldest first, and the same values sorted
        self._values: dict[tuple[str, str, int], tuple[deque[float], list[float]]] = {}
        # (model_type, num_devices) -> {hardware_type: median}: one lookup finds a job's row
        self._medians: dict[tuple[str, int], dict[str, float]] = {}
        self._entries = 0

    def __len__(self) -> int:
        return self._entries

    def learn_one(
        self, model_type: str, hardware: str, num_devices: int, throughput: float
    ) -> None:
        """Record one measured throughput."""
        key = (model_type, hardware, num_devices)
        values = self._values.get(key)
        if values is None:
            values = self._values[key] = (deque(), [])
            self._entries += 1
        recent, ordered = values
        if len(recent) == self.window:  # the oldest leaves both
            del ordered[bisect.bisect_left(ordered, recent.popleft())]
        recent.append(throughput)
        bisect.insort(ordered, throughput)
        middle = len(ordered) // 2  # (statistics.median's arithmetic, without its sort)
        median = (
            ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        )
        if median == math.inf:  # two halves near the float's largest: their sum overflowed
            median = ordered[middle - 1] / 2 + ordered[middle] / 2
        self._medians.setdefault((model_type, num_devices), {})[hardware] = median

    def predict_one(self, model_type: str, hardware: str, num_devices: int) -> float | None:
        """The median for this key, or None when the table has no entry."""
        return self._medians.get((model_type, num_devices), {}).get(hardware)

    def predict_many(
        self,
        model_type: str,
        hardware: Sequence[str],
        num_devices: int,
        index: Mapping[str, int] | None = None,
    ) -> np.ndarray:
        """Medians for each hardware type (NaN where the table has no entry).

        ``index`` (hardware type -> position in ``hardware``) saves building one per call.
        """
        predicted = np.full(len(hardware), np.nan)
        row = self._medians.get((model_type, num_devices))
        if row:  # a row holds the few types this job has run on: walk it, not the candidates
            if index is None:
                index = {h: i for i, h in enumerate(hardware)}
            for h, value in row.items():
                i = index.get(h)
                if i is not None:
                    predicted[i] = value
        return predicted
