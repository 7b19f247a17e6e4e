"""Champion/challenger in a running service: score every model on each completion, decide daily.

The replay plays :class:`~leap_stream.core.promotion.PromotionRule` over nights it scored after
the fact (``replay --nightly``). A running service needs the same rule fed as it goes: the
learner scores the online model and each published nightly model on every learn example, day
by day, and at the first example of a new day the rule decides who ranks from then on.

Several workers write the learn log, so an example can arrive after a later day has opened (a
worker that lags behind the others). It is scored on its own day while the next decision still
reads that day (the rule's window); older, it is counted in ``late`` and not scored. The decision
at a day's first example is taken on what has arrived by then.

Every model is scored the same way, on the same examples: its prediction of the example's
``target`` (log throughput net of the lineage's offset, what the models learn), within 10% of
the measured throughput when ``|exp(predicted - target) - 1| <= 0.1``. The lineage's priors and
transfer apply on top of whichever model serves, so they cancel out of the comparison. The
online model is scored just before it learns the example (prequentially, as at submission, but
with the completions learned in between: a small edge for the incumbent, which keeps the rule
conservative). A nightly model is scored only on examples that completed at or after its cutoff:
never on what it was trained on. Out-of-memory examples teach no throughput and are not scored.
Once a nightly model is scored, so is the ensemble (``ensemble``,
:class:`~leap_stream.core.ensemble.Ensemble`): the mean of the scored models' predictions.

>>> import math
>>> from leap_stream.core.catalog import default_catalog
>>> from leap_stream.core.features import FeatureEncoder
>>> from leap_stream.core.hardware import HardwareArrays
>>> from leap_stream.core.model import ThroughputModel
>>> from leap_stream.core.promotion import PromotionRule
>>> from datetime import datetime, timedelta, UTC
>>> encoder = FeatureEncoder(HardwareArrays.from_catalog(default_catalog()))
>>> board = ChampionChallenger(PromotionRule(margin=0.01, window_days=1, min_attempts=2))
>>> job = {"model_type": "resnet", "model_family": "cnn", "framework": "pytorch",
...     "param_count": 25_000_000, "global_batch_size": 2048, "seq_len": None,
...     "precision": "bf16", "num_devices": 8, "tensor_parallel": 1, "pipeline_parallel": 1}
>>> online = ThroughputModel(encoder)
>>> exact = ThroughputModel(encoder)  # a "nightly" model that learned the answer
>>> for _ in range(200):
...     exact.learn_one(encoder.job(job), encoder.hw.index["H100-SXM"], math.log(20_000.0))
>>> start = datetime(2026, 1, 1, tzinfo=UTC)
>>> board.add_challenger("river_batch", exact, start.timestamp() * 1000.0)
>>> def example(day):
...     return {"job": job, "hardware_type": "H100-SXM", "target": math.log(20_000.0),
...             "event_time": start + timedelta(days=day), "out_of_memory": False}
>>> [board.learn_one(example(0), online) for _ in range(3)]  # day 1: scored, nothing decided
[None, None, None]
>>> board.scores[-1][1]  # the ensemble: the mean of the two, far from both here
{'online': (0, 3), 'river_batch': (3, 3), 'ensemble': (0, 3)}
>>> decision = board.learn_one(example(1), online)  # the first example of day 2 decides
>>> decision.serving, decision.promoted, board.serving
('river_batch', True, 'river_batch')
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import numpy as np

from leap_stream.core.ensemble import ENSEMBLE
from leap_stream.core.promotion import Decision, PromotionRule, Score

__all__ = ["ONLINE", "Challenger", "ChampionChallenger"]

ONLINE = "online"
"""The online model's name on the scoreboard."""

WITHIN = 0.10
_EXP_CAP = 700.0  # e^700 is finite; any log error above it is a miss all the same


@dataclass(slots=True)
class Challenger:
    """A nightly model on the scoreboard: scored on completions from ``cutoff_ms`` on."""

    model: Any  # predict_many(job, positions) and an encoder, as LeapCore reads them
    cutoff_ms: float
    version: str


