"""The fleet's own memory rule: how much device memory an attempt really needs, and where it fits.

The service decides eligibility with :mod:`leap_stream.core.memory`; the ground truth must not
share that formula, or a backtest would never see an attempt the core thinks fits fail to fit
(or the reverse). This rule is written independently, from how training jobs spend memory, and
depends on figures a submission does not carry:

- **Model states.** Weights and gradients (8/4/4/5 bytes a parameter for fp32/bf16/fp16/fp8:
  fp8 training keeps 16-bit weights and gradients plus an fp8 copy) over the tensor and
  pipeline shards; Adam state (12 bytes a parameter, 8 in pure fp32) sharded over the
  data-parallel replicas (ZeRO-1) only for models of ``ZERO_MIN_PARAMS`` or more: smaller ones
  train with plain data parallelism and every replica holds the whole optimizer. Recommenders
  shard their embedding tables over every device (2 or 4 bytes a parameter, plus a quarter for
  row-wise optimizer state and the embedding cache).
- **Activations of one micro-batch**, by family. Transformers (LLMs, MoE, speech, ViT,
  diffusion) keep per layer and sample ``34 s h`` bytes without recomputation, ``22 s h`` with
  selective recomputation, and only the layer inputs (``2 s h``) plus one layer's working set
  with full recomputation (Korthikanti et al. 2022, with flash attention: no ``s^2`` term), all
  sharded over tensor parallelism (sequence parallelism). CNNs, GNNs and recommenders keep a
  family share of the activation bytes a sample moves (``traffic x tokens x sqrt(P)``, the
  zoo's hidden figures), less when they checkpoint.
- **The owner's choices, per lineage** (:func:`settle`): the recomputation (none, selective,
  full) and the micro-batch, drawn from family habits and then made lighter until one
  micro-batch's activations fit ``ACTIVATION_BUDGET_GB``. Recomputation costs compute
  (:func:`compute_factor`): full recomputation re-runs the forward pass.
- **Per attempt**: allocator fragmentation, a uniform 5-15% on top of what the tensors need.
- **Per vendor**: the runtime's own reserve (context, collective buffers, workspaces).

An attempt fits a hardware type when ``need x (1 + fragmentation) + reserve(vendor) <=
memory``. The core's rule (fixed 3 GB reserve, 92% usable, ZeRO-1 always, a fixed micro-batch
with checkpointing, per-family activation constants) is therefore sometimes optimistic and
sometimes pessimistic about the same configuration.

>>> fam = np.array([FAMILY_NAMES.index("dense_llm")])
>>> need = need_gb(fam, np.array([7e9]), np.array([7e9]), np.array([4096.0]), np.array([30.0]),
...     np.array([1]), np.array([8]), np.array([1]), np.array([1]), np.array([1024]),
...     recompute=np.array([RECOMPUTE.index("selective")]), micro_cap=np.array([2]))
>>> round(float(need[0]), 1)  # 38.5 GB of model states, 25.0 GB of activations
63.5
"""

from __future__ import annotations

import numpy as np

from leap_stream.core.catalog import VENDORS
from leap_stream.core.hardware import HardwareArrays
from leap_stream.data.fleet.zoo import FAMILY_NAMES

__all__ = [
    "ACTIVATION_BUDGET_GB",
    "FRAGMENTATION",
    "RECOMPUTE",
    "RUNTIME_RESERVE_GB",
    "compute_factor",
    "fits_reference",
    "headroom",
    "micro_batch",
    "need_gb",
    "settle",
    "typical_choices",
]

