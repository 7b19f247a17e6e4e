"""Ground-truth throughput: the documented physical model behind the synthetic fleet.

For one attempt (a configuration) on one hardware type, a training step takes

    t_step = roofline(t_compute, t_memory) * pipeline_bubble + t_communication

- ``t_compute`` = FLOPs per step / (devices x peak TFLOPS at the job's precision x MFU), where MFU
  is the family's base efficiency x the model type's hidden efficiency x the vendor's software
  maturity for that family (which drifts with software releases and ramps up after a launch) x a
  framework factor x a scale penalty x the lineage's hidden efficiency;
- ``t_memory`` = bytes moved per step / (devices x memory bandwidth x 0.75), activations plus
  the active weights re-read once per micro-batch;
- ``roofline(a, b)`` = max(a, b) + 0.15 min(a, b): the two overlap, not perfectly;
- the pipeline bubble is (1 + (pp - 1) / micro-batches);
- communication: the data-parallel gradient all-reduce (partly hidden behind the backward pass),
  tensor-parallel activation all-reduces and MoE all-to-alls, over the scale-up interconnect
  while the job fits in one node and over the per-device network beyond it.

Throughput (samples/s) = global batch / t_step. The micro-batch (weights re-read per micro-batch,
pipeline bubble) and the recomputation's compute cost are the lineage's own choices
(:mod:`leap_stream.data.fleet.memory_truth`); a hidden efficiency no catalog figure explains
(:mod:`leap_stream.data.fleet.hidden`: model x hardware affinity, new types' kernel maturity,
team software stacks) multiplies the whole step rate, memory-bound and communication time
included. A configuration that does not fit device memory under the
fleet's own memory rule (:mod:`leap_stream.data.fleet.memory_truth`, not the service's
:mod:`leap_stream.core.memory`), whose framework or precision the hardware does not support, or
that is submitted before the hardware's launch cannot run there (NaN). Measured throughput adds
run-to-run noise and rare stragglers (:func:`measured_throughput`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from leap_stream.core.catalog import VENDORS
from leap_stream.core.hardware import HardwareArrays
from leap_stream.data.fleet import memory_truth
from leap_stream.data.fleet.zoo import FAMILY_NAMES

__all__ = [
    "NOISE_SIGMA",
    "RELEASES",
    "STRAGGLER_PROBABILITY",
    "STRAGGLER_SLOWDOWN",
    "HardwareArrays",
    "SoftwareRelease",
    "can_run",
    "expected_throughput",
    "measured_throughput",
    "step_throughput",
]

# Software maturity of each vendor's stack per family, relative to NVIDIA's (rows: VENDORS;
# columns: FAMILY_NAMES = dense_llm, moe, vit, cnn, diffusion, recsys, speech, gnn).
MATURITY = np.array(
    [
        [1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00],  # NVIDIA: the reference
        [0.70, 0.65, 0.72, 0.65, 0.70, 0.60, 0.70, 0.55],  # AMD: LLM-first ROCm effort
        [0.72, 0.55, 0.75, 0.80, 0.65, 0.55, 0.65, 0.45],  # Intel Gaudi: strong on vision
        [0.95, 0.90, 0.92, 0.80, 0.85, 0.80, 0.85, 0.50],  # Google TPU under XLA
        [0.78, 0.60, 0.65, 0.60, 0.60, 0.50, 0.60, 0.40],  # AWS Trainium (Neuron)
        [0.50, 0.30, 0.60, 0.70, 0.45, 0.40, 0.50, 0.60],  # Graphcore IPU (MLPerf-era)
    ]
)
# Framework fit per vendor (rows: VENDORS; columns: pytorch, jax, tensorflow): PyTorch runs best
# on GPUs, JAX on TPUs; PyTorch/XLA on TPU costs a good share.
FRAMEWORK_FIT = np.array(
    [
        [1.00, 0.95, 0.90],
        [1.00, 0.90, 0.85],
        [1.00, 0.85, 0.85],
        [0.75, 1.00, 0.95],
        [1.00, 0.90, 0.85],
        [1.00, 0.85, 0.90],
    ]
)
# A newly launched type runs below its later efficiency while its software stack catches up.
LAUNCH_RAMP_DAYS = 90.0
LAUNCH_RAMP_START = 0.80
# Families without attention over their work units (the rest pay attention FLOPs ~ tokens^2).
NON_ATTENTION_FAMILIES = ("cnn", "gnn", "recsys")
# Share of the gradient all-reduce not hidden behind the backward pass.
EXPOSED_ALLREDUCE = 0.35
# Fraction of peak memory bandwidth reachable by training kernels.
BANDWIDTH_EFFICIENCY = 0.75
# Run-to-run noise (log-normal sigma) and stragglers (a slow node) in measured throughput.
NOISE_SIGMA = 0.04
STRAGGLER_PROBABILITY = 0.01
STRAGGLER_SLOWDOWN = (0.35, 0.75)


@dataclass(frozen=True)
class SoftwareRelease:
    """A software release that shifts one vendor's efficiency for some families mid-trace."""

    vendor: str
    families: tuple[str, ...]
    at_fraction: float  # of the trace length
    factor: float
    name: str


