"""The fleet's own memory rule: independent of the service's, and in disagreement with it in
both directions on some configurations."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import leap_stream.data.fleet as fleet_package
from leap_stream.core.catalog import default_catalog
from leap_stream.core.events import FRAMEWORKS, PRECISIONS
from leap_stream.core.hardware import HardwareArrays
from leap_stream.core.memory import fits
from leap_stream.data.fleet import FleetConfig, generate_fleet, memory_truth
from leap_stream.data.fleet.memory_truth import (
    ACTIVATION_BUDGET_GB,
    FRAGMENTATION,
    RECOMPUTE,
    RUNTIME_RESERVE_GB,
)
from leap_stream.data.fleet.zoo import FAMILY_NAMES

HW = HardwareArrays.from_catalog(default_catalog())
SMALL = FleetConfig(days=10, jobs_per_day=1_000, seed=4)


def _config(family: str, **values: float) -> dict[str, np.ndarray]:
    """One configuration as the arrays need_gb takes (defaults: a 7B LLM on 8 devices)."""
    config = {
        "family_index": FAMILY_NAMES.index(family),
        "param_count": 7e9,
        "active_params": values.pop("active_params", values.get("param_count", 7e9)),
        "tokens": 4096.0,
        "traffic": 30.0,
        "precision_index": PRECISIONS.index("bf16"),
        "num_devices": 8,
        "tensor_parallel": 1,
        "pipeline_parallel": 1,
        "global_batch_size": 1024,
        "recompute": RECOMPUTE.index("selective"),
        "micro_cap": 2,
    }
    config.update(values)
    return {k: np.atleast_1d(np.asarray(v)) for k, v in config.items()}


def _truth_fits(config: dict[str, np.ndarray], hardware: str, fragmentation: float) -> bool:
    need = memory_truth.need_gb(**config)
    room = memory_truth.headroom(HW, need, np.array([fragmentation]))
    return bool(room[0, HW.index[hardware]] >= 1.0)


def _core_fits(config: dict[str, np.ndarray], hardware: str, seq_len: float | None) -> bool:
    family = FAMILY_NAMES[int(config["family_index"][0])]
    return bool(
        fits(
            float(config["param_count"][0]),
            PRECISIONS[int(config["precision_index"][0])],
            int(config["num_devices"][0]),
            int(config["tensor_parallel"][0]),
            int(config["pipeline_parallel"][0]),
            int(config["global_batch_size"][0]),
            seq_len,
            family,
            memory_gb=float(HW.memory_gb[HW.index[hardware]]),
        )
    )


def test_the_truth_does_not_use_the_services_memory_rule() -> None:
    package = Path(fleet_package.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "leap_stream.core.memory", path.name
            elif isinstance(node, ast.Import):
                assert all(a.name != "leap_stream.core.memory" for a in node.names), path.name


def test_the_core_is_optimistic_where_the_owner_keeps_more_activations() -> None:
    # A 7B LLM on 8 devices with selective recomputation and 4 samples a micro-batch: the core
    # assumes full checkpointing and sees 51 GB; the truth needs 89 GB.
    config = _config("dense_llm", micro_cap=4)
    assert _core_fits(config, "H100-SXM", 4096)
    assert not _truth_fits(config, "H100-SXM", FRAGMENTATION[0])
    # With 2 samples a micro-batch both agree it fits.
    assert _truth_fits(_config("dense_llm"), "H100-SXM", FRAGMENTATION[1])


def test_the_core_is_pessimistic_about_recommender_tables() -> None:
    # A 20B-parameter recommender on one device in fp32: the core counts fp32 weights and
    # gradients (9 bytes a parameter), the truth sparse rows (5).
    config = _config(
        "recsys",
        param_count=2e10,
        active_params=2e7,
        tokens=20.0,
        traffic=1.0,
        precision_index=PRECISIONS.index("fp32"),
        num_devices=1,
        global_batch_size=16_384,
        recompute=RECOMPUTE.index("none"),
        micro_cap=1024,
    )
    assert not _core_fits(config, "H200-SXM", None)
    assert _truth_fits(config, "H200-SXM", FRAGMENTATION[1])


def test_fragmentation_and_the_vendor_reserve_take_their_share() -> None:
    need = np.array([100.0, 100.0])
    room = memory_truth.headroom(HW, need, np.array(FRAGMENTATION))
    mi300x, tpu = HW.index["MI300X"], HW.index["TPU-v7"]  # 192 GB each
    assert HW.memory_gb[mi300x] == HW.memory_gb[tpu]
    np.testing.assert_allclose(room[0, tpu], (192.0 - RUNTIME_RESERVE_GB["Google"]) / 105.0)
    np.testing.assert_allclose(room[1, mi300x], (192.0 - RUNTIME_RESERVE_GB["AMD"]) / 115.0)
    assert room[1, mi300x] < room[1, tpu] < room[0, tpu]


def test_activations_follow_recomputation_micro_batch_and_tensor_parallelism() -> None:
    needs = {
        r: memory_truth.need_gb(**_config("dense_llm", recompute=RECOMPUTE.index(r)))[0]
        for r in RECOMPUTE
    }
    assert needs["none"] > needs["selective"] > needs["full"]
    one, four = (memory_truth.need_gb(**_config("vit", micro_cap=m))[0] for m in (1, 4))
    assert four > one
    wide = memory_truth.need_gb(**_config("dense_llm", tensor_parallel=4, num_devices=32))[0]
    assert wide < needs["selective"] / 3


def test_owners_settle_on_the_lightest_step_that_fits_the_budget() -> None:
    rng = np.random.default_rng(0)
    n = 2_000
    family = rng.integers(0, len(FAMILY_NAMES), n)
    params = np.exp(rng.uniform(np.log(1e7), np.log(4e11), n))
    tokens = np.where(np.isin(family, [0, 1, 6]), 4096.0, rng.uniform(30, 4096, n))
    traffic = rng.uniform(1, 500, n)
    precision = np.full(n, PRECISIONS.index("bf16"))
    tp = np.where(params > 2e10, 8.0, 1.0)
    recompute, cap = memory_truth.settle(
        rng, family, params, params, tokens, traffic, precision, tp
    )
    # One micro-batch of activations (per device, before tensor sharding) within the budget,
    # unless even full recomputation at the smallest micro-batch does not fit.
    figures = (family, params, params, tokens, traffic, precision, tp, tp, 1, cap)
    with_activations = memory_truth.need_gb(*figures, recompute=recompute, micro_cap=cap)
    states = memory_truth.need_gb(*figures, recompute=recompute, micro_cap=np.zeros(n))
    activations = with_activations - states
    last_resort = recompute == RECOMPUTE.index("full")
    assert np.all((activations <= ACTIVATION_BUDGET_GB + 1e-9) | last_resort)
    assert set(np.unique(recompute)) == {0, 1, 2}
    # Recomputation costs compute: full re-runs the forward pass.
    dense = np.full(3, FAMILY_NAMES.index("dense_llm"))
    factor = memory_truth.compute_factor(dense, np.arange(3))
    assert factor[1] == 1.0 and factor[2] < 0.8 < 1.0 < factor[0]


# ---------------------------------------------------------------------------- in a fleet


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, np.ndarray]:
    out = tmp_path_factory.mktemp("memory")
    generate_fleet(SMALL, out, progress=False)
    history = pq.read_table(out / "history.parquet").to_pandas()
    oracle = pq.read_table(out / "oracle.parquet").column("throughput")
    values = oracle.to_numpy(zero_copy_only=False).astype(float).reshape(-1, len(HW))
    return history[history.event_type == "submitted"].reset_index(drop=True), values


def test_in_a_fleet_the_core_rule_errs_both_ways(small: tuple[pd.DataFrame, np.ndarray]) -> None:
    sub, oracle = small
    catalog = default_catalog()
    accelerators = [catalog[h] for h in HW.names]
    supports = np.array(
        [[[a.supports(f, p) for a in accelerators] for p in PRECISIONS] for f in FRAMEWORKS]
    )
    supported = supports[
        pd.Index(FRAMEWORKS).get_indexer(sub.framework),
        pd.Index(PRECISIONS).get_indexer(sub.precision),
    ]
    launches = np.array([np.datetime64(a.launch_date, "ms") for a in accelerators])
    times = sub.event_time.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    able = supported & (times.astype("datetime64[ms]")[:, None] >= launches[None, :])
    seq = sub.seq_len.to_numpy(dtype=float, na_value=np.nan)
    core = fits(
        sub.param_count.to_numpy(dtype=float)[:, None],
        sub.precision.to_numpy()[:, None],
        sub.num_devices.to_numpy()[:, None],
        sub.tensor_parallel.to_numpy()[:, None],
        sub.pipeline_parallel.to_numpy()[:, None],
        sub.global_batch_size.to_numpy()[:, None],
        seq[:, None],
        sub.model_family.to_numpy()[:, None],
        memory_gb=HW.memory_gb[None, :],
    )
    truth = np.isfinite(oracle)
    cells = able.sum()
    optimistic = (able & core & ~truth).sum() / cells  # eligible, but it does not fit
    pessimistic = (able & ~core & truth).sum() / cells  # ineligible, but it would run
    assert 0.005 < optimistic < 0.2, optimistic
    assert 0.005 < pessimistic < 0.2, pessimistic
    assert (able & (core == truth)).sum() / cells > 0.8  # mostly, the two agree
