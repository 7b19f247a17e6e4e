"""A ranking of candidate hardware types for one submission: what the core returns.

Columnar and cheap to build (numpy arrays, one entry per candidate, best first), so the replay
can score millions of them; :meth:`Ranking.to_record` turns one into the ``HardwareRanking`` Avro
record's dict shape for the rankings topic.

>>> from datetime import datetime, UTC
>>> import numpy as np
>>> r = rank_candidates(
...     job_id="job-1", lineage_id="lin-1", event_time=datetime(2025, 1, 1, tzinfo=UTC),
...     model_version="online@0", num_devices=8,
...     hardware=("A", "B", "C"), eligible=np.array([True, True, False]),
...     reasons=lambda i: "does not fit device memory" if i == 2 else None,
...     predicted=np.array([100.0, 300.0, 500.0]), lower=np.array([90.0, 270.0, 450.0]),
...     upper=np.array([110.0, 330.0, 550.0]), price=np.array([1.0, 2.0, 1.0]),
...     source=np.array(["model", "lineage_prior", "model"]),
... )
>>> r.ranked_hardware, r.top
(('B', 'A', 'C'), 'B')
>>> round(r.record()["candidates"][0]["predicted_cost_per_1k_samples"], 4)
0.0148
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numba
import numpy as np

__all__ = ["SOURCES", "Ranking", "cost_per_1k_samples", "rank_candidates"]

# Where a prediction came from: this lineage's own prior on that hardware; a transfer (the lineage
# has measured other hardware, carried over to this one); the model alone (the lineage has
# measured nothing yet: its first attempt); a cold start (the model has seen too little of this
# hardware type or model type to be trusted); the lookup baseline. Transfers are where a ranking
# earns its keep, so they are scored apart from first attempts.
SOURCES = ("lineage_prior", "transfer", "model", "cold_start", "lookup")


def cost_per_1k_samples(
    num_devices: int | np.ndarray, price_per_device_hour: np.ndarray, throughput: np.ndarray
) -> np.ndarray:
    """USD to process 1,000 samples: devices x price per device-hour / samples per hour x 1000."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(num_devices) * price_per_device_hour * 1000.0 / (throughput * 3600.0)


@dataclass(frozen=True, slots=True)
class Ranking:
    """A submission's candidates with their predictions, and ``order``: best first.

    Arrays are in candidate order (as the submission listed them, or catalog order); ``order``
    lists candidate indices best first: the eligible ones by predicted cost per sample, then the
    rest. Keeping arrays unpermuted keeps a ranking cheap to build on the hot path.
    """

    job_id: str
    lineage_id: str
    event_time: datetime
    model_version: str
    num_devices: int
    hardware: tuple[str, ...]
    eligible: np.ndarray  # bool
    reasons: Callable[[int], str | None]  # why candidate i is ineligible (None when eligible)
    predicted: np.ndarray  # samples/s; NaN where nothing was predicted
    lower: np.ndarray
    upper: np.ndarray
    price: np.ndarray  # USD per device-hour
    cost_per_1k: np.ndarray  # USD per 1,000 samples; NaN where ineligible or unpredicted
    source: np.ndarray  # str: where each prediction came from (SOURCES)
    order: np.ndarray  # candidate indices, best first
    ranked_count: int  # how many candidates got a rank (eligible, with a prediction)
    abstain_reason: str | None = None

    @property
    def abstained(self) -> bool:
        """True when nothing was ranked (no eligible candidate, or nothing to predict from)."""
        return self.abstain_reason is not None

    @property
    def top(self) -> str | None:
        """The best candidate, or None when the ranking abstained."""
        return None if self.abstained else self.hardware[self.order[0]]

    @property
    def ranked_hardware(self) -> tuple[str, ...]:
        """Candidate names, best first."""
        return tuple(self.hardware[i] for i in self.order)

    def record(self, event_id: str | None = None) -> dict[str, Any]:
        """The ``leap.v1.HardwareRanking`` record (dict shape, as fastavro encodes it)."""
        # whole columns to Python at once: per-element numpy scalars cost more than the ranking
        eligible = self.eligible.tolist()
        predicted = _optional(self.predicted, self.eligible)
        lower = _optional(self.lower, self.eligible)
        upper = _optional(self.upper, self.eligible)
        price = _optional(self.price)
        cost = _optional(self.cost_per_1k)
        source = self.source.tolist()
        candidates = [
            {
                "hardware_type": self.hardware[i],
                "rank": rank + 1 if rank < self.ranked_count else None,
                "eligible": eligible[i],
                "ineligible_reason": None if eligible[i] else self.reasons(i),
                "predicted_throughput": predicted[i],
                "throughput_lower": lower[i],
                "throughput_upper": upper[i],
                "price_per_device_hour": price[i] or 0.0,
                "predicted_cost_per_1k_samples": cost[i],
                "source": str(source[i]),
            }
            for rank, i in enumerate(self.order.tolist())
        ]
        return {
            "event_id": event_id or f"{self.job_id}/ranking",
            "event_time": self.event_time,
            "job_id": self.job_id,
            "lineage_id": self.lineage_id,
            "model_version": self.model_version,
            "abstained": self.abstained,
            "abstain_reason": self.abstain_reason,
            "candidates": candidates,
        }


