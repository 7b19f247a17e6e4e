"""Pairwise transfer: what related jobs measured on two hardware types, blended with the model."""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from leap_stream.core.catalog import default_catalog
from leap_stream.core.leap import LeapCore
from leap_stream.core.transfer import (
    DEFAULT_SHARPNESS,
    DEFAULT_SPREAD,
    LOCAL_PRIOR_DISTANCE,
    LOCAL_SHARPNESSES,
    MIN_SHARPNESS_SCORED,
    MIN_SPREAD,
    MIN_SPREAD_WEIGHT,
    PRIOR_WEIGHT,
    PairwiseTransfer,
    config_coordinates,
)

T0 = datetime(2025, 6, 1, tzinfo=UTC)
HARDWARE = ["A", "B", "C"]


def test_a_pair_nobody_measured_keeps_the_model_ratio() -> None:
    pairs = PairwiseTransfer(HARDWARE)
    pairs.learn_one("resnet", "cnn", reference=0, hardware=1, measured=0.4, model=0.0)
    correction = pairs.correction("resnet", "cnn", 0, model=np.full(3, 0.1))
    assert correction[2] == 0.0  # A -> C: no job measured it
    assert correction[1] != 0.0


def test_measured_ratios_take_over_where_the_model_is_wrong_and_not_where_it_is_right() -> None:
    truth = 0.3  # jobs run 35% more efficiently on B than on A
    wrong, right = PairwiseTransfer(HARDWARE), PairwiseTransfer(HARDWARE)
    rng = np.random.default_rng(0)
    for _ in range(200):
        measured = truth + rng.normal(0, 0.1)
        wrong.learn_one("resnet", "cnn", reference=0, hardware=1, measured=measured, model=0.0)
        right.learn_one("resnet", "cnn", reference=0, hardware=1, measured=measured, model=truth)
    # the model that keeps missing by 0.3 loses its say; the one that is right keeps most of it
    fix_wrong = wrong.correction("resnet", "cnn", 0, model=np.zeros(3))[1]
    fix_right = right.correction("resnet", "cnn", 0, model=np.full(3, truth))[1]
    assert fix_wrong == pytest.approx(truth, abs=0.05)
    assert abs(fix_right) < 0.02
    assert wrong.squared_error[0] < wrong.squared_error[1]
    assert right.squared_error[0] > right.squared_error[1]


def test_ratios_are_kept_both_ways_and_by_model_type_before_family() -> None:
    pairs = PairwiseTransfer(HARDWARE)
    for _ in range(50):
        pairs.learn_one("resnet", "cnn", reference=0, hardware=1, measured=0.5, model=0.0)
        pairs.learn_one("vgg", "cnn", reference=0, hardware=1, measured=-0.1, model=0.0)
    resnet, _ = pairs.measured_ratio("resnet", "cnn", 0)
    vgg, _ = pairs.measured_ratio("vgg", "cnn", 0)
    unseen, _ = pairs.measured_ratio("alexnet", "cnn", 0)  # the family's mean
    back, _ = pairs.measured_ratio("resnet", "cnn", 1)
    assert unseen[1] == pytest.approx(0.2, abs=0.01)
    # each type's own mean, shrunk a little (4 pseudo-observations of ~44) towards the family's
    assert 0.45 < resnet[1] < 0.5
    assert -0.1 < vgg[1] < -0.05
    assert back[0] == pytest.approx(-resnet[1])


def _per_device(batch: int) -> np.ndarray:
    """The coordinates of a one-device job of this batch size."""
    return config_coordinates(
        {"global_batch_size": batch, "num_devices": 1, "tensor_parallel": 1, "pipeline_parallel": 1}
    )


