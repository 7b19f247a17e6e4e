"""Gavel's measured job-type throughputs (OSDI'20) as a leap-stream history.

:func:`import_gavel` turns ``gavel_throughputs.csv`` (one isolated throughput of a Gavel job
type on K80, P100 or V100; see ``shared/realdata/README.md`` beside the repository) into a
history: one attempt per kept measurement, a submitted and a completed event each. Each job
type (model + batch size, e.g. ``ResNet-50 (batch size 64)``) is one lineage, so a job type's
throughput on one GPU type is predicted from what it measured on the others. By default only
the physical cluster's consolidated single-GPU measurements are kept (``docs/real-data.md``).

>>> GAVEL_ACCELERATORS["V100"], GAVEL_MODELS["ResNet-50"].param_count
('V100-PCIe-32GB', 25557032)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
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
    "GAVEL_ACCELERATORS",
    "GAVEL_DROP_REASONS",
    "GAVEL_MODELS",
    "GAVEL_START",
    "GavelImportError",
    "GavelModel",
    "gavel_events",
    "import_gavel",
]


class GavelImportError(ValueError):
    """A Gavel throughput table that cannot be read or lacks a column.

    Examples
    --------
    >>> raise GavelImportError("g.csv: missing required column(s) 'model'")
    Traceback (most recent call last):
    ...
    leap_stream.data.importers.gavel.GavelImportError: g.csv: missing required column(s) 'model'
    """


@dataclass(frozen=True)
class GavelModel:
    """What leap-stream records about one Gavel model (``docs/real-data.md``).

    Attributes
    ----------
    model_family
        A family of the synthetic zoo (``leap_stream.data.fleet.zoo.FAMILIES``).
    param_count
        Model size; see ``docs/real-data.md`` for which ones are estimates.

    Examples
    --------
    >>> GAVEL_MODELS["Transformer"].model_family
    'dense_llm'
    """

    model_family: str
    param_count: int


# Gavel's physical cluster ran on Azure NC (K80, one GK210 die per GPU), NCv2 (P100 PCIe 16 GB)
# and NCv3 (V100 PCIe 16 GB) instances. The catalog has no V100 PCIe 16 GB: the 32 GB card has
# the same chip and clocks, only more memory (irrelevant to these small models).
GAVEL_ACCELERATORS: Mapping[str, str] = MappingProxyType(
    {"K80": "K80", "P100": "P100-PCIe-16GB", "V100": "V100-PCIe-32GB"}
)

# Sizes: ResNets from torchvision (ResNet-18 with the 10-class CIFAR head); the others are
# counted from Gavel's workload configurations and marked ~ in docs/real-data.md.
GAVEL_MODELS: Mapping[str, GavelModel] = MappingProxyType(
    {
        "ResNet-18": GavelModel("cnn", 11_173_962),
        "ResNet-50": GavelModel("cnn", 25_557_032),
        "Transformer": GavelModel("dense_llm", 50_000_000),
        "LM": GavelModel("dense_llm", 14_000_000),
        "Recommendation": GavelModel("recsys", 27_000_000),
        "A3C": GavelModel("cnn", 1_000_000),
        "CycleGAN": GavelModel("cnn", 28_000_000),
    }
)

# Gavel was presented at OSDI'20 (2020-11-04); measurements are placed from that day, 00:00 UTC.
GAVEL_START = datetime(2020, 11, 4, tzinfo=UTC)

GAVEL_DROP_REASONS = (
    "other_source",
    "other_placement",
    "other_gpu_count",
    "did_not_run",
    "no_samples_per_sec",
    "unknown_model",
    "not_in_catalog",
    "duplicate",
)

_REQUIRED_COLUMNS = (
    "source_file",
    "job_type",
    "model",
    "batch_size",
    "num_gpus",
    "accelerator",
    "placement",
    "samples_per_sec",
    "zero_or_missing",
)


def _read(csv_path: Path) -> pd.DataFrame:
    frame = read_table(csv_path, _REQUIRED_COLUMNS, GavelImportError, "the throughput table")
    for column in ("batch_size", "num_gpus", "samples_per_sec", "zero_or_missing"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def _selected(value: Any, allowed: Collection[Any] | None) -> bool:
    return allowed is None or value in allowed


def gavel_events(
    csv_path: str | Path,
    catalog: Catalog | None = None,
    sources: Collection[str] | None = ("physical_cluster",),
    placements: Collection[str] | None = ("consolidated",),
    num_gpus: Collection[int] | None = (1,),
) -> tuple[list[tuple[str, dict[str, Any]]], ImportStats]:
    """The history events of a Gavel throughput table, in event-time order, and the stats.

    Parameters
    ----------
    csv_path
        A table with the columns of ``gavel_throughputs.csv`` (realdata README).
    catalog
        Hardware catalog; measurements on types it lacks are counted (``not_in_catalog``) and
        dropped. Default: the packaged one.
    sources, placements, num_gpus
        Rows kept by ``source_file``, ``placement`` and ``num_gpus``; None keeps every value.

    Returns
    -------
    events, stats
        ``(event_type, event dict)`` pairs as :func:`leap_stream.data.history.events_to_table`
        takes them, and an :class:`~leap_stream.data.importers.attempts.ImportStats` whose
        ``dropped`` has every reason of :data:`GAVEL_DROP_REASONS`.

    Raises
    ------
    GavelImportError
        When the file cannot be read or lacks a column.

    Examples
    --------
    >>> import tempfile
    >>> rows = [{"source_file": "physical_cluster", "job_type": "LM (batch size 5)",
    ...     "model": "LM", "batch_size": 5, "num_gpus": 1, "accelerator": a,
    ...     "placement": "consolidated", "samples_per_sec": s, "zero_or_missing": 0}
    ...     for a, s in [("K80", 130.5), ("V100", 400.0), ("TPU", 9.0)]]
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     pd.DataFrame(rows).to_csv(f"{tmp}/g.csv", index=False)
    ...     events, stats = gavel_events(f"{tmp}/g.csv")
    >>> stats.attempts, stats.dropped["not_in_catalog"], events[0][1]["lineage_id"]
    (2, 1, 'gavel/LM/bs5')
    """
    catalog = catalog if catalog is not None else default_catalog()
    frame = _read(Path(csv_path))
    return measurement_events(
        frame.to_dict("records"),
        lambda row: _attempt(row, catalog, sources, placements, num_gpus),
        start=GAVEL_START,
        drop_reasons=GAVEL_DROP_REASONS,
    )


def _attempt(
    row: Mapping[str, Any],
    catalog: Catalog,
    sources: Collection[str] | None,
    placements: Collection[str] | None,
    num_gpus: Collection[int] | None,
) -> tuple[str | None, dict[str, Any]]:
    """One measurement as an attempt, or the reason it is dropped (in GAVEL_DROP_REASONS order)."""
    source, placement = str(row["source_file"]), str(row["placement"])
    if not _selected(source, sources):
        return "other_source", {}
    if not _selected(placement, placements):
        return "other_placement", {}
    gpus = row["num_gpus"]
    if pd.isna(gpus) or gpus <= 0 or not _selected(int(gpus), num_gpus):
        return "other_gpu_count", {}
    if pd.notna(row["zero_or_missing"]) and row["zero_or_missing"] != 0:
        return "did_not_run", {}
    throughput, batch = row["samples_per_sec"], row["batch_size"]
    if pd.isna(throughput) or throughput <= 0 or pd.isna(batch) or batch <= 0:
        return "no_samples_per_sec", {}
    model_name = str(row["model"])
    model = GAVEL_MODELS.get(model_name)
    if model is None:
        return "unknown_model", {}
    hardware = GAVEL_ACCELERATORS.get(str(row["accelerator"]), str(row["accelerator"]))
    if hardware not in catalog:
        return "not_in_catalog", {}
    gpus, batch = int(gpus), int(batch)
    lineage = f"gavel/{model_name}/bs{batch}"
    return None, {
        "job_id": f"{lineage}/{gpus}x{hardware}/{source}/{placement}",
        "lineage_id": lineage,
        "submitted": {
            "model_type": model_name,
            "model_family": model.model_family,
            "framework": "pytorch",
            "param_count": model.param_count,
            # Gavel's batch size is per worker; samples_per_sec = steps/s x that batch.
            "global_batch_size": batch * gpus,
            "seq_len": None,
            "precision": "fp32",
            "num_devices": gpus,
            "tensor_parallel": 1,
            "pipeline_parallel": 1,
            "requested_hardware": hardware,
            "candidate_hardware": None,
        },
        "completed": succeeded_on(hardware, gpus, throughput),
    }


def import_gavel(
    csv_path: Path,
    out_dir: Path,
    catalog: Catalog | None = None,
    sources: Collection[str] | None = ("physical_cluster",),
    placements: Collection[str] | None = ("consolidated",),
    num_gpus: Collection[int] | None = (1,),
) -> ImportStats:
    """Write ``out_dir/history.parquet`` from a Gavel throughput table (no oracle).

    Parameters
    ----------
    csv_path
        ``gavel_throughputs.csv`` or a table with its columns.
    out_dir
        Created if missing; ``history.parquet`` is replaced.
    catalog, sources, placements, num_gpus
        As :func:`gavel_events`.

    Returns
    -------
    ImportStats

    Raises
    ------
    GavelImportError
        As :func:`gavel_events`.

    Examples
    --------
    >>> import tempfile
    >>> rows = [{"source_file": "physical_cluster", "job_type": "ResNet-18 (batch size 16)",
    ...     "model": "ResNet-18", "batch_size": 16, "num_gpus": 1, "accelerator": a,
    ...     "placement": "consolidated", "samples_per_sec": s, "zero_or_missing": 0}
    ...     for a, s in [("K80", 78.5), ("P100", 596.4)]]
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     pd.DataFrame(rows).to_csv(f"{tmp}/g.csv", index=False)
    ...     stats = import_gavel(Path(tmp, "g.csv"), Path(tmp, "out"))
    ...     history = pd.read_parquet(Path(tmp, "out", "history.parquet"))
    >>> stats.hardware_types, len(history)
    (('K80', 'P100-PCIe-16GB'), 4)
    """
    events, stats = gavel_events(csv_path, catalog, sources, placements, num_gpus)
    write_events(events, out_dir)
    return stats
