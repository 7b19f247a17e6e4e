"""How much device memory a training configuration needs: the memory-fit rule.

One rule serves two sides: the fleet generator uses it as ground truth (a job that does not fit
cannot run there) and the core uses it to mark candidates ineligible. It counts, per device:

- weights and gradients, sharded over tensor and pipeline parallelism;
- optimizer state (Adam: fp32 master weights and two moments), additionally sharded over the
  data-parallel replicas (ZeRO-1, the default of every mainstream trainer today);
- activations of one micro-batch (up to ``MICRO_BATCH`` samples for sequence models, with
  activation checkpointing; a family-specific cap for the others), sharded over tensor parallelism;
- a fixed runtime reserve (CUDA/HIP context, collectives buffers, fragmentation).

Recommendation models are the exception: their embedding tables are sharded over every device
(model-parallel embeddings), and train with a row-wise optimizer of negligible state.

Works on scalars and on numpy arrays alike.

>>> round(float(required_memory_gb(7e9, "bf16", 8, 1, 1, 1024, 4096, "dense_llm")), 1)
50.7
>>> bool(fits(7e9, "bf16", 1, 1, 1, 8, 4096, "dense_llm", memory_gb=80.0))
False
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "MICRO_BATCH",
    "RUNTIME_RESERVE_GB",
    "SEQUENCE_FAMILIES",
    "USABLE_FRACTION",
    "fits",
    "required_memory_gb",
]

GB = 1e9
MICRO_BATCH = 4
RUNTIME_RESERVE_GB = 3.0
# The allocator never hands out the whole device: keep headroom for fragmentation.
USABLE_FRACTION = 0.92

# bytes per parameter for weights + gradients, and for optimizer state
_WEIGHT_GRAD_BYTES = {"fp32": 8.0, "bf16": 4.0, "fp16": 4.0, "fp8": 3.0}
_OPTIMIZER_BYTES = {"fp32": 8.0, "bf16": 12.0, "fp16": 12.0, "fp8": 12.0}
_ACTIVATION_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.5}

# Non-sequence families: checkpoint-free activation bytes per sample per sqrt(parameter) at
# 16-bit, and the largest per-device micro-batch their trainers keep in memory at once.
_ACTIVATION_SCALE = {"vit": 5.0e3, "cnn": 2.0e4, "diffusion": 5.0e4, "recsys": 50.0, "gnn": 1.0e4}
_MICRO_BATCH_CAP = {"vit": 256, "cnn": 256, "diffusion": 16, "recsys": 1024, "gnn": 64}
SEQUENCE_FAMILIES = ("dense_llm", "moe", "speech")


def _lookup(table: dict[str, float], keys: ArrayLike) -> np.ndarray:
    keys = np.asarray(keys)
    if keys.ndim == 0:
        return np.asarray(table[str(keys)], dtype=float)
    return np.array([table[str(k)] for k in keys.ravel()], dtype=float).reshape(keys.shape)


def required_memory_gb(
    param_count: ArrayLike,
    precision: ArrayLike,
    num_devices: ArrayLike,
    tensor_parallel: ArrayLike,
    pipeline_parallel: ArrayLike,
    global_batch_size: ArrayLike,
    seq_len: ArrayLike,
    model_family: ArrayLike,
) -> np.ndarray:
    """Device memory (GB) one device needs for this configuration.

    ``seq_len`` may be None/NaN for models without a sequence dimension.
    """
    params = np.asarray(param_count, dtype=float)
    devices = np.asarray(num_devices, dtype=float)
    model_shards = np.asarray(tensor_parallel, dtype=float) * np.asarray(
        pipeline_parallel, dtype=float
    )
    replicas = np.maximum(devices / model_shards, 1.0)
    family = np.asarray(model_family)
    is_recsys = family == "recsys"
    shards = np.where(is_recsys, devices, model_shards)

    weight_grad = params * _lookup(_WEIGHT_GRAD_BYTES, precision) / shards
    optimizer = np.where(
        is_recsys, params * 1.0 / devices, params * _lookup(_OPTIMIZER_BYTES, precision) / shards
    )
    optimizer = np.where(is_recsys, optimizer, optimizer / replicas)

    per_device_batch = np.maximum(np.asarray(global_batch_size, dtype=float) / replicas, 1.0)
    is_sequence = np.isin(family, SEQUENCE_FAMILIES)
    cap = np.where(
        is_sequence, MICRO_BATCH, _lookup(_MICRO_BATCH_CAP, np.where(is_sequence, "vit", family))
    )
    micro = np.minimum(per_device_batch, cap)

    seq = np.asarray(np.nan if seq_len is None else seq_len, dtype=float)
    seq = np.where(np.isfinite(seq), seq, 0.0)
    # A transformer of P parameters has P ~ 12 L h^2 with L ~ h / 128 layers; with activation
    # checkpointing it keeps each layer's input (2 L s h bytes) plus one layer's working set
    # (~68 s h bytes) per sample.
    hidden = np.cbrt(np.maximum(params, 1.0) * 128.0 / 12.0)
    layers = hidden / 128.0
    sequence_act = seq * hidden * (2.0 * layers + 68.0)
    other_act = _lookup(_ACTIVATION_SCALE, np.where(is_sequence, "vit", family)) * np.sqrt(
        np.maximum(params, 1.0)
    )
    per_sample = np.where(is_sequence, sequence_act, other_act)
    activations = (
        per_sample
        * _lookup(_ACTIVATION_BYTES, precision)
        / 2.0
        * micro
        / np.asarray(tensor_parallel, dtype=float)
    )
    return (weight_grad + optimizer + activations) / GB + RUNTIME_RESERVE_GB


def fits(
    param_count: ArrayLike,
    precision: ArrayLike,
    num_devices: ArrayLike,
    tensor_parallel: ArrayLike,
    pipeline_parallel: ArrayLike,
    global_batch_size: ArrayLike,
    seq_len: ArrayLike,
    model_family: ArrayLike,
    *,
    memory_gb: ArrayLike,
) -> np.ndarray:
    """Whether the configuration fits a device with ``memory_gb`` of memory."""
    need = required_memory_gb(
        param_count,
        precision,
        num_devices,
        tensor_parallel,
        pipeline_parallel,
        global_batch_size,
        seq_len,
        model_family,
    )
    return need <= np.asarray(memory_gb, dtype=float) * USABLE_FRACTION
