"""The NeuSight importer: training rows, mapping, parallelism, unknown counts, event order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from realdata_paths import REALDATA
from typer.testing import CliRunner

from leap_stream.cli import app
from leap_stream.data.history import read_history_batches
from leap_stream.data.importers.neusight import (
    NEUSIGHT_DROP_REASONS,
    NeusightImportError,
    import_neusight,
    neusight_events,
    parallel_degrees,
)

REAL_CSV = REALDATA / "neusight_latency.csv"


def _row(**overrides: Any) -> dict[str, Any]:
    """One measurement in the real file's columns (a subset; the rest are ignored)."""
    row: dict[str, Any] = {
        "model": "gpt2_large",
        "mode": "train",
        "seq_len": 1024,
        "batch_size": 4,
        "parallelism": "single",
        "device": "NVIDIA_H100_80GB_HBM3",
        "vendor": "NVIDIA",
        "accelerator_type": "H100-SXM",
        "num_gpus": 1,
        "measured_iter_latency_ms": 638.8,
        "samples_per_sec": 6.26,
        "pred_neusight_latency_ms": 649.6,
    }
    row.update(overrides)
    return row


def _csv(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "neusight.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _mixed_rows() -> list[dict[str, Any]]:
    return [
        _row(),
        _row(accelerator_type="MI250", device="AMD_Instinct_MI250", samples_per_sec=2.17),
        _row(parallelism="tp4", num_gpus=4, samples_per_sec=18.9),
        _row(parallelism="pp4_1", num_gpus=4, samples_per_sec=6.27),
        _row(mode="inf", samples_per_sec=20.0),
        _row(samples_per_sec=None),
        _row(model="llama2_7b"),
        _row(accelerator_type="RTX-9090"),
        _row(accelerator_type=None),
        _row(parallelism="zero3"),
        _row(samples_per_sec=6.3),  # the first row again
    ]


def test_parallel_degrees() -> None:
    assert parallel_degrees("single") == (1, 1, None)
    assert parallel_degrees("dp4") == (1, 1, None)
    assert parallel_degrees("tp8") == (8, 1, None)
    assert parallel_degrees("pp4_2") == (1, 4, 2)
    assert parallel_degrees("pp2") == (1, 2, None)
    assert parallel_degrees("tp") is None


def test_training_rows_mapping_and_unknown_counts(tmp_path: Path) -> None:
    events, stats = neusight_events(_csv(tmp_path, _mixed_rows()))
    assert stats.rows_read == 11 and stats.attempts == 4
    assert set(stats.dropped) == set(NEUSIGHT_DROP_REASONS)
    assert stats.dropped == {
        "not_train": 1,
        "no_samples_per_sec": 1,
        "unknown_model": 1,
        "not_in_catalog": 2,
        "unknown_parallelism": 1,
        "duplicate": 1,
    }
    assert stats.hardware_types == ("H100-SXM", "MI250")
    assert stats.lineages == 3  # single (on two types), tp4, pp4_1
    submitted = {e["job_id"]: e for k, e in events if k == "submitted"}
    tp = submitted["neusight/gpt2_large/s1024/bs4/tp4/4xH100-SXM"]
    assert (tp["tensor_parallel"], tp["pipeline_parallel"], tp["num_devices"]) == (4, 1, 4)
    assert tp["micro_batches"] is None
    pp = submitted["neusight/gpt2_large/s1024/bs4/pp4_1/4xH100-SXM"]
    assert (pp["tensor_parallel"], pp["pipeline_parallel"], pp["micro_batches"]) == (1, 4, 1)
    single = submitted["neusight/gpt2_large/s1024/bs4/single/1xMI250"]
    assert single["model_type"] == "GPT2-Large" and single["model_family"] == "dense_llm"
    assert single["param_count"] == 774_030_080 and single["seq_len"] == 1024
    assert single["global_batch_size"] == 4 and single["requested_hardware"] == "MI250"
    completed = {e["job_id"]: e["throughput"] for k, e in events if k == "completed"}
    assert completed["neusight/gpt2_large/s1024/bs4/single/1xH100-SXM"] == 6.26


def test_events_pair_up_in_time_order(tmp_path: Path) -> None:
    events, _ = neusight_events(_csv(tmp_path, _mixed_rows()))
    assert [k for k, _ in events] == ["submitted", "completed"] * 4
    times = [e["event_time"] for _, e in events]
    assert times == sorted(times) and len(set(times)) == len(times)
    for (_, sub), (_, done) in zip(events[::2], events[1::2], strict=True):
        assert sub["job_id"] == done["job_id"] and done["event_time"] > sub["event_time"]


def test_writes_a_valid_history_and_cli(tmp_path: Path) -> None:
    path = _csv(tmp_path, _mixed_rows())
    stats = import_neusight(path, tmp_path / "out")
    tables = list(read_history_batches(tmp_path / "out" / "history.parquet"))
    assert sum(t.num_rows for t in tables) == 2 * stats.attempts
    # the pipelined row's micro-batch count survives the file (null elsewhere)
    assert sorted(v for t in tables for v in t["micro_batches"].to_pylist() if v) == [1]
    result = CliRunner().invoke(
        app, ["import", "neusight", str(path), "--out", str(tmp_path / "c")]
    )
    assert result.exit_code == 0, result.output
    assert "unknown_model" in result.output and "not_train" in result.output


def test_missing_column_is_an_error(tmp_path: Path) -> None:
    rows = [{k: v for k, v in _row().items() if k != "mode"}]
    with pytest.raises(NeusightImportError, match="mode"):
        neusight_events(_csv(tmp_path, rows))


@pytest.mark.skipif(not REAL_CSV.exists(), reason=f"{REAL_CSV} not present")
def test_real_file_imports_and_validates(tmp_path: Path) -> None:
    stats = import_neusight(REAL_CSV, tmp_path)
    tables = list(read_history_batches(tmp_path / "history.parquet", batch_rows=32))
    assert sum(t.num_rows for t in tables) == 2 * stats.attempts
    assert stats.rows_read == 134 and stats.attempts == 52 and stats.lineages == 18
    assert stats.dropped["not_train"] == 82
    assert stats.rows_read == stats.rows_kept + sum(stats.dropped.values())
    assert len(stats.hardware_types) == 8 and "MI250" in stats.hardware_types
