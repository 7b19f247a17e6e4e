"""Public MLPerf Training results as a leap-stream history, and the naive cross-type predictor.

:func:`import_mlperf` turns ``mlperf_training.csv`` (one row per published result; see
``shared/realdata/README.md`` beside the repository) into a history: one attempt per
closed-division result on a catalog accelerator, a submitted and a completed event each, one
lineage per benchmark
(``mlperf-bert``, ...) so that earlier results on other hardware are the job's prior
throughput. The mapping rules, every figure they use and what gets dropped are in
``docs/real-data.md``; the figures live in :data:`BENCHMARKS` and :data:`ROUND_DATES`.

:func:`naive_ratio_predictions` is the reference predictor of the realdata README (the bar an
online model must beat): a result's throughput is predicted from the same benchmark measured on
another type, times the median speed ratio of the two types over the other benchmarks.

>>> spec = BENCHMARKS["resnet"]
>>> spec.model_family, spec.param_count, spec.samples_to_train
('cnn', 25557032, 45500000.0)
>>> ROUND_DATES["v3.1"].date().isoformat()
'2023-11-08'
"""

from __future__ import annotations

import math
import re
import tomllib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from leap_stream.core.catalog import Catalog, default_catalog
from leap_stream.data.importers.attempts import (
    ATTEMPT_SPACING,
    COMPLETION_DELAY,
    ImportStats,
    attempt_events,
    read_table,
    succeeded_on,
    write_events,
)

__all__ = [
    "BENCHMARKS",
    "BENCHMARK_ALIASES",
    "DROP_REASONS",
    "ROUND_DATES",
    "BenchmarkSpec",
    "MlperfImportError",
    "import_mlperf",
    "load_benchmarks",
    "mlperf_events",
    "naive_ratio_predictions",
    "naive_ratio_summary",
    "parse_round_dates",
]


class MlperfImportError(ValueError):
    """An MLPerf results table that cannot be imported: missing columns or an unplaced round.

    The message names the file, and the 0-based data row and column when one is at fault.

    Examples
    --------
    >>> raise MlperfImportError("r.csv row 3, column 'round': 'v9.9' has no publication date")
    Traceback (most recent call last):
    ...
    leap_stream.data.importers.mlperf.MlperfImportError: r.csv row 3, column 'round': 'v9.9' has ...
    """


@dataclass(frozen=True)
class BenchmarkSpec:
    """What leap-stream records about one MLPerf Training benchmark (``docs/real-data.md``).

    Attributes
    ----------
    model_family
        A family of the synthetic zoo (``leap_stream.data.fleet.zoo.FAMILIES``).
    param_count
        Public model size (trained or not: the frozen Llama 2 base counts).
    seq_len
        Tokens per sample for sequence models, else None.
    samples_to_train
        Samples a typical run consumes before it reaches the quality target, as logged
        throughput x time to train (so it includes evaluation pauses, like time to train does);
        None when the benchmark has no samples-per-second measure at all (MiniGo).
    reference_batch
        The global batch most results use; a run at 4x this or more converges after many more
        samples, so ``samples_to_train`` does not hold for it.
    logged_unit
        What ``tracked_throughput_median`` counts: ``"system"`` samples/s of the whole system,
        ``"device"`` samples/s of one accelerator (RetinaNet logs per rank), ``"token"``
        tokens/s of the whole system (GPT-3 logs tokens).
    fp8
        Recorded as fp8 on fp8-capable hardware (LLM submissions), else bf16 (fp16 without bf16).
    flops_per_sample
        Training FLOPs per sample (forward and backward), counted from the architecture, where
        the roofline's default, 6 x parameters x tokens, is wrong: convnets, speech, recsys,
        diffusion, graphs, LoRA. None for dense transformers, where the default holds.

    Examples
    --------
    >>> BENCHMARKS["gpt3"].logged_unit, BENCHMARKS["gpt3"].seq_len
    ('token', 2048)
    """

    model_family: str
    param_count: int
    seq_len: int | None
    samples_to_train: float | None
    reference_batch: int
    logged_unit: Literal["system", "device", "token"] = "system"
    fp8: bool = False
    flops_per_sample: float | None = None