GB = 1e9
RECOMPUTE = ("none", "selective", "full")
# Owners' recomputation habits per family (probabilities of RECOMPUTE): large transformers
# default to selective (Megatron), vision and graph models rarely checkpoint, recommenders never
# (their activations are small).
RECOMPUTE_PREFERENCE = {
    "dense_llm": (0.15, 0.55, 0.30),
    "moe": (0.10, 0.55, 0.35),
    "vit": (0.60, 0.20, 0.20),
    "cnn": (0.80, 0.00, 0.20),
    "diffusion": (0.30, 0.30, 0.40),
    "recsys": (1.00, 0.00, 0.00),
    "speech": (0.40, 0.30, 0.30),
    "gnn": (0.90, 0.00, 0.10),
}
# Model FLOPs per unit of hardware work: full recomputation re-runs the forward pass (8 instead
# of 6 FLOPs per parameter per token); selective recomputes the cheap element-wise parts (~3%).
RECOMPUTE_COST = np.array([1.0, 0.97, 0.75])
# Micro-batch (samples one device holds activations for) owners start from, per family; the
# four choices are drawn with MICRO_BATCH_P.
MICRO_BATCH_CHOICES = {
    "dense_llm": (1, 2, 4, 8),
    "moe": (1, 2, 4, 8),
    "speech": (1, 2, 4, 8),
    "vit": (64, 128, 256, 512),
    "cnn": (64, 128, 256, 512),
    "gnn": (64, 128, 256, 512),
    "diffusion": (4, 8, 16, 32),
    "recsys": (1024, 2048, 4096, 8192),
}
MICRO_BATCH_P = (0.15, 0.30, 0.40, 0.15)
# Owners keep one micro-batch's activations under this, about 40% of the 80 GB device they
# plan for, leaving the rest to weights and optimizer state.
ACTIVATION_BUDGET_GB = 32.0
# Models this large shard their optimizer over the data-parallel replicas (ZeRO-1); smaller ones
# use plain data parallelism, where it costs little.
ZERO_MIN_PARAMS = 1e9
# Bytes a parameter: weights + gradients, and Adam state, by precision (fp32, bf16, fp16, fp8).
WEIGHT_GRAD_BYTES = np.array([8.0, 4.0, 4.0, 5.0])
OPTIMIZER_BYTES = np.array([8.0, 12.0, 12.0, 12.0])
# Recommenders: embedding bytes a parameter (fp32 tables, else 16-bit), x1.25 for row-wise
# optimizer state and the embedding cache.
EMBEDDING_BYTES = np.array([4.0, 2.0, 2.0, 2.0]) * 1.25
# Activation bytes relative to 16-bit (fp8 training keeps some activations in fp8).
ACTIVATION_SCALE = np.array([2.0, 1.0, 1.0, 0.75])
# Transformer activations per layer per token per hidden unit, in bytes, by RECOMPUTE: none,
# selective; full keeps 2 per layer plus one layer's working set (TRANSFORMER_WORKING_SET).
TRANSFORMER_LAYER_BYTES = np.array([34.0, 22.0, 2.0])
TRANSFORMER_WORKING_SET = 34.0
TRANSFORMER_FAMILIES = ("dense_llm", "moe", "speech", "vit", "diffusion")
# Other families: share of a sample's activation traffic (traffic x tokens x sqrt(P) bytes) kept
# for the backward pass, set so the median zoo model lands near published footprints (a
# ResNet-50 ~ 0.1 GB an image at 16 bits), and the part kept when checkpointing (by RECOMPUTE).
STORED_SHARE = {"cnn": 0.3, "gnn": 4.0, "recsys": 2.0}
CHECKPOINT_KEEP = np.array([1.0, 0.5, 0.2])
# Allocator fragmentation per attempt: caching allocators waste 5-15% of what the tensors need.
FRAGMENTATION = (0.05, 0.15)
MEAN_FRAGMENTATION = sum(FRAGMENTATION) / 2
# Runtime reserve per vendor (VENDORS order), GB: driver context, collective-library buffers and
# workspaces. XLA plans TPU memory ahead and keeps little; ROCm/RCCL and Gaudi's graph runtime
# keep more than CUDA/NCCL.
RUNTIME_RESERVE_GB = {
    "NVIDIA": 2.5,
    "AMD": 4.0,
    "Intel": 3.5,
    "Google": 1.0,
    "AWS": 2.0,
    "Graphcore": 0.1,
}
# The device owners plan for when they choose a configuration: an 80 GB NVIDIA part.
REFERENCE_MEMORY_GB = 80.0

