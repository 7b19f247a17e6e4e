"""An example placement policy for :class:`~leap_stream.streaming.client.RankingSubscriber`.

It places each job on the service's first choice, the rank-1 candidate: the cheapest eligible
type by predicted cost per 1,000 samples (made conservative where a prediction is uncertain,
``docs/predictor.md``). When the ranking abstained it keeps the job's requested hardware, which
the ranking record does not carry, so the decision says "abstained" and why. Each decision is
one log line. ``leap-stream scheduler`` runs it.

>>> ranking = {"job_id": "j-1", "model_version": "online-120", "abstained": False,
...     "abstain_reason": None, "candidates": [
...         {"hardware_type": "MI300X", "rank": 1, "predicted_cost_per_1k_samples": 0.0123},
...         {"hardware_type": "H100-SXM", "rank": 2, "predicted_cost_per_1k_samples": 0.0150},
...         {"hardware_type": "v100-16g", "rank": None, "predicted_cost_per_1k_samples": None}]}
>>> choose(ranking)
'MI300X'
>>> describe(ranking)
'job j-1: MI300X at $0.0123 per 1k samples (model online-120)'
>>> abstained = {**ranking, "abstained": True, "abstain_reason": "no eligible candidate: oom"}
>>> choose(abstained) is None
True
>>> describe(abstained)
'job j-1: abstained: no eligible candidate: oom; keeps its requested hardware (model online-120)'
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["choose", "describe", "place"]

log = logging.getLogger("leap_stream.scheduler")


def _first(ranking: dict[str, Any]) -> dict[str, Any] | None:
    if ranking["abstained"]:
        return None
    return next((c for c in ranking["candidates"] if c["rank"] == 1), None)


def choose(ranking: dict[str, Any]) -> str | None:
    """The hardware type to place the job on, or None to keep its requested hardware.

    Parameters
    ----------
    ranking
        A HardwareRanking record, as decoded.

    Returns
    -------
    str or None
        The rank-1 candidate's ``hardware_type``; None when the ranking abstained (or, against
        the contract, ranked nothing).
    """
    first = _first(ranking)
    return None if first is None else first["hardware_type"]


def describe(ranking: dict[str, Any]) -> str:
    """The decision on ``ranking`` as one line: job id, choice, predicted cost, model version."""
    job, version = ranking["job_id"], ranking["model_version"]
    first = _first(ranking)
    if first is None:
        reason = ranking["abstain_reason"] or "no ranked candidate"
        return f"job {job}: abstained: {reason}; keeps its requested hardware (model {version})"
    cost = first["predicted_cost_per_1k_samples"]
    price = "an unknown cost" if cost is None else f"${cost:.4g}"
    return f"job {job}: {first['hardware_type']} at {price} per 1k samples (model {version})"


def place(ranking: dict[str, Any]) -> None:
    """The policy: log the decision on ``ranking`` (a real scheduler would act on it)."""
    log.info("%s", describe(ranking))
