"""The online throughput model: a river linear regressor on log throughput, scored in batches.

It learns ``log(throughput) - baseline`` (:mod:`leap_stream.core.features`) from every succeeded
completion with river's ``LinearRegression``; ``predict_many`` scores all of a submission's
candidates at once by reading the regressor's weights (one dict lookup per one-hot, numpy for
the rest) instead of one ``predict_one`` per candidate: the same numbers, an order of magnitude
faster. ``predict_one`` goes through river itself, and the tests hold the two equal.

>>> from leap_stream.core.catalog import default_catalog
>>> from leap_stream.core.features import FeatureEncoder
>>> from leap_stream.core.hardware import HardwareArrays
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
from typing import Any

import numpy as np
from river import linear_model, optim

from leap_stream.core.features import FeatureEncoder, JobFeatures

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
        # observations per family and hardware type: how much it knows of each pairing
        self.seen_by_family: dict[str, np.ndarray] = {}
        self._column: dict[str, int] = {}
        self._mirror = np.zeros(1024)
        # per job key: mirror columns of its shared, numeric and (per hardware) one-hot features
        self._job_columns: dict[tuple[str, str, str, str], tuple[np.ndarray, ...]] = {}
        self._device_columns = self._columns([f"hw={h}:log_devices" for h in encoder.names])

    def __getstate__(self) -> dict[str, Any]:
        # per-job column lists are a cache over ``_column``: rebuilt on first use
        return {**self.__dict__, "_job_columns": {}}

    def _columns(self, names: list[str]) -> np.ndarray:
        """Mirror columns of feature ``names`` (new names get a zero weight)."""
        column = self._column
        for name in names:
            if name not in column:
                column[name] = len(column)
        if len(column) > len(self._mirror):
            self._mirror = np.r_[self._mirror, np.zeros(max(len(column), len(self._mirror)))]
        return np.array([column[name] for name in names], dtype=np.int64)

    def _columns_of(self, job: JobFeatures) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mirror columns of a job's shared, numeric and per-hardware one-hot features."""
        columns = self._job_columns.get(job.key)
        if columns is None:
            onehot_names = [k for per_hw in self.encoder.onehot_keys(job) for k in per_hw]
            columns = self._job_columns[job.key] = (
                self._columns(list(job.shared_names)),
                self._columns(list(job.numeric_names)),
                self._columns(onehot_names).reshape(len(self.encoder.names), -1),
            )
        return columns

    def predict_many(self, job: JobFeatures, positions: np.ndarray | None = None) -> np.ndarray:
        """log throughput of ``job`` on each catalog position in ``positions`` (None: all)."""
        shared_columns, numeric_columns, onehot_columns = self._columns_of(job)
        device_columns = self._device_columns
        if positions is not None:
            onehot_columns = onehot_columns[positions]
            device_columns = device_columns[positions]
        mirror = self._mirror
        scalar = self.regressor.intercept + float(mirror[shared_columns] @ job.shared_values)
        return (
            self.encoder.baseline(job, positions)
            + mirror[numeric_columns] @ self.encoder.numeric(job, positions)
            + mirror[onehot_columns].sum(axis=1)
            + mirror[device_columns] * job.log_devices
            + scalar
        )

    def predict_one(self, job: JobFeatures, position: int) -> float:
        """The same prediction for one candidate, through river's own ``predict_one``."""
        x = self.encoder.pair(job, position)
        baseline = float(self.encoder.baseline(job)[position])
        return baseline + self.regressor.predict_one(x)

    def learn_one(self, job: JobFeatures, position: int, log_throughput: float) -> None:
        """Learn from one measured throughput (already net of the lineage's own offset)."""
        if not math.isfinite(log_throughput):
            return
        # A zero-valued feature gets a zero gradient: leaving it out changes no weight and
        # spares the optimizer's per-feature loop.
        x = {name: value for name, value in self.encoder.pair(job, position).items() if value}
        baseline = float(self.encoder.baseline(job)[position])
        self.regressor.learn_one(x, log_throughput - baseline)
        # refresh the mirror for exactly the features river just updated
        self._columns_of(job)  # registers every feature of this job's pairs
        column = self._column
        get = self.regressor._weights.get  # river's VectorDict: read, never written here
        self._mirror[[column[name] for name in x]] = [get(name, 0.0) for name in x]
        self.learned += 1
        self.seen[position] += 1
        self.family_seen(job.family)[position] += 1

    def family_seen(self, family: str) -> np.ndarray:
        """Observations of each hardware type for ``family`` (a live array: do not modify)."""
        seen = self.seen_by_family.get(family)
        if seen is None:
            seen = self.seen_by_family[family] = np.zeros(len(self.encoder.hw), dtype=np.int64)
        return seen