class ChampionChallenger:
    """Scores models on learn examples by day, and applies ``rule`` at each new day.

    Parameters
    ----------
    rule
        The promotion rule (its ``window_days`` trailing days are kept, and no more).
    serving
        Who serves at first: the ensemble (the online model alone until a nightly model is
        there), which beat every single model on the nights measured (docs/nightly.md).
    """

    def __init__(self, rule: PromotionRule | None = None, serving: str = ENSEMBLE) -> None:
        self.rule = rule or PromotionRule()
        self.serving = serving
        self.challengers: dict[str, Challenger] = {}
        # (day, {model: (within 10%, scored)}), oldest first; the last entry is the open day
        self.scores: list[tuple[date, dict[str, Score]]] = []
        self.late = 0  # examples of a day older than the window: not scored

    def add_challenger(self, name: str, model: Any, cutoff_ms: float, version: str = "") -> None:
        """Score ``model`` as ``name`` from now on (a newer nightly model of a name replaces the
        older one and continues its record)."""
        if name == ONLINE:
            raise ValueError(f"{ONLINE!r} names the online model, not a challenger")
        self.challengers[name] = Challenger(model, cutoff_ms, version or name)

    def learn_one(self, example: Mapping[str, Any], online: Any) -> Decision | None:
        """Score ``online`` and each challenger on ``example``; the rule's decision when the
        example opens a new day (None otherwise). Call before the online model learns it."""
        if example.get("out_of_memory"):
            return None
        when: datetime = example["event_time"]
        day = when.date()
        decision = None
        if self.scores and day > self.scores[-1][0]:
            decision = self.rule.decide(self.serving, [scores for _, scores in self.scores])
            self.serving = decision.serving
        if not self.scores or day > self.scores[-1][0]:
            self.scores.append((day, {}))
            del self.scores[: -(self.rule.window_days + 1)]
        tally = self._tally(day)
        position = online.encoder.hw.index.get(example["hardware_type"])
        if tally is None or position is None:
            return decision
        at = np.array([position])
        now_ms = when.timestamp() * 1000.0
        models = {ONLINE: online}
        for name, challenger in self.challengers.items():
            if now_ms >= challenger.cutoff_ms:
                models[name] = challenger.model
        predicted = {
            name: float(model.predict_many(model.encoder.job(example["job"]), at)[0])
            for name, model in models.items()
        }
        if len(predicted) > 1:  # the ensemble of what is scored (as Ensemble predicts)
            predicted[ENSEMBLE] = sum(predicted.values()) / len(predicted)
        for name, value in predicted.items():
            # (capped: a throughput the contract lets through, 1e-320 say, would overflow it)
            hit = abs(math.exp(min(value - example["target"], _EXP_CAP)) - 1.0) <= WITHIN
            within, scored = tally.get(name, (0, 0))
            tally[name] = (within + int(hit), scored + 1)
        return decision

    def _tally(self, day: date) -> dict[str, Score] | None:
        """The scores of ``day``: the open day's, or an earlier day's for a late example while
        the next decision reads that day (a day without an example yet gets its entry); None
        for a day no decision will read again."""
        days = [kept for kept, _ in self.scores]
        position = bisect_left(days, day)
        missing = position == len(days) or days[position] != day
        # the next decision pools the last window_days entries, the open day's among them
        if position < len(days) + missing - self.rule.window_days:
            self.late += 1
            return None
        if missing:
            self.scores.insert(position, (day, {}))
        return self.scores[position][1]

    def state(self) -> dict[str, Any]:
        """The record to resume from (the challengers' models travel on their own)."""
        return {"serving": self.serving, "scores": [(d, dict(s)) for d, s in self.scores]}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Resume from a :meth:`state` taken earlier."""
        self.serving = state["serving"]
        self.scores = [(d, dict(s)) for d, s in state["scores"]]
