"""The ground-truth throughput model: scaling, rooflines, fit, and the drift schedule."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import UTC, datetime

import numpy as np
import pytest

from leap_stream.core.catalog import VENDORS, default_catalog
from leap_stream.core.events import FRAMEWORKS, PRECISIONS
from leap_stream.data.fleet import HardwareArrays
from leap_stream.data.fleet.physics import (
    NOISE_SIGMA,
    RELEASES,
    STRAGGLER_PROBABILITY,
    expected_throughput,
    measured_throughput,
)
from leap_stream.data.fleet.zoo import FAMILIES, FAMILY_NAMES

SEQUENCE = ("dense_llm", "moe", "speech")
# Long after every launch: no launch ramp, every type available.
LATE = datetime(2031, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def catalog_hw() -> HardwareArrays:
    return HardwareArrays.from_catalog(default_catalog(), LATE)


def pick(hw: HardwareArrays, names: list[str], **scale: float) -> HardwareArrays:
    """The rows ``names`` of ``hw`` (repeats allowed), figures of the last row scaled."""
    rows = [list(hw.names).index(n) for n in names]
    columns = {
        f.name: getattr(hw, f.name)[rows]
        for f in fields(hw)
        if isinstance(getattr(hw, f.name), np.ndarray)
    }
    for name, factor in scale.items():
        columns[name] = columns[name].astype(float)
        columns[name][-1] = columns[name][-1] * factor
    if "index" in {f.name for f in fields(hw)}:
        columns["index"] = {n: i for i, n in enumerate(columns["names"])}
    return replace(hw, **columns)


def _arguments(
    hw: HardwareArrays,
    family: str = "dense_llm",
    *,
    params: float = 7e9,
    active: float | None = None,
    tokens: float = 4096,
    traffic: float = 30.0,
    precision: str = "bf16",
    framework: str = "pytorch",
    devices: int | np.ndarray = 8,
    tp: int = 1,
    pp: int = 1,
    batch: int | np.ndarray = 1024,
    day: float = 0.0,
    days: float = 100.0,
) -> dict:
    """expected_throughput's arguments for reference jobs with neutral hidden efficiencies."""
    devices = np.atleast_1d(np.asarray(devices))
    n = len(devices)
    batch = np.broadcast_to(np.asarray(batch), (n,))
    index = FAMILY_NAMES.index(family)

    def full(value: float, dtype: type = float) -> np.ndarray:
        return np.full(n, value, dtype=dtype)

    return dict(
        family_index=full(index, int),
        param_count=full(int(params), np.int64),
        active_params=full(params if active is None else active),
        tokens=full(tokens),
        traffic=full(traffic),
        base_mfu=full(FAMILIES[index].base_mfu),
        type_efficiency=full(1.0),
        precision_index=full(PRECISIONS.index(precision), int),
        framework_index=full(FRAMEWORKS.index(framework), int),
        num_devices=devices.astype(int),
        tensor_parallel=full(tp, int),
        pipeline_parallel=full(pp, int),
        global_batch_size=batch.astype(int),
        seq_len=full(tokens if family in SEQUENCE else np.nan),
        lineage_efficiency=np.ones((n, len(hw))),
        day=full(day),
        days=days,
    )


def throughput(hw: HardwareArrays, family: str = "dense_llm", **job: float) -> np.ndarray:
    """Expected samples/s (N, H) of reference jobs with neutral hidden efficiencies."""
    return expected_throughput(hw, **_arguments(hw, family, **job))


def test_more_devices_give_more_throughput_but_less_than_linear(catalog_hw) -> None:
    hw = pick(catalog_hw, ["H100-SXM"])
    devices = np.array([8, 16, 32, 64, 128, 256, 512])
    samples = throughput(hw, devices=devices, batch=128 * devices)[:, 0]
    assert np.all(np.diff(samples) > 0)
    per_device = samples / devices
    assert np.all(np.diff(per_device) < 0)
    # Not collapsing either: 64x the devices still give most of 64x the throughput.
    assert samples[-1] / samples[0] > 0.5 * 64


def test_a_faster_chip_speeds_up_a_compute_bound_job(catalog_hw) -> None:
    hw = pick(catalog_hw, ["H100-SXM", "H100-SXM"], peak_tflops=2.0)
    slow, fast = throughput(hw)[0]
    assert fast / slow > 1.5
    # ... and more bandwidth hardly does: this job is compute-bound.
    hw_bw = pick(catalog_hw, ["H100-SXM", "H100-SXM"], memory_bw_tbps=2.0)
    base, more_bw = throughput(hw_bw)[0]
    assert more_bw / base < 1.02


def test_a_memory_bound_job_responds_to_bandwidth_not_peak(catalog_hw) -> None:
    # A CNN with ResNet-50's work (80 x 25.6M params) and the zoo's heaviest activation traffic.
    cnn = {"params": 25.6e6, "tokens": 80, "traffic": 1500.0, "batch": 2048}
    hw_bw = pick(catalog_hw, ["H100-SXM", "H100-SXM"], memory_bw_tbps=2.0)
    base, more_bw = throughput(hw_bw, "cnn", **cnn)[0]
    assert more_bw / base > 1.5
    hw_peak = pick(catalog_hw, ["H100-SXM", "H100-SXM"], peak_tflops=2.0)
    base, more_peak = throughput(hw_peak, "cnn", **cnn)[0]
    assert more_peak / base < 1.1


