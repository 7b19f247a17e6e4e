"""The online throughput model: AdaGrad linear regression on log throughput, scored in batches.

It learns ``log(throughput) - baseline`` (:mod:`leap_stream.core.features`) from every succeeded
completion, exactly as river's ``LinearRegression(optimizer=AdaGrad(lr, eps), intercept_lr=0.05)``
would, weight for weight: the same loss gradient, clipping, intercept step and AdaGrad
accumulators, in the same order of floating-point operations. It does so on numpy arrays keyed by
a column per feature name instead of river's dicts, several times faster. River's regressor stays
the model's reference and its persisted form: :attr:`ThroughputModel.regressor` is brought up to
date whenever it is read (and when the model is pickled), ``predict_one`` goes through it, and the
tests hold the two learners equal and ``predict_many`` (all of a submission's candidates in one
pass over the weight array) equal to river's ``predict_one``.

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

import collections
import math
from typing import Any, NamedTuple

import numba
import numpy as np
from river import linear_model, optim, utils

from leap_stream.core.adagrad import UNSEEN, adagrad_step
from leap_stream.core.features import (
    NUMERIC_CACHE_SIZE,
    ONEHOT_VALUES,
    PAIR_TYPE_SLOPES,
    TEAM_ONEHOT_VALUE,
    TYPE_SLOPES,
    FeatureEncoder,
    JobFeatures,
    RecentCache,
)

__all__ = ["PreparedPair", "ThroughputModel"]

# AdaGrad gives every one-hot its own step size: rare hardware and model types learn as fast as
# the common ones, which plain SGD starves.
LEARNING_RATE = 0.15
INTERCEPT_LR = 0.05
# AdaGrad's eps sits under the square root with a feature's sum of squared gradients: a pseudo-sum
# that damps the feature's first steps until its own gradients outweigh it. At river's default
# (1e-8) a feature's first step is a full LEARNING_RATE whatever the error, a sign and not a
# size: a new hardware type's four one-hots move its prediction by 4 x 0.15 = 0.6 on the log
# scale on its first attempt, however small the error, and the ranking picked the types a few
# noisy attempts had flattered. Picked on both 60-day fleets (docs/results.md): 16 cut top-1
# regret 9.2% -> 7.8% and 11.3% -> 9.7%, transfers +1.4 and +0.6 points; MLPerf by round
# 24.6% -> 27.1% within 20%.
ADAGRAD_EPS = 16.0
_ONEHOT_VALUES = np.array(ONEHOT_VALUES)
_NO_TEAM = np.empty(0, dtype=np.int64)  # a job that does not say its team: no team one-hot
# What pickles carry: river's regressor plus the model's own counts and column index (the layout
# of earlier versions, which can load these pickles); the learner's arrays are rebuilt from river.
_PERSISTED = ("encoder", "learned", "seen", "seen_by_family", "_column", "_mirror",
              "_device_columns", "slope_range")  # fmt: skip
# A model type's own slope with no range (a pickle from before ranges were kept) is not clipped.
_UNBOUNDED = (-math.inf, math.inf)


class PreparedPair(NamedTuple):
    """One (job, hardware) pair as a learning step reads it (:meth:`ThroughputModel.prepare`)."""

    columns: np.ndarray  # the features' weight columns, in river's order
    values: np.ndarray  # their values (a zero is skipped, as river never sees it)
    baseline: float  # subtracted from the target: the model learns the rest
    slopes: list[tuple[int, float]]  # (column, value) of the model type's own slopes


class ThroughputModel:
    """Predicts log throughput (samples/s) of a job on hardware types; learns online.

    The weights live in ``_mirror`` (one column per feature name, ``_column``) with AdaGrad's
    sums of squared gradients in ``_g2``; ``regressor`` is river's ``LinearRegression`` holding
    the same state, written back from the arrays when read.
    """

    def __init__(
        self,
        encoder: FeatureEncoder,
        learning_rate: float = LEARNING_RATE,
        intercept_lr: float = INTERCEPT_LR,
    ) -> None:
        self.encoder = encoder
        self._river = linear_model.LinearRegression(
            optimizer=optim.AdaGrad(learning_rate, eps=ADAGRAD_EPS),
            intercept_lr=intercept_lr,
            l2=0.0,
        )
        self.learned = 0
        # observations per hardware type: how much the model knows of each (cold start)
        self.seen = np.zeros(len(encoder.hw), dtype=np.int64)
        # observations per family and hardware type: how much it knows of each pairing
        self.seen_by_family: dict[str, np.ndarray] = {}
        self._column: dict[str, int] = {}
        self._mirror = np.zeros(1024)
        self._g2 = np.full(1024, UNSEEN)
        self._device_columns = self._columns(encoder.device_names())
        # column of a model type's own slope -> (lowest, highest) value it was learned on
        self.slope_range: dict[int, tuple[float, float]] = {}
        self._start_learner()

    # -- river as the persisted form -----------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = {name: self.__dict__[name] for name in _PERSISTED}
        # per-job column lists are a cache over ``_column``: rebuilt on first use
        return {**state, "regressor": self.regressor, "_job_columns": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        self._river = state.pop("regressor")
        if "slope_range" not in state:  # learned before ranges were kept: never clipped
            own = (
                c
                for name, c in state["_column"].items()
                if name.startswith("type=") and ":" in name
            )
            state["slope_range"] = dict.fromkeys(own, _UNBOUNDED)
        self.__dict__.update(state)
        self._start_learner()

    @property
    def regressor(self) -> linear_model.LinearRegression:
        """River's regressor with everything learned so far (written back here when stale)."""
        if self._river_stale:
            self._write_river()
        return self._river

    def _start_learner(self) -> None:
        """Take the settings and the state (weights, intercept, AdaGrad's sums) from river's
        regressor into the arrays, and empty the caches."""
        river = self._river
        optimizer = river.optimizer
        if not (
            type(optimizer) is optim.AdaGrad
            and type(optimizer.lr) is optim.schedulers.Constant
            and type(river.intercept_lr) is optim.schedulers.Constant
            and type(river.loss) is optim.losses.Squared
            and type(river.initializer) is optim.initializers.Zeros
            and river.l1 == 0
            and river.l2 == 0
        ):
            raise ValueError(f"the learner reproduces AdaGrad without penalties only: {river}")
        # what adagrad_step reads: lr, eps, intercept_lr, clip
        self._hyper = np.array(
            [optimizer.lr.learning_rate, optimizer.eps, river.intercept_lr.learning_rate,
             river.clip_gradient], dtype=float,
        )  # fmt: skip
        self._intercept = river.intercept
        self._iterations = optimizer.n_iterations
        weights = river._weights.to_dict()
        self._g2 = np.full(len(self._mirror), UNSEEN)
        columns = self._columns(list(weights))
        self._mirror[columns] = list(weights.values())
        self._g2[columns] = [optimizer.g2.get(name, 0.0) for name in weights]
        self._river_stale = False
        self._job_columns: dict[tuple[str, str, str, str], tuple[np.ndarray, ...]] = {}
        self._team_columns: dict[str, np.ndarray] = {}  # per team: its one-hot's, per type
        # encoder.numeric with the type slopes clipped, by configuration and ranges
        self._clipped = RecentCache(NUMERIC_CACHE_SIZE)
        self._pair_columns: dict[
            tuple[tuple[str, str, str, str], int], tuple[np.ndarray, list[int] | None]
        ] = {}
        # (job, learning steps taken, predict_many of every type): until the next step
        self._last_prediction: tuple[JobFeatures, int, np.ndarray] | None = None

    def _write_river(self) -> None:
        """Write the arrays back into river's regressor, as its own learn_one would have left it
        (keys in column order; nothing river computes depends on their order)."""
        river = self._river
        names = list(self._column)  # columns are numbered in insertion order
        learned = np.flatnonzero(self._g2 != UNSEEN).tolist()
        keys = [names[c] for c in learned]
        river._weights = utils.VectorDict(
            dict(zip(keys, self._mirror[learned].tolist(), strict=True))
        )
        river.optimizer.g2 = collections.defaultdict(
            float, zip(keys, self._g2[learned].tolist(), strict=True)
        )
        river.optimizer.n_iterations = self._iterations
        river.intercept = self._intercept
        self._river_stale = False

    # -- feature columns -------------------------------------------------------------------------

    def _columns(self, names: list[str]) -> np.ndarray:
        """Columns of feature ``names`` (new names get a zero weight)."""
        column = self._column
        for name in names:
            if name not in column:
                column[name] = len(column)
        if len(column) > len(self._mirror):
            grow = max(len(column), len(self._mirror))
            self._mirror = np.r_[self._mirror, np.zeros(grow)]
            self._g2 = np.r_[self._g2, np.full(grow, UNSEEN)]
        return np.array([column[name] for name in names], dtype=np.int64)

    def _columns_of(self, job: JobFeatures) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Columns of a job's shared, numeric and per-hardware one-hot features."""
        columns = self._job_columns.get(job.key)
        if columns is None:
            onehot_names = [k for per_hw in self.encoder.onehot_keys(job) for k in per_hw]
            columns = self._job_columns[job.key] = (
                self._columns(list(job.shared_names)),
                self._columns(list(job.numeric_names)),
                self._columns(onehot_names).reshape(len(self.encoder.names), -1),
            )
        return columns

    def _team_columns_of(self, team: str) -> np.ndarray:
        """Per catalog type, the column of ``team``'s one-hot on its vendor."""
        columns = self._team_columns.get(team)
        if columns is None:
            columns = self._team_columns[team] = self._columns(self.encoder.team_keys(team))
        return columns

    def _pair_columns_of(
        self, job: JobFeatures, position: int
    ) -> tuple[np.ndarray, list[int] | None]:
        """Columns of one pair's configuration features in river's order
        (``FeatureEncoder.config_pair_names``), and which of its values each takes (None: all, in
        order; else a repeated name keeps its first place and last value, as in a dict)."""
        key = (job.key, position)
        cached = self._pair_columns.get(key)
        if cached is None:
            shared, numeric, onehot = self._columns_of(job)
            device = self._device_columns[position : position + 1]
            columns = np.concatenate((shared, onehot[position], numeric, device))
            take = None
            if len(set(columns.tolist())) < len(columns):  # a name repeats (none does today)
                names = self.encoder.config_pair_names(job, position)
                last = {name: i for i, name in enumerate(names)}
                first = list(dict.fromkeys(names))
                take = [last[name] for name in first]
                columns = self._columns(first)
            cached = self._pair_columns[key] = (columns, take)
        return cached

    # -- prediction --------------------------------------------------------------------------

    def predict_many(self, job: JobFeatures, positions: np.ndarray | None = None) -> np.ndarray:
        """log throughput of ``job`` on each catalog position in ``positions`` (None: all; then
        read-only).

        Every catalog type is predicted and the positions asked for are taken from those: a
        pair's prediction is the same to the bit whichever other types are asked for with it,
        and the last job's predictions serve again until the model learns (a submission's
        ranking reads them for its candidates, its lineage's latest attempt and its references).
        """
        last = self._last_prediction
        if last is not None and last[0] is job and last[1] == self._iterations:
            predicted = last[2]
        else:
            predicted = self._predict_all(job)
            predicted.flags.writeable = False
            self._last_prediction = (job, self._iterations, predicted)
        return predicted if positions is None else predicted[positions]

    def _predict_all(self, job: JobFeatures) -> np.ndarray:
        """:meth:`predict_many` of every catalog type, computed afresh."""
        columns = self._job_columns.get(job.key)
        shared_columns, numeric_columns, onehot_columns = columns or self._columns_of(job)
        team_columns = self._team_columns_of(job.team) if job.team else None
        mirror = self._mirror  # (after the columns: a new name grows it)
        # the two products stay BLAS's: a loop would not sum them in its order, to the bit
        scalar = self._intercept + float(mirror[shared_columns] @ job.shared_values)
        log_throughput = self.encoder.baseline(job)  # a new array: the sum goes in place
        log_throughput += mirror[numeric_columns] @ self._numeric(job, numeric_columns)
        return _add_pair_terms(
            log_throughput,
            mirror,
            onehot_columns,
            _ONEHOT_VALUES,
            _NO_TEAM if team_columns is None else team_columns,
            TEAM_ONEHOT_VALUE,
            self._device_columns,
            job.log_devices,
            scalar,
        )

    def _numeric(self, job: JobFeatures, columns: np.ndarray) -> np.ndarray:
        """``encoder.numeric(job)``, the model type's own slopes' values clipped to
        the range they were learned on.

        A type's own slope is learned from the few hardware types it ran on: with one, it is an
        offset in disguise, and a straight line through two or three says nothing of hardware
        far from them. Beyond what it saw, the family's slopes and the one-hots speak.
        """
        first, second = columns[TYPE_SLOPES].tolist()
        ranges = (self.slope_range.get(first), self.slope_range.get(second))
        if ranges == (None, None):  # nothing learned: the weights are zero
            return self.encoder.numeric(job)
        # every candidate's values, clipped once per configuration and ranges
        key = (job.precision_index, job.num_devices, job.log_comm_over_work, ranges)
        table = self._clipped.get(key)
        if table is None:
            table = self.encoder.numeric(job).copy()
            for row, bounds in zip(range(len(table))[TYPE_SLOPES], ranges, strict=True):
                if bounds is not None:  # (np.clip's arithmetic, without its wrappers)
                    values = table[row]
                    np.minimum(np.maximum(values, bounds[0], out=values), bounds[1], out=values)
            table.flags.writeable = False
            self._clipped.put(key, table)
        return table

    def predict_one(self, job: JobFeatures, position: int) -> float:
        """The same prediction for one candidate, through river's own ``predict_one`` (on the
        pair's features, the type's own slopes clipped as in :meth:`predict_many`)."""
        x = self.encoder.pair(job, position)
        for name in job.numeric_names[TYPE_SLOPES]:
            bounds = self.slope_range.get(self._column.get(name, -1))
            if bounds is not None:
                x[name] = min(max(x[name], bounds[0]), bounds[1])
        baseline = float(self.encoder.baseline(job)[position])
        return baseline + self.regressor.predict_one(x)

    # -- learning ----------------------------------------------------------------------------

    def learn_one(
        self, job: JobFeatures, position: int, log_throughput: float, *, count: bool = True
    ) -> None:
        """Learn from one measured throughput (already net of the lineage's own offset).

        River's ``LinearRegression.learn_one`` with AdaGrad on the pair's feature dict, step for
        step, on the arrays. ``count=False``: a second pass over an example already learned
        (the weights move; ``learned``, ``seen`` and ``family_seen`` count it once).
        """
        self.step(job, position, log_throughput, count=count)

    def step(
        self, job: JobFeatures, position: int, log_throughput: float, *, count: bool = True
    ) -> PreparedPair | None:
        """:meth:`learn_one`, returning the pair as prepared (None if nothing was learned): a
        later pass over the example steps on it again with :meth:`learn_prepared`."""
        if not math.isfinite(log_throughput):
            return None
        pair = self.prepare(job, position)
        self.learn_prepared(pair, log_throughput)
        if count:
            self.learned += 1
            self.seen[position] += 1
            self.family_seen(job.family)[position] += 1
        return pair

    def prepare(self, job: JobFeatures, position: int) -> PreparedPair:
        """What a step on the (job, hardware) pair reads besides the weights: its features'
        columns and values, the baseline, the model type's own slopes. A pass over a snapshot
        repeats pairs, and prepares each once (:func:`leap_stream.core.batch.train_river`)."""
        pair = self._pair_columns.get((job.key, position))
        columns, take = pair or self._pair_columns_of(job, position)
        x = self.encoder.pair_values(job, position)
        if job.team:  # the team's one-hot comes first (FeatureEncoder.pair_names)
            team = self._team_columns_of(job.team)[position : position + 1]
            columns = np.concatenate((team, columns))
            take = None if take is None else [0, *(i + 1 for i in take)]
        slopes: list[tuple[int, float]] = []
        if take is None:  # (else the names repeat, and none does today)
            slopes = list(zip(columns[PAIR_TYPE_SLOPES].tolist(), x[PAIR_TYPE_SLOPES], strict=True))
        else:
            x = [x[i] for i in take]
        encoder = self.encoder
        baseline = (
            encoder.log_peak_by_precision[job.precision_index, position] + job.log_scale
            if encoder.roofline
            else 0.0
        )
        return PreparedPair(columns, np.array(x), float(baseline), slopes)

    def learn_prepared(self, pair: PreparedPair, log_throughput: float) -> None:
        """:meth:`learn_one`'s step on a prepared pair, counting nothing (a later pass)."""
        if not math.isfinite(log_throughput):
            return
        self._intercept = adagrad_step(
            self._mirror,
            self._g2,
            pair.columns,
            pair.values,
            log_throughput - pair.baseline,
            self._intercept,
            self._hyper,
        )
        ranges = self.slope_range
        for column, value in pair.slopes:
            bounds = ranges.get(column)
            if bounds is None:
                ranges[column] = (value, value)
            elif not bounds[0] <= value <= bounds[1]:
                ranges[column] = (min(bounds[0], value), max(bounds[1], value))
        self._iterations += 1
        self._river_stale = True

    def family_seen(self, family: str) -> np.ndarray:
        """Observations of each hardware type for ``family`` (a live array: do not modify)."""
        seen = self.seen_by_family.get(family)
        if seen is None:
            seen = self.seen_by_family[family] = np.zeros(len(self.encoder.hw), dtype=np.int64)
        return seen