# Sizes are public model sizes (docs/real-data.md says where each comes from and which are
# counted from the architecture). samples_to_train: the file's own median of logged
# throughput x time to train over results whose logged figure is whole-system, rounded to three
# digits; docs/real-data.md shows each as passes over the training set. Benchmarks that the
# realdata file has no results of have samples_to_train None (their rows are counted under
# ``no_samples_measure``): give the figure with ``--benchmarks FILE`` once results exist.
# flops_per_sample: training FLOPs of one sample, 3 x the forward pass's 2 x multiply-adds,
# counted from the layer sizes the comments give (docs/real-data.md shows the sums); left None
# where the roofline's 6 x parameters x tokens already holds, or no result here checks the count.
BENCHMARKS: Mapping[str, BenchmarkSpec] = MappingProxyType(
    {
        # BERT-Large, 340M (Devlin et al. 2019). Until v5.0.
        "bert": BenchmarkSpec("dense_llm", 340_000_000, 512, 2.50e6, 448),
        # GPT-3 175B (Brown et al. 2020, Table 2.1).
        "gpt3": BenchmarkSpec("dense_llm", 175_000_000_000, 2048, 5.91e5, 2048, "token", True),
        # Llama 2 70B (Touvron et al. 2023, Table 1); LoRA trains a tiny fraction. v4.0 on.
        # FLOPs: 4 x P x tokens (the frozen weights get no weight gradients: forward 2, the
        # activations' gradients 2).
        "llama2_70b_lora": BenchmarkSpec(
            "dense_llm", 70_000_000_000, 8192, 3.64e3, 8, fp8=True, flops_per_sample=2.29e15
        ),
        # Llama 3.1 405B and 8B (Meta's Llama 3.1 model card; Dubey et al. 2024, "The Llama 3
        # Herd of Models", Table 3: 405B and 8B, 8,192-token pretraining context). 405B
        # pretraining from v5.0 (replaced GPT-3), 8B from v5.1 (replaced BERT); batch: the
        # reference's global batch (1152 sequences for 405B; 8B's is an assumption).
        "llama31_405b": BenchmarkSpec("dense_llm", 405_000_000_000, 8192, None, 1152, fp8=True),
        "llama31_8b": BenchmarkSpec("dense_llm", 8_030_000_000, 8192, None, 32, fp8=True),
        # ResNet-50 v1.5, 25,557,032 (torchvision's count); 4.1G multiply-adds at 224 x 224.
        "resnet": BenchmarkSpec("cnn", 25_557_032, None, 4.55e7, 3264, flops_per_sample=2.46e10),
        # RetinaNet (from v2.0; the results folder is "ssd" to v4.1, "retinanet" from v5.0).
        # ~145G multiply-adds at 800 x 800: the ResNeXt50 backbone ~55G, FPN and heads ~90G.
        "ssd": BenchmarkSpec(
            "cnn", 37_000_000, None, 4.95e6, 256, "device", flops_per_sample=8.7e11
        ),
        # SSD with a ResNet-34 backbone (before v2.0, folder "ssd" there too): 36.3M (Reddi et
        # al. 2020, "MLPerf Inference Benchmark", Table 1, the same SSD-ResNet34).
        "ssd_resnet34": BenchmarkSpec("cnn", 36_300_000, None, None, 1024),
        # Mask R-CNN R50-FPN, 44,401,393 (torchvision's count); ~250G multiply-adds at COCO's
        # 800 x ~1,200.
        "maskrcnn": BenchmarkSpec("cnn", 44_401_393, None, 1.67e6, 96, flops_per_sample=1.5e12),
        # 3D U-Net, ~31M counted from its widths; ~520G multiply-adds on a 128^3 patch (two
        # 3x3x3 convolutions a level each way, the decoder's on concatenated inputs).
        "unet3d": BenchmarkSpec("cnn", 31_000_000, None, 4.14e5, 56, flops_per_sample=3.1e12),
        # RNN-T, ~45M counted from its layers; ~16.5G multiply-adds for a 12.3 s utterance
        # (LibriSpeech's mean): the LSTMs ~0.94G a second of audio, the joint ~4.8G.
        "rnnt": BenchmarkSpec("speech", 45_000_000, None, 1.40e7, 1536, flops_per_sample=1.0e11),
        # GNMT, 210M (Reddi et al. 2020, Table 1); an LSTM seq2seq, the family RNN-T has.
        "gnmt": BenchmarkSpec("speech", 210_000_000, None, None, 1024),
        # Transformer big, 213M (Vaswani et al. 2017, Table 3).
        "transformer": BenchmarkSpec("dense_llm", 213_000_000, None, None, 1024),
        # NCF (NeuMF on MovieLens-20M), ~31.8M counted: (138,493 users + 26,744 items) x
        # (64 + 128) embedding widths + the 256-256-128-64 MLP.
        "ncf": BenchmarkSpec("recsys", 31_800_000, None, None, 1_048_576),
        # DLRM on Criteo 1TB, ~24B (embeddings); DLRM-dcnv2 from v3.0. Their FLOPs are the
        # MLPs' (an embedding row costs a read, no multiply): DLRM 2.4M multiply-adds (bottom
        # 13-512-256-128, 351 dot products, top 479-1024-1024-512-256-1); DCNv2 16M (three
        # rank-512 cross layers on 3,456 inputs 10.6M, top MLP 5.2M).
        "dlrm": BenchmarkSpec(
            "recsys", 24_000_000_000, None, 3.78e9, 55296, flops_per_sample=1.45e7
        ),
        "dlrm_dcnv2": BenchmarkSpec(
            "recsys", 24_000_000_000, None, 3.15e9, 55296, flops_per_sample=9.6e7
        ),
        # Stable Diffusion v2 UNet, 865M (Stability AI's model card). v3.1-v5.0. FLOPs: the UNet
        # trained (~0.4T multiply-adds on a 64 x 64 latent) and the frozen VAE encoder and text
        # encoder run forward (~0.3T).
        "stable_diffusion": BenchmarkSpec(
            "diffusion", 865_000_000, None, 3.30e6, 1024, flops_per_sample=3.0e12
        ),
        # Flux.1, 12B (Black Forest Labs: "a 12 billion parameter rectified flow
        # transformer"). v5.1 (replaced Stable Diffusion); batch is an assumption.
        "flux1": BenchmarkSpec("diffusion", 12_000_000_000, None, None, 1024),
        # R-GAT on IGBH-full, ~8M (order of magnitude only). v4.0 on ("gnn", "rgat" from v5.0).
        # FLOPs: ~0.53G multiply-adds a seed node (fan-out 15-10-5: ~916 sampled nodes' 1,024
        # features projected to 512, then two 512 x 512 layers).
        "gnn": BenchmarkSpec("gnn", 8_000_000, None, 8.39e7, 16384, flops_per_sample=3.2e9),
        # MiniGo, ~2.3M; logs no samples/s.
        "minigo": BenchmarkSpec("cnn", 2_300_000, None, None, 1),
    }
)