def test_a_ratio_is_read_near_the_jobs_own_configuration() -> None:
    """Small batches leave B's extra speed unused (ratio -1.0), large ones use it (-0.2), as
    Gavel's K80 against P100 does: a job reads the ratio of its neighbours, not the mean."""
    pairs = PairwiseTransfer(HARDWARE)
    for _ in range(10):
        for batch, ratio in ((16, -1.0), (256, -0.2)):
            pairs.learn_one(
                "resnet",
                "cnn",
                reference=0,
                hardware=1,
                measured=ratio,
                model=0.0,
                coordinates=_per_device(batch),
            )
    small, _ = pairs.measured_ratio("resnet", "cnn", 0, _per_device(16))
    near_small, _ = pairs.measured_ratio("resnet", "cnn", 0, _per_device(24))
    large, _ = pairs.measured_ratio("resnet", "cnn", 0, _per_device(256))
    back, _ = pairs.measured_ratio("resnet", "cnn", 1, _per_device(256))
    pooled, _ = pairs.measured_ratio("resnet", "cnn", 0)
    assert small[1] == pytest.approx(-1.0, abs=0.01)
    assert large[1] == pytest.approx(-0.2, abs=0.01)
    assert near_small[1] < -0.9  # half a doubling away: still the small batches' ratio
    assert back[0] == pytest.approx(0.2, abs=0.01)
    assert pooled[1] == pytest.approx(-0.6, abs=0.05)  # without a configuration: the mean
    # another model type has no neighbours of its own: its family's mean
    other, _ = pairs.measured_ratio("vgg", "cnn", 0, _per_device(16))
    assert other[1] == pytest.approx(pooled[1], abs=0.2)


def _sweeps(
    pairs: PairwiseTransfer, ratio_of_batch: Callable[[int], float], noise: float, sweeps: int
) -> None:
    """A model type that runs batches of 16 to 512 per device on A and B, again and again in
    random order, its ratio B / A a function of the batch, measured with ``noise``."""
    rng = np.random.default_rng(3)
    for _ in range(sweeps):
        for doublings in rng.permutation(6):
            batch = 16 * 2 ** int(doublings)
            pairs.learn_one(
                "resnet",
                "cnn",
                reference=0,
                hardware=1,
                measured=ratio_of_batch(batch) + float(rng.normal(0.0, noise)),
                model=0.0,
                coordinates=_per_device(batch),
            )


@pytest.mark.parametrize(
    ("ratio_of_batch", "noise", "chosen"),
    [
        # a ratio that flips at every doubling: only the same batch's measurements know it
        (lambda batch: 0.5 * (-1) ** round(math.log2(batch)), 0.02, max(LOCAL_SHARPNESSES)),
        # one ratio, noisily measured: every neighbour helps average the noise
        (lambda batch: 0.3, 0.1, min(LOCAL_SHARPNESSES)),
    ],
)
def test_the_local_level_chooses_its_sharpness_from_what_it_predicted(
    ratio_of_batch: Callable[[int], float], noise: float, chosen: float
) -> None:
    pairs = PairwiseTransfer(HARDWARE)
    assert pairs.local_sharpness() == DEFAULT_SHARPNESS  # nothing scored yet
    # (enough sweeps that the first, with no measurement of the same batch yet, fade from the
    # running error)
    _sweeps(pairs, ratio_of_batch, noise, sweeps=100)
    assert pairs.local_scored > MIN_SHARPNESS_SCORED
    assert pairs.local_sharpness() == chosen
    # what it serves is what it scored best: a batch's ratio read at that sharpness
    near, _ = pairs.measured_ratio("resnet", "cnn", 0, _per_device(64))
    assert near[1] == pytest.approx(ratio_of_batch(64), abs=0.05)


