"""A synthetic mixed-vendor training fleet: model zoo, ground-truth physics and the generator.

The generator writes a history (one row per event) and an oracle (the true expected throughput of
every attempt on every hardware type) that look like a real fleet's: see ``docs/data.md``. The
truth shares no formula with the predictor's: the fleet has its own memory rule
(:mod:`~leap_stream.data.fleet.memory_truth`) and efficiencies no catalog figure explains
(:mod:`~leap_stream.data.fleet.hidden`).
"""

from leap_stream.core.hardware import HardwareArrays
from leap_stream.data.fleet.generator import FleetConfig, generate_fleet
from leap_stream.data.fleet.physics import expected_throughput
from leap_stream.data.fleet.zoo import FAMILIES, ModelZoo, build_zoo

__all__ = [
    "FAMILIES",
    "FleetConfig",
    "HardwareArrays",
    "ModelZoo",
    "build_zoo",
    "expected_throughput",
    "generate_fleet",
]