# Results-folder names that are another name of a benchmark above: v5.0 renamed two, and
# v0.5 named folders by task. A folder keeps its name in job ids; lineage and model type use
# the benchmark's. "ssd" is SSD-ResNet34 before v2.0 (see _benchmark_key).
BENCHMARK_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "retinanet": "ssd",
        "rgat": "gnn",
        "image_classification": "resnet",
        "object_detection": "maskrcnn",
        "single_stage_detector": "ssd_resnet34",
        "rnn_translator": "gnmt",
        "translation": "transformer",
        "recommendation": "ncf",
        "reinforcement": "minigo",
    }
)

# Publication dates of the rounds: the day MLCommons published each round's results (its press
# release and the training_results_<round> repository), 00:00 UTC. Rounds without a date here
# or in ``--round-date`` are placed after the last dated round, in version order, a month apart
# (ROUND_GAP); an undated round older than that cannot be placed and its rows are dropped.
ROUND_DATES: Mapping[str, datetime] = MappingProxyType(
    {
        "v0.5": datetime(2018, 12, 12, tzinfo=UTC),
        "v0.6": datetime(2019, 7, 10, tzinfo=UTC),
        "v0.7": datetime(2020, 7, 29, tzinfo=UTC),
        "v1.0": datetime(2021, 6, 30, tzinfo=UTC),
        "v1.1": datetime(2021, 12, 1, tzinfo=UTC),
        "v2.0": datetime(2022, 6, 29, tzinfo=UTC),
        "v2.1": datetime(2022, 11, 9, tzinfo=UTC),
        "v3.0": datetime(2023, 6, 27, tzinfo=UTC),
        "v3.1": datetime(2023, 11, 8, tzinfo=UTC),
        "v4.0": datetime(2024, 6, 12, tzinfo=UTC),
        "v4.1": datetime(2024, 11, 13, tzinfo=UTC),
        "v5.0": datetime(2025, 6, 4, tzinfo=UTC),
        "v5.1": datetime(2025, 11, 12, tzinfo=UTC),
    }
)
ROUND_GAP = timedelta(days=30)

# The README's rule: a logged throughput is trusted when throughput x time to train is within
# this factor of the benchmark's samples to train; outside it is per-device/per-node logging.
WORK_RATIO_WINDOW = (0.5, 2.0)
LARGE_BATCH_FACTOR = 4
FP8_BENCHMARKS = frozenset(name for name, spec in BENCHMARKS.items() if spec.fp8)

_REQUIRED_COLUMNS = (
    "round",
    "submitter",
    "system",
    "benchmark",
    "division",
    "accelerator_type",
    "accelerators_count",
    "framework",
    "global_batch_size",
    "time_to_train_minutes",
    "tracked_throughput_median",
    "duplicate_of",
)

# Framework words in the `framework` column, in the order they are looked for.
_FRAMEWORK_WORDS: tuple[tuple[str, str], ...] = (
    ("pytorch", "pytorch"),
    ("nemo", "pytorch"),
    ("deepspeed", "pytorch"),
    ("composer", "pytorch"),
    ("dgl", "pytorch"),
    ("mxnet", "mxnet"),
    ("hugectr", "hugectr"),
    ("tensorflow", "tensorflow"),
    ("maxtext", "jax"),
    ("pax", "jax"),
    ("jax", "jax"),
    ("paddle", "paddle"),
    ("popart", "popart"),
    ("tinygrad", "tinygrad"),
)
# NVIDIA's containers list several frameworks; its closed-division code for these benchmarks
# used this one (the rest are PyTorch).
_NVIDIA_STACK = {
    "resnet": "mxnet",
    "unet3d": "mxnet",
    "minigo": "tensorflow",
    "dlrm": "hugectr",
    "dlrm_dcnv2": "hugectr",
}
# HISTORY_SCHEMA has pytorch|jax|tensorflow only: the other stacks are eager CUDA (or IPU)
# runtimes closest to PyTorch, and the hardware type, not this feature, carries the speed.
_FRAMEWORK_ENUM = {
    "pytorch": "pytorch",
    "tensorflow": "tensorflow",
    "jax": "jax",
    "mxnet": "pytorch",
    "hugectr": "pytorch",
    "paddle": "pytorch",
    "popart": "pytorch",
    "tinygrad": "pytorch",
}

DROP_REASONS = (
    "open_division",
    "duplicate",
    "not_in_catalog",
    "unmapped_benchmark",
    "no_samples_measure",
    "no_accelerator_count",
    "no_batch_size",
    "large_batch_no_tracked",
    "no_throughput",
    "unknown_round",
)


