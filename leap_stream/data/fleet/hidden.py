"""Efficiency effects no catalog figure explains: the part of the truth a predictor cannot derive.

Three static draws per seed (their own generator, ``[seed, 0x300]``), each a multiplier of a
job's whole step rate (software reaches memory-bound kernels and collectives too, not only the
matrix units):

- **Affinity** of a model type for a hardware type: log-normal with sigma ``AFFINITY_SIGMA``,
  half of its variance shared by every type of one vendor (``AFFINITY_VENDOR_SHARE``): a model
  whose kernels suit one AMD part tends to suit the others, so it is partly learnable across a
  vendor's types, never from the spec sheet.
- **Kernel maturity** of a newly launched type, beyond the documented launch ramp of
  :mod:`leap_stream.data.fleet.physics`: each type starts ``deficit`` (uniform in
  ``LAUNCH_DEFICIT``) below its mature efficiency, and the deficit fades as ``exp(-t / tau)``
  with ``tau`` uniform in ``DEFICIT_DAYS`` days after launch, a rate of its own per type.
- **Team software stacks**: each team's containers, compiler flags and library pins make it a
  log-normal (sigma ``TEAM_STACK_SIGMA``) better or worse user of each vendor; the submission
  names its team, as a scheduler knows whose job it is, not what its stack is worth.

>>> from leap_stream.core.catalog import default_catalog
>>> hw = HardwareArrays.from_catalog(default_catalog())
>>> world = HiddenWorld.draw(seed=1, n_model_types=360, hw=hw, n_teams=300)
>>> world.affinity.shape, world.team_stack.shape
((360, 46), (300, 6))
>>> bool(abs(np.log(world.affinity).std() - AFFINITY_SIGMA) < 0.01)
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from leap_stream.core.catalog import VENDORS
from leap_stream.core.hardware import HardwareArrays

__all__ = [
    "AFFINITY_SIGMA",
    "AFFINITY_VENDOR_SHARE",
    "DEFICIT_DAYS",
    "LAUNCH_DEFICIT",
    "TEAM_STACK_SIGMA",
    "HiddenWorld",
]

# Model-type x hardware-type affinity: as large as the per-type tuning spread of the zoo (0.15),
# the size of the kernel-choice differences between parts that benchmarks show.
AFFINITY_SIGMA = 0.15
# Share of its log-variance common to a vendor's types (the rest is per type): half.
AFFINITY_VENDOR_SHARE = 0.5
# Initial kernel deficit of a type at launch, and how many days it takes to fade by 1/e: new
# parts launch 5-30% short of their later kernels and catch up within one to four months.
LAUNCH_DEFICIT = (0.05, 0.30)
DEFICIT_DAYS = (30.0, 120.0)
# Team software stacks per vendor: smaller than the lineage's own spread (0.20), since teams
# share a platform.
TEAM_STACK_SIGMA = 0.08


@dataclass(frozen=True)
class HiddenWorld:
    """The hidden efficiency draws of one seed."""

    affinity: np.ndarray  # (model types, H) multiplier
    team_stack: np.ndarray  # (teams, vendors) multiplier
    launch_deficit: np.ndarray  # (H,) share of efficiency missing at launch
    deficit_days: np.ndarray  # (H,) e-folding time of the deficit, days
    launch_day: np.ndarray  # (H,) launch day of each type, as in the generator's HardwareArrays
    vendor_index: np.ndarray  # (H,)

    @classmethod
    def draw(cls, seed: int, n_model_types: int, hw: HardwareArrays, n_teams: int) -> HiddenWorld:
        """Draw the hidden world, deterministically per seed."""
        rng = np.random.default_rng([seed, 0x300])
        n_hw = len(hw)
        shared = rng.normal(0.0, 1.0, (n_model_types, len(VENDORS)))[:, hw.vendor_index]
        own = rng.normal(0.0, 1.0, (n_model_types, n_hw))
        log_affinity = AFFINITY_SIGMA * (
            np.sqrt(AFFINITY_VENDOR_SHARE) * shared + np.sqrt(1 - AFFINITY_VENDOR_SHARE) * own
        )
        team_stack = np.exp(rng.normal(0.0, TEAM_STACK_SIGMA, (n_teams, len(VENDORS))))
        return cls(
            affinity=np.exp(log_affinity),
            team_stack=team_stack,
            launch_deficit=rng.uniform(*LAUNCH_DEFICIT, n_hw),
            deficit_days=rng.uniform(*DEFICIT_DAYS, n_hw),
            launch_day=hw.launch_day.copy(),
            vendor_index=hw.vendor_index.copy(),
        )

    def kernel_maturity(self, day: np.ndarray) -> np.ndarray:
        """(N, H) multiplier of each type on each ``day``: 1 - deficit x exp(-t / tau), t the
        days since its launch.

        Before launch the type cannot run; the value there is the launch-day one.
        """
        since = np.maximum(np.asarray(day, dtype=float)[:, None] - self.launch_day[None, :], 0.0)
        return 1.0 - self.launch_deficit[None, :] * np.exp(-since / self.deficit_days[None, :])

    def efficiency(self, model: np.ndarray, team: np.ndarray, day: np.ndarray) -> np.ndarray:
        """(N, H) hidden multiplier of attempts of model types ``model`` by teams ``team``."""
        return (
            self.affinity[model]
            * self.team_stack[team][:, self.vendor_index]
            * self.kernel_maturity(day)
        )