# The drift schedule, placed by fraction so that every trace length sees it.
RELEASES: tuple[SoftwareRelease, ...] = (
    SoftwareRelease("AMD", ("dense_llm", "moe"), 0.35, 1.18, "ROCm release: fused attention"),
    SoftwareRelease("AWS", ("diffusion", "vit"), 0.50, 0.88, "Neuron SDK regression on convs"),
    SoftwareRelease("NVIDIA", ("diffusion", "vit"), 0.60, 1.08, "cuDNN release: new kernels"),
    SoftwareRelease("Intel", ("cnn", "vit"), 0.70, 1.12, "Gaudi software release"),
    SoftwareRelease("Google", ("cnn", "recsys"), 0.80, 1.12, "XLA release: sparse cores"),
)


def maturity(
    hw: HardwareArrays, family_index: np.ndarray, day: np.ndarray, days: float
) -> np.ndarray:
    """Software maturity (N, H) at ``day`` of a trace of ``days`` days, releases applied."""
    base = MATURITY[hw.vendor_index][:, family_index].T  # (N, H)
    day = np.asarray(day, dtype=float)[:, None]
    for release in RELEASES:
        hit_vendor = hw.vendor_index == VENDORS.index(release.vendor)
        hit_family = np.isin(np.asarray(FAMILY_NAMES)[family_index], release.families)
        after = day >= release.at_fraction * days
        base = np.where(
            hit_vendor[None, :] & hit_family[:, None] & after, base * release.factor, base
        )
    since_launch = day - hw.launch_day[None, :]
    ramp = LAUNCH_RAMP_START + (1 - LAUNCH_RAMP_START) * np.clip(
        since_launch / LAUNCH_RAMP_DAYS, 0, 1
    )
    return base * ramp