# Compiled: five numpy calls (two gathers, a row sum, three sums in place) for a few dozen types,
# once or twice a submission. Each type's terms are added in numpy's order (the one-hots' row sum
# is sequential at this width), so the same bits.
@numba.njit(cache=True)
def _add_pair_terms(
    log_throughput: np.ndarray,
    mirror: np.ndarray,
    onehot_columns: np.ndarray,
    onehot_values: np.ndarray,
    team_columns: np.ndarray,
    team_value: float,
    device_columns: np.ndarray,
    log_devices: float,
    scalar: float,
) -> np.ndarray:
    """Add to each type's ``log_throughput`` (in place) its one-hots' sum, its team one-hot
    (when ``team_columns`` is not empty), its slope on the device count and ``scalar``."""
    n, k = onehot_columns.shape
    if onehot_values.shape[0] != k:  # (numba does not check bounds)
        raise ValueError("one value per one-hot column")
    for h in range(n):
        onehots = mirror[onehot_columns[h, 0]] * onehot_values[0]
        for j in range(1, k):
            onehots += mirror[onehot_columns[h, j]] * onehot_values[j]
        value = log_throughput[h] + onehots
        if team_columns.shape[0]:  # without one, the sums are those from before teams
            value += mirror[team_columns[h]] * team_value
        value += mirror[device_columns[h]] * log_devices
        log_throughput[h] = value + scalar
    return log_throughput