@pytest.mark.parametrize(("model_miss", "weight"), [(2.0, 1.0), (0.5, 0.0)])
def test_the_blend_weight_minimises_the_blends_error_when_both_miss_alike(
    model_miss: float, weight: float
) -> None:
    """Each observation is a new model type, so the measured estimate is the all-jobs mean
    (about 0) and misses by the measured ratio; the model misses by ``model_miss`` times as
    much, the same way. Inverse squared errors would weigh the measured ratios 0.8 and 0.2;
    where one estimate's miss contains the other's, the better one should have all the say."""
    pairs = PairwiseTransfer(HARDWARE)
    rng = np.random.default_rng(2)
    for i in range(600):
        measured = float(rng.normal(0.0, 0.3))
        pooled, _ = pairs.measured_ratio(f"type{i}", f"family{i}", 0)
        miss = pooled[1] - measured
        model = measured + model_miss * miss
        pairs.learn_one(
            f"type{i}", f"family{i}", reference=0, hardware=1, measured=measured, model=model
        )
    inverse = pairs.squared_error[1] / pairs.squared_error.sum()
    assert inverse == pytest.approx(model_miss**2 / (1 + model_miss**2), abs=0.05)
    assert pairs.measured_weight() == pytest.approx(weight, abs=0.05)


def test_a_transfer_pickled_before_the_local_level_loads_and_blends_as_it_did() -> None:
    pairs = PairwiseTransfer(HARDWARE)
    for i in range(20):
        pairs.learn_one("resnet", "cnn", reference=0, hardware=1, measured=0.3, model=0.1 * i)
    old = pickle.loads(pickle.dumps(pairs))
    for name in ("_local", "cross_error", "local_error", "local_scored"):
        del old.__dict__[name]
    loaded = pickle.loads(pickle.dumps(old))
    expected = loaded.squared_error[1] / loaded.squared_error.sum()
    assert loaded.measured_weight() == pytest.approx(expected)  # no covariance yet
    loaded.learn_one(
        "resnet",
        "cnn",
        reference=0,
        hardware=2,
        measured=0.5,
        model=0.0,
        coordinates=_per_device(32),
    )
    near, _ = loaded.measured_ratio("resnet", "cnn", 0, _per_device(32))
    assert near[2] == pytest.approx(0.5)
    assert loaded.local_sharpness() == DEFAULT_SHARPNESS


def _job(job_id: str, lineage: str, model_type: str, **overrides: Any) -> dict[str, Any]:
    return {
        "event_id": f"{job_id}/s",
        "event_time": T0,
        "job_id": job_id,
        "lineage_id": lineage,
        "model_type": model_type,
        "model_family": "cnn",
        "framework": "pytorch",
        "param_count": 25_000_000,
        "global_batch_size": 2048,
        "seq_len": None,
        "precision": "bf16",
        "num_devices": 8,
        "tensor_parallel": 1,
        "pipeline_parallel": 1,
        "requested_hardware": None,
        "candidate_hardware": ["H100-SXM", "MI300X"],
    } | overrides


def _completed(job: dict[str, Any], hardware: str, throughput: float) -> dict[str, Any]:
    """Its success an hour after ``job`` was submitted."""
    return {
        "event_id": f"{job['job_id']}/c",
        "event_time": job["event_time"] + timedelta(hours=1),
        "job_id": job["job_id"],
        "lineage_id": job["lineage_id"],
        "hardware_type": hardware,
        "num_devices": job["num_devices"],
        "status": "succeeded",
        "throughput": throughput,
        "steps": 100,
    }


def _run(core: LeapCore, job: dict[str, Any], hardware: str, throughput: float) -> None:
    core.on_submitted(job)
    core.on_completed(_completed(job, hardware, throughput))


def _transfer_error(core: LeapCore, start: datetime) -> float:
    """|log error| of a new lineage's prediction on MI300X after it ran on H100-SXM."""
    new = _job("new-1", "new", "resnet", event_time=start)
    _run(core, new, "H100-SXM", 10_000.0)
    ranking = core.on_submitted(
        {**new, "job_id": "new-2", "event_time": start + timedelta(hours=2)}
    )
    i = ranking.hardware.index("MI300X")
    return abs(math.log(ranking.predicted[i] / 30_000.0))