def test_nan_where_the_configuration_cannot_run(catalog_hw) -> None:
    hw = pick(catalog_hw, ["H100-SXM", "A100-SXM-80GB", "A100-SXM-40GB"])
    # 7B on 8 devices needs ~51 GB a device: fits 80 GB, not 40 GB.
    fits_80 = throughput(hw)[0]
    assert np.all(np.isfinite(fits_80[:2])) and np.isnan(fits_80[2])
    # 70B on one device fits nowhere.
    assert np.all(np.isnan(throughput(hw, params=7e10, devices=1, batch=64)))
    # fp8 runs on Hopper only; JAX is not on every type's framework list.
    fp8 = throughput(hw, params=1e9, precision="fp8")[0]
    assert np.isfinite(fp8[0]) and np.all(np.isnan(fp8[1:]))


def test_nan_before_a_types_launch(catalog_hw) -> None:
    catalog = default_catalog()
    launch = catalog["Trainium3"].launch_date
    start = datetime(launch.year, launch.month, launch.day, tzinfo=UTC)
    hw = pick(HardwareArrays.from_catalog(catalog, start), ["Trainium3", "H100-SXM"])
    before = throughput(hw, params=1e9, day=-0.5)[0]
    after = throughput(hw, params=1e9, day=0.5)[0]
    assert np.isnan(before[0]) and np.isfinite(after[0])
    assert np.isfinite(before[1])
    # Freshly launched: runs below its later, mature efficiency.
    later = throughput(hw, params=1e9, day=365.0)[0]
    assert after[0] < later[0]


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: f"{r.vendor}-{r.at_fraction}")
def test_a_release_moves_its_vendor_for_its_families_after_its_day(catalog_hw, release) -> None:
    days = 100.0
    at = release.at_fraction * days
    # The vendor's largest-memory type, and H100/MI300X as a type of another vendor.
    own = [i for i, v in enumerate(catalog_hw.vendor_index) if VENDORS[v] == release.vendor]
    mine = catalog_hw.names[max(own, key=lambda i: catalog_hw.memory_gb[i])]
    other = "MI300X" if release.vendor == "NVIDIA" else "H100-SXM"
    hw = pick(catalog_hw, [mine, other])
    # Compute-bound jobs (little activation traffic), so efficiency shows in full.
    job = {"params": 1e9, "tokens": 256, "traffic": 0.5, "batch": 256, "days": days}
    for family in FAMILY_NAMES:
        active = 0.02e9 if family == "recsys" else None
        start, before, after = (
            throughput(hw, family, active=active, day=d, **job)[0]
            for d in (0.0, at - 0.5, at + 0.5)
        )
        assert np.all(np.isfinite(after)), family
        earlier = [
            r
            for r in RELEASES
            if r.vendor == release.vendor and family in r.families and r.at_fraction * days < at
        ]
        if not earlier:
            assert before[0] == start[0], family  # nothing moves before the release
        assert after[1] == before[1]  # other vendors never move
        if family in release.families:
            ratio = after[0] / before[0]
            assert (ratio - 1) / (release.factor - 1) > 0.5, (family, ratio)
        else:
            assert after[0] == before[0], family


def test_measured_throughput_noise_and_stragglers() -> None:
    expected = np.full(200_000, 100.0)
    measured = measured_throughput(expected, np.random.default_rng(0))
    ratio = measured / expected
    stragglers = ratio < 0.8
    assert abs(stragglers.mean() - STRAGGLER_PROBABILITY) < 0.002
    assert abs(np.log(ratio[~stragglers]).std() / NOISE_SIGMA - 1) < 0.05
    assert np.isnan(measured_throughput(np.array([np.nan]), np.random.default_rng(0)))[0]


def test_hidden_efficiency_scales_the_whole_step_rate(catalog_hw) -> None:
    hw = pick(catalog_hw, ["H100-SXM", "MI300X"])
    cnn = {"params": 25.6e6, "tokens": 80, "traffic": 1500.0, "batch": 2048}  # memory-bound
    for job in ({}, cnn):
        family = "cnn" if job else "dense_llm"
        base = throughput(hw, family, **job)
        factor = np.array([[0.8, 1.25]])
        scaled = expected_throughput(
            hw, **{**_arguments(hw, family, **job), "hidden_efficiency": factor}
        )
        np.testing.assert_allclose(scaled, base * factor)


def test_full_recomputation_costs_a_compute_bound_job_a_forward_pass(catalog_hw) -> None:
    hw = pick(catalog_hw, ["H100-SXM"])
    selective, full = (
        expected_throughput(
            hw,
            **{
                **_arguments(hw, "dense_llm"),
                "recompute": np.array([r]),
                "micro_cap": np.array([2]),
            },
        )[0, 0]
        for r in (1, 2)
    )
    assert 0.72 < full / selective < 0.8  # 6 / 8 FLOPs, relative to selective's 0.97
