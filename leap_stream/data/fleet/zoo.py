"""The model zoo: hundreds of model types in eight families, with their hidden work figures.

Each model type has public attributes (name, family, parameter count) that a submission carries,
and hidden ones that only the ground truth knows: how much compute and memory traffic one sample
costs, and a per-type efficiency. Popularity is heavy-tailed (Zipf), and a share of the types
appears only partway through the trace.

>>> zoo = build_zoo(seed=1)
>>> len(zoo) >= 300, len(set(zoo.family)) == len(FAMILIES)
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FAMILIES", "FamilySpec", "ModelZoo", "build_zoo"]


@dataclass(frozen=True)
class FamilySpec:
    """How the model types of one family are drawn.

    ``tokens`` is the range of work units per sample for families without a ``seq_len`` in the
    submission (patches for ViT, latent tokens for diffusion, a FLOPs-per-parameter factor for
    CNNs, sampled neighbours for GNNs); sequence families take ``seq_lens`` instead.
    """

    name: str
    n_types: int
    params: tuple[float, float]
    base_mfu: float
    seq_lens: tuple[int, ...] = ()
    tokens: tuple[float, float] = (1.0, 1.0)
    # memory traffic per sample per token, in bytes per sqrt(parameter)
    traffic: tuple[float, float] = (1.0, 1.0)
    active_fraction: tuple[float, float] = (1.0, 1.0)
    batch: tuple[int, int] = (256, 1024)
    frameworks: tuple[float, float, float] = (0.8, 0.15, 0.05)  # pytorch, jax, tensorflow
    precisions: tuple[float, float, float, float] = (0.05, 0.85, 0.07, 0.03)  # fp32 bf16 fp16 fp8
    prefixes: tuple[str, ...] = ("model",)


FAMILIES: tuple[FamilySpec, ...] = (
    FamilySpec(
        "dense_llm",
        110,
        (1.2e8, 4.05e11),
        0.42,
        seq_lens=(2048, 4096, 8192),
        traffic=(20.0, 40.0),
        batch=(256, 2048),
        frameworks=(0.8, 0.18, 0.02),
        precisions=(0.01, 0.86, 0.03, 0.10),
        prefixes=("decoder", "chat", "code", "instruct", "base", "reasoner", "assistant"),
    ),
    FamilySpec(
        "moe",
        40,
        (8e9, 1.2e12),
        0.30,
        seq_lens=(4096, 8192),
        traffic=(20.0, 40.0),
        active_fraction=(0.05, 0.3),
        batch=(512, 4096),
        frameworks=(0.7, 0.3, 0.0),
        precisions=(0.0, 0.85, 0.0, 0.15),
        prefixes=("moe", "sparse", "mixture"),
    ),
    FamilySpec(
        "vit",
        40,
        (5e6, 2e9),
        0.40,
        tokens=(197, 577),
        traffic=(40.0, 120.0),
        batch=(1024, 8192),
        frameworks=(0.7, 0.25, 0.05),
        prefixes=("vit", "deit", "swin", "eva"),
    ),
    FamilySpec(
        "cnn",
        45,
        (3e6, 2e8),
        0.30,
        tokens=(30.0, 300.0),
        traffic=(300.0, 1500.0),
        batch=(256, 4096),
        frameworks=(0.75, 0.05, 0.2),
        precisions=(0.15, 0.6, 0.25, 0.0),
        prefixes=("resnet", "efficientnet", "convnext", "regnet", "unet-seg", "yolo"),
    ),
    FamilySpec(
        "diffusion",
        35,
        (1e8, 1.2e10),
        0.35,
        tokens=(256.0, 4096.0),
        traffic=(60.0, 200.0),
        batch=(256, 2048),
        frameworks=(0.85, 0.15, 0.0),
        precisions=(0.02, 0.9, 0.08, 0.0),
        prefixes=("ldm", "dit", "video-diffusion", "unet-diffusion"),
    ),
    FamilySpec(
        "recsys",
        35,
        (5e7, 2e10),
        0.15,
        tokens=(5.0, 50.0),
        traffic=(0.5, 5.0),
        active_fraction=(0.0005, 0.005),
        batch=(16384, 131072),
        frameworks=(0.7, 0.05, 0.25),
        precisions=(0.5, 0.4, 0.1, 0.0),
        prefixes=("dlrm", "dcn", "two-tower", "seq-rec"),
    ),
    FamilySpec(
        "speech",
        30,
        (3e7, 2e9),
        0.33,
        seq_lens=(1500, 3000),
        traffic=(30.0, 60.0),
        batch=(256, 2048),
        frameworks=(0.8, 0.15, 0.05),
        precisions=(0.05, 0.85, 0.1, 0.0),
        prefixes=("asr", "conformer", "tts", "speech-lm"),
    ),
    FamilySpec(
        "gnn",
        25,
        (1e6, 3e8),
        0.10,
        tokens=(5.0, 50.0),
        traffic=(50.0, 500.0),
        batch=(512, 8192),
        frameworks=(0.85, 0.1, 0.05),
        precisions=(0.4, 0.55, 0.05, 0.0),
        prefixes=("gcn", "graphsage", "gat", "mpnn"),
    ),
)
FAMILY_NAMES: tuple[str, ...] = tuple(f.name for f in FAMILIES)

# Zipf exponent of model-type popularity: a few types dominate, a long tail is rare.
POPULARITY_EXPONENT = 1.1
SIZE_POPULARITY_EXPONENT = 0.25
# Share of model types that exist from day 0; the rest appear uniformly through the trace.
SHARE_AT_START = 0.7
# Hidden per-type efficiency spread (log-normal sigma) around the family's base MFU.
TYPE_EFFICIENCY_SIGMA = 0.15


def _size_label(params: float) -> str:
    if params >= 1e9:
        return f"{params / 1e9:.3g}b"
    return f"{params / 1e6:.3g}m"


@dataclass(frozen=True)
class ModelZoo:
    """The model types as parallel numpy arrays (one entry per type)."""

    name: np.ndarray  # str
    family: np.ndarray  # str
    family_index: np.ndarray  # int, index into FAMILIES
    param_count: np.ndarray  # int64
    active_params: np.ndarray  # float: parameters that take part in one token's compute
    tokens: np.ndarray  # float: work units per sample (NaN for sequence families: use seq_len)
    traffic: np.ndarray  # float: memory bytes moved per sample per token per sqrt(parameter)
    efficiency: np.ndarray  # float: hidden multiplier of the family's base MFU
    popularity: np.ndarray  # float, sums to 1
    introduced_at: np.ndarray  # float: fraction of the trace after which the type exists

    def __len__(self) -> int:
        return len(self.name)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, size: int) -> np.ndarray:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size))


def build_zoo(seed: int) -> ModelZoo:
    """Draw the model zoo, deterministically per seed."""
    rng = np.random.default_rng([seed, 0x200])
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ModelZoo.__dataclass_fields__}
    for index, spec in enumerate(FAMILIES):
        n = spec.n_types
        params = _log_uniform(rng, *spec.params, n)
        prefix = rng.choice(np.array(spec.prefixes), n)
        names = [
            f"{p}-{_size_label(s)}-v{i}"
            for i, (p, s) in enumerate(zip(prefix, params, strict=True))
        ]
        cols["name"].append(np.array(names))
        cols["family"].append(np.full(n, spec.name))
        cols["family_index"].append(np.full(n, index))
        cols["param_count"].append(params.astype(np.int64))
        cols["active_params"].append(params * rng.uniform(*spec.active_fraction, n))
        tokens = np.full(n, np.nan) if spec.seq_lens else _log_uniform(rng, *spec.tokens, n)
        cols["tokens"].append(tokens)
        cols["traffic"].append(_log_uniform(rng, *spec.traffic, n))
        cols["efficiency"].append(np.exp(rng.normal(0.0, TYPE_EFFICIENCY_SIGMA, n)))
    total = sum(f.n_types for f in FAMILIES)
    ranks = rng.permutation(total) + 1
    # Big models are trained less often than small ones.
    size_penalty = (np.concatenate(cols["param_count"]) / 1e8) ** -SIZE_POPULARITY_EXPONENT
    popularity = ranks.astype(float) ** -POPULARITY_EXPONENT * size_penalty
    introduced = np.where(rng.random(total) < SHARE_AT_START, 0.0, rng.uniform(0.02, 0.95, total))
    arrays = {k: np.concatenate(v) for k, v in cols.items() if v}
    return ModelZoo(
        **arrays,
        popularity=popularity / popularity.sum(),
        introduced_at=introduced,
    )