def test_lineages_that_ran_on_both_types_teach_the_ratio_a_new_lineage_transfers_with() -> None:
    """resnet runs 3x faster on MI300X than on H100-SXM here, which no spec sheet says: after
    a few lineages ran on both, a new one's first MI300X prediction follows them."""
    taught, untaught = LeapCore(default_catalog()), LeapCore(default_catalog())
    when = T0
    for i in range(30):
        when = T0 + timedelta(hours=3 * i)
        speed = 8_000.0 * (1.0 + 0.01 * (i % 5))
        first = _job(f"j{i}a", f"l{i}", "resnet", event_time=when)
        _run(taught, first, "H100-SXM", speed)
        _run(untaught, first, "H100-SXM", speed)
        # only the taught core sees these lineages move on to MI300X
        second = _job(f"j{i}b", f"l{i}", "resnet", event_time=when + timedelta(hours=1))
        _run(taught, second, "MI300X", 3.0 * speed)
    start = when + timedelta(hours=3)
    assert taught.pairs.learned == 30
    assert _transfer_error(taught, start) < 0.15
    assert _transfer_error(untaught, start) > 2 * _transfer_error(taught, start)


def test_a_new_lineage_transfers_with_the_ratio_of_its_own_configuration() -> None:
    """resnet at 16 samples per device runs as fast on MI300X as on H100-SXM, at 256 three
    times as fast: a new lineage at each batch reads its own configuration's ratio."""
    core = LeapCore(default_catalog())
    when = T0
    for i in range(40):
        when = T0 + timedelta(hours=3 * i)
        batch, ratio = (128, 1.0) if i % 2 else (2048, 3.0)
        first = _job(f"j{i}a", f"l{i}", "resnet", event_time=when, global_batch_size=batch)
        _run(core, first, "H100-SXM", 8_000.0)
        second = {**first, "job_id": f"j{i}b", "event_time": when + timedelta(hours=1)}
        _run(core, second, "MI300X", ratio * 8_000.0)
    for batch, ratio in ((128, 1.0), (2048, 3.0)):
        start = when + timedelta(hours=3)
        new = _job(
            f"new{batch}", f"new{batch}", "resnet", event_time=start, global_batch_size=batch
        )
        _run(core, new, "H100-SXM", 8_000.0)
        ranking = core.on_submitted({**new, "job_id": f"new{batch}b"})
        predicted = ranking.predicted[ranking.hardware.index("MI300X")]
        assert abs(math.log(predicted / (ratio * 8_000.0))) < 0.1, (batch, predicted)


@pytest.mark.parametrize(("gap_hours", "ratios"), [(1, 2), (7, 1)])
def test_a_sweep_of_one_configuration_teaches_a_ratio_from_every_recent_type(
    gap_hours: int, ratios: int
) -> None:
    """H100-SXM, then MI300X, then A100-SXM-80GB, each gap_hours apart: the last completion
    teaches the ratio from MI300X (the latest) and, measured within 6 hours, from H100-SXM."""
    core = LeapCore(default_catalog())
    candidates = ["H100-SXM", "MI300X", "A100-SXM-80GB"]
    speeds = [8_000.0, 9_000.0, 4_000.0]
    examples = []
    for i, (hardware, speed) in enumerate(zip(candidates, speeds, strict=True)):
        job = _job(
            f"j{i}",
            "l1",
            "resnet",
            event_time=T0 + timedelta(hours=gap_hours * i),
            candidate_hardware=candidates,
        )
        core.on_submitted(job)
        _, example = core.join(_completed(job, hardware, speed))
        assert example is not None
        core.learn(example)
        examples.append(example)
    last = examples[-1]
    assert last["reference"]["hardware_type"] == "MI300X"
    assert [r["hardware_type"] for r in last["exact_references"]] == ["H100-SXM"][: ratios - 1]
    assert core.pairs.learned == 1 + ratios  # MI300X's ratio from H100-SXM, then the last's
    h100, a100 = core.hw.index["H100-SXM"], core.hw.index["A100-SXM-80GB"]
    measured, evidence = core.pairs.measured_ratio("resnet", "cnn", h100)
    assert (evidence[a100] > 0) == (ratios == 2)
    if ratios == 2:  # the efficiency ratio the two measured: throughput net of the roofline
        job = core.model.encoder.job(last["job"])
        baseline = core.model.encoder.baseline(job, np.array([h100, a100]))
        expected = math.log(4_000.0 / 8_000.0) - (baseline[1] - baseline[0])
        assert measured[a100] == pytest.approx(expected)