def _first_batch(value: Any) -> float:
    """The first of a ``|``-joined batch list, as a number (NaN when missing or unparsable)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.nan
    try:
        return float(str(value).split("|")[0].strip())
    except ValueError:
        return math.nan


def _framework(text: Any, benchmark: str, hardware: str) -> str:
    """The framework enum value for a result's free-text ``framework`` column."""
    lowered = str(text).lower() if isinstance(text, str) else ""
    named = [name for word, name in _FRAMEWORK_WORDS if word in lowered]
    stack = _NVIDIA_STACK.get(benchmark, "pytorch")
    if not named:
        chosen = "jax" if hardware.startswith("TPU") else stack
    elif stack in named:
        chosen = stack
    else:
        chosen = named[0]
    return _FRAMEWORK_ENUM[chosen]


def _precision(spec: BenchmarkSpec, hardware: str, catalog: Catalog) -> str:
    accelerator = catalog[hardware]
    if not accelerator.bf16_support:
        return "fp16"
    if spec.fp8 and accelerator.fp8_support:
        return "fp8"  # a guess: Transformer Engine / Habana fp8 were the LLM norm from 2023
    return "bf16"


def _throughput(
    row: Mapping[str, Any], spec: BenchmarkSpec, batch: float
) -> tuple[float | None, str]:
    """Whole-system samples/s of a result and its source, or (None, drop reason)."""
    minutes = row["time_to_train_minutes"]
    seconds = minutes * 60.0 if pd.notna(minutes) and minutes > 0 else math.nan
    assert spec.samples_to_train is not None
    large_batch = batch >= LARGE_BATCH_FACTOR * spec.reference_batch
    logged = row["tracked_throughput_median"]
    if pd.notna(logged) and logged > 0 and not math.isnan(seconds):
        system = float(logged)
        if spec.logged_unit == "device":
            system *= row["accelerators_count"]
        elif spec.logged_unit == "token":
            system /= spec.seq_len or 1
        ratio = system * seconds / spec.samples_to_train
        low, high = WORK_RATIO_WINDOW
        # Above the window a large-batch run really did train on more samples: the logged
        # step rate is right and time to train is the wrong denominator.
        if low <= ratio <= high or (ratio > high and large_batch):
            return system, "tracked"
    if large_batch:
        return None, "large_batch_no_tracked"
    if math.isnan(seconds):
        return None, "no_throughput"
    return spec.samples_to_train / seconds, "time_to_train"


def _read_results(csv_path: Path) -> pd.DataFrame:
    frame = read_table(
        csv_path,
        _REQUIRED_COLUMNS,
        MlperfImportError,
        "the results table",
        dtype={"global_batch_size": "string"},
    )
    for column in ("accelerators_count", "time_to_train_minutes", "tracked_throughput_median"):
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = (values.isna() & frame[column].notna()) | values.abs().eq(math.inf)
        what = "a finite number"
        if column == "accelerators_count":  # (a count: 8.5 would be read as 8)
            bad |= values.notna() & values.mod(1).ne(0)
            what = "a whole number"
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            cell = frame[column].iloc[i]
            cell = cell.item() if isinstance(cell, np.generic) else cell  # inf, not np.float64(inf)
            raise MlperfImportError(
                f"{csv_path} row {i}, column {column!r}: {cell!r} is not {what}"
            )
        frame[column] = values
    return frame


_ROUND_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")
_SPEC_FIELDS = {
    "model_family": str,
    "param_count": int,
    "seq_len": int,
    "samples_to_train": float,
    "reference_batch": int,
    "logged_unit": str,
    "fp8": bool,
    "flops_per_sample": float,
}
_REQUIRED_SPEC_FIELDS = ("model_family", "param_count", "reference_batch")


def _round_version(name: str) -> tuple[int, ...] | None:
    """``"v5.1"`` -> ``(5, 1)``; None when the name has no version number.

    >>> _round_version("v5.1"), _round_version("v10.0"), _round_version("spring")
    ((5, 1), (10, 0), None)
    """
    match = _ROUND_VERSION.fullmatch(name.strip().lower())
    if match is None:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


def parse_round_dates(values: list[str] | tuple[str, ...]) -> dict[str, datetime]:
    """``["vX.Y=YYYY-MM-DD", ...]`` (``--round-date``) as round -> 00:00 UTC of that day.

    Raises
    ------
    MlperfImportError
        When a value is not ``round=date`` with an ISO date.

    Examples
    --------
    >>> parse_round_dates(["v5.2=2026-06-03"])["v5.2"].isoformat()
    '2026-06-03T00:00:00+00:00'
    >>> parse_round_dates(["v5.2:2026"])
    Traceback (most recent call last):
    ...
    leap_stream.data.importers.mlperf.MlperfImportError: --round-date 'v5.2:2026': expected ...
    """
    dates: dict[str, datetime] = {}
    for value in values:
        name, sep, day = value.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            parsed = datetime.strptime(day.strip(), "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            raise MlperfImportError(
                f"--round-date {value!r}: expected ROUND=YYYY-MM-DD, e.g. v5.2=2026-06-03"
            ) from None
        dates[name.strip()] = parsed
    return dates


