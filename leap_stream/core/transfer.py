"""What related jobs measured on both: a job's speed on one hardware type from its speed on another.

A lineage that ran on hardware A and now goes to B is predicted from its measurement on A and an
estimate of the ratio B / A for it. The model gives one ratio: ``model(B) - model(A)`` on the log
scale. Lineages that ran on both give another, the ratio predictor's: what they measured.
:class:`PairwiseTransfer` keeps the measured ratios, and learns how much to trust each.

Ratios are kept as **efficiency** ratios, ``(log measured - log roofline)`` on B minus that on A,
so that they are stationary (the roofline of :mod:`leap_stream.core.features` is a fixed function
of the spec sheet and the configuration: jobs of other sizes still tell the same story) and never
go stale as the model learns. Each ordered pair (A, B) keeps an exponentially weighted mean over
its last ``window`` observations at three levels, the model type, its family and all jobs, each
shrunk towards the next one up by its number of observations. A fourth level reads the model
type's ratios **near the job's own configuration** (:func:`config_coordinates`: batch per
device, devices, sequence, parallelism): the roofline does not say how well a small batch fills
a big part, so a model type's ratio between two types moves with its batch (Gavel's ResNet-18
runs 7.6 times faster on a P100 than on a K80 at 16 samples and 3.2 times at 64).

The two estimates are blended with the weight that minimises the blend's mean squared error,
from both errors' running second moments (their variances and covariance), measured online on
every new observation before it is learned (prequentially): where the model already knows the
ratio (a big fleet, common types) it keeps the say; where it does not (a new fleet, few
measurements, effects no spec sheet explains), what related jobs measured takes over. The two
miss alike (both read the spec sheet's prior through the same lineages), which inverse squared
errors alone ignore: they gave the measured ratios 0.32 of the say on a 60-day fleet and 0.82
on Gavel, where 0.17 and 0.96 minimise the error. A pair nobody has measured keeps the model's
ratio.

>>> import numpy as np
>>> pairs = PairwiseTransfer(["A", "B", "C"])
>>> for _ in range(30):  # the model says B is as efficient as A; jobs measure 35% more on B
...     pairs.learn_one("resnet", "cnn", reference=0, hardware=1, measured=0.3, model=0.0)
>>> model = np.zeros(3)  # the model's efficiency ratios from A, for a new job
>>> pairs.correction("resnet", "cnn", reference=0, model=model).round(2).tolist()
[0.0, 0.28, 0.0]
>>> pairs.correction("resnet", "cnn", reference=1, model=model).round(2).tolist()  # and back
[-0.28, 0.0, 0.0]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numba
import numpy as np

from leap_stream.core.features import RecentCache

__all__ = ["PairwiseTransfer", "config_coordinates"]

# Pseudo-observations of the parent level's value at each level (model type, family; the
# all-jobs level stands alone): how many of a pair's own observations it takes before they
# count as much as the level above. One observation's noise (two runs, two lineage x hardware
# effects: ~0.1 on the log scale) against the spread of true effects between types (~0.1-0.2)
# puts it at a few.
PRIOR_WEIGHT = 4.0
# A pair's mean forgets at this many observations: enough to average the noise down, few enough
# to follow software releases.
WINDOW = 200.0
# Both squared errors start from this (log scale, ~ a 30% miss), their covariance from 0 (the
# blend starts as inverse squared errors weigh), and all forget at the same pace.
INITIAL_SQUARED_ERROR = 0.09
ERROR_WINDOW = 500.0
# The spread of a pair's ratios before it has this many observations at a level, and a floor
# (run-to-run noise of two measurements): used to weigh a lineage's references.
DEFAULT_SPREAD = 0.04
MIN_SPREAD_WEIGHT = 3.0
MIN_SPREAD = 0.002
# The configuration-local level: a model type's ratios near this job's configuration (batch per
# device, devices, sequence, tensor and pipeline parallelism, in doublings). An observation
# weighs exp(-sharpness x its L1 distance), and the model type's mean counts as one more
# observation LOCAL_PRIOR_DISTANCE doublings away, so a job with no neighbour reads the mean.
# How fast a ratio moves with the configuration is the data's to say (Gavel's ResNet-18 ratios
# move with every doubling of the batch; a fleet's lineages differ in more than their batch):
# each sharpness of LOCAL_SHARPNESSES is scored prequentially on every observation the level
# could have predicted, and the one with the least squared error serves, DEFAULT_SHARPNESS until
# MIN_SHARPNESS_SCORED observations are scored. Each (model type, reference) keeps its last
# LOCAL_CAPACITY observations.
LOCAL_SHARPNESSES = (1.0, 2.0, 3.0, 4.0, 6.0)
DEFAULT_SHARPNESS = 3.0
LOCAL_PRIOR_DISTANCE = 1.75
MIN_SHARPNESS_SCORED = 20
LOCAL_CAPACITY = 32
_COORDINATES = 5
_SHARPNESSES = np.array(LOCAL_SHARPNESSES)
_NO_ROW = np.zeros((3, 0))  # a level nobody measured from this reference: skipped
# Entries per generation of the cache of what a reference's rows say (PairwiseTransfer._cache).
CACHE_SIZE = 4096
_ALL = "*"


def config_coordinates(job: Mapping[str, Any]) -> np.ndarray:
    """Where a configuration sits among its model type's, in doublings (see LOCAL_SHARPNESSES).

    >>> config_coordinates({"global_batch_size": 256, "num_devices": 8, "seq_len": None,
    ...     "tensor_parallel": 1, "pipeline_parallel": 2}).tolist()
    [5.0, 3.0, 0.0, 0.0, 1.0]
    """
    devices = max(int(job["num_devices"]), 1)
    return np.log2(
        [
            max(float(job["global_batch_size"]) / devices, 1e-3),
            devices,
            max(job.get("seq_len") or 1, 1),
            max(int(job["tensor_parallel"]), 1),
            max(int(job["pipeline_parallel"]), 1),
        ]
    )


@functools.lru_cache(maxsize=4096)
def _level_keys(model_type: str, family: str) -> tuple[str, str, str]:
    """The keys of a model type's three levels, all jobs first (made once: read per reference
    of every submission)."""
    return (_ALL, f"family={family}", f"type={model_type}")


class _Neighbours:
    """A (model type, reference) pair's last observations: target position, coordinates, value."""

    __slots__ = ("coordinates", "next", "size", "target", "value")

    def __init__(self) -> None:
        # (single precision and a short ring: a big fleet holds ~10,000 of these, and they
        # travel in every model snapshot)
        self.target = np.zeros(8, dtype=np.int16)
        self.coordinates = np.zeros((8, _COORDINATES), dtype=np.float32)
        self.value = np.zeros(8, dtype=np.float32)
        self.size = 0
        self.next = 0

    def add(self, target: int, coordinates: np.ndarray, value: float) -> None:
        if self.next == len(self.value) and len(self.value) < LOCAL_CAPACITY:  # grow
            grown = min(2 * len(self.value), LOCAL_CAPACITY)
            self.target = np.resize(self.target, grown)
            self.coordinates = np.resize(self.coordinates, (grown, _COORDINATES))
            self.value = np.resize(self.value, grown)
        at = self.next % len(self.value)
        self.target[at], self.coordinates[at], self.value[at] = target, coordinates, value
        self.size = min(self.size + 1, len(self.value))
        self.next = at + 1

    def weighted_mean(
        self, coordinates: np.ndarray, pooled: np.ndarray, sharpness: float
    ) -> np.ndarray:
        """Per target position: the mean of the values near ``coordinates``, each weighing
        exp(-sharpness x its distance), with ``pooled`` as one more value of weight
        exp(-sharpness x LOCAL_PRIOR_DISTANCE)."""
        # numpy's exp between the two kernels: numba's is the C library's, which differs
        weight = np.exp(_scaled_distances(self.coordinates, self.size, coordinates, sharpness))
        prior = math.exp(-sharpness * LOCAL_PRIOR_DISTANCE)
        return _weighted_means(self.target, self.value, weight, pooled, prior)

    def estimates(self, coordinates: np.ndarray, target: int, mean: float) -> np.ndarray | None:
        """The level's estimate for ``target`` at each of LOCAL_SHARPNESSES (None without a
        neighbour there), the model type's ``mean`` counting as its prior."""
        k = self.size
        here = self.target[:k] == target
        if not here.any():
            return None
        distance = np.abs(self.coordinates[:k][here] - coordinates).sum(axis=1)
        sharpness = _SHARPNESSES[:, None]
        weight = np.exp(-sharpness * distance)
        prior = np.exp(-_SHARPNESSES * LOCAL_PRIOR_DISTANCE)
        return (weight @ self.value[:k][here] + prior * mean) / (weight.sum(axis=1) + prior)