def test_the_reference_travels_in_the_learn_example_and_the_fold_learns_the_same() -> None:
    """join + learn on another core (the service's split) learns the same ratios, those of a
    sweep's earlier types included."""
    whole, joiner, learner = (LeapCore(default_catalog()) for _ in range(3))
    sweep = [("H100-SXM", 8_000.0), ("MI300X", 20_000.0), ("A100-SXM-80GB", 4_000.0)]
    for i, (hardware, speed) in enumerate(sweep):
        job = _job(
            f"j{i}",
            "l1",
            "resnet",
            event_time=T0 + timedelta(hours=2 * i),
            candidate_hardware=[h for h, _ in sweep],
        )
        completed = _completed(job, hardware, speed)
        whole.on_submitted(job)
        whole.on_completed(completed)
        joiner.on_submitted(job)
        _, example = joiner.join(completed)
        assert example is not None
        assert (example["reference"] is None) == (i == 0)
        learner.learn(example)
    assert learner.pairs.learned == whole.pairs.learned == 3
    for reference in range(len(whole.hw)):
        np.testing.assert_array_equal(
            learner.pairs.measured_ratio("resnet", "cnn", reference)[0],
            whole.pairs.measured_ratio("resnet", "cnn", reference)[0],
        )
    assert "pairs" in whole.model_state()


def test_a_pair_whose_ratio_varies_less_across_jobs_has_the_smaller_spread() -> None:
    pairs = PairwiseTransfer(HARDWARE)
    rng = np.random.default_rng(1)
    for _ in range(100):
        pairs.learn_one("lm", "dense_llm", reference=0, hardware=1, measured=0.5, model=0.0)
        noisy = 0.5 + rng.normal(0, 0.4)
        pairs.learn_one("lm", "dense_llm", reference=0, hardware=2, measured=noisy, model=0.0)
    spread = pairs.spread("lm", "dense_llm", 0)
    assert spread[1] == pytest.approx(0.002)  # the floor: they all measured the same ratio
    assert spread[2] == pytest.approx(0.16, rel=0.3)
    # a reference nobody measured from: the default
    assert pairs.spread("lm", "dense_llm", 1)[2] == pytest.approx(0.04)


def test_what_a_reference_says_is_cached_until_a_ratio_to_or_from_it_is_learned() -> None:
    rng = np.random.default_rng(3)
    pairs = PairwiseTransfer(["A", "B", "C", "D"])
    kinds = [("resnet", "cnn"), ("vgg", "cnn"), ("bert", "dense_llm")]
    for _ in range(300):
        model_type, family = kinds[rng.integers(len(kinds))]
        reference, hardware = rng.choice(4, size=2, replace=False).tolist()
        pairs.learn_one(
            model_type,
            family,
            reference=reference,
            hardware=hardware,
            measured=float(rng.normal(0.2 * hardware, 0.1)),
            model=0.0,
        )
        for model_type, family in kinds:
            for reference in range(4):  # every read as computed afresh, and read-only
                spread = pairs.spread(model_type, family, reference)
                assert spread is pairs.spread(model_type, family, reference)  # (cached)
                fresh = pairs._spread_afresh(model_type, family, reference)
                np.testing.assert_array_equal(spread, fresh)
                value, evidence = pairs.measured_ratio(model_type, family, reference)
                fresh_value, fresh_evidence = pairs._pooled_afresh(model_type, family, reference)
                np.testing.assert_array_equal(value, fresh_value)
                np.testing.assert_array_equal(evidence, fresh_evidence)
                assert not (spread.flags.writeable or value.flags.writeable)
    loaded = pickle.loads(pickle.dumps(pairs))  # the cache stays behind, and refills
    assert len(loaded._cache.new) == 0
    np.testing.assert_array_equal(loaded.spread("vgg", "cnn", 2), pairs.spread("vgg", "cnn", 2))