_FAMILY = np.asarray(FAMILY_NAMES)
_IS_TRANSFORMER = np.isin(_FAMILY, TRANSFORMER_FAMILIES)
_IS_RECSYS = _FAMILY == "recsys"
_STORED_SHARE = np.array([STORED_SHARE.get(f, 0.0) for f in FAMILY_NAMES])
_PREFERENCE = np.array([RECOMPUTE_PREFERENCE[f] for f in FAMILY_NAMES])
_MICRO_CHOICES = np.array([MICRO_BATCH_CHOICES[f] for f in FAMILY_NAMES], dtype=float)
# Each family's most common recomputation: its base MFU is measured with it (factor 1).
_TYPICAL = np.argmax(_PREFERENCE, axis=1)
_COMPUTE = RECOMPUTE_COST[None, :] / RECOMPUTE_COST[_TYPICAL][:, None]  # (families, RECOMPUTE)
_RESERVE = np.array([RUNTIME_RESERVE_GB[v] for v in VENDORS])


def compute_factor(family_index: np.ndarray, recompute: np.ndarray) -> np.ndarray:
    """MFU multiplier of a recomputation choice, relative to the family's typical one."""
    return _COMPUTE[family_index, recompute]


def micro_batch(
    global_batch_size: np.ndarray,
    num_devices: np.ndarray,
    tensor_parallel: np.ndarray,
    pipeline_parallel: np.ndarray,
    micro_cap: np.ndarray,
) -> np.ndarray:
    """Samples a device holds activations for at once: its share of the batch, up to the cap."""
    replicas = np.maximum(num_devices / (tensor_parallel * pipeline_parallel), 1.0)
    return np.minimum(np.maximum(global_batch_size / replicas, 1.0), micro_cap)


def _activation_bytes(
    family_index: np.ndarray,
    param_count: np.ndarray,
    active_params: np.ndarray,
    tokens: np.ndarray,
    traffic: np.ndarray,
    precision_index: np.ndarray,
    recompute: np.ndarray,
) -> np.ndarray:
    """Activation bytes of one sample on one device before tensor sharding."""
    # A transformer of A active parameters: A ~ 12 L h^2 with L = h / 128 layers.
    hidden = np.cbrt(np.maximum(active_params, 1.0) * 128.0 / 12.0)
    layers = hidden / 128.0
    full = recompute == RECOMPUTE.index("full")
    per_token = np.where(
        full,
        TRANSFORMER_LAYER_BYTES[2] * layers + TRANSFORMER_WORKING_SET,
        TRANSFORMER_LAYER_BYTES[recompute] * layers,
    )
    transformer = per_token * tokens * hidden
    other = (
        _STORED_SHARE[family_index]
        * traffic
        * tokens
        * np.sqrt(np.maximum(param_count, 1.0))
        * CHECKPOINT_KEEP[recompute]
    )
    return (
        np.where(_IS_TRANSFORMER[family_index], transformer, other)
        * (ACTIVATION_SCALE[precision_index])
    )


def need_gb(
    family_index: np.ndarray,
    param_count: np.ndarray,
    active_params: np.ndarray,
    tokens: np.ndarray,
    traffic: np.ndarray,
    precision_index: np.ndarray,
    num_devices: np.ndarray,
    tensor_parallel: np.ndarray,
    pipeline_parallel: np.ndarray,
    global_batch_size: np.ndarray,
    *,
    recompute: np.ndarray,
    micro_cap: np.ndarray,
) -> np.ndarray:
    """GB the tensors of one device need (before fragmentation and the runtime reserve).

    Arrays broadcast together; ``tokens`` is the work units per sample (``seq_len`` for
    sequence families), ``traffic`` the zoo's hidden activation traffic.
    """
    params = np.asarray(param_count, dtype=float)
    devices = np.asarray(num_devices, dtype=float)
    tp = np.asarray(tensor_parallel, dtype=float)
    pp = np.asarray(pipeline_parallel, dtype=float)
    shards = tp * pp
    replicas = np.maximum(devices / shards, 1.0)
    zero = np.where(params >= ZERO_MIN_PARAMS, replicas, 1.0)
    states = params * (
        WEIGHT_GRAD_BYTES[precision_index] / shards
        + OPTIMIZER_BYTES[precision_index] / (shards * zero)
    )
    embeddings = params * EMBEDDING_BYTES[precision_index] / devices
    states = np.where(_IS_RECSYS[family_index], embeddings, states)
    micro = micro_batch(global_batch_size, devices, tp, pp, micro_cap)
    per_sample = _activation_bytes(
        family_index, params, active_params, tokens, traffic, precision_index, recompute
    )
    return (states + per_sample * micro / tp) / GB


