"""The online throughput model: a river linear regressor on log throughput, scored in batches.

It learns ``log(throughput) - baseline`` (:mod:`leap_stream.features`) from every succeeded
completion with river's ``LinearRegression``; ``predict_many`` scores all of a submission's
candidates at once by reading the regressor's weights (one dict lookup per one-hot, numpy for
the rest) instead of one ``predict_one`` per candidate: the same numbers, an order of magnitude
faster. ``predict_one`` goes through river itself, and the tests hold the two equal.

>>> from leap_stream.catalog import default_catalog
>>> from leap_stream.features import FeatureEncoder
>>> from leap_stream.hardware import HardwareArrays
>>> model = ThroughputModel(FeatureEncoder(HardwareArrays.from_catalog(default_catalog())))
>>> job = model.encoder.job({"model_type": "resnet", "model_family": "cnn",
...     "framework": "pytorch", "precision": "bf16", "param_count": 25_000_000,
...     "global_batch_size": 2048, "seq_len": None, "num_devices": 8,
...     "tensor_parallel": 1, "pipeline_parallel": 1})
>>> h100 = model.encoder.hw.index["H100-SXM"]
>>> for _ in range(200):
...     model.learn_one(job, h100, math.log(20_000.0))
>>> round(math.exp(model.predict_one(job, h100)))
20000
"""

from __future__ import annotations

import math

import numpy as np
from river import linear_model, optim

from leap_stream.features import FeatureEncoder, JobFeatures

__all__ = ["ThroughputModel"]

# AdaGrad gives every one-hot its own step size: rare hardware and model types learn as fast as
# the common ones, which plain SGD starves.
LEARNING_RATE = 0.15


class ThroughputModel:
    """Predicts log throughput (samples/s) of a job on hardware types; learns online.

    River's regressor holds the weights; a dense numpy mirror of them, refreshed for the features
    each ``learn_one`` touches, lets ``predict_many`` score all candidates with a few array
    gathers.
    """

    def __init__(self, encoder: FeatureEncoder, learning_rate: float = LEARNING_RATE) -> None:
        self.encoder = encoder
        self.regressor = linear_model.LinearRegression(
            optimizer=optim.AdaGrad(learning_rate), intercept_lr=0.05, l2=0.0
        )
        self.learned = 0
        # observations per hardware type: how much the model knows of each (cold start)
        self.seen = np.zeros(len(encoder.hw), dtype=np.int64)
        self._column: dict[str, int] = {}
        self._mirror = np.zeros(1024)
        # per (family, framework, precision): feature columns of every hardware type's one-hots
        self._onehot_columns: dict[tuple[str, str, str], np.ndarray] = {}
        self._device_columns = self._columns([f"hw={h}:log_devices" for h in encoder.names])

    def _columns(self, names: list[str]) -> np.ndarray:
        """Mirror columns of feature ``names`` (new names get a zero weight)."""
        column = self._column
        for name in names:
            if name not in column:
                column[name] = len(column)
        if len(column) > len(self._mirror):
            self._mirror = np.r_[self._mirror, np.zeros(max(len(column), len(self._mirror)))]
        return np.array([column[name] for name in names], dtype=np.int64)

    def predict_many(self, job: JobFeatures, positions: np.ndarray) -> np.ndarray:
        """log throughput of ``job`` on each catalog position in ``positions``."""
        key = (job.family, job.framework, job.precision)
        onehots = self._onehot_columns.get(key)
        if onehots is None:
            keys = self.encoder.onehot_keys(job)
            flat = self._columns([k for per_hw in keys for k in per_hw])
            onehots = self._onehot_columns[key] = flat.reshape(len(keys), -1)
        shared_names = list(job.shared)
        numeric = self.encoder.numeric(job, positions)
        columns = self._columns(shared_names + list(numeric))
        mirror = self._mirror
        shared_values = np.fromiter(job.shared.values(), dtype=float, count=len(shared_names))
        weights = mirror[columns]
        score = self.regressor.intercept + float(weights[: len(shared_names)] @ shared_values)
        for w, values in zip(weights[len(shared_names) :], numeric.values(), strict=True):
            score = score + w * values
        score = score + mirror[onehots[positions]].sum(axis=1)
        score = score + mirror[self._device_columns[positions]] * job.log_devices
        return self.encoder.baseline(job, positions) + score

    def predict_one(self, job: JobFeatures, position: int) -> float:
        """The same prediction for one candidate, through river's own ``predict_one``."""
        x = self.encoder.pair(job, position)
        baseline = float(self.encoder.baseline(job, np.array([position]))[0])
        return baseline + self.regressor.predict_one(x)

    def learn_one(self, job: JobFeatures, position: int, log_throughput: float) -> None:
        """Learn from one measured throughput (already net of the lineage's own offset)."""
        if not math.isfinite(log_throughput):
            return
        x = self.encoder.pair(job, position)
        baseline = float(self.encoder.baseline(job, np.array([position]))[0])
        self.regressor.learn_one(x, log_throughput - baseline)
        names = list(x)
        get = self.regressor._weights.get  # river's VectorDict: read, never written here
        self._mirror[self._columns(names)] = [get(name, 0.0) for name in names]
        self.learned += 1
        self.seen[position] += 1