def _numpy_reads(
    pairs: PairwiseTransfer, model_type: str, family: str, reference: int, coordinates: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What measured_ratio (near ``coordinates``) and spread computed with numpy before their
    loops were compiled: (ratio, evidence, spread)."""
    n = len(pairs.hardware)
    value, evidence, spread = np.zeros(n), np.zeros(n), np.full(n, DEFAULT_SPREAD)
    for i, key in enumerate(pairs._levels(model_type, family)):
        row = pairs._rows.get((key, reference))
        if row is None:
            continue
        if i == 0:
            value = np.divide(row[0], row[1], out=np.zeros(n), where=row[1] > 0)
            evidence = row[1].copy()
        else:
            value = (row[0] + PRIOR_WEIGHT * value) / (row[1] + PRIOR_WEIGHT)
        enough = row[1] >= MIN_SPREAD_WEIGHT
        mean = np.divide(row[0], row[1], out=np.zeros(n), where=enough)
        square = np.divide(row[2], row[1], out=np.zeros(n), where=enough)
        spread = np.where(enough, np.maximum(square - mean * mean, MIN_SPREAD), spread)
    near = pairs._local.get((model_type, reference))
    if near is not None:
        sharpness = pairs.local_sharpness()
        k = near.size
        distance = np.abs(near.coordinates[:k] - coordinates).sum(axis=1)
        weight = np.exp(-sharpness * distance)
        sums = np.bincount(near.target[:k], weight * near.value[:k], minlength=n)
        weights = np.bincount(near.target[:k], weight, minlength=n)
        prior = math.exp(-sharpness * LOCAL_PRIOR_DISTANCE)
        value = (sums + prior * value) / (weights + prior)
    return value, evidence, spread


def test_the_compiled_reads_equal_numpys_to_the_bit() -> None:
    rng = np.random.default_rng(11)
    n = 12
    pairs = PairwiseTransfer([f"T{i}" for i in range(n)])
    kinds = [("resnet", "cnn"), ("vgg", "cnn"), ("bert", "dense_llm"), ("gpt", "dense_llm")]
    for step in range(4000):
        model_type, family = kinds[rng.integers(len(kinds))]
        reference, hardware = rng.choice(n, size=2, replace=False).tolist()
        coordinates = rng.integers(0, 8, 5).astype(float) + rng.normal(0, 0.3, 5)
        if step % 4 == 0:  # every level and the local one, as they fill (none at first)
            ratio, evidence = pairs.measured_ratio(model_type, family, reference, coordinates)
            expected = _numpy_reads(pairs, model_type, family, reference, coordinates)
            np.testing.assert_array_equal(ratio, expected[0])
            np.testing.assert_array_equal(evidence, expected[1])
            np.testing.assert_array_equal(pairs.spread(model_type, family, reference), expected[2])
        pairs.learn_one(
            model_type,
            family,
            reference=reference,
            hardware=hardware,
            measured=float(rng.normal(0.1 * (hardware - reference), 0.05 + 0.1 * (hardware % 3))),
            model=0.0,
            coordinates=coordinates,
        )
    assert pairs.local_scored >= MIN_SHARPNESS_SCORED  # the chosen sharpness was read too