def load_benchmarks(path: str | Path) -> dict[str, BenchmarkSpec]:
    """Benchmark specs from a TOML file (``--benchmarks``): one table per benchmark.

    The keys are :class:`BenchmarkSpec`'s fields; ``model_family``, ``param_count`` and
    ``reference_batch`` are required, the others default as in the built-in table (``seq_len``
    and ``samples_to_train`` absent means None). A benchmark of the built-in table is
    replaced whole.

    Raises
    ------
    MlperfImportError
        Naming the file and the key when the file cannot be read or a value is wrong.

    Examples
    --------
    >>> import tempfile
    >>> text = '[my_llm]\\nmodel_family = "dense_llm"\\nparam_count = 7_000_000_000\\n'
    >>> text += 'seq_len = 4096\\nsamples_to_train = 1.5e6\\nreference_batch = 512\\n'
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     Path(tmp, "b.toml").write_text(text)
    ...     load_benchmarks(Path(tmp, "b.toml"))["my_llm"].param_count
    126
    7000000000
    """
    from leap_stream.data.fleet.zoo import FAMILIES

    path = Path(path)
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MlperfImportError(f"{path}: cannot read the benchmarks file ({exc})") from None
    families = sorted(spec.name for spec in FAMILIES)
    specs: dict[str, BenchmarkSpec] = {}
    for name, table in document.items():
        where = f"{path} [{name}]"
        if not isinstance(table, dict):
            raise MlperfImportError(f"{where}: expected a table of BenchmarkSpec fields")
        unknown = sorted(set(table) - set(_SPEC_FIELDS))
        if unknown:
            raise MlperfImportError(
                f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(_SPEC_FIELDS)}"
            )
        for key in _REQUIRED_SPEC_FIELDS:
            if key not in table:
                raise MlperfImportError(f"{where}, key {key!r}: missing (required)")
        for key, value in table.items():
            kind = _SPEC_FIELDS[key]
            ok = (
                isinstance(value, bool)
                if kind is bool
                else isinstance(value, kind) and not isinstance(value, bool)
            )
            if kind is float:
                ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok:
                raise MlperfImportError(f"{where}, key {key!r}: {value!r} is not a {kind.__name__}")
            if kind in (int, float) and not 0 < value < math.inf:
                raise MlperfImportError(
                    f"{where}, key {key!r}: {value!r} must be positive and finite"
                )
        if table["model_family"] not in families:
            raise MlperfImportError(
                f"{where}, key 'model_family': {table['model_family']!r} is not one of "
                f"{', '.join(families)}"
            )
        unit = table.get("logged_unit", "system")
        if unit not in ("system", "device", "token"):
            raise MlperfImportError(
                f"{where}, key 'logged_unit': {unit!r} is not one of system, device, token"
            )
        if unit == "token" and "seq_len" not in table:
            raise MlperfImportError(f"{where}, key 'seq_len': required when logged_unit is 'token'")
        specs[name] = BenchmarkSpec(
            model_family=table["model_family"],
            param_count=table["param_count"],
            seq_len=table.get("seq_len"),
            samples_to_train=(
                float(table["samples_to_train"]) if "samples_to_train" in table else None
            ),
            reference_batch=table["reference_batch"],
            logged_unit=unit,
            fp8=table.get("fp8", False),
            flops_per_sample=(
                float(table["flops_per_sample"]) if "flops_per_sample" in table else None
            ),
        )
    return specs


def _benchmark_key(folder: str, round_: str, specs: Mapping[str, BenchmarkSpec]) -> str:
    """The benchmark a results folder holds: itself, an alias's target, or SSD-ResNet34.

    >>> _benchmark_key("ssd", "v1.1", BENCHMARKS), _benchmark_key("ssd", "v2.0", BENCHMARKS)
    ('ssd_resnet34', 'ssd')
    >>> _benchmark_key("rgat", "v5.0", BENCHMARKS)
    'gnn'
    """
    if folder in specs and folder not in BENCHMARKS:
        return folder  # given by --benchmarks: taken as it is
    if folder == "ssd":
        version = _round_version(round_)
        return "ssd_resnet34" if version is not None and version < (2, 0) else "ssd"
    return BENCHMARK_ALIASES.get(folder, folder)


def _place_rounds(
    rounds: set[str], dates: Mapping[str, datetime]
) -> tuple[dict[str, datetime], dict[str, datetime]]:
    """Dates of ``rounds``: (every placeable round's, the undated ones placed after the last).

    An undated round with a version above every dated round's goes ROUND_GAP after the one
    before it in version order; any other undated round gets no date.

    >>> dates = {"v5.1": datetime(2025, 11, 12, tzinfo=UTC)}
    >>> every, placed = _place_rounds({"v5.1", "v6.0", "v5.2", "v4.9", "x"}, dates)
    >>> sorted((r, d.date().isoformat()) for r, d in placed.items())
    [('v5.2', '2025-12-12'), ('v6.0', '2026-01-11')]
    >>> sorted(every)
    ['v5.1', 'v5.2', 'v6.0']
    """
    every = {r: dates[r] for r in rounds if r in dates}
    dated = [(v, d) for r, d in dates.items() if (v := _round_version(r)) is not None]
    if not dated:
        return every, {}
    last_version, last_date = max(dated, key=lambda vd: (vd[0], vd[1]))
    later = sorted(
        (v, r)
        for r in rounds - set(dates)
        if (v := _round_version(r)) is not None and v > last_version
    )
    placed = {r: last_date + (k + 1) * ROUND_GAP for k, (_, r) in enumerate(later)}
    return {**every, **placed}, placed


