"""The hardware catalog as column arrays, for vectorised work over every hardware type at once.

Both the fleet's ground truth and the core's eligibility and features read the catalog this way:
one numpy array per figure, indexed by the catalog's order.

>>> from datetime import datetime, UTC
>>> from leap_stream.core.catalog import default_catalog
>>> hw = HardwareArrays.from_catalog(default_catalog(), datetime(2025, 1, 1, tzinfo=UTC))
>>> len(hw) == len(default_catalog()), hw.index["H100-SXM"] == list(hw.names).index("H100-SXM")
(True, True)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from leap_stream.core.catalog import VENDORS, Catalog
from leap_stream.core.events import FRAMEWORKS, PRECISIONS

__all__ = ["EPOCH", "HardwareArrays"]

# Launch days count from here unless a caller (the fleet generator) names its own start.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class HardwareArrays:
    """The catalog as column arrays, indexed by hardware position (H types)."""

    names: np.ndarray
    vendor_index: np.ndarray
    vendor_names: np.ndarray
    peak_tflops: np.ndarray  # (H, len(PRECISIONS))
    supports: np.ndarray  # bool (H, len(FRAMEWORKS), len(PRECISIONS))
    memory_gb: np.ndarray
    memory_bw_tbps: np.ndarray
    interconnect_gbps: np.ndarray
    devices_per_node: np.ndarray
    scale_out_gbps: np.ndarray
    price_per_device_hour: np.ndarray
    launch_day: np.ndarray  # days after ``start`` (negative: launched before)
    index: dict[str, int] = field(default_factory=dict)  # name -> position

    @classmethod
    def from_catalog(cls, catalog: Catalog, start: datetime = EPOCH) -> HardwareArrays:
        """Column arrays of ``catalog``, with launch days counted from ``start``."""
        acc = list(catalog)
        start_day = start.date()
        return cls(
            names=np.array([a.name for a in acc]),
            vendor_index=np.array([VENDORS.index(a.vendor) for a in acc]),
            vendor_names=np.array([a.vendor for a in acc]),
            peak_tflops=np.array([[a.peak_tflops(p) for p in PRECISIONS] for a in acc]),
            supports=np.array(
                [[[a.supports(f, p) for p in PRECISIONS] for f in FRAMEWORKS] for a in acc]
            ),
            memory_gb=np.array([a.memory_gb for a in acc], dtype=float),
            memory_bw_tbps=np.array([a.memory_bw_tbps for a in acc], dtype=float),
            interconnect_gbps=np.array([a.interconnect_gbps for a in acc], dtype=float),
            devices_per_node=np.array([a.devices_per_node for a in acc], dtype=float),
            scale_out_gbps=np.array([a.scale_out_gbps for a in acc], dtype=float),
            price_per_device_hour=np.array([a.price_per_device_hour for a in acc], dtype=float),
            launch_day=np.array([(a.launch_date - start_day).days for a in acc], dtype=float),
            # interned, as the history's names are: a lookup by an event's name is by identity
            index={sys.intern(a.name): i for i, a in enumerate(acc)},
        )

    def __len__(self) -> int:
        return len(self.names)
