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

import statistics
from collections import deque
from collections.abc import Sequence

import numpy as np

__all__ = ["LookupTable"]


class LookupTable:
    """Median measured throughput per (model_type, hardware_type, num_devices)."""

    def __init__(self, window: int = 64) -> None:
        self.window = window
        self._values: dict[tuple[str, str, int], deque[float]] = {}
        self._medians: dict[tuple[str, str, int], float] = {}

    def __len__(self) -> int:
        return len(self._medians)

    def learn_one(
        self, model_type: str, hardware: str, num_devices: int, throughput: float
    ) -> None:
        """Record one measured throughput."""
        key = (model_type, hardware, num_devices)
        values = self._values.get(key)
        if values is None:
            values = self._values[key] = deque(maxlen=self.window)
        values.append(throughput)
        self._medians[key] = statistics.median(values)

    def predict_one(self, model_type: str, hardware: str, num_devices: int) -> float | None:
        """The median for this key, or None when the table has no entry."""
        return self._medians.get((model_type, hardware, num_devices))

    def predict_many(
        self, model_type: str, hardware: Sequence[str], num_devices: int
    ) -> np.ndarray:
        """Medians for each hardware type (NaN where the table has no entry)."""
        get = self._medians.get
        nan = float("nan")
        return np.fromiter(
            (get((model_type, h, num_devices), nan) for h in hardware),
            dtype=float,
            count=len(hardware),
        )
