"""Tests of leap_stream.core.features: the caches give the same numbers as a fresh encoding."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from leap_stream.core import features
from leap_stream.core.catalog import Catalog
from leap_stream.core.features import ONEHOT_VALUES, TEAM_ONEHOT_VALUE, FeatureEncoder, JobFeatures
from leap_stream.core.hardware import HardwareArrays

JOB: dict[str, Any] = {
    "model_type": "llm-7b", "model_family": "dense_llm", "framework": "jax", "precision": "fp8",
    "param_count": 7_000_000_000, "global_batch_size": 1024, "seq_len": 4096, "num_devices": 64,
    "tensor_parallel": 4, "pipeline_parallel": 2,
}  # fmt: skip


@pytest.fixture
def encoder(hw_catalog: Catalog) -> FeatureEncoder:
    return FeatureEncoder(HardwareArrays.from_catalog(hw_catalog))


def _fields(job: JobFeatures) -> dict[str, Any]:
    return {name: getattr(job, name) for name in JobFeatures.__slots__}


def _assert_same_job(a: JobFeatures, b: JobFeatures) -> None:
    fa, fb = _fields(a), _fields(b)
    np.testing.assert_array_equal(fa.pop("shared_values"), fb.pop("shared_values"))
    assert fa == fb


def test_a_repeated_configuration_is_encoded_once(encoder: FeatureEncoder) -> None:
    job = encoder.job(JOB)
    # the same object for an equal record (another dict, other fields, equal numbers) ...
    assert encoder.job({**JOB, "job_id": "other", "param_count": 7e9}) is job
    # ... and the numbers of a fresh encoding; shared, so read-only
    _assert_same_job(job, FeatureEncoder(encoder.hw).job(JOB))
    assert not job.shared_values.flags.writeable
    other = encoder.job({**JOB, "num_devices": 128})
    assert other is not job and other.num_devices == 128


def test_seq_len_may_be_left_out(encoder: FeatureEncoder) -> None:
    cnn = {**JOB, "model_family": "cnn", "seq_len": None}
    without = {k: v for k, v in cnn.items() if k != "seq_len"}
    _assert_same_job(encoder.job(without), FeatureEncoder(encoder.hw).job(cnn))
    with pytest.raises(KeyError):
        encoder.job({k: v for k, v in JOB.items() if k != "framework"})


def test_the_roofline_holds_the_pipelines_fill_and_drain_when_the_micro_batches_are_known(
    encoder: FeatureEncoder,
) -> None:
    unknown = encoder.baseline(encoder.job({**JOB, "pipeline_parallel": 4}))
    for micro_batches, busy in ((1, 1 / 4), (4, 4 / 7), (12, 12 / 15)):
        job = encoder.job({**JOB, "pipeline_parallel": 4, "micro_batches": micro_batches})
        np.testing.assert_allclose(encoder.baseline(job) - unknown, np.log(busy))
    # no pipeline, no bubble: the micro-batches are gradient accumulation
    no_pipeline = {**JOB, "pipeline_parallel": 1}
    np.testing.assert_array_equal(
        encoder.baseline(encoder.job({**no_pipeline, "micro_batches": 8})),
        encoder.baseline(encoder.job(no_pipeline)),
    )


def test_the_micro_batches_may_be_left_out(encoder: FeatureEncoder) -> None:
    _assert_same_job(
        encoder.job(JOB), FeatureEncoder(encoder.hw).job({**JOB, "micro_batches": None})
    )
    assert encoder.job({**JOB, "micro_batches": 2}) is not encoder.job(JOB)


def test_the_roofline_counts_the_flops_per_sample_the_submission_says(
    encoder: FeatureEncoder,
) -> None:
    default = encoder.job(JOB)  # 6 x parameters x tokens
    rule = 6.0 * JOB["param_count"] * JOB["seq_len"]
    said = encoder.job({**JOB, "flops_per_sample": rule / 100})
    np.testing.assert_allclose(encoder.baseline(said) - encoder.baseline(default), np.log(100))
    # a hundredth of the work per step: a hundred times more talking per FLOP
    assert said.log_comm_over_work - default.log_comm_over_work == pytest.approx(np.log(100))
    _assert_same_job(default, FeatureEncoder(encoder.hw).job({**JOB, "flops_per_sample": rule}))
    _assert_same_job(default, FeatureEncoder(encoder.hw).job({**JOB, "flops_per_sample": None}))


def test_the_recent_caches_stay_bounded(
    hw_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(features, "JOB_CACHE_SIZE", 8)
    monkeypatch.setattr(features, "NUMERIC_CACHE_SIZE", 4)
    encoder = FeatureEncoder(HardwareArrays.from_catalog(hw_catalog))
    fresh = FeatureEncoder(HardwareArrays.from_catalog(hw_catalog))
    kept = encoder.job(JOB)
    for batch in range(1, 100):
        job = encoder.job({**JOB, "global_batch_size": 64 * batch})
        np.testing.assert_array_equal(encoder.numeric(job), fresh._numeric_all(job))
        assert encoder.job(JOB) is kept  # in use: it stays
    for cache in (encoder._job_cache, encoder._numeric_by_job):
        assert len(cache.new) <= cache.size and len(cache.old) <= cache.size


def test_numeric_subsets_are_the_full_table_gathered(encoder: FeatureEncoder) -> None:
    n = len(encoder.names)
    for record in (JOB, {**JOB, "num_devices": 8, "tensor_parallel": 1, "precision": "bf16"}):
        job = encoder.job(record)
        full = encoder.numeric(job)
        assert full.shape == (len(job.numeric_names), n) and not full.flags.writeable
        np.testing.assert_array_equal(full, FeatureEncoder(encoder.hw)._numeric_all(job))
        subset = np.array([n - 1, 3, 0, 3])
        np.testing.assert_array_equal(encoder.numeric(job, subset), full[:, subset])
        for position in range(n):  # as a single column, bit for bit
            one = encoder.numeric(job, np.array([position]))[:, 0]
            np.testing.assert_array_equal(one, full[:, position])


def test_pair_values_follow_pair_names(encoder: FeatureEncoder) -> None:
    job = encoder.job(JOB)
    h100 = encoder.hw.index["H100-SXM"]
    names, values = encoder.pair_names(job, h100), encoder.pair_values(job, h100)
    assert len(names) == len(values) == len(set(names))
    pair = encoder.pair(job, h100)
    assert list(pair) == list(names) and list(pair.values()) == values
    assert pair["hw=H100-SXM"] == ONEHOT_VALUES[0]
    assert pair["dense_llm:log_params"] == job.shared_values[4]
    numeric = encoder.numeric(job)[:, h100].tolist()
    assert [pair[name] for name in job.numeric_names] == numeric


def test_a_team_said_is_a_one_hot_per_vendor_and_one_not_said_is_no_feature(
    encoder: FeatureEncoder,
) -> None:
    mi300x = encoder.hw.index["MI300X"]
    said_job, unsaid_job = encoder.job({**JOB, "team": "speech"}), encoder.job(JOB)
    said, unsaid = encoder.pair(said_job, mi300x), encoder.pair(unsaid_job, mi300x)
    assert said["vendor=AMD|team=speech"] == TEAM_ONEHOT_VALUE
    assert not any("team=" in name for name in unsaid)
    # the rest of the pair is the same, and so is what is cached per configuration
    assert {n: v for n, v in said.items() if "team=" not in n} == unsaid
    assert said_job.key == unsaid_job.key and said_job is not unsaid_job
    # without the job x hardware terms a team is not one
    ablated = FeatureEncoder(encoder.hw, frozenset({"interactions"}))
    ablated_pair = ablated.pair(ablated.job({**JOB, "team": "speech"}), mi300x)
    assert not any("team=" in name for name in ablated_pair)


def test_a_pickled_encoder_drops_its_caches(encoder: FeatureEncoder) -> None:
    job = encoder.job(JOB)
    encoder.numeric(job)
    copy = pickle.loads(pickle.dumps(encoder))
    assert not copy._job_cache.new and not copy._numeric_by_job.new
    _assert_same_job(copy.job(JOB), job)
    np.testing.assert_array_equal(copy.numeric(copy.job(JOB)), encoder.numeric(job))


# -- input groups left out (an ablation) -------------------------------------------------------


def _without(encoder: FeatureEncoder, *groups: str) -> FeatureEncoder:
    return FeatureEncoder(encoder.hw, frozenset(groups))


def test_without_hardware_specs_every_type_reads_the_same_figures(
    encoder: FeatureEncoder,
) -> None:
    full, ablated = encoder.job(JOB), _without(encoder, "hardware_specs")
    job = ablated.job(JOB)
    assert np.ptp(encoder.numeric(full), axis=1).max() > 0.1  # the full encoder tells them apart
    table = ablated.numeric(job)
    np.testing.assert_allclose(table, table[:, :1].repeat(table.shape[1], axis=1))
    assert np.ptp(ablated.baseline(job)) == 0.0
    # the one-hots still name each type: the model can learn them, not read them off a sheet
    assert ablated.pair_names(job, 0) != ablated.pair_names(job, 1)


def test_without_interactions_no_feature_names_both_the_job_and_the_hardware(
    encoder: FeatureEncoder,
) -> None:
    ablated = _without(encoder, "interactions")
    job = ablated.job(JOB)
    job_words = ("dense_llm", "llm-7b", "fp8", "jax")
    for position in range(len(encoder.names)):
        names = ablated.pair_names(job, position)
        assert len(set(names)) == len(names)
        for name in set(names) - set(job.shared_names):  # what varies with the hardware
            assert not any(word in name for word in job_words), name
    # the full encoder has such terms, and both give the same values
    full_names = encoder.pair_names(encoder.job(JOB), 0)
    assert "hw=" + encoder.names[0] + "|type=llm-7b" in full_names
    assert ablated.pair_values(job, 3) == encoder.pair_values(encoder.job(JOB), 3)


def test_without_job_configuration_the_jobs_own_features_are_zero(
    encoder: FeatureEncoder,
) -> None:
    job = _without(encoder, "job_configuration").job(JOB)
    assert not job.shared_values.any()
    assert encoder.job(JOB).shared_values.any()


def test_without_the_roofline_the_target_is_raw_log_throughput(encoder: FeatureEncoder) -> None:
    ablated = _without(encoder, "roofline")
    assert not ablated.baseline(ablated.job(JOB)).any()
    assert ablated.baseline(ablated.job(JOB), np.array([2, 0])).shape == (2,)
    # with it: devices x peak FLOP/s at the job's precision x the assumed utilisation / work
    peak = encoder.log_peak_by_precision[features.PRECISIONS.index(JOB["precision"])]
    work = 6.0 * JOB["param_count"] * JOB["seq_len"]
    np.testing.assert_allclose(
        encoder.baseline(encoder.job(JOB)),
        peak + np.log(features.ASSUMED_MFU * JOB["num_devices"] / work),
    )


def test_an_unknown_group_is_refused(encoder: FeatureEncoder) -> None:
    with pytest.raises(ValueError, match="unknown input group"):
        _without(encoder, "specs")
