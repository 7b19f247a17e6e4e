"""An ensemble of throughput models: the mean of their log-throughput predictions.

The online model and a nightly retrain miss in partly different places: the online model has
learned the latest completions, LightGBM the interactions a linear model cannot hold, and a
multi-pass river fit is closer to convergence. Their mean misses less than any of them, and a
ranking that reads smaller errors is less often won by a candidate whose error flatters it
(docs/nightly.md: on the last 30 nights of two 60-day fleets, 0.6 points more within 10% than
the best single model, and the lowest top-1 regret of them all).

The first member leads: its ``encoder`` encodes the jobs, and its counts of what it has seen
(``seen``, ``family_seen``) decide cold starts and the ranking's risk charge. Members are read,
never copied: an ensemble over the online model follows it as it learns.

>>> import math
>>> import numpy as np
>>> from leap_stream.core.catalog import default_catalog
>>> from leap_stream.core.features import FeatureEncoder
>>> from leap_stream.core.hardware import HardwareArrays
>>> from leap_stream.core.model import ThroughputModel
>>> encoder = FeatureEncoder(HardwareArrays.from_catalog(default_catalog()))
>>> job = encoder.job({"model_type": "resnet", "model_family": "cnn", "framework": "pytorch",
...     "param_count": 25_000_000, "global_batch_size": 2048, "seq_len": None,
...     "precision": "bf16", "num_devices": 8, "tensor_parallel": 1, "pipeline_parallel": 1})
>>> h100 = np.array([encoder.hw.index["H100-SXM"]])
>>> online, nightly = ThroughputModel(encoder), ThroughputModel(encoder)
>>> for _ in range(200):
...     nightly.learn_one(job, int(h100[0]), math.log(20_000.0))
>>> both = Ensemble([online, nightly])
>>> mean = (online.predict_many(job, h100) + nightly.predict_many(job, h100)) / 2
>>> bool(np.allclose(both.predict_many(job, h100), mean))
True
>>> both.seen is online.seen  # the online model leads
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from leap_stream.core.features import FeatureEncoder, JobFeatures

__all__ = ["ENSEMBLE", "Ensemble"]

ENSEMBLE = "ensemble"
"""The ensemble's name among the models champion/challenger chooses from."""


class Ensemble:
    """The mean of ``members``' log-throughput predictions, read by LeapCore as one model.

    Parameters
    ----------
    members
        Models with ``predict_many(job, positions)`` over the same hardware catalog (the
        online :class:`~leap_stream.core.model.ThroughputModel`, the nightly models); the first
        one leads (its encoder and counts are the ensemble's).
    """

    def __init__(self, members: Sequence[Any]) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one model")
        names = members[0].encoder.names
        if any(m.encoder.names != names for m in members[1:]):
            raise ValueError("the ensemble's models were trained over different hardware catalogs")
        self.members = tuple(members)

    @property
    def encoder(self) -> FeatureEncoder:
        return self.members[0].encoder

    @property
    def seen(self) -> np.ndarray:
        """Examples the leading model has learned per hardware type."""
        return self.members[0].seen

    @property
    def learned(self) -> int:
        return self.members[0].learned

    def family_seen(self, family: str) -> np.ndarray:
        """Examples the leading model has learned per hardware type for ``family``."""
        return self.members[0].family_seen(family)

    def predict_many(self, job: JobFeatures, positions: np.ndarray | None = None) -> np.ndarray:
        """log throughput of ``job`` on each catalog position in ``positions`` (None: all)."""
        return self.combine([member.predict_many(job, positions) for member in self.members])

    def combine(self, predictions: Sequence[np.ndarray]) -> np.ndarray:
        """The ensemble's prediction from its members' (in ``members`` order)."""
        total = predictions[0]
        for predicted in predictions[1:]:
            total = total + predicted
        return total / len(self.members)

    def learn_one(self, job: JobFeatures, position: int, log_throughput: float) -> None:
        """Members learn on their own (the online model) or from their next retrain."""
        raise TypeError("an Ensemble does not learn: its members do")