class PairwiseTransfer:
    """Measured efficiency ratios between hardware types, blended with the model's (see the
    module docstring)."""

    def __init__(self, hardware: list[str], window: float = WINDOW) -> None:
        self.hardware = list(hardware)
        self.keep = 1.0 - 1.0 / window
        # (level key, reference position) -> [sums, weights, sums of squares], arrays over
        # hardware positions
        self._rows: dict[tuple[str, int], np.ndarray] = {}
        # running mean squared errors of the two estimates: [measured ratios, model]
        self.squared_error = np.full(2, INITIAL_SQUARED_ERROR)
        self.cross_error = 0.0
        self.scored = 0
        self.learned = 0
        # (model type, reference position) -> its last observations, for the local level
        self._local: dict[tuple[str, int], _Neighbours] = {}
        # running mean squared error of the local level at each of LOCAL_SHARPNESSES
        self.local_error = np.zeros(len(LOCAL_SHARPNESSES))
        self.local_scored = 0
        self._reset_cache()

    def _reset_cache(self) -> None:
        # what _pooled and spread computed from a reference's rows, until a ratio to or from it
        # is learned: (kind, model type, family, reference) -> (that reference's version, value)
        self._cache = RecentCache(CACHE_SIZE)
        self._versions = [0] * len(self.hardware)
        self._sharpness: float | None = None  # local_sharpness, until the next score

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_cache"], state["_versions"], state["_sharpness"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_cache()
        self.__dict__.setdefault("_local", {})  # pickled before the local level
        self.__dict__.setdefault("cross_error", 0.0)
        self.__dict__.setdefault("local_error", np.zeros(len(LOCAL_SHARPNESSES)))
        self.__dict__.setdefault("local_scored", 0)

    def _levels(self, model_type: str, family: str) -> tuple[str, str, str]:
        return _level_keys(model_type, family)

    def measured_ratio(
        self,
        model_type: str,
        family: str,
        reference: int,
        coordinates: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """What related jobs measured from ``reference`` to each type, and how much of it
        there is (the all-jobs weight; 0 where no job measured the pair); with a job's
        ``coordinates`` (:func:`config_coordinates`), what its model type measured near it."""
        value, evidence = self._pooled(model_type, family, reference)
        return self._near(value, model_type, reference, coordinates), evidence

    def _near(
        self,
        pooled: np.ndarray,
        model_type: str,
        reference: int,
        coordinates: np.ndarray | None,
    ) -> np.ndarray:
        """The configuration-local level over the ``pooled`` levels' values."""
        near = self._local.get((model_type, reference)) if coordinates is not None else None
        if near is None:
            return pooled
        return near.weighted_mean(coordinates, pooled, self.local_sharpness())

    def _pooled(
        self, model_type: str, family: str, reference: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`measured_ratio` without the configuration-local level (read-only arrays)."""
        return self._read(self._pooled_afresh, model_type, family, reference)

    def _read(
        self, compute: Callable[[str, str, int], Any], model_type: str, family: str, reference: int
    ) -> Any:
        """What ``compute`` reads from ``reference``'s rows, as cached since they last moved."""
        key = (compute.__name__, model_type, family, reference)
        version = self._versions[reference]
        cached = self._cache.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        value = compute(model_type, family, reference)
        self._cache.put(key, (version, value))
        return value

    def _pooled_afresh(
        self, model_type: str, family: str, reference: int
    ) -> tuple[np.ndarray, np.ndarray]:
        value, evidence = _pooled_rows(
            len(self.hardware), *self._level_rows(model_type, family, reference)
        )
        value.flags.writeable = evidence.flags.writeable = False  # (cached: see _read)
        return value, evidence

    def _level_rows(
        self, model_type: str, family: str, reference: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``reference``'s rows at each level, all jobs first (_NO_ROW where there is none)."""
        everyone, of_family, of_type = _level_keys(model_type, family)
        rows = self._rows
        return (
            rows.get((everyone, reference), _NO_ROW),
            rows.get((of_family, reference), _NO_ROW),
            rows.get((of_type, reference), _NO_ROW),
        )

    def local_sharpness(self) -> float:
        """The sharpness of the configuration-local level with the least prequential squared
        error so far (DEFAULT_SHARPNESS until MIN_SHARPNESS_SCORED are scored)."""
        if self._sharpness is None:
            self._sharpness = (
                DEFAULT_SHARPNESS
                if self.local_scored < MIN_SHARPNESS_SCORED
                else LOCAL_SHARPNESSES[int(np.argmin(self.local_error))]
            )
        return self._sharpness

    def spread(self, model_type: str, family: str, reference: int) -> np.ndarray:
        """How much jobs' ratios from ``reference`` to each type vary around their mean (a
        variance, log scale): at the most specific level with a few observations, else
        ``DEFAULT_SPREAD``. Ratios between types that treat jobs alike (two generations of
        one vendor) vary little; those to a type with its own quirks vary a lot. (Read-only.)"""
        return self._read(self._spread_afresh, model_type, family, reference)

    def _spread_afresh(self, model_type: str, family: str, reference: int) -> np.ndarray:
        spread = _spread_rows(len(self.hardware), *self._level_rows(model_type, family, reference))
        spread.flags.writeable = False  # (cached: see _read)
        return spread

    def correction(
        self,
        model_type: str,
        family: str,
        reference: int,
        model: np.ndarray,
        positions: np.ndarray | None = None,
        coordinates: np.ndarray | None = None,
    ) -> np.ndarray:
        """What to add to the model's efficiency ratios ``model`` from ``reference`` to the
        types at ``positions`` (None: every type) to get the blended ones."""
        measured, evidence = self.measured_ratio(model_type, family, reference, coordinates)
        if positions is not None:
            measured, evidence = measured[positions], evidence[positions]
        return self.blend(measured, evidence, model, self.measured_weight())

    @staticmethod
    def blend(
        measured: np.ndarray, evidence: np.ndarray, model: np.ndarray, weight: float
    ) -> np.ndarray:
        """:meth:`correction` from :meth:`measured_ratio`'s two arrays (at the same positions
        as ``model``) and :meth:`measured_weight`."""
        return _blend(measured, evidence, model, weight)

    def measured_weight(self) -> float:
        """The blend's weight of the measured ratios: the one that minimises the blend's mean
        squared error, from both errors' second moments (they are correlated)."""
        measured, model = self.squared_error
        difference = measured + model - 2.0 * self.cross_error  # E[(model miss - measured miss)^2]
        if difference <= 1e-12:  # the two miss alike: either will do
            return 0.5
        return float(min(max((model - self.cross_error) / difference, 0.0), 1.0))

    def learn_one(
        self,
        model_type: str,
        family: str,
        *,
        reference: int,
        hardware: int,
        measured: float,
        model: float,
        coordinates: np.ndarray | None = None,
    ) -> None:
        """One lineage's efficiency ratio from ``reference`` to ``hardware``: ``measured``, and
        what the model predicted it to be before learning from it; ``coordinates``: the job's
        on ``hardware`` (:func:`config_coordinates`)."""
        if reference == hardware or not np.isfinite(measured):
            return
        levels, evidence = self._pooled(model_type, family, reference)
        if coordinates is not None:
            self._score_sharpness(model_type, reference, hardware, measured, coordinates, levels)
        pooled = self._near(levels, model_type, reference, coordinates)
        if evidence[hardware] > 0:  # both estimates existed: score them
            errors = np.array([pooled[hardware] - measured, model - measured])
            self.scored += 1
            # a plain mean (the start value counting twice) until the window is reached
            decay = 1.0 / min(self.scored + 2.0, ERROR_WINDOW)
            self.squared_error = self.squared_error * (1.0 - decay) + errors**2 * decay
            self.cross_error = self.cross_error * (1.0 - decay) + errors[0] * errors[1] * decay
        for a, b, value in ((reference, hardware, measured), (hardware, reference, -measured)):
            self._versions[a] += 1  # what was read from a's rows is stale
            for key in self._levels(model_type, family):
                row = self._rows.get((key, a))
                if row is None:
                    row = self._rows[(key, a)] = np.zeros((3, len(self.hardware)))
                row[:, b] = row[:, b] * self.keep + (value, 1.0, value * value)
            if coordinates is not None:
                near = self._local.get((model_type, a))
                if near is None:
                    near = self._local[(model_type, a)] = _Neighbours()
                near.add(b, coordinates, value)
        self.learned += 1

    def _score_sharpness(
        self,
        model_type: str,
        reference: int,
        hardware: int,
        measured: float,
        coordinates: np.ndarray,
        pooled: np.ndarray,
    ) -> None:
        """Score each sharpness of the local level on an observation before it is learned
        (``pooled``: the levels above it, the model type's mean among them)."""
        near = self._local.get((model_type, reference))
        if near is None:
            return
        estimates = near.estimates(coordinates, hardware, float(pooled[hardware]))
        if estimates is None:
            return
        self.local_scored += 1
        decay = 1.0 / min(self.local_scored, ERROR_WINDOW)
        self.local_error += ((estimates - measured) ** 2 - self.local_error) * decay
        self._sharpness = None


# Compiled: the numpy operations each replaced, element by element in the same order, so the
# same bits (a dozen small numpy calls for each reference of each submission).
@numba.njit(cache=True)
def _pooled_rows(
    n: int, everyone: np.ndarray, family: np.ndarray, model_type: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The pooled ratio to each type and the all-jobs weight behind it, from a reference's
    ``[sums, weights, sums of squares]`` rows (no columns: no row at that level)."""
    value, evidence = np.zeros(n), np.zeros(n)
    if everyone.shape[1]:
        for j in range(n):
            if everyone[1, j] > 0:
                value[j] = everyone[0, j] / everyone[1, j]
            evidence[j] = everyone[1, j]  # (a copy: the row moves on, what was read must not)
    for row in (family, model_type):
        if row.shape[1]:
            for j in range(n):
                value[j] = (row[0, j] + PRIOR_WEIGHT * value[j]) / (row[1, j] + PRIOR_WEIGHT)
    return value, evidence


@numba.njit(cache=True)
def _spread_rows(
    n: int, everyone: np.ndarray, family: np.ndarray, model_type: np.ndarray
) -> np.ndarray:
    """The spread of the ratios to each type at the most specific level with enough weight."""
    spread = np.full(n, DEFAULT_SPREAD)
    for row in (everyone, family, model_type):
        if row.shape[1]:
            for j in range(n):
                if row[1, j] >= MIN_SPREAD_WEIGHT:
                    mean = row[0, j] / row[1, j]
                    variance = row[2, j] / row[1, j] - mean * mean
                    # (np.maximum's: NaN stays NaN)
                    spread[j] = (
                        variance if variance >= MIN_SPREAD or variance != variance else MIN_SPREAD
                    )
    return spread


@numba.njit(cache=True)
def blended(measured: float, evidence: float, model: float, weight: float) -> float:
    """:meth:`PairwiseTransfer.blend` of one type (for other kernels)."""
    return weight * (measured - model) if evidence > 0 else 0.0


@numba.njit(cache=True)
def _blend(
    measured: np.ndarray, evidence: np.ndarray, model: np.ndarray, weight: float
) -> np.ndarray:
    """:meth:`PairwiseTransfer.blend`, type by type."""
    correction = np.empty(model.shape[0])
    for j in range(model.shape[0]):
        correction[j] = blended(measured[j], evidence[j], model[j], weight)
    return correction


@numba.njit(cache=True)
def _scaled_distances(
    coordinates: np.ndarray, k: int, here: np.ndarray, sharpness: float
) -> np.ndarray:
    """-sharpness x each of the first ``k`` rows' L1 distance to ``here`` (summed in order)."""
    scaled = np.empty(k)
    for i in range(k):
        distance = 0.0
        for c in range(coordinates.shape[1]):
            distance += abs(np.float64(coordinates[i, c]) - here[c])
        scaled[i] = -sharpness * distance
    return scaled


@numba.njit(cache=True)
def _weighted_means(
    target: np.ndarray, value: np.ndarray, weight: np.ndarray, pooled: np.ndarray, prior: float
) -> np.ndarray:
    """Per target position, ``(sum of weight x value + prior x pooled) / (sum of weights +
    prior)`` over the first ``len(weight)`` observations, summed in their order."""
    n = pooled.shape[0]
    sums, weights = np.zeros(n), np.zeros(n)
    for i in range(weight.shape[0]):
        sums[target[i]] += weight[i] * np.float64(value[i])
        weights[target[i]] += weight[i]
    near = np.empty(n)
    for j in range(n):
        near[j] = (sums[j] + prior * pooled[j]) / (weights[j] + prior)
    return near
