"""Batch models: trained on a snapshot of completions at once, read by LeapCore like its own.

The online model (:mod:`leap_stream.core.model`) learns one completion at a time. A nightly
retrain instead fits a model on every completion up to a cutoff (a *snapshot*), from the same
examples and features, and ranks with it until the next one:

- :func:`train_river`: the online model's own class, river's AdaGrad linear regression, folded
  over the snapshot in time order ``passes`` times. One pass in time order *is* the online model
  at the cutoff, weight for weight (:meth:`LeapCore.learn` is a fold over the same examples);
  later passes refine it with smaller AdaGrad steps, the newest completions last.
- :func:`train_boosted`: a gradient-boosted challenger (LightGBM) on the same per-(job,
  hardware) features, the :meth:`FeatureEncoder.pair` dicts vectorised sparsely, and the same
  target: the example's log throughput, net of the lineage's offset and of the roofline baseline.

Both return an object with the part of :class:`~leap_stream.core.model.ThroughputModel`'s
interface that :class:`~leap_stream.core.LeapCore` reads when it ranks (``predict_many``,
``seen``, ``family_seen``, ``learned``, ``encoder``), so a core ranks with a batch model by
swapping its ``model``: the lineage priors and pairwise transfer still apply on top.

A snapshot is a :class:`TrainingSet`: the learn examples in completion order, kept as arrays
(a six-month fleet has millions).

>>> from leap_stream.core.catalog import default_catalog
>>> from leap_stream.core.hardware import HardwareArrays
>>> encoder = FeatureEncoder(HardwareArrays.from_catalog(default_catalog()))
>>> job = {"model_type": "resnet", "model_family": "cnn", "framework": "pytorch",
...     "param_count": 25_000_000, "global_batch_size": 2048, "seq_len": None,
...     "precision": "bf16", "num_devices": 8, "tensor_parallel": 1, "pipeline_parallel": 1}
>>> examples = [{"job": job, "hardware_type": "H100-SXM", "target": math.log(20_000.0),
...     "event_time_ms": float(i)} for i in range(300)]
>>> training = TrainingSet.from_examples(examples, encoder.hw.index)
>>> len(training), training.type_counts()
(300, {'resnet': 300})
>>> river = train_river(training, encoder, passes=2)
>>> river.learned, int(river.seen[encoder.hw.index["H100-SXM"]])  # counts of one pass
(300, 300)
>>> h100 = np.array([encoder.hw.index["H100-SXM"]])
>>> round(math.exp(river.predict_many(encoder.job(job), h100)[0]))
20000
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from leap_stream.core.events import JOB_CONFIG_FIELDS
from leap_stream.core.features import (
    ONEHOT_VALUES,
    TEAM_ONEHOT_VALUE,
    FeatureEncoder,
    JobFeatures,
)
from leap_stream.core.model import PreparedPair, ThroughputModel

if TYPE_CHECKING:
    import lightgbm
    import scipy.sparse

__all__ = [
    "BOOSTED_PARAMS",
    "BOOSTED_ROUNDS",
    "RIVER_PASSES",
    "BoostedModel",
    "TrainingSet",
    "feature_fingerprint",
    "probe_predictions",
    "train_boosted",
    "train_river",
    "training_rows",
]

# Passes of the river model over its snapshot, in time order. One pass reproduces the online
# model at the cutoff; on 14-day fleets, first attempts' MdAPE went 26% / 25% / 23% with 1 / 2 / 3
# passes (shuffled passes were erratic: 13% to 26% within 10%). Each pass costs ~50 us an example.
RIVER_PASSES = 3
# LightGBM's settings: one thread (the nightly replay runs a process per night), deterministic,
# L2 on the log scale. 31 leaves x 500 rounds at 0.05 matched 63 or 127 leaves on first
# attempts of a 14-day fleet (28% within 10% against the river model's 21%) at half the time;
# 250 rounds at 0.1 matched 500 at 0.05 on both 60-day fleets' 30 nights (within 10% -0.01 and
# -0.04 points, the ensemble +0.05 and +0.02) in about a quarter less training (docs/nightly.md).
BOOSTED_PARAMS: dict[str, Any] = {
    "objective": "regression",
    "learning_rate": 0.1,
    "num_leaves": 31,
    "min_data_in_leaf": 20,
    "num_threads": 1,
    "deterministic": True,
    "force_col_wise": True,
    "seed": 7,
    "verbose": -1,
}
BOOSTED_ROUNDS = 250
_DAY_MS = 86_400_000.0
# Predictions cached per job configuration (all catalog types each) before the cache is reset.
_CACHE_LIMIT = 50_000
# Jobs whose features and predictions :func:`feature_fingerprint` and :func:`probe_predictions`
# read: one per kind of job the encoder treats apart (no sequence; a sharded, multi-node LLM
# whose team is said).
_PROBES: tuple[dict[str, Any], ...] = (
    {"model_type": "resnet", "model_family": "cnn", "framework": "pytorch",
     "param_count": 25_000_000, "global_batch_size": 2048, "seq_len": None,
     "precision": "bf16", "num_devices": 8, "tensor_parallel": 1, "pipeline_parallel": 1},
    {"model_type": "llm-7b", "model_family": "dense_llm", "framework": "jax",
     "param_count": 7_000_000_000, "global_batch_size": 1024, "seq_len": 4096,
     "precision": "fp8", "num_devices": 64, "tensor_parallel": 2, "pipeline_parallel": 2,
     "team": "research"},
)  # fmt: skip


@dataclass(slots=True)
class TrainingSet:
    """Learn examples in completion order, as arrays: the snapshot a batch model trains on.

    Attributes
    ----------
    configs
        Job configurations (``JOB_CONFIG_FIELDS`` dicts) the examples refer to.
    config
        Per example, its index into ``configs``.
    position
        Per example, the catalog position of the hardware it ran on.
    target
        Per example, :class:`~leap_stream.core.LearnExample`'s ``target``: log throughput net of
        the lineage's own offset (the roofline baseline is taken off when training).
    time_ms
        Per example, its completion time (ms since the epoch).
    """

    configs: list[dict[str, Any]]
    config: np.ndarray
    position: np.ndarray
    target: np.ndarray
    time_ms: np.ndarray

    @classmethod
    def from_examples(
        cls, examples: Iterable[Mapping[str, Any]], index: Mapping[str, int]
    ) -> TrainingSet:
        """From learn examples (``LearnExample`` dicts, or any with ``job``, ``hardware_type``,
        ``target`` and ``event_time`` or ``event_time_ms``), in the order given."""
        builder = TrainingSetBuilder(index)
        for example in examples:
            builder.add(example)
        return builder.take()

    @classmethod
    def concat(cls, parts: Sequence[TrainingSet]) -> TrainingSet:
        """One set of ``parts`` in order (their configurations appended, indices shifted)."""
        configs: list[dict[str, Any]] = []
        shifted = []
        for part in parts:
            shifted.append(part.config + len(configs))
            configs.extend(part.configs)

        def joined(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(arrays).astype(dtype) if arrays else np.empty(0, dtype)

        return cls(
            configs,
            joined(shifted, np.int64),
            joined([p.position for p in parts], np.int64),
            joined([p.target for p in parts], np.float64),
            joined([p.time_ms for p in parts], np.float64),
        )

    def __len__(self) -> int:
        return len(self.target)

    def before(self, cutoff_ms: float) -> TrainingSet:
        """The examples that completed strictly before ``cutoff_ms``."""
        keep = self.time_ms < cutoff_ms
        return TrainingSet(
            self.configs, self.config[keep], self.position[keep], self.target[keep],
            self.time_ms[keep],
        )  # fmt: skip

    def window(self, end_ms: float, days: float | None) -> TrainingSet:
        """The examples of the ``days`` before ``end_ms`` (None: all of them), with only the
        configurations they use: what is trained on a window costs what the window holds.

        >>> import numpy as np
        >>> day = 86_400_000.0
        >>> examples = TrainingSet([{"a": 1}, {"a": 2}], np.array([0, 1, 1]), np.zeros(3, int),
        ...     np.zeros(3), np.array([0.0, 5 * day, 9 * day]))
        >>> recent = examples.window(10 * day, 7)
        >>> len(recent), recent.configs, len(examples.window(10 * day, None))
        (2, [{'a': 2}], 3)
        """
        if days is None:
            return self
        keep = self.time_ms >= end_ms - days * _DAY_MS
        used, config = np.unique(self.config[keep], return_inverse=True)
        return TrainingSet(
            [self.configs[i] for i in used.tolist()], config.astype(np.int64),
            self.position[keep], self.target[keep], self.time_ms[keep],
        )  # fmt: skip

    def type_counts(self) -> dict[str, int]:
        """Examples per model type: what :attr:`LeapCore.type_counts` holds after learning them."""
        per_config = np.bincount(self.config, minlength=len(self.configs))
        counts: dict[str, int] = {}
        for config, n in zip(self.configs, per_config.tolist(), strict=True):
            if n:
                counts[config["model_type"]] = counts.get(config["model_type"], 0) + n
        return counts

    def seen(self, n_positions: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Examples per hardware position, and per family and hardware position (the counts
        :class:`~leap_stream.core.model.ThroughputModel` keeps as ``seen``, ``seen_by_family``)."""
        names = [config["model_family"] for config in self.configs]
        families = sorted(set(names))
        code = {family: i for i, family in enumerate(families)}
        family_of = np.array([code[name] for name in names], dtype=np.int64)[self.config]
        counts = np.zeros((len(families), n_positions), dtype=np.int64)
        np.add.at(counts, (family_of, self.position), 1)
        seen = counts.sum(axis=0)
        return seen, {f: counts[i] for i, f in enumerate(families) if counts[i].any()}


