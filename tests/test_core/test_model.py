"""Tests of leap_stream.core.model: batch scoring equals river's predict_one, learning, pickling."""

from __future__ import annotations

import math
import pickle
from typing import Any

import numpy as np
import pytest

from leap_stream.core.catalog import Catalog
from leap_stream.core.features import FeatureEncoder, JobFeatures
from leap_stream.core.hardware import HardwareArrays
from leap_stream.core.model import ThroughputModel

JOBS: list[dict[str, Any]] = [
    {"model_type": "resnet-50", "model_family": "cnn", "framework": "pytorch",
     "precision": "bf16", "param_count": 25_000_000, "global_batch_size": 512, "seq_len": None,
     "num_devices": 8, "tensor_parallel": 1, "pipeline_parallel": 1},
    {"model_type": "llm-7b", "model_family": "dense_llm", "framework": "jax",
     "precision": "fp8", "param_count": 7_000_000_000, "global_batch_size": 1024,
     "seq_len": 4096, "num_devices": 64, "tensor_parallel": 4, "pipeline_parallel": 2},
    {"model_type": "bert-large", "model_family": "encoder", "framework": "tensorflow",
     "precision": "fp32", "param_count": 340_000_000, "global_batch_size": 256,
     "seq_len": 512, "num_devices": 1, "tensor_parallel": 1, "pipeline_parallel": 1},
]  # fmt: skip


@pytest.fixture
def model(hw_catalog: Catalog) -> ThroughputModel:
    return ThroughputModel(FeatureEncoder(HardwareArrays.from_catalog(hw_catalog)))


def _features(model: ThroughputModel) -> list[JobFeatures]:
    return [model.encoder.job(j) for j in JOBS]


def _assert_batch_equals_river(model: ThroughputModel, job: JobFeatures) -> None:
    n = len(model.encoder.hw)
    every = model.predict_many(job)
    assert every.shape == (n,)
    one = np.array([model.predict_one(job, p) for p in range(n)])
    np.testing.assert_allclose(every, one, rtol=1e-12, atol=1e-9)
    # a candidate subset, in any order, with a repeat
    subset = np.array([n - 1, 3, 0, 3, n // 2])
    np.testing.assert_allclose(model.predict_many(job, subset), one[subset], rtol=1e-12, atol=1e-9)


def _learn_some(model: ThroughputModel, rounds: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    features = _features(model)
    n = len(model.encoder.hw)
    for _ in range(rounds):
        job = features[int(rng.integers(len(features)))]
        model.learn_one(job, int(rng.integers(n)), float(rng.normal(8.0, 2.0)))


def test_predict_many_equals_predict_one_before_learning(model: ThroughputModel) -> None:
    for job in _features(model):
        _assert_batch_equals_river(model, job)


def test_predict_many_equals_predict_one_after_learning(model: ThroughputModel) -> None:
    _learn_some(model, 300)
    assert model.learned == 300
    for job in _features(model):
        _assert_batch_equals_river(model, job)
    # a job key the model has never scored nor learned: its weights are read fresh
    unseen = model.encoder.job({**JOBS[0], "model_type": "vgg-16", "num_devices": 128})
    _assert_batch_equals_river(model, unseen)


def test_predict_many_equals_predict_one_when_scored_between_learns(
    model: ThroughputModel,
) -> None:
    # scoring builds caches; learning afterwards must still reach the batch path
    features = _features(model)
    for job in features:
        model.predict_many(job)
    h100 = model.encoder.hw.index["H100-SXM"]
    for step in range(20):
        model.learn_one(features[step % 3], (h100 + step) % len(model.encoder.hw), 9.0)
        _assert_batch_equals_river(model, features[(step + 1) % 3])


def test_learning_moves_the_prediction_toward_the_target(model: ThroughputModel) -> None:
    job = _features(model)[0]
    h100 = model.encoder.hw.index["H100-SXM"]
    for target in (math.log(20_000.0), math.log(1e9)):
        before = model.predict_one(job, h100)
        model.learn_one(job, h100, target)
        after = model.predict_one(job, h100)
        assert abs(after - target) < abs(before - target)
    assert model.seen[h100] == 2 and model.seen.sum() == 2
    assert model.family_seen("cnn")[h100] == 2 and model.family_seen("dense_llm").sum() == 0


def test_non_finite_targets_are_ignored(model: ThroughputModel) -> None:
    job = _features(model)[0]
    before = model.predict_many(job).copy()
    for bad in (math.nan, math.inf, -math.inf):
        model.learn_one(job, 0, bad)
    assert model.learned == 0
    np.testing.assert_array_equal(model.predict_many(job), before)


def test_learns_a_real_relationship(model: ThroughputModel, hw_catalog: Catalog) -> None:
    # Throughput proportional to devices x peak bf16 rate, with a vendor efficiency (AMD runs
    # this model at 60% of NVIDIA's); held-out (hardware, devices) pairs were never learned.
    hardware = ["H100-SXM", "A100-SXM-80GB", "MI300X", "L40S", "H200-SXM", "MI250X"]
    devices = [1, 2, 4, 8, 16, 32]

    def job(d: int) -> JobFeatures:
        return model.encoder.job({**JOBS[2], "precision": "bf16", "framework": "pytorch",
                                  "num_devices": d, "global_batch_size": 32 * d})  # fmt: skip

    def truth(h: str, d: int) -> float:
        efficiency = 0.6 if hw_catalog[h].vendor == "AMD" else 1.0
        return 0.3 * d * hw_catalog[h].peak_tflops("bf16") * efficiency

    held_out = {("H100-SXM", 8), ("MI300X", 16), ("L40S", 4), ("A100-SXM-80GB", 32)}
    train = [(h, d) for h in hardware for d in devices if (h, d) not in held_out]
    rng = np.random.default_rng(0)
    for _ in range(400):
        h, d = train[int(rng.integers(len(train)))]
        model.learn_one(job(d), model.encoder.hw.index[h], math.log(truth(h, d)))
    for h, d in sorted(held_out):
        predicted = math.exp(model.predict_one(job(d), model.encoder.hw.index[h]))
        assert predicted == pytest.approx(truth(h, d), rel=0.10), (h, d)


def test_pickle_round_trip_gives_the_same_predictions(model: ThroughputModel) -> None:
    _learn_some(model, 100)
    features = _features(model)
    copy = pickle.loads(pickle.dumps(model))
    for job in features:
        np.testing.assert_array_equal(copy.predict_many(job), model.predict_many(job))
        assert copy.predict_one(job, 5) == model.predict_one(job, 5)
    assert copy.learned == model.learned
    np.testing.assert_array_equal(copy.seen, model.seen)
    # the copy keeps learning exactly like the original
    for m in (model, copy):
        m.learn_one(features[1], 7, 10.0)
    for job in features:
        np.testing.assert_array_equal(copy.predict_many(job), model.predict_many(job))
