"""NeuSight's measured training iterations (ASPLOS'25) as a leap-stream history.

:func:`import_neusight` turns ``neusight_latency.csv`` (one measured training or inference
iteration latency of a transformer on one of 12 GPUs; see ``shared/realdata/README.md`` beside
the repository) into a history: one attempt per training row, a submitted and a completed event
each, ``samples_per_sec`` (batch / iteration latency) as throughput. Each configuration (model,
sequence length, batch size, parallelism) is one lineage, so its throughput on one GPU is
predicted from what it measured on the others (``docs/real-data.md``).

>>> NEUSIGHT_MODELS["gpt2_large"].param_count, parallel_degrees("tp4")
(774030080, (4, 1, None))
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pandas as pd

from leap_stream.core.catalog import Catalog, default_catalog
from leap_stream.data.importers.attempts import (
    ImportStats,
    measurement_events,
    read_table,
    succeeded_on,
    write_events,
)

__all__ = [
    "NEUSIGHT_DROP_REASONS",
    "NEUSIGHT_MODELS",
    "NEUSIGHT_START",
    "NeusightImportError",
    "NeusightModel",
    "import_neusight",
    "neusight_events",
    "parallel_degrees",
]


class NeusightImportError(ValueError):
    """A NeuSight latency table that cannot be read or lacks a column.

    Examples
    --------
    >>> raise NeusightImportError("n.csv: missing required column(s) 'mode'")
    Traceback (most recent call last):
    ...
    leap_stream.data.importers.neusight.NeusightImportError: n.csv: missing required column(s) ...
    """


@dataclass(frozen=True)
class NeusightModel:
    """What leap-stream records about one NeuSight model (``docs/real-data.md``).

    Attributes
    ----------
    model_type
        A readable name for the ``model_type`` field (``GPT2-Large``).
    model_family
        A family of the synthetic zoo (``leap_stream.data.fleet.zoo.FAMILIES``).
    param_count
        Published model size (``switchxl4`` is an estimate).

    Examples
    --------
    >>> NEUSIGHT_MODELS["switchxl4"].model_family
    'moe'
    """

    model_type: str
    model_family: str
    param_count: int


NEUSIGHT_MODELS: Mapping[str, NeusightModel] = MappingProxyType(
    {
        "bert_large": NeusightModel("BERT-Large", "dense_llm", 340_000_000),
        "gpt2_large": NeusightModel("GPT2-Large", "dense_llm", 774_030_080),
        "gpt3_xl": NeusightModel("GPT3-XL", "dense_llm", 1_300_000_000),
        "gpt3_27": NeusightModel("GPT3-2.7B", "dense_llm", 2_700_000_000),
        "opt_13": NeusightModel("OPT-1.3B", "dense_llm", 1_300_000_000),
        # Switch Transformer with 4 experts at XL width: ~4B is an estimate, not a published size.
        "switchxl4": NeusightModel("SwitchXL4", "moe", 4_000_000_000),
    }
)

# NeuSight was presented at ASPLOS'25 (2025-03-30); measurements are placed from that day.
NEUSIGHT_START = datetime(2025, 3, 30, tzinfo=UTC)

NEUSIGHT_DROP_REASONS = (
    "not_train",
    "no_samples_per_sec",
    "unknown_model",
    "not_in_catalog",
    "unknown_parallelism",
    "duplicate",
)

_REQUIRED_COLUMNS = (
    "model",
    "mode",
    "seq_len",
    "batch_size",
    "parallelism",
    "device",
    "accelerator_type",
    "num_gpus",
    "samples_per_sec",
)
_PARALLELISM = re.compile(r"^(single|dp\d+|tp(\d+)|pp(\d+)(?:_(\d+))?)$")


def parallel_degrees(parallelism: str) -> tuple[int, int, int | None] | None:
    """``(tensor_parallel, pipeline_parallel, micro_batches)`` of a NeuSight parallelism label,
    None if unknown.

    ``single`` and ``dpN`` are (1, 1, None); ``tpN`` is (N, 1, None); ``ppN_M`` (M
    micro-batches) is (1, N, M), ``ppN`` (1, N, None).

    Examples
    --------
    >>> parallel_degrees("single"), parallel_degrees("dp4"), parallel_degrees("pp4_1")
    ((1, 1, None), (1, 1, None), (1, 4, 1))
    >>> parallel_degrees("zero3") is None
    True
    """
    match = _PARALLELISM.match(parallelism.strip().lower())
    if match is None:
        return None
    tensor, pipeline, micro_batches = match.group(2, 3, 4)
    return (
        int(tensor or 1),
        int(pipeline or 1),
        None if micro_batches is None else int(micro_batches),
    )


def _read(csv_path: Path) -> pd.DataFrame:
    frame = read_table(csv_path, _REQUIRED_COLUMNS, NeusightImportError, "the latency table")
    for column in ("seq_len", "batch_size", "num_gpus", "samples_per_sec"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def neusight_events(
    csv_path: str | Path, catalog: Catalog | None = None
) -> tuple[list[tuple[str, dict[str, Any]]], ImportStats]:
    """The history events of a NeuSight latency table, in event-time order, and the stats.

    Parameters
    ----------
    csv_path
        A table with the columns of ``neusight_latency.csv`` (realdata README).
    catalog
        Hardware catalog; rows on types it lacks are counted (``not_in_catalog``) and dropped.
        Default: the packaged one.

    Returns
    -------
    events, stats
        ``(event_type, event dict)`` pairs as :func:`leap_stream.data.history.events_to_table`
        takes them, and an :class:`~leap_stream.data.importers.attempts.ImportStats` whose
        ``dropped`` has every reason of :data:`NEUSIGHT_DROP_REASONS`.

    Raises
    ------
    NeusightImportError
        When the file cannot be read or lacks a column.

    Examples
    --------
    >>> import tempfile
    >>> rows = [{"model": m, "mode": mode, "seq_len": 1024, "batch_size": 4,
    ...     "parallelism": "tp4", "device": "d", "accelerator_type": "H100-SXM", "num_gpus": 4,
    ...     "samples_per_sec": 18.9} for m, mode in [("gpt2_large", "train"),
    ...     ("gpt2_large", "inf"), ("llama_7b", "train")]]
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     pd.DataFrame(rows).to_csv(f"{tmp}/n.csv", index=False)
    ...     events, stats = neusight_events(f"{tmp}/n.csv")
    >>> stats.attempts, stats.dropped["not_train"], stats.dropped["unknown_model"]
    (1, 1, 1)
    >>> events[0][1]["lineage_id"], events[0][1]["tensor_parallel"]
    ('neusight/gpt2_large/s1024/bs4/tp4', 4)
    """
    catalog = catalog if catalog is not None else default_catalog()
    frame = _read(Path(csv_path))
    return measurement_events(
        frame.to_dict("records"),
        lambda row: _attempt(row, catalog),
        start=NEUSIGHT_START,
        drop_reasons=NEUSIGHT_DROP_REASONS,
    )


def _attempt(row: Mapping[str, Any], catalog: Catalog) -> tuple[str | None, dict[str, Any]]:
    """One training row as an attempt, or the reason it is dropped (NEUSIGHT_DROP_REASONS order)."""
    if str(row["mode"]).strip().lower() != "train":
        return "not_train", {}
    throughput, batch, gpus = row["samples_per_sec"], row["batch_size"], row["num_gpus"]
    if any(pd.isna(v) or v <= 0 for v in (throughput, batch, gpus)):
        return "no_samples_per_sec", {}
    name = str(row["model"])
    model = NEUSIGHT_MODELS.get(name)
    if model is None:
        return "unknown_model", {}
    hardware = row["accelerator_type"]
    if pd.isna(hardware) or str(hardware) not in catalog:
        return "not_in_catalog", {}
    hardware = str(hardware)
    parallelism = str(row["parallelism"])
    degrees = parallel_degrees(parallelism)
    if degrees is None:
        return "unknown_parallelism", {}
    seq_len = int(row["seq_len"]) if pd.notna(row["seq_len"]) and row["seq_len"] > 0 else None
    batch, gpus = int(batch), int(gpus)
    lineage = f"neusight/{name}/s{seq_len}/bs{batch}/{parallelism}"
    return None, {
        "job_id": f"{lineage}/{gpus}x{hardware}",
        "lineage_id": lineage,
        "submitted": {
            "model_type": model.model_type,
            "model_family": model.model_family,
            "framework": "pytorch",
            "param_count": model.param_count,
            # NeuSight's batch is the whole iteration's: samples_per_sec = batch / latency.
            "global_batch_size": batch,
            "seq_len": seq_len,
            # Models built from HF configs in fp32, TF32 disabled (NeuSight's tracer).
            "precision": "fp32",
            "num_devices": gpus,
            "tensor_parallel": degrees[0],
            "pipeline_parallel": degrees[1],
            "micro_batches": degrees[2],
            "requested_hardware": hardware,
            "candidate_hardware": None,
        },
        "completed": succeeded_on(hardware, gpus, throughput),
    }


def import_neusight(csv_path: Path, out_dir: Path, catalog: Catalog | None = None) -> ImportStats:
    """Write ``out_dir/history.parquet`` from a NeuSight latency table (no oracle).

    Parameters
    ----------
    csv_path
        ``neusight_latency.csv`` or a table with its columns.
    out_dir
        Created if missing; ``history.parquet`` is replaced.
    catalog
        Hardware catalog (default: the packaged one).

    Returns
    -------
    ImportStats

    Raises
    ------
    NeusightImportError
        As :func:`neusight_events`.

    Examples
    --------
    >>> import tempfile
    >>> rows = [{"model": "bert_large", "mode": "train", "seq_len": 512, "batch_size": 8,
    ...     "parallelism": "single", "device": "d", "accelerator_type": t, "num_gpus": 1,
    ...     "samples_per_sec": s} for t, s in [("H100-SXM", 33.9), ("MI250", 20.5)]]
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     pd.DataFrame(rows).to_csv(f"{tmp}/n.csv", index=False)
    ...     stats = import_neusight(Path(tmp, "n.csv"), Path(tmp, "out"))
    ...     history = pd.read_parquet(Path(tmp, "out", "history.parquet"))
    >>> stats.hardware_types, len(history)
    (('H100-SXM', 'MI250'), 4)
    """
    events, stats = neusight_events(csv_path, catalog)
    write_events(events, out_dir)
    return stats