def mlperf_events(
    csv_path: str | Path,
    catalog: Catalog | None = None,
    round_dates: Mapping[str, datetime] | None = None,
    benchmarks: Mapping[str, BenchmarkSpec] | None = None,
) -> tuple[list[tuple[str, dict[str, Any]]], ImportStats]:
    """The history events of an MLPerf results table, in event-time order, and the stats.

    Parameters
    ----------
    csv_path
        A table with the columns of ``mlperf_training.csv`` (realdata README).
    catalog
        Hardware catalog; results on types it lacks are dropped. Default: the packaged one.
    round_dates
        Publication dates that add to or override :data:`ROUND_DATES` (``--round-date``).
    benchmarks
        Specs that add to or replace :data:`BENCHMARKS` (``--benchmarks``, see
        :func:`load_benchmarks`).

    Returns
    -------
    events, stats
        ``(event_type, event dict)`` pairs as :func:`leap_stream.data.history.events_to_table`
        takes them, and an :class:`ImportStats`.

    Raises
    ------
    MlperfImportError
        When the file cannot be read, lacks a column or has a non-numeric number. Unknown
        benchmarks, hardware and rounds are never fatal: they are counted in the stats.

    Examples
    --------
    >>> import tempfile
    >>> row = {"round": "v4.0", "submitter": "NVIDIA", "system": "dgxh100", "benchmark": "bert",
    ...     "division": "closed", "accelerator_type": "H100-SXM", "accelerators_count": 8,
    ...     "framework": "PyTorch NVIDIA Release 24.04", "global_batch_size": "448",
    ...     "time_to_train_minutes": 5.0, "tracked_throughput_median": 8000.0,
    ...     "duplicate_of": None}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     pd.DataFrame([row]).to_csv(f"{tmp}/r.csv", index=False)
    ...     events, stats = mlperf_events(f"{tmp}/r.csv")
    >>> [(kind, e["lineage_id"], e.get("throughput")) for kind, e in events]
    [('submitted', 'mlperf-bert', None), ('completed', 'mlperf-bert', 8000.0)]
    """
    csv_path = Path(csv_path)
    catalog = catalog if catalog is not None else default_catalog()
    specs = {**BENCHMARKS, **(benchmarks or {})}
    known_dates = {**ROUND_DATES, **(round_dates or {})}
    frame = _read_results(csv_path)
    rounds = {str(r) for r in frame["round"]}
    dates, placed = _place_rounds(rounds, known_dates)
    drops: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    unknown: dict[str, Counter[str]] = {"benchmark": Counter(), "hardware": Counter()}
    kept: list[dict[str, Any]] = []
    for row in frame.to_dict("records"):
        reason, attempt = _attempt(row, catalog, specs)
        if reason == "unmapped_benchmark":
            unknown["benchmark"][str(row["benchmark"])] += 1
        elif reason == "not_in_catalog":
            unknown["hardware"][str(row["accelerator_type"])] += 1
        if reason is None and attempt["round"] not in dates:
            reason = "unknown_round"
        if reason is not None:
            drops[reason] += 1
            continue
        sources[attempt["source"]] += 1
        kept.append(attempt)

    # rounds dated the same day (--round-date) follow one another
    kept.sort(key=lambda a: (dates[a["round"]], a["round"], *a["order"]))
    events: list[tuple[str, dict[str, Any]]] = []
    index_on_day: Counter[datetime] = Counter()
    for attempt in kept:
        day = dates[attempt["round"]]
        n = index_on_day[day]
        index_on_day[day] += 1
        submitted_at = day + n * ATTEMPT_SPACING
        events += attempt_events(attempt, submitted_at, COMPLETION_DELAY)
    stats = ImportStats(
        rows_read=len(frame),
        rows_kept=len(kept),
        dropped={reason: drops[reason] for reason in DROP_REASONS},
        lineages=len({a["lineage_id"] for a in kept}),
        attempts=len(kept),
        hardware_types=tuple(sorted({a["completed"]["hardware_type"] for a in kept})),
        throughput_sources=dict(sorted(sources.items())),
        unknown_benchmarks=dict(sorted(unknown["benchmark"].items())),
        unknown_hardware=dict(sorted(unknown["hardware"].items())),
        unknown_rounds=dict(
            sorted(Counter(r for r in map(str, frame["round"]) if r not in known_dates).items())
        ),
        placed_rounds={r: d.date().isoformat() for r, d in sorted(placed.items())},
    )
    return events, stats


