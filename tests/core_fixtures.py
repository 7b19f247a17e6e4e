"""Fixtures for the functional core's tests: event builders and a tiny hand-made history.

Registered from ``tests/conftest.py`` through ``pytest_plugins``; the builders are plain
functions too, so the contract suite (``core_contract.py``) can use them without a fixture.

Fixtures
--------
hw_catalog
    Session-scoped packaged catalog (:func:`leap_stream.core.catalog.default_catalog`).
generated_fleet
    Session-scoped: ``generated_fleet(FleetConfig(...))`` generates that synthetic fleet (history
    and oracle) once for the session and returns its directory.
tiny_history
    Writes :data:`TINY_EVENTS` as ``history.parquet`` and :data:`TINY_ORACLE` as
    ``oracle.parquet`` into the test's ``tmp_path``; returns a :class:`TinyHistory`.

:func:`write_csv_unchecked` writes event pairs as a history CSV without validating them, to
make broken files.

Examples
--------
>>> job = submitted_event("j1", "l1", T0, candidates=["H100-SXM"])
>>> job["candidate_hardware"], job["num_devices"], job["event_time"].isoformat()
(['H100-SXM'], 8, '2025-06-02T00:00:00+00:00')
>>> completed_event("j1", "l1", T0, "H100-SXM", throughput=None, status="failed")["steps"]
1000
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from leap_stream.core.catalog import Catalog, default_catalog
from leap_stream.core.events import HISTORY_COLUMNS
from leap_stream.data.fleet import FleetConfig, generate_fleet
from leap_stream.data.history import events_to_table, write_history, write_oracle

__all__ = [
    "JOBS",
    "T0",
    "TINY_EVENTS",
    "TINY_ORACLE",
    "TinyHistory",
    "completed_event",
    "hours",
    "submitted_event",
    "write_csv_unchecked",
]

T0 = datetime(2025, 6, 2, tzinfo=UTC)

# Three JobSubmitted configurations far apart (family, framework, precision, size, parallelism,
# with and without a sequence length), for the model's tests.
JOBS: list[dict[str, Any]] = [
    {"model_type": "resnet-50", "model_family": "cnn", "framework": "pytorch",
     "precision": "bf16", "param_count": 25_000_000, "global_batch_size": 512, "seq_len": None,
     "num_devices": 8, "tensor_parallel": 1, "pipeline_parallel": 1},
    {"model_type": "llm-7b", "model_family": "dense_llm", "framework": "jax",
     "precision": "fp8", "param_count": 7_000_000_000, "global_batch_size": 1024,
     "seq_len": 4096, "num_devices": 64, "tensor_parallel": 4, "pipeline_parallel": 2},
    {"model_type": "bert-large", "model_family": "encoder", "framework": "tensorflow",
     "precision": "fp32", "param_count": 340_000_000, "global_batch_size": 256,
     "seq_len": 512, "num_devices": 1, "tensor_parallel": 1, "pipeline_parallel": 1},
]  # fmt: skip


def hours(h: float) -> datetime:
    """``h`` hours after :data:`T0`."""
    return T0 + timedelta(hours=h)


def submitted_event(
    job_id: str,
    lineage_id: str,
    when: datetime,
    *,
    candidates: Sequence[str] | None = None,
    requested: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """A JobSubmitted dict: a ResNet-50-sized CNN on 8 devices, pytorch at bf16 by default.

    Small enough (about 10 GB a device) to fit every type with bf16, so eligibility is decided
    by what a test overrides (framework, precision, candidates, time), not by memory.
    """
    event: dict[str, Any] = {
        "event_id": f"{job_id}/submitted",
        "event_time": when,
        "job_id": job_id,
        "lineage_id": lineage_id,
        "model_type": "resnet-50",
        "model_family": "cnn",
        "framework": "pytorch",
        "param_count": 25_000_000,
        "global_batch_size": 512,
        "seq_len": None,
        "precision": "bf16",
        "num_devices": 8,
        "tensor_parallel": 1,
        "pipeline_parallel": 1,
        "requested_hardware": requested,
        "candidate_hardware": None if candidates is None else list(candidates),
    }
    event.update(overrides)
    return event


def completed_event(
    job_id: str,
    lineage_id: str,
    when: datetime,
    hardware: str,
    *,
    throughput: float | None,
    status: str = "succeeded",
    steps: int = 1000,
    num_devices: int = 8,
) -> dict[str, Any]:
    """A JobCompleted dict."""
    return {
        "event_id": f"{job_id}/completed/{when.isoformat()}",
        "event_time": when,
        "job_id": job_id,
        "lineage_id": lineage_id,
        "hardware_type": hardware,
        "num_devices": num_devices,
        "status": status,
        "throughput": throughput,
        "steps": steps,
    }


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, list):
        return ";".join(value)
    return str(value)


def write_csv_unchecked(events: Sequence[tuple[str, dict[str, Any]]], path: Path) -> None:
    """Write ``(event_type, event)`` pairs as a history CSV without validating anything.

    Times as ISO-8601 UTC with milliseconds, candidate lists joined with ``;``, None as an
    empty cell, anything else as ``str(value)`` (so ``"fast"`` lands in a number column as is).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "h.csv"
    ...     write_csv_unchecked([("completed", completed_event("j1", "l1", T0, "K80",
    ...                                                        throughput="fast"))], path)
    ...     path.read_text().splitlines()[1]
    'completed,j1/completed/2025-06-02T00:00:00+00:00,2025-06-02T00:00:00.000Z,j1,l1,,,,,,,,8,,,,,K80,succeeded,fast,1000'
    """
    with open(path, "w", newline="") as fo:
        writer = csv.writer(fo)
        writer.writerow(HISTORY_COLUMNS)
        for kind, event in events:
            writer.writerow(
                [_csv_cell(kind if c == "event_type" else event.get(c)) for c in HISTORY_COLUMNS]
            )


# The tiny history (test_replay.py works its figures out by hand from these rows).
# Day 1 (2025-06-02): lineage L1 runs its one configuration on H100-SXM, then on MI300X, each
# time with a single candidate (so every policy's pick is forced); an orphan completion (j99,
# never submitted) must teach nothing.
# Day 2 (2025-06-03): L1 resubmits the same configuration with both types as candidates, asks
# for H100-SXM and runs there; L2 fails on H100-SXM; L3 asks for bf16 on a K80 (no bf16 on a
# K80: nothing eligible) and never completes.
TINY_EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("submitted", submitted_event("j1", "L1", hours(0), candidates=["H100-SXM"],
                                  requested="H100-SXM")),
    ("completed", completed_event("j1", "L1", hours(1), "H100-SXM", throughput=20_000.0)),
    ("submitted", submitted_event("j2", "L1", hours(2), candidates=["MI300X"],
                                  requested="MI300X")),
    ("completed", completed_event("j2", "L1", hours(3), "MI300X", throughput=30_000.0)),
    ("completed", completed_event("j99", "L9", hours(4), "H100-SXM", throughput=5_000.0,
                                  steps=10)),
    ("submitted", submitted_event("j3", "L1", hours(24), candidates=["H100-SXM", "MI300X"],
                                  requested="H100-SXM")),
    ("submitted", submitted_event("j4", "L2", hours(25), candidates=["H100-SXM"],
                                  requested="H100-SXM")),
    ("completed", completed_event("j3", "L1", hours(26), "H100-SXM", throughput=21_000.0)),
    ("completed", completed_event("j4", "L2", hours(27), "H100-SXM", throughput=None,
                                  status="failed", steps=10)),
    ("submitted", submitted_event("j5", "L3", hours(28), candidates=["K80"], requested="K80")),
]  # fmt: skip

# True throughput of each submitted job on its candidates, in submission order (null: the
# job cannot run there).
TINY_ORACLE = pd.DataFrame(
    [
        ("j1", "H100-SXM", 20_000.0),
        ("j2", "MI300X", 30_000.0),
        ("j3", "H100-SXM", 21_000.0),
        ("j3", "MI300X", 33_000.0),
        ("j4", "H100-SXM", 20_000.0),
        ("j5", "K80", None),
    ],
    columns=["job_id", "hardware_type", "throughput"],
)


@dataclass(frozen=True)
class TinyHistory:
    """Where the tiny history and its oracle were written."""

    history: Path
    oracle: Path
    catalog: Catalog


@pytest.fixture(scope="session")
def hw_catalog() -> Catalog:
    """The packaged hardware catalog."""
    return default_catalog()


@pytest.fixture(scope="session")
def generated_fleet(
    tmp_path_factory: pytest.TempPathFactory, hw_catalog: Catalog
) -> Callable[[FleetConfig], Path]:
    """Generate a synthetic fleet once per configuration for the session; return its directory."""
    made: dict[FleetConfig, Path] = {}

    def fleet(config: FleetConfig) -> Path:
        if config not in made:
            out = tmp_path_factory.mktemp(f"fleet-{config.days}d-seed{config.seed}")
            generate_fleet(config, out, hw_catalog, progress=False)
            made[config] = out
        return made[config]

    return fleet


@pytest.fixture
def tiny_history(tmp_path: Path, hw_catalog: Catalog) -> TinyHistory:
    """The tiny history and its oracle as Parquet files in ``tmp_path``."""
    history, oracle = tmp_path / "history.parquet", tmp_path / "oracle.parquet"
    write_history([events_to_table(TINY_EVENTS)], history)
    write_oracle([TINY_ORACLE], oracle)
    return TinyHistory(history, oracle, hw_catalog)
