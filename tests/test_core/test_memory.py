"""The memory-fit rule: what grows the requirement, what shards it, and fits() matching it."""

from __future__ import annotations

import numpy as np
import pytest

from leap_stream.core.memory import (
    RUNTIME_RESERVE_GB,
    USABLE_FRACTION,
    fits,
    required_memory_gb,
)

# (params, precision, devices, tp, pp, batch, seq_len, family)
LLM_7B = (7e9, "bf16", 8, 1, 1, 1024, 4096, "dense_llm")


def need(*args: object) -> float:
    return float(required_memory_gb(*args))


@pytest.mark.parametrize(
    ("family", "seq_len"),
    [("dense_llm", 4096), ("moe", 8192), ("speech", 1500), ("vit", None), ("cnn", None),
     ("diffusion", None), ("recsys", None), ("gnn", None)],
)  # fmt: skip
def test_requirement_grows_with_parameters(family: str, seq_len: int | None) -> None:
    params = np.geomspace(1e6, 1e12, 25)
    required = required_memory_gb(params, "bf16", 8, 1, 1, 1024, seq_len, family)
    assert np.all(np.diff(required) > 0)
    assert required[0] > RUNTIME_RESERVE_GB  # the reserve is a floor, never the whole answer


def test_tensor_and_pipeline_shards_shrink_the_requirement() -> None:
    params, precision, _, _, _, batch, seq, family = LLM_7B
    base = need(params, precision, 64, 1, 1, batch, seq, family)
    by_tp = [need(params, precision, 64, tp, 1, batch, seq, family) for tp in (1, 2, 4, 8)]
    by_pp = [need(params, precision, 64, 1, pp, batch, seq, family) for pp in (1, 2, 4, 8)]
    assert by_tp[0] == base and by_pp[0] == base
    assert np.all(np.diff(by_tp) < 0)
    assert np.all(np.diff(by_pp) < 0)
    # 64 shards of the model state take it far below an eighth (the reserve stays whole).
    sharded = need(params, precision, 64, 8, 8, batch, seq, family)
    assert sharded - RUNTIME_RESERVE_GB < (base - RUNTIME_RESERVE_GB) / 8


def test_data_parallelism_alone_shards_only_optimizer_state_of_dense_models() -> None:
    # ZeRO-1: more replicas shrink Adam's 12 bytes a parameter, never the 4 of weights+grads.
    one = need(7e9, "bf16", 1, 1, 1, 1024, 4096, "dense_llm")
    many = need(7e9, "bf16", 1024, 1, 1, 1024, 4096, "dense_llm")
    assert many < one
    assert many > 7e9 * 4 / 1e9  # weights + gradients stay whole on every device


def test_recsys_shards_embeddings_over_every_device() -> None:
    devices = np.array([1, 2, 4, 8, 16, 32])
    # Activations are tiny for recsys: the requirement above the reserve falls ~ 1/devices.
    above_reserve = (
        required_memory_gb(2e10, "fp32", devices, 1, 1, 1024, None, "recsys") - RUNTIME_RESERVE_GB
    )
    assert np.all(np.diff(above_reserve) < 0)
    np.testing.assert_allclose(above_reserve[:-1] / above_reserve[1:], 2.0, rtol=0.1)
    # A dense model with the same parameters and devices does not shard its weights that way.
    dense = required_memory_gb(2e10, "fp32", devices, 1, 1, 1024, 512, "dense_llm")
    assert np.all(dense[1:] > 2e10 * 8 / 1e9)


def test_lower_precision_needs_less() -> None:
    by_precision = [need(7e9, p, 8, 1, 1, 1024, 4096, "dense_llm") for p in ("fp32", "bf16")]
    assert by_precision[1] < by_precision[0]


def test_fits_agrees_with_required_memory() -> None:
    rng = np.random.default_rng(0)
    n = 2_000
    families = rng.choice(["dense_llm", "moe", "vit", "cnn", "diffusion", "recsys", "gnn"], n)
    seq = np.where(np.isin(families, ["dense_llm", "moe"]), 4096.0, np.nan)
    args = (
        np.exp(rng.uniform(np.log(1e6), np.log(1e11), n)),
        rng.choice(["fp32", "bf16", "fp16", "fp8"], n),
        2 ** rng.integers(0, 10, n),
        2 ** rng.integers(0, 3, n),
        2 ** rng.integers(0, 3, n),
        2 ** rng.integers(6, 14, n),
        seq,
        families,
    )
    memory = rng.choice([16.0, 40.0, 80.0, 192.0], n)
    required = required_memory_gb(*args)
    verdict = fits(*args, memory_gb=memory)
    np.testing.assert_array_equal(verdict, required <= memory * USABLE_FRACTION)
    assert 0.1 < verdict.mean() < 0.9  # the sample exercises both answers


def test_fits_boundary_is_the_usable_fraction() -> None:
    required = need(*LLM_7B)
    exact = required / USABLE_FRACTION
    assert bool(fits(*LLM_7B, memory_gb=exact * (1 + 1e-9)))
    assert not bool(fits(*LLM_7B, memory_gb=exact * (1 - 1e-6)))
    assert not bool(fits(*LLM_7B, memory_gb=required))  # headroom: the whole device is not usable