class TrainingSetBuilder:
    """Collects learn examples into :class:`TrainingSet` chunks (see :meth:`take`)."""

    def __init__(self, index: Mapping[str, int]) -> None:
        self.index = index
        self._reset()

    def _reset(self) -> None:
        self._ids: dict[tuple[Any, ...], int] = {}
        self._configs: list[dict[str, Any]] = []
        self._config: list[int] = []
        self._position: list[int] = []
        self._target: list[float] = []
        self._time: list[float] = []

    def __len__(self) -> int:
        return len(self._target)

    def add(self, example: Mapping[str, Any]) -> None:
        """Add one learn example (its hardware must be in the catalog index); an out-of-memory
        one teaches the memory risk only, not the throughput model: it is left out."""
        if example.get("out_of_memory"):
            return
        job = example["job"]
        key = tuple(job.get(name) for name in JOB_CONFIG_FIELDS)
        config = self._ids.get(key)
        if config is None:
            config = self._ids[key] = len(self._configs)
            self._configs.append(dict(zip(JOB_CONFIG_FIELDS, key, strict=True)))
        when = example.get("event_time_ms")
        if when is None:
            when = example["event_time"].timestamp() * 1000.0
        self._config.append(config)
        self._position.append(self.index[example["hardware_type"]])
        self._target.append(float(example["target"]))
        self._time.append(float(when))

    def take(self) -> TrainingSet:
        """The examples added since the last ``take``, as a set of their own."""
        chunk = TrainingSet(
            self._configs,
            np.array(self._config, dtype=np.int64),
            np.array(self._position, dtype=np.int64),
            np.array(self._target, dtype=np.float64),
            np.array(self._time, dtype=np.float64),
        )
        self._reset()
        return chunk