def step_throughput(
    hw: HardwareArrays,
    *,
    family_index: np.ndarray,
    param_count: np.ndarray,
    active_params: np.ndarray,
    tokens: np.ndarray,
    traffic: np.ndarray,
    base_mfu: np.ndarray,
    type_efficiency: np.ndarray,
    precision_index: np.ndarray,
    framework_index: np.ndarray,
    num_devices: np.ndarray,
    tensor_parallel: np.ndarray,
    pipeline_parallel: np.ndarray,
    global_batch_size: np.ndarray,
    micro_batch: np.ndarray,
    efficiency: np.ndarray,
    day: np.ndarray,
    days: float,
    hidden_efficiency: np.ndarray | None = None,
) -> np.ndarray:
    """Noise-free throughput (samples/s), shape (N, H), whether or not the attempt can run there.

    ``micro_batch`` is the samples a device computes at once (N,); ``efficiency`` (N, H) the
    MFU multipliers of the lineage (its code, its recomputation); ``hidden_efficiency`` (N, H)
    multiplies the step rate as a whole (:mod:`leap_stream.data.fleet.hidden`), None for 1.
    """
    n = num_devices.astype(float)[:, None]
    tp = tensor_parallel.astype(float)[:, None]
    pp = pipeline_parallel.astype(float)[:, None]
    batch = global_batch_size.astype(float)[:, None]
    dp = np.maximum(n / (tp * pp), 1.0)
    params = param_count.astype(float)[:, None]
    active = active_params[:, None]
    tok = tokens[:, None]
    precision_bytes = np.array([4.0, 2.0, 2.0, 1.0])[precision_index][:, None]

    # Compute: 6 FLOPs per active parameter per token (forward + backward), plus attention for
    # the families that attend over their tokens.
    hidden = np.cbrt(active * 128.0 / 12.0)
    attends = ~np.isin(np.asarray(FAMILY_NAMES)[family_index], NON_ATTENTION_FAMILIES)[:, None]
    flops_per_sample = 6.0 * active * tok * (1.0 + np.where(attends, tok / (6.0 * hidden), 0.0))
    peak = hw.peak_tflops[:, precision_index].T * 1e12  # (N, H)
    scale_penalty = 1.0 / (1.0 + 0.03 * np.log2(n))
    fit = FRAMEWORK_FIT[hw.vendor_index][:, framework_index].T
    mfu = (
        base_mfu[:, None]
        * type_efficiency[:, None]
        * maturity(hw, family_index, day, days)
        * fit
        * scale_penalty
        * efficiency
    )
    t_compute = flops_per_sample * batch / (n * peak * mfu)

    # Memory: activation traffic per sample, plus the weights re-read every micro-batch.
    micro_batches = np.maximum(batch / dp / micro_batch[:, None], 1.0)
    bytes_per_sample = traffic[:, None] * tok * np.sqrt(params) * precision_bytes / 2.0
    weight_bytes = 3.0 * active * precision_bytes / (tp * pp) * np.minimum(micro_batches, 64.0)
    bandwidth = hw.memory_bw_tbps[None, :] * 1e12 * BANDWIDTH_EFFICIENCY
    t_memory = (bytes_per_sample * batch / n + weight_bytes) / bandwidth

    t_core = np.maximum(t_compute, t_memory) + 0.15 * np.minimum(t_compute, t_memory)
    bubble = 1.0 + (pp - 1.0) / np.minimum(micro_batches, 64.0)

    # Communication over the scale-up domain while it holds the job, the network beyond it.
    in_node = n <= hw.devices_per_node[None, :]
    link = np.where(in_node, hw.interconnect_gbps[None, :], hw.scale_out_gbps[None, :]) * 1e9
    grad_bytes = 2.0 * active / (tp * pp)
    t_allreduce = EXPOSED_ALLREDUCE * 2.0 * (dp - 1.0) / dp * grad_bytes / link
    tp_link = (
        np.where(
            tp <= hw.devices_per_node[None, :],
            hw.interconnect_gbps[None, :],
            hw.scale_out_gbps[None, :],
        )
        * 1e9
    )
    layers = hidden / 128.0
    t_tensor = (
        4.0 * layers * (batch / dp) * tok * hidden * precision_bytes * (tp - 1.0) / tp / tp_link
    )
    is_moe = (np.asarray(FAMILY_NAMES)[family_index] == "moe")[:, None]
    t_all_to_all = np.where(is_moe, 4.0 * (batch / n) * tok * hidden * precision_bytes / link, 0.0)
    t_step = t_core * bubble + t_allreduce + t_tensor + t_all_to_all
    throughput = batch / t_step
    return throughput if hidden_efficiency is None else throughput * hidden_efficiency


def can_run(
    hw: HardwareArrays, framework_index: np.ndarray, precision_index: np.ndarray, day: np.ndarray
) -> np.ndarray:
    """(N, H): the type supports the framework and precision natively and has launched by
    ``day``. Memory is the other condition (:mod:`leap_stream.data.fleet.memory_truth`)."""
    return hw.supports[:, framework_index, precision_index].T & (
        np.asarray(day, dtype=float)[:, None] >= hw.launch_day[None, :]
    )


