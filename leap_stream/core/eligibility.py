"""Which candidate hardware types a submission can run on, and why not the others.

A candidate is eligible when it is in the catalog, has launched by the submission time, supports
the job's framework and precision, and has the device memory the configuration needs
(:mod:`leap_stream.core.memory`). When the submission names candidates, only those are considered.

>>> from datetime import datetime, UTC
>>> from leap_stream.core.catalog import default_catalog
>>> rules = EligibilityRules(default_catalog())
>>> job = {"event_time": datetime(2025, 1, 1, tzinfo=UTC), "framework": "pytorch",
...        "precision": "bf16", "param_count": 70_000_000_000, "num_devices": 64,
...        "tensor_parallel": 8, "pipeline_parallel": 1, "global_batch_size": 256,
...        "seq_len": 4096, "model_family": "dense_llm",
...        "candidate_hardware": ["H100-SXM", "L4", "X"]}
>>> check = rules.check(job)
>>> [(name, bool(ok)) for name, ok in zip(check.names, check.eligible)]
[('H100-SXM', True), ('L4', False), ('X', False)]
>>> check.reason(2)
"'X' is not in the hardware catalog"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from leap_stream.core.catalog import Catalog
from leap_stream.core.events import FRAMEWORKS, PRECISIONS
from leap_stream.core.hardware import EPOCH, HardwareArrays
from leap_stream.core.memory import USABLE_FRACTION, required_memory_gb

__all__ = [
    "ELIGIBLE",
    "NOT_LAUNCHED",
    "TOO_LITTLE_MEMORY",
    "UNKNOWN",
    "UNSUPPORTED",
    "Eligibility",
    "EligibilityRules",
]


MEMORY_CACHE_SIZE = 100_000
_ALL_KNOWN = np.zeros(0, dtype=bool)  # (no flags: every candidate is a catalog type)

# Why a candidate is ineligible, checked in this order (the first failing rule is the reason).
ELIGIBLE, UNKNOWN, NOT_LAUNCHED, UNSUPPORTED, TOO_LITTLE_MEMORY = range(5)


@dataclass(frozen=True, slots=True)
class Eligibility:
    """Candidates of one submission: catalog positions (-1: unknown), verdicts and reasons.

    Reasons are kept as codes and worded only when asked for (:meth:`reason`): most rankings
    are scored, not read.
    """

    names: tuple[str, ...]
    positions: np.ndarray  # int, into the catalog; -1 for a name the catalog lacks
    eligible: np.ndarray  # bool
    codes: np.ndarray  # ELIGIBLE or the first rule that failed
    memory_needed_gb: float
    framework: str
    precision: str
    rules: EligibilityRules

    @property
    def index(self) -> dict[str, int]:
        """Candidate position of each named hardware type."""
        return {name: i for i, name in enumerate(self.names)}

    @property
    def reasons(self) -> tuple[str | None, ...]:
        """Every candidate's reason (None when eligible)."""
        return tuple(self.reason(i) for i in range(len(self.names)))

    def reason(self, i: int) -> str | None:
        """Why candidate ``i`` is ineligible, in words (None when it is eligible)."""
        code = self.codes[i]
        if code == ELIGIBLE:
            return None
        name, pos = self.names[i], int(self.positions[i])
        if code == UNKNOWN:
            return f"{name!r} is not in the hardware catalog"
        if code == NOT_LAUNCHED:
            return f"not launched until {self.rules.launch_dates[pos].isoformat()}"
        if code == UNSUPPORTED:
            return f"does not support {self.framework} at {self.precision}"
        have = self.rules.hw.memory_gb[pos] * USABLE_FRACTION
        return f"needs {self.memory_needed_gb:.0f} GB per device, {have:.0f} GB usable"


class EligibilityRules:
    """The eligibility rules over one catalog, vectorised over its hardware types."""

    def __init__(self, catalog: Catalog) -> None:
        self.hw = HardwareArrays.from_catalog(catalog)
        self.all_positions = np.arange(len(self.hw))
        self.all_names = tuple(self.hw.index)  # (its interned names, in catalog order)
        self.launch_dates = [a.launch_date for a in catalog]
        self.usable_memory = self.hw.memory_gb * USABLE_FRACTION
        self._memory: dict[tuple[Any, ...], float] = {}

    def check(self, job: dict[str, Any]) -> Eligibility:
        """Eligibility of each candidate of ``job`` (a JobSubmitted record)."""
        hw = self.hw
        listed = job.get("candidate_hardware")
        if listed is None:
            names, positions, known = self.all_names, self.all_positions, None
            pos = positions
        else:
            names = tuple(listed)
            if len(set(names)) < len(names):  # listed twice: one candidate, ranked once
                names = tuple(dict.fromkeys(names))
            positions = np.array([hw.index.get(n, -1) for n in names], dtype=np.int64)
            known = positions >= 0
            pos = np.where(known, positions, 0)

        framework, precision = job["framework"], job["precision"]
        supported = self._supported(framework, precision)[pos]
        day = (job["event_time"] - EPOCH).total_seconds() / 86_400.0
        need = self.memory_needed_gb(job)
        codes, eligible = _verdicts(
            pos,
            _ALL_KNOWN if known is None else known,
            supported,
            self.usable_memory,
            hw.launch_day,
            need,
            day,
        )
        return Eligibility(names, positions, eligible, codes, need, framework, precision, self)

    def memory_needed_gb(self, job: Mapping[str, Any]) -> float:
        """The memory ``job`` needs per device (what :meth:`check` compares with each type's)."""
        precision = job["precision"]
        config = (
            job["param_count"],
            precision if precision in PRECISIONS else "fp32",
            job["num_devices"],
            job["tensor_parallel"],
            job["pipeline_parallel"],
            job["global_batch_size"],
            job.get("seq_len"),
            job["model_family"],
        )
        need = self._memory.get(config)
        if need is None:  # lineages resubmit the same configuration: remember a few
            if len(self._memory) >= MEMORY_CACHE_SIZE:
                self._memory.clear()
            need = self._memory[config] = float(required_memory_gb(*config))
        return need

    def _supported(self, framework: str, precision: str) -> np.ndarray:
        """Which catalog types support ``framework`` at ``precision`` (all False if unknown)."""
        if framework in FRAMEWORKS and precision in PRECISIONS:
            return self.hw.supports[:, FRAMEWORKS.index(framework), PRECISIONS.index(precision)]
        return np.zeros(len(self.hw), dtype=bool)


# Compiled: six numpy calls on a few dozen candidates, once a submission.
@numba.njit(cache=True)
def _verdicts(
    positions: np.ndarray,
    known: np.ndarray,
    supported: np.ndarray,
    usable_memory: np.ndarray,
    launch_day: np.ndarray,
    need: float,
    day: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's code and whether it is eligible. ``positions`` in the catalog (0 for
    a name it lacks), ``known``: which are catalog types (empty: all), ``supported``: which
    support the job's framework and precision."""
    n = positions.shape[0]
    codes = np.empty(n, dtype=np.int64)
    for i in range(n):
        p = positions[i]
        # the first rule that fails names the reason: later rules override earlier ones
        code = TOO_LITTLE_MEMORY if need > usable_memory[p] else ELIGIBLE
        if not supported[i]:
            code = UNSUPPORTED
        if launch_day[p] > day:
            code = NOT_LAUNCHED
        if known.shape[0] and not known[i]:
            code = UNKNOWN
        codes[i] = code
    return codes, codes == ELIGIBLE