def _job_features(encoder: FeatureEncoder, training: TrainingSet) -> list[JobFeatures]:
    return [encoder.job(config) for config in training.configs]


def train_river(
    training: TrainingSet,
    encoder: FeatureEncoder,
    passes: int = RIVER_PASSES,
    start: ThroughputModel | None = None,
    later: TrainingSet | None = None,
) -> ThroughputModel:
    """The online model's class folded over ``training`` in time order, ``passes`` times.

    Parameters
    ----------
    training
        The snapshot, in completion order.
    encoder
        The feature encoder (ignored when ``start`` is given: its own is used).
    passes
        Passes over the snapshot (>= 1).
    start
        A model that has learned exactly the first pass already: the online model at the
        cutoff. It is updated in place and returned; the result equals a fold from scratch.
    later
        The examples the passes after the first go over (default: all of ``training``): a
        training window of its latest days (:meth:`TrainingSet.window`).

    Returns
    -------
    ThroughputModel
        With ``learned``, ``seen`` and ``family_seen`` counting each example once, as the
        online model does: they decide cold starts and the ranking's risk charge.
    """
    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes}")
    if start is not None and start.learned != len(training):
        raise ValueError(
            f"the start model learned {start.learned} examples, the snapshot holds "
            f"{len(training)}: it is not the first pass over this snapshot"
        )
    model = start if start is not None else ThroughputModel(encoder)
    folded: TrainingSet | None = None
    for n in range(0 if start is None else 1, passes):
        examples = training if n == 0 or later is None else later
        if examples is not folded:
            jobs = _job_features(model.encoder, examples)
            rows = list(zip(examples.config.tolist(), examples.position.tolist(),
                            examples.target.tolist(), strict=True))  # fmt: skip
            folded = examples
            prepared: dict[tuple[int, int], PreparedPair] = {}
        if n == 0:
            for config, position, target in rows:
                model.learn_one(jobs[config], position, target)
            continue
        # later passes see each example again: it counts once, as in the online model; what a
        # step reads of a pair besides the weights never changes, so it is prepared once
        for config, position, target in rows:
            pair = prepared.get((config, position))
            if pair is None:
                pair = prepared[config, position] = model.prepare(jobs[config], position)
            model.learn_prepared(pair, target)
    return model