def expected_throughput(
    hw: HardwareArrays,
    *,
    family_index: np.ndarray,
    param_count: np.ndarray,
    active_params: np.ndarray,
    tokens: np.ndarray,
    traffic: np.ndarray,
    base_mfu: np.ndarray,
    type_efficiency: np.ndarray,
    precision_index: np.ndarray,
    framework_index: np.ndarray,
    num_devices: np.ndarray,
    tensor_parallel: np.ndarray,
    pipeline_parallel: np.ndarray,
    global_batch_size: np.ndarray,
    seq_len: np.ndarray,
    lineage_efficiency: np.ndarray,
    day: np.ndarray,
    days: float,
    recompute: np.ndarray | None = None,
    micro_cap: np.ndarray | None = None,
    fragmentation: np.ndarray | None = None,
    hidden_efficiency: np.ndarray | None = None,
) -> np.ndarray:
    """Noise-free throughput (samples/s), shape (N attempts, H types); NaN where it cannot run.

    Every argument but ``hw``, ``lineage_efficiency`` and ``hidden_efficiency`` (N, H) and
    ``days`` is an (N,) array. ``tokens`` is the work units per sample (``seq_len`` for sequence
    families; ``seq_len`` itself is kept for callers and not read). The lineage's memory choices
    (``recompute``, an index into ``memory_truth.RECOMPUTE``, and ``micro_cap``) default to the
    family's typical ones, ``fragmentation`` to its mean, ``hidden_efficiency`` (a step-rate
    multiplier, (N, H)) to 1.
    """
    del seq_len  # the memory rule reads tokens: the same figure for sequence families
    if recompute is None or micro_cap is None:
        recompute, micro_cap = memory_truth.typical_choices(
            family_index,
            param_count,
            active_params,
            tokens,
            traffic,
            precision_index,
            tensor_parallel,
        )
    if fragmentation is None:
        fragmentation = np.full(len(family_index), memory_truth.MEAN_FRAGMENTATION)
    efficiency = lineage_efficiency * memory_truth.compute_factor(family_index, recompute)[:, None]
    throughput = step_throughput(
        hw,
        family_index=family_index,
        param_count=param_count,
        active_params=active_params,
        tokens=tokens,
        traffic=traffic,
        base_mfu=base_mfu,
        type_efficiency=type_efficiency,
        precision_index=precision_index,
        framework_index=framework_index,
        num_devices=num_devices,
        tensor_parallel=tensor_parallel,
        pipeline_parallel=pipeline_parallel,
        global_batch_size=global_batch_size,
        micro_batch=memory_truth.micro_batch(
            global_batch_size, num_devices, tensor_parallel, pipeline_parallel, micro_cap
        ),
        efficiency=efficiency,
        day=day,
        days=days,
        hidden_efficiency=hidden_efficiency,
    )
    need = memory_truth.need_gb(
        family_index,
        param_count,
        active_params,
        tokens,
        traffic,
        precision_index,
        num_devices,
        tensor_parallel,
        pipeline_parallel,
        global_batch_size,
        recompute=recompute,
        micro_cap=micro_cap,
    )
    fits = memory_truth.headroom(hw, need, fragmentation) >= 1.0
    runs = fits & can_run(hw, framework_index, precision_index, day)
    return np.where(runs, throughput, np.nan)


def measured_throughput(expected: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """What a run measures: expected x log-normal noise, and a rare straggler slowdown."""
    noise = np.exp(rng.normal(0.0, NOISE_SIGMA, expected.shape))
    straggler = rng.random(expected.shape) < STRAGGLER_PROBABILITY
    slowdown = np.where(straggler, rng.uniform(*STRAGGLER_SLOWDOWN, expected.shape), 1.0)
    return expected * noise * slowdown