def headroom(hw: HardwareArrays, need: np.ndarray, fragmentation: np.ndarray) -> np.ndarray:
    """Memory a device has over what the attempt takes there, as a ratio (N, H); >= 1 fits."""
    usable = hw.memory_gb - _RESERVE[hw.vendor_index]
    taken = np.maximum(need * (1.0 + fragmentation), 1e-9)
    return usable[None, :] / taken[:, None]


def fits_reference(need: np.ndarray) -> np.ndarray:
    """Whether ``need`` fits the device owners plan for, at the mean fragmentation."""
    reserve = RUNTIME_RESERVE_GB["NVIDIA"]
    return need * (1.0 + MEAN_FRAGMENTATION) + reserve <= REFERENCE_MEMORY_GB


def _settled(
    family_index: np.ndarray,
    active_params: np.ndarray,
    param_count: np.ndarray,
    tokens: np.ndarray,
    traffic: np.ndarray,
    precision_index: np.ndarray,
    tensor_parallel: np.ndarray,
    preferred_recompute: np.ndarray,
    preferred_micro: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """From each preference, the lightest step down that fits the activation budget.

    Options in the owner's order: the preferred recomputation with the preferred micro-batch,
    then smaller micro-batches, then the next heavier recomputation from the preferred
    micro-batch down, and so on; the last resort is full recomputation at the smallest.
    """
    n = len(family_index)
    n_micro = _MICRO_CHOICES.shape[1]
    options = [(r, k) for r in range(len(RECOMPUTE)) for k in range(n_micro - 1, -1, -1)]
    budget_ok = np.zeros((n, len(options)), dtype=bool)
    allowed = np.zeros((n, len(options)), dtype=bool)
    for j, (r, k) in enumerate(options):
        recompute = np.full(n, r)
        micro = _MICRO_CHOICES[family_index, k]
        per_sample = _activation_bytes(
            family_index, param_count, active_params, tokens, traffic, precision_index, recompute
        )
        activations = per_sample * micro / tensor_parallel / GB
        budget_ok[:, j] = activations <= ACTIVATION_BUDGET_GB
        allowed[:, j] = (r >= preferred_recompute) & (k <= preferred_micro)
    ok = budget_ok & allowed
    first = np.where(ok.any(axis=1), np.argmax(ok, axis=1), len(options) - 1)
    chosen = np.array(options)[first]
    recompute, k = chosen[:, 0], chosen[:, 1]
    return recompute, _MICRO_CHOICES[family_index, k]


def settle(
    rng: np.random.Generator,
    family_index: np.ndarray,
    param_count: np.ndarray,
    active_params: np.ndarray,
    tokens: np.ndarray,
    traffic: np.ndarray,
    precision_index: np.ndarray,
    tensor_parallel: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Each lineage's recomputation (index into RECOMPUTE) and micro-batch cap (samples).

    Drawn from the family's habits, then made lighter until a micro-batch fits the budget.
    """
    n = len(family_index)
    cumulative = np.cumsum(_PREFERENCE[family_index], axis=1)
    preferred_recompute = np.minimum((rng.random(n)[:, None] > cumulative).sum(axis=1), 2)
    preferred_micro = rng.choice(len(MICRO_BATCH_P), n, p=MICRO_BATCH_P)
    return _settled(
        family_index,
        active_params,
        param_count,
        tokens,
        traffic,
        precision_index,
        tensor_parallel,
        preferred_recompute,
        preferred_micro,
    )


def typical_choices(
    family_index: np.ndarray,
    param_count: np.ndarray,
    active_params: np.ndarray,
    tokens: np.ndarray,
    traffic: np.ndarray,
    precision_index: np.ndarray,
    tensor_parallel: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """What :func:`settle` gives an owner with the family's most common habits (no draw)."""
    n = len(family_index)
    return _settled(
        family_index,
        active_params,
        param_count,
        tokens,
        traffic,
        precision_index,
        tensor_parallel,
        _TYPICAL[family_index],
        np.full(n, int(np.argmax(MICRO_BATCH_P))),
    )