class _Vectoriser:
    """Feature dicts as sparse rows over a fixed vocabulary (names unseen in training drop)."""

    def __init__(self, vocabulary: Mapping[str, int]) -> None:
        self.vocabulary = dict(vocabulary)

    @classmethod
    def fit(cls, dicts: Iterable[Mapping[str, float]]) -> _Vectoriser:
        vocabulary: dict[str, int] = {}
        for features in dicts:
            for name in features:
                if name not in vocabulary:
                    vocabulary[name] = len(vocabulary)
        return cls(vocabulary)

    def rows(self, dicts: Iterable[Mapping[str, float]]) -> scipy.sparse.csr_matrix:
        import scipy.sparse

        vocabulary = self.vocabulary
        indptr = [0]
        indices: list[int] = []
        values: list[float] = []
        for features in dicts:
            for name, value in features.items():
                column = vocabulary.get(name)
                if column is not None and value:  # zeros stay implicit, as in river's updates
                    indices.append(column)
                    values.append(value)
            indptr.append(len(indices))
        shape = (len(indptr) - 1, len(vocabulary))
        return scipy.sparse.csr_matrix(
            (np.array(values, dtype=np.float64), np.array(indices, dtype=np.int32), indptr),
            shape=shape,
        )


class BoostedModel:
    """A LightGBM regressor behind the read interface LeapCore uses of its model.

    It predicts ``log(throughput) - baseline`` from a (job, hardware) pair's feature dict; a
    job's predictions for every catalog type are made in one call and cached, since LeapCore
    asks for the same job several times per submission (its ranking, the lineage's transfer
    references). It does not learn online: :meth:`learn_one` raises.
    """

    def __init__(
        self,
        encoder: FeatureEncoder,
        booster: lightgbm.Booster,
        vocabulary: Mapping[str, int],
        training: TrainingSet,
    ) -> None:
        self.encoder = encoder
        self.booster = booster
        self.vectoriser = _Vectoriser(vocabulary)
        self.learned = len(training)
        self.seen, self.seen_by_family = training.seen(len(encoder.names))
        # per job configuration: the efficiency predicted on every catalog type (see prime)
        self.predictions: dict[tuple[Any, ...], np.ndarray] = {}
        self._columns: dict[tuple[str, str, str, str], np.ndarray | None] = {}
        self._teams: dict[str, np.ndarray] = {}
        self._splits: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        # LightGBM's own text format: exact, and readable by any LightGBM of that version
        caches = ("predictions", "booster", "_columns", "_teams", "_splits")
        state = {k: v for k, v in self.__dict__.items() if k not in caches}
        return {**state, "booster": self.booster.model_to_string()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        import lightgbm

        self.__dict__.update(state)
        self.booster = lightgbm.Booster(model_str=state["booster"])
        self.predictions = {}
        self._columns = {}
        self._teams = {}
        self._splits = None

    @staticmethod
    def _key(job: JobFeatures) -> tuple[Any, ...]:
        # everything a pair's features are computed from (see FeatureEncoder.pair); the team
        # last, for _every_type to leave out
        return (
            job.key, job.shared_values.tobytes(), job.num_devices, job.log_comm_over_work,
            job.log_scale, job.team,
        )  # fmt: skip

    def prime(self, jobs: Iterable[JobFeatures]) -> None:
        """Predict every catalog type for each of ``jobs`` in one LightGBM call (cached)."""
        todo: dict[tuple[Any, ...], JobFeatures] = {}
        for job in jobs:
            key = self._key(job)
            if key not in self.predictions:
                todo[key] = job
        if not todo:
            return
        if len(self.predictions) + len(todo) > _CACHE_LIMIT:
            self.predictions.clear()
        for key, row in zip(todo, self._every_type(list(todo.values())), strict=True):
            self.predictions[key] = row

    def _every_type(self, jobs: Sequence[JobFeatures]) -> np.ndarray:
        """LightGBM's predictions of each job's pairs with every catalog type, one row per job:
        those of :meth:`every_type_rows`, value for value, from fewer rows.

        A pair whose team's one-hot no tree splits on is predicted as the pair without it: the
        same leaves. So the configurations are predicted once without their teams, and only the
        pairs whose team's one-hot some tree reads are predicted again with it. A day's
        configurations counted with their teams are about three times as many as without
        (docs/nightly.md).
        """
        n = len(self.encoder.names)
        teamless: dict[tuple[Any, ...], int] = {}
        base_of = np.empty(len(jobs), dtype=np.int64)
        bare: list[JobFeatures] = []
        redo: list[tuple[int, np.ndarray]] = []  # (job, the positions its team is read at)
        for i, job in enumerate(jobs):
            base_of[i] = teamless.setdefault(self._key(job)[:-1], len(teamless))  # no team
            if base_of[i] == len(bare):
                bare.append(replace(job, team="") if job.team else job)
            if job.team:
                columns = self._team_columns(job.team)
                read = (columns >= 0) & self._split_on[np.maximum(columns, 0)]
                if read.any():
                    redo.append((i, np.flatnonzero(read)))
        base = self.booster.predict(self.every_type_rows(bare)).reshape(len(bare), n)
        predicted = base[base_of]  # a copy, one row per job
        if redo:
            rows = self.every_type_rows([jobs[i] for i, _ in redo])
            take = np.concatenate([k * n + at for k, (_, at) in enumerate(redo)])
            job_of = np.concatenate([np.full(len(at), i) for i, at in redo])
            predicted[job_of, take % n] = self.booster.predict(rows[take])
        return predicted

    @property
    def _split_on(self) -> np.ndarray:
        """Per vocabulary column, whether some tree splits on it."""
        if self._splits is None:
            self._splits = np.asarray(self.booster.feature_importance("split")) > 0
        return self._splits

    def every_type_rows(self, jobs: Iterable[JobFeatures]) -> scipy.sparse.csr_matrix:
        """The sparse rows of each job's pairs with every catalog type, job by job: the
        vectoriser's rows of their :meth:`FeatureEncoder.pair` dicts, entry for entry, built from
        the encoder's arrays (a day's configurations make hundreds of thousands of pairs)."""
        import scipy.sparse

        encoder = self.encoder
        n = len(encoder.names)
        indices: list[np.ndarray] = []
        values: list[np.ndarray] = []
        lengths: list[np.ndarray] = []
        for job in jobs:
            columns = self._pair_columns(job)
            if columns is None:  # a name repeats: a dict keeps one of them, so go through dicts
                rows = self.vectoriser.rows(encoder.pair(job, p) for p in range(n))
                indices.append(rows.indices)
                values.append(rows.data)
                lengths.append(np.diff(rows.indptr))
                continue
            # pair_values' order: shared, the one-hots (ONEHOT_VALUES), numeric, the device count
            shared = len(job.shared_names)
            numeric = encoder.numeric(job)
            onehots = columns.shape[1] - shared - len(numeric) - 1
            x = np.empty(columns.shape)
            x[:, :shared] = job.shared_values
            x[:, shared : shared + onehots] = ONEHOT_VALUES
            x[:, shared + onehots : -1] = numeric.T
            x[:, -1] = job.log_devices
            if job.team:  # its one-hot comes first (FeatureEncoder.pair_names)
                columns = np.column_stack((self._team_columns(job.team), columns))
                x = np.column_stack((np.full(len(x), TEAM_ONEHOT_VALUE), x))
            keep = (columns >= 0) & (x != 0)  # zeros stay implicit, as in river's updates
            indices.append(columns[keep])
            values.append(x[keep])
            lengths.append(keep.sum(axis=1))
        indptr = np.concatenate([[0], np.cumsum(np.concatenate(lengths))])
        return scipy.sparse.csr_matrix(
            (np.concatenate(values), np.concatenate(indices).astype(np.int32), indptr),
            shape=(len(indptr) - 1, len(self.vectoriser.vocabulary)),
        )

    def _team_columns(self, team: str) -> np.ndarray:
        """Per catalog type, the vocabulary column of ``team``'s one-hot (-1: not in it)."""
        columns = self._teams.get(team)
        if columns is None:
            vocabulary = self.vectoriser.vocabulary
            keys = self.encoder.team_keys(team)
            columns = np.array([vocabulary.get(key, -1) for key in keys], dtype=np.int32)
            self._teams[team] = columns
        return columns

    def _pair_columns(self, job: JobFeatures) -> np.ndarray | None:
        """Per catalog type, the vocabulary column of each of the pair's configuration feature
        names (-1: not in it), in :meth:`FeatureEncoder.config_pair_names` order; None when a
        name repeats."""
        if job.key not in self._columns:
            vocabulary = self.vectoriser.vocabulary
            n = len(self.encoder.names)
            names = [self.encoder.config_pair_names(job, p) for p in range(n)]
            repeats = any(len(set(each)) < len(each) for each in names)
            self._columns[job.key] = (
                None
                if repeats
                else np.array(
                    [[vocabulary.get(name, -1) for name in each] for each in names], dtype=np.int32
                )
            )
        return self._columns[job.key]

    def predict_many(self, job: JobFeatures, positions: np.ndarray | None = None) -> np.ndarray:
        """log throughput of ``job`` on each catalog position in ``positions`` (None: all)."""
        key = self._key(job)
        efficiency = self.predictions.get(key)
        if efficiency is None:
            self.prime([job])
            efficiency = self.predictions[key]
        if positions is not None:
            efficiency = efficiency[positions]
        return self.encoder.baseline(job, positions) + efficiency

    def family_seen(self, family: str) -> np.ndarray:
        """Training examples of each hardware type for ``family`` (do not modify)."""
        seen = self.seen_by_family.get(family)
        if seen is None:
            seen = self.seen_by_family[family] = np.zeros(len(self.encoder.names), np.int64)
        return seen

    def learn_one(self, job: JobFeatures, position: int, log_throughput: float) -> None:
        """A batch model learns from its next retrain, not online."""
        raise TypeError("a BoostedModel is trained on a snapshot (train_boosted), not online")


def train_boosted(
    training: TrainingSet,
    encoder: FeatureEncoder,
    params: Mapping[str, Any] | None = None,
    rounds: int = BOOSTED_ROUNDS,
) -> BoostedModel:
    """A LightGBM regressor on the snapshot's pair features (see the module docstring).

    Parameters
    ----------
    training, encoder
        The snapshot and the feature encoder.
    params, rounds
        LightGBM parameters (default :data:`BOOSTED_PARAMS`) and boosting rounds.
    """
    import lightgbm

    if len(training) == 0:
        raise ValueError("an empty snapshot: nothing to train a boosted model on")
    jobs = _job_features(encoder, training)
    vocabulary, rows = training_rows(training, encoder, jobs)
    baselines = np.array([encoder.baseline(job) for job in jobs])
    target = training.target - baselines[training.config, training.position]
    data = lightgbm.Dataset(rows, target, free_raw_data=True)
    booster = lightgbm.train(dict(params or BOOSTED_PARAMS), data, num_boost_round=rounds)
    return BoostedModel(encoder, booster, vocabulary, training)


def training_rows(
    training: TrainingSet, encoder: FeatureEncoder, jobs: Sequence[JobFeatures] | None = None
) -> tuple[dict[str, int], scipy.sparse.csr_matrix]:
    """The vocabulary and sparse rows LightGBM trains on: the vectoriser fitted on, and applied
    to, each example's :meth:`FeatureEncoder.pair` dict, entry for entry, built once per
    distinct (configuration, hardware) pair (a night's window repeats most of them).

    ``jobs``: the configurations' features, if already encoded.
    """
    import scipy.sparse

    jobs = _job_features(encoder, training) if jobs is None else jobs
    n = len(encoder.names)
    pairs, first, inverse = np.unique(
        training.config * n + training.position, return_index=True, return_inverse=True
    )
    vocabulary: dict[str, int] = {}
    # a pair's names depend on its job's key, position and team only: numbered when first seen
    named: dict[tuple[tuple[str, str, str, str], int], np.ndarray] = {}
    columns: list[np.ndarray] = [np.empty(0, np.int32)] * len(pairs)
    values: list[np.ndarray] = [np.empty(0)] * len(pairs)
    for u in np.argsort(first, kind="stable").tolist():  # in the order pairs first appear
        config, position = divmod(int(pairs[u]), n)
        job = jobs[config]
        # the team's one-hot comes first (FeatureEncoder.pair_names), and is numbered first
        team = encoder.team_keys(job.team)[position] if job.team else None
        team_column = None if team is None else vocabulary.setdefault(team, len(vocabulary))
        numbered = named.get((job.key, position))
        if numbered is None:
            names = encoder.config_pair_names(job, position)
            if len(set(names)) < len(names):  # a dict keeps one of a repeated name: use them
                return _dict_rows(training, encoder, jobs)
            numbered = named[(job.key, position)] = np.array(
                [vocabulary.setdefault(name, len(vocabulary)) for name in names], np.int32
            )
        if team_column is not None:
            numbered = np.r_[np.int32(team_column), numbered]
        x = np.array(encoder.pair_values(job, position))
        nonzero = x != 0  # zeros stay implicit, as in river's updates
        columns[u], values[u] = numbered[nonzero], x[nonzero]
    # each example's row is its pair's: gather the pairs' entries in example order
    lengths = np.array([len(each) for each in columns], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    per_example = lengths[inverse]
    indptr = np.concatenate([[0], np.cumsum(per_example)])
    take = np.repeat(starts[inverse] - indptr[:-1], per_example) + np.arange(indptr[-1])
    flat_columns = np.concatenate([np.empty(0, np.int32), *columns])
    flat_values = np.concatenate([np.empty(0), *values])
    return vocabulary, scipy.sparse.csr_matrix(
        (flat_values[take], flat_columns[take], indptr), shape=(len(training), len(vocabulary))
    )


def _dict_rows(
    training: TrainingSet, encoder: FeatureEncoder, jobs: Sequence[JobFeatures]
) -> tuple[dict[str, int], scipy.sparse.csr_matrix]:
    """:func:`training_rows` through one feature dict per example."""
    dicts = [
        encoder.pair(jobs[c], p)
        for c, p in zip(training.config.tolist(), training.position.tolist(), strict=True)
    ]
    vectoriser = _Vectoriser.fit(dicts)
    return vectoriser.vocabulary, vectoriser.rows(dicts)


def feature_fingerprint(encoder: FeatureEncoder) -> str:
    """sha256 of the features the encoder computes for fixed probe jobs on every catalog type.

    It changes when the features do (``features.py`` or the catalog's figures), so a model saved
    with one feature set is not silently read with another.

    >>> from leap_stream.core.catalog import default_catalog
    >>> from leap_stream.core.hardware import HardwareArrays
    >>> encoder = FeatureEncoder(HardwareArrays.from_catalog(default_catalog()))
    >>> len(feature_fingerprint(encoder)), feature_fingerprint(encoder) == feature_fingerprint(
    ...     FeatureEncoder(HardwareArrays.from_catalog(default_catalog())))
    (64, True)
    """
    digest = hashlib.sha256()
    for probe in _PROBES:
        job = encoder.job(probe)
        baseline = encoder.baseline(job)
        for position, name in enumerate(encoder.names):
            pair = encoder.pair(job, position)
            features = [[key, _rounded(value)] for key, value in pair.items()]
            line = [name, _rounded(float(baseline[position])), features]
            digest.update(json.dumps(line).encode())
    return digest.hexdigest()


def probe_predictions(model: Any) -> list[float]:
    """A model's log-throughput predictions for the probe jobs on every catalog type.

    Recorded when a model is saved and compared when it is loaded: a model that loads but
    predicts otherwise (another library or code version) is refused.
    """
    encoder = model.encoder
    return [
        _rounded(float(value))
        for probe in _PROBES
        for value in model.predict_many(encoder.job(probe))
    ]


def _rounded(value: float) -> float:
    """12 significant digits: stable across platforms' last-bit differences of log/exp."""
    return float(f"{value:.12g}") if math.isfinite(value) else value