def _attempt(
    row: Mapping[str, Any],
    catalog: Catalog,
    specs: Mapping[str, BenchmarkSpec],
) -> tuple[str | None, dict[str, Any]]:
    """One result as an attempt, or the reason it is dropped (docs/real-data.md, in order)."""
    if str(row["division"]).strip().lower() != "closed":
        return "open_division", {}
    if pd.notna(row["duplicate_of"]) and str(row["duplicate_of"]).strip():
        return "duplicate", {}
    hardware = str(row["accelerator_type"])
    if hardware not in catalog:
        return "not_in_catalog", {}
    folder, round_ = str(row["benchmark"]), str(row["round"])
    benchmark = _benchmark_key(folder, round_, specs)
    spec = specs.get(benchmark)
    if spec is None:
        return "unmapped_benchmark", {}
    if spec.samples_to_train is None:
        return "no_samples_measure", {}
    count = row["accelerators_count"]
    if pd.isna(count) or count <= 0:
        return "no_accelerator_count", {}
    batch = _first_batch(row["global_batch_size"])
    if math.isnan(batch) or batch <= 0:
        return "no_batch_size", {}
    throughput, source = _throughput(row, spec, batch)
    if throughput is None:
        return source, {}
    minutes = row["time_to_train_minutes"]
    samples = throughput * minutes * 60.0 if pd.notna(minutes) else spec.samples_to_train
    submitter, system = str(row["submitter"]), str(row["system"])
    return None, {
        "round": round_,
        "source": source,
        "order": (submitter.casefold(), system.casefold(), folder),
        "job_id": f"mlperf/{round_}/{submitter}/{system}/{folder}",
        "lineage_id": f"mlperf-{benchmark}",
        "submitted": {
            "model_type": benchmark,
            "model_family": spec.model_family,
            "framework": _framework(row["framework"], benchmark, hardware),
            "param_count": spec.param_count,
            "global_batch_size": int(batch),
            "seq_len": spec.seq_len,
            "precision": _precision(spec, hardware, catalog),
            "num_devices": int(count),
            "tensor_parallel": 1,
            "pipeline_parallel": 1,
            "flops_per_sample": spec.flops_per_sample,
            "requested_hardware": hardware,
            "candidate_hardware": None,
        },
        "completed": succeeded_on(hardware, int(count), throughput, max(1, round(samples / batch))),
    }


def import_mlperf(
    csv_path: Path,
    out_dir: Path,
    catalog: Catalog | None = None,
    round_dates: Mapping[str, datetime] | None = None,
    benchmarks: Mapping[str, BenchmarkSpec] | None = None,
) -> ImportStats:
    """Write ``out_dir/history.parquet`` from an MLPerf Training results table.

    There is no oracle: real results have no counterfactual truth.

    Parameters
    ----------
    csv_path
        ``mlperf_training.csv`` or a table with its columns.
    out_dir
        Created if missing; ``history.parquet`` is replaced.
    catalog
        Hardware catalog (default: the packaged one).
    round_dates, benchmarks
        As :func:`mlperf_events`.

    Returns
    -------
    ImportStats

    Raises
    ------
    MlperfImportError
        As :func:`mlperf_events`.

    Examples
    --------
    >>> import tempfile
    >>> rows = [{"round": "v3.1", "submitter": s, "system": "sys", "benchmark": "resnet",
    ...     "division": "closed", "accelerator_type": t, "accelerators_count": 8,
    ...     "framework": "MXNet", "global_batch_size": "3264", "time_to_train_minutes": 20.0,
    ...     "tracked_throughput_median": None, "duplicate_of": None}
    ...     for s, t in [("A", "H100-SXM"), ("B", "Gaudi2"), ("C", "Nowhere-9000")]]
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     pd.DataFrame(rows).to_csv(f"{tmp}/r.csv", index=False)
    ...     stats = import_mlperf(Path(tmp, "r.csv"), Path(tmp, "out"))
    ...     history = pd.read_parquet(Path(tmp, "out", "history.parquet"))
    >>> stats.attempts, stats.dropped["not_in_catalog"], stats.hardware_types
    (2, 1, ('Gaudi2', 'H100-SXM'))
    >>> round(history["throughput"].dropna().iloc[0])  # 45.5M images / 1200 s
    37917
    """
    events, stats = mlperf_events(csv_path, catalog, round_dates, benchmarks)
    write_events(events, out_dir)
    return stats


# --------------------------------------------------------------------------------------------
# The naive cross-type predictor (realdata README, "Reference figures")


