"""How much device memory a training configuration needs: the memory-fit rule.

The core's estimate, used to mark candidates ineligible before ranking. It is an estimate, not
the truth: the synthetic fleet decides what fits with a rule of its own
(``leap_stream.data.fleet.memory_truth``: recompute choices, allocator fragmentation, vendor
reserves), and what the estimate misses the core learns from out-of-memory failures
(``memory_risk``). It counts, per device:

- weights and gradients, sharded over tensor and pipeline parallelism;
- optimizer state (Adam: fp32 master weights and two moments), additionally sharded over the
  data-parallel replicas (ZeRO-1, the default of every mainstream trainer today);
- activations of one micro-batch (up to ``MICRO_BATCH`` samples for sequence models, with
  activation checkpointing; a family-specific cap for the others), sharded over tensor parallelism;
- a fixed runtime reserve (CUDA/HIP context, collectives buffers, fragmentation).

Recommendation models are the exception: their embedding tables are sharded over every device
(model-parallel embeddings), and train with a row-wise optimizer of negligible state.

Works on scalars (pure Python: the core calls it once per submission) and on numpy arrays (many
configurations at once), through one formula. A family the rule does not know
is treated like a ViT (a non-sequence model of moderate activations).

>>> round(float(required_memory_gb(7e9, "bf16", 8, 1, 1, 1024, 4096, "dense_llm")), 1)
50.7
>>> bool(fits(7e9, "bf16", 1, 1, 1, 8, 4096, "dense_llm", memory_gb=80.0))
False
"""

from __future__ import annotations

import math
from types import SimpleNamespace

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


_DEFAULT_FAMILY = "vit"

# The few operations the formula needs, for Python scalars and for numpy arrays.
_SCALAR_OPS = SimpleNamespace(
    where=lambda c, a, b: a if c else b, maximum=max, minimum=min, sqrt=math.sqrt, cbrt=math.cbrt
)
_ARRAY_OPS = SimpleNamespace(
    where=np.where, maximum=np.maximum, minimum=np.minimum, sqrt=np.sqrt, cbrt=np.cbrt
)


def _coefficients(table: dict[str, float], keys: ArrayLike, default: str) -> np.ndarray:
    """Look ``keys`` up in ``table`` element-wise (unknown keys take ``table[default]``)."""
    unique, inverse = np.unique(np.asarray(keys, dtype=str), return_inverse=True)
    values = np.array([table.get(k, table[default]) for k in unique], dtype=float)
    return values[inverse].reshape(np.shape(keys))


def required_memory_gb(
    param_count: ArrayLike,
    precision: ArrayLike,
    num_devices: ArrayLike,
    tensor_parallel: ArrayLike,
    pipeline_parallel: ArrayLike,
    global_batch_size: ArrayLike,
    seq_len: ArrayLike,
    model_family: ArrayLike,
) -> np.ndarray | float:
    """Device memory (GB) one device needs for this configuration.

    ``seq_len`` may be None/NaN for models without a sequence dimension. Scalars in, a float
    out; arrays in, an array out.
    """
    args = (
        param_count,
        precision,
        num_devices,
        tensor_parallel,
        pipeline_parallel,
        global_batch_size,
        seq_len,
        model_family,
    )
    if not any(isinstance(a, np.ndarray | list | tuple) for a in args):
        family = str(model_family)
        is_sequence = family in SEQUENCE_FAMILIES
        other = family if family in _ACTIVATION_SCALE else _DEFAULT_FAMILY
        seq = float(seq_len) if seq_len is not None else 0.0
        return _formula(
            _SCALAR_OPS,
            float(param_count),
            float(num_devices),
            float(tensor_parallel),
            float(pipeline_parallel),
            float(global_batch_size),
            seq if seq == seq else 0.0,
            family == "recsys",
            is_sequence,
            _WEIGHT_GRAD_BYTES[precision],
            _OPTIMIZER_BYTES[precision],
            _ACTIVATION_BYTES[precision],
            _ACTIVATION_SCALE[other],
            _MICRO_BATCH_CAP[other],
        )
    family = np.asarray(model_family, dtype=str)
    seq = np.asarray(np.nan if seq_len is None else seq_len, dtype=float)
    return _formula(
        _ARRAY_OPS,
        np.asarray(param_count, dtype=float),
        np.asarray(num_devices, dtype=float),
        np.asarray(tensor_parallel, dtype=float),
        np.asarray(pipeline_parallel, dtype=float),
        np.asarray(global_batch_size, dtype=float),
        np.where(np.isfinite(seq), seq, 0.0),
        family == "recsys",
        np.isin(family, SEQUENCE_FAMILIES),
        _coefficients(_WEIGHT_GRAD_BYTES, precision, "fp32"),
        _coefficients(_OPTIMIZER_BYTES, precision, "fp32"),
        _coefficients(_ACTIVATION_BYTES, precision, "fp32"),
        _coefficients(_ACTIVATION_SCALE, family, _DEFAULT_FAMILY),
        _coefficients(_MICRO_BATCH_CAP, family, _DEFAULT_FAMILY),
    )


def _formula(
    xp: SimpleNamespace,
    params,
    devices,
    tp,
    pp,
    batch,
    seq,
    is_recsys,
    is_sequence,
    weight_grad_bytes,
    optimizer_bytes,
    activation_bytes,
    activation_scale,
    micro_batch_cap,
):
    model_shards = tp * pp
    replicas = xp.maximum(devices / model_shards, 1.0)
    shards = xp.where(is_recsys, devices, model_shards)
    weight_grad = params * weight_grad_bytes / shards
    optimizer = xp.where(
        is_recsys, params * 1.0 / devices, params * optimizer_bytes / shards / replicas
    )
    per_device_batch = xp.maximum(batch / replicas, 1.0)
    micro = xp.minimum(per_device_batch, xp.where(is_sequence, MICRO_BATCH, micro_batch_cap))
    # A transformer of P parameters has P ~ 12 L h^2 with L ~ h / 128 layers; with activation
    # checkpointing it keeps each layer's input (2 L s h bytes) plus one layer's working set
    # (~68 s h bytes) per sample.
    hidden = xp.cbrt(xp.maximum(params, 1.0) * 128.0 / 12.0)
    layers = hidden / 128.0
    sequence_act = seq * hidden * (2.0 * layers + 68.0)
    other_act = activation_scale * xp.sqrt(xp.maximum(params, 1.0))
    per_sample = xp.where(is_sequence, sequence_act, other_act)
    activations = per_sample * activation_bytes / 2.0 * micro / tp
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
