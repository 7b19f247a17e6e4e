"""The Gavel importer: row selection, hardware mapping, drop counts, lineages, event order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from realdata_paths import REALDATA
from typer.testing import CliRunner

from leap_stream.cli import app
from leap_stream.data.history import read_history_batches
from leap_stream.data.importers.gavel import (
    GAVEL_DROP_REASONS,
    GavelImportError,
    gavel_events,
    import_gavel,
)

REAL_CSV = REALDATA / "gavel_throughputs.csv"


def _row(**overrides: Any) -> dict[str, Any]:
    """One measurement in the real file's columns."""
    row: dict[str, Any] = {
        "source_file": "physical_cluster",
        "job_type": "ResNet-18 (batch size 16)",
        "model": "ResNet-18",
        "batch_size": 16,
        "num_gpus": 1,
        "accelerator": "K80",
        "vendor": "NVIDIA",
        "placement": "consolidated",
        "throughput_steps_per_sec": 4.9,
        "samples_per_sec": 78.5,
        "zero_or_missing": 0,
        "repo_commit": "0" * 40,
    }
    row.update(overrides)
    return row


def _csv(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "gavel.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _mixed_rows() -> list[dict[str, Any]]:
    return [
        _row(),
        _row(accelerator="P100", samples_per_sec=596.4),
        _row(accelerator="V100", samples_per_sec=517.7),
        _row(source_file="simulation"),
        _row(placement="unconsolidated"),
        _row(num_gpus=2, samples_per_sec=140.1),
        _row(model="ResNet-50", batch_size=128, samples_per_sec=0.0, zero_or_missing=1),
        _row(model="A3C", job_type="A3C", batch_size=None, samples_per_sec=None),
        _row(model="GPT-9", job_type="GPT-9 (batch size 16)"),
        _row(accelerator="A40"),
        _row(samples_per_sec=80.0),  # same job as the first row
    ]


def test_default_selection_mapping_and_drop_counts(tmp_path: Path) -> None:
    events, stats = gavel_events(_csv(tmp_path, _mixed_rows()))
    assert stats.rows_read == 11 and stats.attempts == stats.rows_kept == 3
    assert set(stats.dropped) == set(GAVEL_DROP_REASONS)
    assert stats.dropped == {
        "other_source": 1,
        "other_placement": 1,
        "other_gpu_count": 1,
        "did_not_run": 1,
        "no_samples_per_sec": 1,
        "unknown_model": 1,
        "not_in_catalog": 1,
        "duplicate": 1,
    }
    assert stats.rows_read == stats.rows_kept + sum(stats.dropped.values())
    assert stats.hardware_types == ("K80", "P100-PCIe-16GB", "V100-PCIe-32GB")
    assert stats.lineages == 1
    completed = {e["hardware_type"]: e["throughput"] for k, e in events if k == "completed"}
    assert completed == {"K80": 78.5, "P100-PCIe-16GB": 596.4, "V100-PCIe-32GB": 517.7}
    submitted = [e for k, e in events if k == "submitted"]
    assert {e["lineage_id"] for e in submitted} == {"gavel/ResNet-18/bs16"}
    first = submitted[0]
    assert first["model_family"] == "cnn" and first["param_count"] == 11_173_962
    assert first["precision"] == "fp32" and first["framework"] == "pytorch"
    assert first["global_batch_size"] == 16 and first["num_devices"] == 1
    assert (
        first["requested_hardware"]
        == next(e for k, e in events if k == "completed")["hardware_type"]
    )


def test_options_include_the_other_rows(tmp_path: Path) -> None:
    path = _csv(tmp_path, _mixed_rows())
    _, stats = gavel_events(path, sources=None, placements=None, num_gpus=None)
    # simulation, unconsolidated and 2-GPU rows are kept; the 1st row's repeat is still dropped
    assert stats.attempts == 6 and stats.dropped["duplicate"] == 1
    events, _ = gavel_events(path, num_gpus=(2,))
    (two,) = [e for k, e in events if k == "submitted"]
    assert two["num_devices"] == 2 and two["global_batch_size"] == 32  # per-worker batch x 2


def test_events_pair_up_in_time_order(tmp_path: Path) -> None:
    rows = [
        _row(model=m, job_type=f"{m} (batch size {b})", batch_size=b, accelerator=a)
        for m in ("ResNet-18", "LM", "Transformer")
        for b in (16, 32)
        for a in ("K80", "P100", "V100")
    ]
    events, stats = gavel_events(_csv(tmp_path, rows))
    assert stats.attempts == 18 and stats.lineages == 6
    kinds = [k for k, _ in events]
    assert kinds == ["submitted", "completed"] * 18
    times = [e["event_time"] for _, e in events]
    assert times == sorted(times) and len(set(times)) == len(times)
    for (_, sub), (_, done) in zip(events[::2], events[1::2], strict=True):
        assert sub["job_id"] == done["job_id"] and done["event_time"] > sub["event_time"]
    # the arrival order does not depend on the file's row order
    again, _ = gavel_events(_csv(tmp_path, rows[::-1]))
    assert [e["event_id"] for _, e in again] == [e["event_id"] for _, e in events]


def test_writes_a_valid_history(tmp_path: Path) -> None:
    stats = import_gavel(_csv(tmp_path, _mixed_rows()), tmp_path / "out")
    tables = list(read_history_batches(tmp_path / "out" / "history.parquet"))
    assert sum(t.num_rows for t in tables) == 2 * stats.attempts


def test_missing_column_is_an_error(tmp_path: Path) -> None:
    rows = [{k: v for k, v in _row().items() if k != "samples_per_sec"}]
    with pytest.raises(GavelImportError, match="samples_per_sec"):
        gavel_events(_csv(tmp_path, rows))


def test_cli_prints_the_counts(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["import", "gavel", str(_csv(tmp_path, _mixed_rows())), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    assert "not_in_catalog" in result.output and "rows kept" in result.output
    assert (tmp_path / "o" / "history.parquet").exists()
    result = CliRunner().invoke(
        app,
        ["import", "gavel", str(tmp_path / "gavel.csv"), "--out", str(tmp_path / "a"), "--all"],
    )
    assert result.exit_code == 0, result.output


@pytest.mark.skipif(not REAL_CSV.exists(), reason=f"{REAL_CSV} not present")
def test_real_file_imports_and_validates(tmp_path: Path) -> None:
    stats = import_gavel(REAL_CSV, tmp_path)
    tables = list(read_history_batches(tmp_path / "history.parquet", batch_rows=64))
    assert sum(t.num_rows for t in tables) == 2 * stats.attempts
    assert stats.rows_read == 984 and stats.attempts == 71 and stats.lineages == 24
    assert stats.dropped["did_not_run"] == 1  # ResNet-50 batch 128 on K80: out of memory
    assert stats.dropped["no_samples_per_sec"] == 6  # A3C and CycleGAN log no samples
    assert stats.dropped["not_in_catalog"] == 0 and stats.dropped["unknown_model"] == 0
    assert stats.rows_read == stats.rows_kept + sum(stats.dropped.values())
    assert stats.hardware_types == ("K80", "P100-PCIe-16GB", "V100-PCIe-32GB")