def _optional(values: np.ndarray, keep: np.ndarray | None = None) -> list[float | None]:
    """``values`` as Python floats, None where not finite (or not ``keep``)."""
    ok = np.isfinite(values) if keep is None else np.isfinite(values) & keep
    return [v if k else None for v, k in zip(values.tolist(), ok.tolist(), strict=True)]


def rank_candidates(
    *,
    job_id: str,
    lineage_id: str,
    event_time: datetime,
    model_version: str,
    num_devices: int,
    hardware: tuple[str, ...],
    eligible: np.ndarray,
    reasons: Callable[[int], str | None],
    predicted: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    price: np.ndarray,
    source: np.ndarray,
    risk: np.ndarray | None = None,
) -> Ranking:
    """Order candidates by predicted cost per 1,000 samples (cheapest first).

    Eligible candidates with a prediction come first, cheapest first (ties keep candidate
    order, so the order is deterministic); then eligible ones without a prediction; then the
    ineligible ones, in the order given. The ranking abstains when no
    candidate can be ranked.

    ``risk`` (log scale, >= 0) makes the order conservative where a prediction is uncertain:
    candidates are ordered by ``cost x exp(risk)``. The argmin of noisy estimates favours the
    ones whose errors happen to flatter them (the winner's curse); charging for uncertainty
    keeps a barely-known type from winning on optimism alone. ``cost_per_1k`` stays the
    unadjusted prediction.
    """
    # numpy's exp, as before: numba's is the C library's, which differs in the last bit
    factor = None if risk is None else np.exp(risk)
    cost, order, ranked = _cost_and_order(eligible, price, predicted, num_devices, factor)
    abstain = None
    if ranked == 0:  # (a ranked candidate is eligible: no scan of the flags otherwise)
        if not eligible.any():
            abstain = "no eligible candidate: " + "; ".join(
                sorted({r for i in range(len(hardware)) if (r := reasons(i)) is not None})
            )
        else:
            abstain = "no prediction for any eligible candidate"
    return Ranking(
        job_id=job_id,
        lineage_id=lineage_id,
        event_time=event_time,
        model_version=model_version,
        num_devices=num_devices,
        hardware=hardware,
        eligible=eligible,
        reasons=reasons,
        predicted=predicted,
        lower=lower,
        upper=upper,
        price=price,
        cost_per_1k=cost,
        source=source,
        order=order,
        ranked_count=ranked,
        abstain_reason=abstain,
    )


# Compiled: numpy's dozen small calls here cost more than the arithmetic, twice a submission (the
# model's ranking and the lookup's). The same operations in the same order, so the same bits;
# error_model="numpy": a division by zero gives inf, as numpy's does, instead of raising.
@numba.njit(error_model="numpy", cache=True)
def _cost_and_order(
    eligible: np.ndarray,
    price: np.ndarray,
    predicted: np.ndarray,
    num_devices: int,
    factor: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Each candidate's cost per 1,000 samples (NaN where ineligible), the order (one stable
    sort: ranked by ``cost x factor``, then eligible without a prediction, then the ineligible;
    ties keep candidate order), and how many are ranked."""
    n = eligible.shape[0]
    cost = np.full(n, np.nan)
    key = np.full(n, np.nan)  # NaN sorts last
    ranked = 0
    for i in range(n):
        if not eligible[i]:
            continue
        # predicted is positive or NaN, so no error-state guard
        cost[i] = num_devices * price[i] * (1000.0 / 3600.0) / predicted[i]
        if np.isfinite(cost[i]):
            key[i] = cost[i] if factor is None else cost[i] * factor[i]
            ranked += 1
        else:
            key[i] = np.inf
    return cost, np.argsort(key, kind="mergesort"), ranked