def _results_frame(history: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """One row per succeeded attempt: job_id, model_type, hardware_type, num_devices, throughput."""
    frame = history.to_pandas() if isinstance(history, pa.Table) else history
    submitted = frame.loc[frame["event_type"] == "submitted", ["job_id", "model_type"]]
    completed = frame.loc[
        (frame["event_type"] == "completed") & (frame["status"] == "succeeded"),
        ["job_id", "hardware_type", "num_devices", "throughput"],
    ]
    return completed.merge(submitted, on="job_id", how="inner")


def naive_ratio_predictions(history: pd.DataFrame | pa.Table, num_devices: int = 8) -> pd.DataFrame:
    """Predict each result on ``num_devices`` accelerators from every other hardware type.

    Cells are the median throughput of a (benchmark, type) among those results. For a result
    of benchmark ``b`` on type ``t`` and each other type ``s`` that measured ``b``, the
    prediction is ``cell(b, s) x median over b' of cell(b', t) / cell(b', s)``, over the
    benchmarks ``b' != b`` measured on both types (pairs sharing none are skipped). The
    target's own cell never enters its prediction. :func:`naive_ratio_summary` picks one
    prediction per result.

    Parameters
    ----------
    history
        A history table or DataFrame (``HISTORY_SCHEMA`` columns; ``model_type`` is read from
        submitted rows, the rest from succeeded completed rows).
    num_devices
        Only results on exactly this many accelerators are used, as reference and as target.

    Returns
    -------
    pandas.DataFrame
        One row per (result, reference type): job_id, model_type, hardware_type,
        reference_hardware, shared_benchmarks, throughput, predicted, ape (absolute
        percentage error as a fraction); ordered by job then reference type.

    Examples
    --------
    Three benchmarks on two types; B runs x and y at 2x A, so z on B is predicted at 2x its
    speed on A, and z on A at half its speed on B:

    >>> rows = []
    >>> for i, (model, hw, thr) in enumerate([("x", "A", 10.0), ("x", "B", 20.0),
    ...         ("y", "A", 5.0), ("y", "B", 10.0), ("z", "A", 7.0), ("z", "B", 12.0)]):
    ...     rows.append({"event_type": "submitted", "job_id": f"j{i}", "model_type": model,
    ...         "hardware_type": None, "num_devices": 8, "status": None, "throughput": None})
    ...     rows.append({"event_type": "completed", "job_id": f"j{i}", "model_type": None,
    ...         "hardware_type": hw, "num_devices": 8, "status": "succeeded", "throughput": thr})
    >>> preds = naive_ratio_predictions(pd.DataFrame(rows))
    >>> preds.loc[preds.model_type == "z", ["hardware_type", "predicted"]].to_dict("records")
    [{'hardware_type': 'A', 'predicted': 6.0}, {'hardware_type': 'B', 'predicted': 14.0}]
    """
    results = _results_frame(history)
    results = results[results["num_devices"] == num_devices]
    cells = results.groupby(["model_type", "hardware_type"])["throughput"].median()
    table = cells.unstack("hardware_type")  # benchmark x type, NaN where not measured
    ratios: dict[tuple[str, str, str], tuple[float, int]] = {}
    rows: list[dict[str, Any]] = []
    for job_id, model, target, actual in results[
        ["job_id", "model_type", "hardware_type", "throughput"]
    ].itertuples(index=False):
        for reference in table.columns:
            measured = table.at[model, reference]
            if reference == target or pd.isna(measured):
                continue
            key = (model, target, reference)
            if key not in ratios:
                other = table.drop(index=model)[[target, reference]].dropna()
                ratio = float(np.median(other[target] / other[reference])) if len(other) else 0.0
                ratios[key] = (ratio, len(other))
            ratio, shared = ratios[key]
            if shared == 0:
                continue
            predicted = float(measured) * ratio
            rows.append(
                {
                    "job_id": job_id,
                    "model_type": model,
                    "hardware_type": target,
                    "reference_hardware": reference,
                    "shared_benchmarks": shared,
                    "throughput": actual,
                    "predicted": predicted,
                    "ape": abs(predicted - actual) / actual,
                }
            )
    columns = [
        "job_id",
        "model_type",
        "hardware_type",
        "reference_hardware",
        "shared_benchmarks",
        "throughput",
        "predicted",
        "ape",
    ]
    return pd.DataFrame(rows, columns=columns)


def naive_ratio_summary(
    predictions: pd.DataFrame,
    reference: Literal["most_shared", "median", "all"] = "most_shared",
    tolerance: float = 0.2,
) -> dict[str, float]:
    """MAPE and the share within ``±tolerance`` of :func:`naive_ratio_predictions` output.

    Parameters
    ----------
    predictions
        The output of :func:`naive_ratio_predictions`.
    reference
        Which prediction a result gets: ``"most_shared"`` the one from the reference type
        sharing the most other benchmarks with its type (ties: first type by name);
        ``"median"`` the median over reference types; ``"all"`` every (result, reference)
        pair counts once.
    tolerance
        Relative error band for ``within``.

    Returns
    -------
    dict
        ``{"n": predictions scored, "mape": mean APE, "within": share with APE <= tolerance}``
        (fractions, not percent; NaN when nothing was scored).

    Examples
    --------
    >>> frame = pd.DataFrame({"job_id": ["j1", "j1", "j2"], "reference_hardware": ["A", "B", "A"],
    ...     "shared_benchmarks": [1, 2, 1], "throughput": [10.0, 10.0, 10.0],
    ...     "predicted": [11.0, 13.0, 7.0], "ape": [0.1, 0.3, 0.3]})
    >>> naive_ratio_summary(frame), naive_ratio_summary(frame, "median")
    ({'n': 2, 'mape': 0.3, 'within': 0.0}, {'n': 2, 'mape': 0.25, 'within': 0.5})
    """
    if reference not in ("most_shared", "median", "all"):
        raise ValueError(f"reference must be most_shared|median|all, got {reference!r}")
    if predictions.empty:
        return {"n": 0, "mape": math.nan, "within": math.nan}
    if reference == "all":
        ape = predictions["ape"]
    elif reference == "median":
        per_job = predictions.groupby("job_id", sort=False).agg(
            throughput=("throughput", "first"), predicted=("predicted", "median")
        )
        ape = (per_job["predicted"] - per_job["throughput"]).abs() / per_job["throughput"]
    else:
        ordered = predictions.sort_values(
            ["job_id", "shared_benchmarks", "reference_hardware"],
            ascending=[True, False, True],
            kind="stable",
        )
        ape = ordered.drop_duplicates("job_id")["ape"]
    return {
        "n": int(ape.size),
        "mape": round(float(ape.mean()), 6),
        "within": round(float((ape <= tolerance).mean()), 6),
    }
