"""The MLPerf importer: mapping rules, drops, throughput rule, ordering; the naive predictor."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from realdata_paths import MLPERF_CSV as REAL_CSV
from typer.testing import CliRunner

from leap_stream.cli import app
from leap_stream.data.history import read_history_batches
from leap_stream.data.importers.mlperf import (
    BENCHMARKS,
    DROP_REASONS,
    ROUND_DATES,
    MlperfImportError,
    import_mlperf,
    load_benchmarks,
    mlperf_events,
    naive_ratio_predictions,
    naive_ratio_summary,
    parse_round_dates,
)


def _row(**overrides: Any) -> dict[str, Any]:
    """One result in the real file's columns (a subset is enough; extra ones are ignored)."""
    row: dict[str, Any] = {
        "round": "v3.1",
        "repo_commit": "0" * 40,
        "submitter": "NVIDIA",
        "system": "dgxh100",
        "benchmark": "bert",
        "division": "closed",
        "availability": "available",
        "accelerator_model_name": "NVIDIA H100-SXM5-80GB",
        "vendor": "NVIDIA",
        "accelerator_type": "H100-SXM",
        "accelerators_per_node": 8,
        "number_of_nodes": 1,
        "accelerators_count": 8,
        "host_processor_model_name": "Intel Xeon Platinum 8480C",
        "framework": "PyTorch NVIDIA Release 23.09",
        "global_batch_size": "448",
        "n_runs": 10,
        "n_success": 10,
        "time_to_train_minutes": 5.0,
        "tracked_throughput_median": None,
        "work_ratio_vs_benchmark_median": None,
        "duplicate_of": None,
    }
    row.update(overrides)
    return row


# Kept rows, named by what they check; throughputs are hand-computed from BENCHMARKS.
KEPT = {
    # tracked x time = 8000 x 300 s = 2.4M samples, 0.96 of bert's 2.5M: the logged figure.
    "tracked": _row(submitter="Zeta", tracked_throughput_median=8000.0),
    # Nothing logged: 2.5M samples / (20 min x 60).
    "from_time": _row(
        round="v2.0", submitter="beta", accelerator_type="A100-SXM-80GB", time_to_train_minutes=20.0
    ),
    # Logged 1000/s x 1200 s = 1.2M images, 0.026 of resnet's 45.5M: per-device logging, so
    # time to train decides: 45.5M / 1200 s.
    "per_device_logged": _row(
        round="v2.0",
        submitter="Alpha",
        system="s2",
        benchmark="resnet",
        accelerator_type="A100-SXM-80GB",
        framework="NGC MXNet 22.04 , NGC PyTorch 22.04 , NGC TensorFlow 22.04-tf1",
        global_batch_size="3264",
        time_to_train_minutes=20.0,
        tracked_throughput_median=1000.0,
    ),
    # RetinaNet logs per device: 290/s x 8 = 2320/s whole system.
    "ssd_per_device": _row(
        benchmark="ssd",
        submitter="Alpha",
        global_batch_size="256",
        time_to_train_minutes=36.0,
        tracked_throughput_median=290.0,
    ),
    # Large batch (16x) with a logged figure 2.4x the samples to train: the logged figure holds.
    "large_batch_tracked": _row(
        round="v4.0",
        submitter="NVIDIA",
        benchmark="resnet",
        accelerators_count=3584,
        global_batch_size="57344",
        time_to_train_minutes=0.2,
        tracked_throughput_median=9.0e6,
    ),
    # GPT-3 logs tokens/s: 1.2M tokens/s / 2048 = 585.9 sequences/s; fp8 on H100; TPU -> jax.
    "gpt3_tokens": _row(
        round="v4.0",
        submitter="Google",
        benchmark="gpt3",
        accelerator_type="TPU-v5p",
        framework="maxtext",
        accelerators_count=512,
        global_batch_size="2048|1024",
        time_to_train_minutes=17.0,  # 585.9/s x 1020 s = 598k sequences, 1.01x of 591k
        tracked_throughput_median=1.2e6,
    ),
    # IPU has no bf16: fp16. Several frameworks named, none NVIDIA's for bert: the first one.
    "ipu": _row(
        round="v2.0",
        submitter="Graphcore",
        accelerator_type="IPU-BOW",
        accelerators_count=16,
        framework="TensorFlow 1.15 Poplar SDK 2.5.1",
        time_to_train_minutes=25.0,
    ),
}
DROPPED = {
    "open_division": _row(division="open", submitter="o"),
    "duplicate": _row(submitter="d", duplicate_of="v3.1/NVIDIA/dgxh100/bert"),
    "not_in_catalog": _row(submitter="n", accelerator_type="Warp-Drive-9000"),
    "unmapped_benchmark": _row(submitter="u", benchmark="tetris"),
    "no_samples_measure": _row(submitter="m", benchmark="minigo", global_batch_size=None),
    "no_accelerator_count": _row(submitter="c", accelerator_type="CPU-Xeon", accelerators_count=0),
    "no_batch_size": _row(submitter="b", global_batch_size=None),
    "large_batch_no_tracked": _row(submitter="l", global_batch_size="6912"),
    "no_throughput": _row(submitter="t", time_to_train_minutes=None),
    # Older than every dated round and undated: cannot be placed.
    "unknown_round": _row(submitter="r", round="v0.1"),
}


@pytest.fixture
def small_csv(tmp_path: Path) -> Path:
    path = tmp_path / "results.csv"
    # Dropped rows first, so that kept order cannot come from file order by accident.
    pd.DataFrame([*DROPPED.values(), *KEPT.values()]).to_csv(path, index=False)
    return path


@pytest.fixture
def small_history(small_csv: Path, tmp_path: Path) -> pd.DataFrame:
    import_mlperf(small_csv, tmp_path / "out")
    return pd.read_parquet(tmp_path / "out" / "history.parquet")


def _completed(history: pd.DataFrame, name: str) -> pd.Series:
    row = KEPT[name]
    job_id = f"mlperf/{row['round']}/{row['submitter']}/{row['system']}/{row['benchmark']}"
    completed = history[(history.event_type == "completed") & (history.job_id == job_id)]
    assert len(completed) == 1, job_id
    return completed.iloc[0]


def _submitted(history: pd.DataFrame, name: str) -> pd.Series:
    job_id = _completed(history, name).job_id
    return history[(history.event_type == "submitted") & (history.job_id == job_id)].iloc[0]


def test_stats_count_every_drop_reason_once(small_csv: Path, tmp_path: Path) -> None:
    stats = import_mlperf(small_csv, tmp_path / "out")
    assert stats.rows_read == len(KEPT) + len(DROPPED)
    assert stats.dropped == dict.fromkeys(DROP_REASONS, 1)
    assert stats.rows_kept == stats.attempts == len(KEPT)
    assert stats.lineages == 4  # bert, resnet, ssd, gpt3
    assert stats.hardware_types == ("A100-SXM-80GB", "H100-SXM", "IPU-BOW", "TPU-v5p")
    assert stats.throughput_sources == {"time_to_train": 3, "tracked": 4}


def test_events_in_time_order_by_round_then_submitter(small_history: pd.DataFrame) -> None:
    times = small_history.event_time
    assert times.is_monotonic_increasing and times.is_unique
    submitted = small_history[small_history.event_type == "submitted"]
    # v2.0 (Alpha, beta, Graphcore: case-insensitive), then v3.1 (Alpha, Zeta), then v4.0.
    assert [job.split("/")[1:3] for job in submitted.job_id] == [
        ["v2.0", "Alpha"],
        ["v2.0", "beta"],
        ["v2.0", "Graphcore"],
        ["v3.1", "Alpha"],
        ["v3.1", "Zeta"],
        ["v4.0", "Google"],
        ["v4.0", "NVIDIA"],
    ]
    assert submitted.event_time.iloc[0] == pd.Timestamp(datetime(2022, 6, 29, tzinfo=UTC))
    assert submitted.event_time.iloc[3] == pd.Timestamp(datetime(2023, 11, 8, tzinfo=UTC))
    # Each attempt: submitted, then its own completion, before the next submission.
    kinds = small_history.event_type.tolist()
    assert kinds == ["submitted", "completed"] * len(KEPT)
    assert (small_history.job_id.iloc[0::2].to_numpy() == small_history.job_id.iloc[1::2]).all()
    gaps = small_history.event_time.diff().iloc[1:2]
    assert gaps.iloc[0] == pd.Timedelta(timedelta(minutes=2))


def test_one_lineage_per_benchmark(small_history: pd.DataFrame) -> None:
    submitted = small_history[small_history.event_type == "submitted"]
    assert (submitted.lineage_id == "mlperf-" + submitted.model_type).all()
    assert (
        submitted.model_family == submitted.model_type.map(lambda b: BENCHMARKS[b].model_family)
    ).all()
    assert set(submitted.lineage_id) == {
        "mlperf-bert",
        "mlperf-resnet",
        "mlperf-ssd",
        "mlperf-gpt3",
    }


@pytest.mark.parametrize(
    ("name", "throughput"),
    [
        ("tracked", 8000.0),
        ("from_time", 2.50e6 / 1200),
        ("per_device_logged", 4.55e7 / 1200),
        ("ssd_per_device", 290.0 * 8),
        ("large_batch_tracked", 9.0e6),
        ("gpt3_tokens", 1.2e6 / 2048),
        ("ipu", 2.50e6 / 1500),
    ],
)
def test_throughput_rule(small_history: pd.DataFrame, name: str, throughput: float) -> None:
    completed = _completed(small_history, name)
    assert completed.throughput == pytest.approx(throughput)
    assert completed.status == "succeeded"
    assert completed.hardware_type == KEPT[name]["accelerator_type"]


def test_submission_fields(small_history: pd.DataFrame) -> None:
    gpt3 = _submitted(small_history, "gpt3_tokens")
    assert (gpt3.framework, gpt3.precision, gpt3.global_batch_size, gpt3.seq_len) == (
        "jax",
        "bf16",  # TPU v5p has no fp8
        2048,
        2048,
    )
    assert (gpt3.num_devices, gpt3.param_count, gpt3.requested_hardware) == (
        512,
        175_000_000_000,
        "TPU-v5p",
    )
    assert gpt3.candidate_hardware is None
    # FLOPs per sample where 6 x parameters x tokens is wrong (a convnet), not for a transformer
    assert pd.isna(gpt3.flops_per_sample)
    resnet = _submitted(small_history, "per_device_logged")
    assert resnet.model_type == "resnet"
    assert resnet.flops_per_sample == BENCHMARKS["resnet"].flops_per_sample == 2.46e10
    # NVIDIA's multi-framework container: resnet ran on MXNet, recorded as pytorch.
    assert _submitted(small_history, "per_device_logged").framework == "pytorch"
    ipu = _submitted(small_history, "ipu")
    assert (ipu.framework, ipu.precision) == ("tensorflow", "fp16")
    assert _submitted(small_history, "tracked").precision == "bf16"
    # steps: samples / batch, samples = throughput x time to train.
    assert _completed(small_history, "from_time").steps == round(2.50e6 / 448)


def test_fp8_for_llm_benchmarks_on_fp8_hardware(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    rows = [
        _row(
            benchmark="gpt3",
            global_batch_size="2048",
            tracked_throughput_median=4e5,
            time_to_train_minutes=25.0,
        ),
        _row(
            benchmark="gpt3",
            accelerator_type="A100-SXM-80GB",
            global_batch_size="2048",
            time_to_train_minutes=25.0,
        ),
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    events, _ = mlperf_events(path)
    precisions = {e["requested_hardware"]: e["precision"] for k, e in events if k == "submitted"}
    assert precisions == {"H100-SXM": "fp8", "A100-SXM-80GB": "bf16"}


def test_import_is_deterministic(small_csv: Path, tmp_path: Path) -> None:
    import_mlperf(small_csv, tmp_path / "a")
    import_mlperf(small_csv, tmp_path / "b")
    a = pd.read_parquet(tmp_path / "a" / "history.parquet")
    b = pd.read_parquet(tmp_path / "b" / "history.parquet")
    pd.testing.assert_frame_equal(a, b)
    assert a.event_id.is_unique
    assert not (tmp_path / "a" / "oracle.parquet").exists()


def _submitted_times(events: list[tuple[str, dict[str, Any]]]) -> dict[str, datetime]:
    return {e["job_id"]: e["event_time"] for kind, e in events if kind == "submitted"}


def test_every_published_round_has_a_date_in_order() -> None:
    versions = [f"v0.{m}" for m in (5, 6, 7)] + [
        f"v{a}.{b}" for a in (1, 2, 3, 4, 5) for b in (0, 1)
    ]
    assert list(ROUND_DATES) == versions
    dates = list(ROUND_DATES.values())
    assert dates == sorted(dates) and len(set(dates)) == len(dates)
    assert ROUND_DATES["v5.1"].date().isoformat().startswith("2025-11")


def test_round_without_a_builtin_date_is_placed_or_given(tmp_path: Path) -> None:
    # v4.2 never existed: undated and older than v5.1, so it cannot be placed (never fatal).
    path = tmp_path / "r.csv"
    pd.DataFrame([_row(), _row(round="v4.2", submitter="x")]).to_csv(path, index=False)
    events, stats = mlperf_events(path)
    assert stats.rows_kept == 1 and stats.dropped["unknown_round"] == 1
    assert stats.unknown_rounds == {"v4.2": 1} and stats.placed_rounds == {}
    # --round-date gives it a date: kept, at that day.
    given = parse_round_dates(["v4.2=2025-01-15"])
    events, stats = mlperf_events(path, round_dates=given)
    assert stats.rows_kept == 2 and stats.dropped["unknown_round"] == 0
    assert stats.unknown_rounds == {}
    times = _submitted_times(events)
    assert times["mlperf/v4.2/x/dgxh100/bert"] == datetime(2025, 1, 15, tzinfo=UTC)
    # A built-in date can be overridden too.
    events, _ = mlperf_events(path, round_dates=parse_round_dates(["v3.1=2023-11-15"]))
    assert _submitted_times(events)["mlperf/v3.1/NVIDIA/dgxh100/bert"] == datetime(
        2023, 11, 15, tzinfo=UTC
    )


def test_later_unknown_rounds_go_after_the_last_known_in_version_order(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    rows = [
        _row(round="v6.0", submitter="b"),
        _row(round="v5.1"),
        _row(round="v5.10", submitter="a"),
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    events, stats = mlperf_events(path)
    assert stats.rows_kept == 3 and stats.dropped["unknown_round"] == 0
    assert stats.unknown_rounds == {"v5.10": 1, "v6.0": 1}
    last = ROUND_DATES["v5.1"]
    assert stats.placed_rounds == {
        "v5.10": (last + timedelta(days=30)).date().isoformat(),
        "v6.0": (last + timedelta(days=60)).date().isoformat(),
    }
    order = [e["job_id"].split("/")[1] for kind, e in events if kind == "submitted"]
    assert order == ["v5.1", "v5.10", "v6.0"]
    # A given date for a later round moves the ones after it.
    events, stats = mlperf_events(path, round_dates=parse_round_dates(["v5.10=2026-03-01"]))
    assert stats.placed_rounds == {"v6.0": "2026-03-31"}


def test_round_date_option_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(MlperfImportError, match=r"--round-date 'v5\.2=June': expected"):
        parse_round_dates(["v5.2=June"])
    path = tmp_path / "r.csv"
    pd.DataFrame([_row()]).to_csv(path, index=False)
    result = CliRunner().invoke(
        app, ["import", "mlperf", str(path), "--out", str(tmp_path / "o"), "--round-date", "x"]
    )
    assert result.exit_code == 2


def test_newer_benchmarks_and_folder_aliases_have_specs(tmp_path: Path) -> None:
    for name in ("llama31_8b", "llama31_405b", "llama2_70b_lora", "flux1", "gnn", "ssd_resnet34"):
        assert name in BENCHMARKS
    assert BENCHMARKS["llama31_405b"].param_count == 405_000_000_000
    path = tmp_path / "r.csv"
    rows = [
        # v5.0 renamed the RetinaNet folder: same lineage as "ssd" of earlier rounds.
        _row(
            round="v5.0", benchmark="retinanet", global_batch_size="256", time_to_train_minutes=36.0
        ),
        # "ssd" before v2.0 is SSD-ResNet34: its own lineage (no samples-to-train figure).
        _row(round="v1.1", benchmark="ssd", submitter="old", accelerator_type="A100-SXM-80GB"),
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    events, stats = mlperf_events(path)
    submitted = [e for kind, e in events if kind == "submitted"]
    assert [(e["job_id"], e["lineage_id"]) for e in submitted] == [
        ("mlperf/v5.0/NVIDIA/dgxh100/retinanet", "mlperf-ssd")
    ]
    assert stats.dropped["no_samples_measure"] == 1 and stats.unknown_benchmarks == {}


def test_unknown_benchmarks_and_hardware_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    rows = [
        _row(),
        _row(benchmark="tetris", submitter="a"),
        _row(benchmark="tetris", submitter="b"),
        _row(benchmark="chess", submitter="c"),
        _row(accelerator_type="Warp-Drive-9000", submitter="d"),
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    _, stats = mlperf_events(path)
    assert stats.rows_kept == 1 and stats.dropped["unmapped_benchmark"] == 3
    assert stats.unknown_benchmarks == {"chess": 1, "tetris": 2}
    assert stats.unknown_hardware == {"Warp-Drive-9000": 1}
    result = CliRunner().invoke(app, ["import", "mlperf", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "chess (1), tetris (2)" in text and "Warp-Drive-9000 (1)" in text


BENCHMARKS_TOML = """
[tetris]
model_family = "cnn"
param_count = 1_000_000
samples_to_train = 2.0e6
reference_batch = 256
flops_per_sample = 3.0e9

[bert]  # replaces the built-in spec
model_family = "dense_llm"
param_count = 340_000_000
seq_len = 512
samples_to_train = 5.0e6
reference_batch = 448
fp8 = true
"""


def test_benchmarks_file_adds_a_benchmark(tmp_path: Path) -> None:
    toml = tmp_path / "benchmarks.toml"
    toml.write_text(BENCHMARKS_TOML)
    specs = load_benchmarks(toml)
    assert specs["tetris"].seq_len is None and specs["tetris"].logged_unit == "system"
    assert (specs["tetris"].flops_per_sample, specs["bert"].flops_per_sample) == (3.0e9, None)
    path = tmp_path / "r.csv"
    rows = [_row(), _row(benchmark="tetris", submitter="a", global_batch_size="256")]
    pd.DataFrame(rows).to_csv(path, index=False)
    events, stats = mlperf_events(path, benchmarks=specs)
    assert stats.rows_kept == 2 and stats.unknown_benchmarks == {}
    completed = {e["job_id"]: e["throughput"] for kind, e in events if kind == "completed"}
    assert completed["mlperf/v3.1/a/dgxh100/tetris"] == pytest.approx(2.0e6 / 300)
    assert completed["mlperf/v3.1/NVIDIA/dgxh100/bert"] == pytest.approx(5.0e6 / 300)
    submitted = {e["job_id"]: e for kind, e in events if kind == "submitted"}
    assert submitted["mlperf/v3.1/a/dgxh100/tetris"]["lineage_id"] == "mlperf-tetris"
    assert submitted["mlperf/v3.1/NVIDIA/dgxh100/bert"]["precision"] == "fp8"
    assert submitted["mlperf/v3.1/a/dgxh100/tetris"]["flops_per_sample"] == 3.0e9
    result = CliRunner().invoke(
        app,
        ["import", "mlperf", str(path), "--out", str(tmp_path / "o"), "--benchmarks", str(toml)],
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"rows kept \(attempts\)\s*│\s*2\s", result.output)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[x\nmodel_family = 1", r"b\.toml: cannot read the benchmarks file"),
        ('[x]\nmodel_family = "cnn"\nparam_count = 5', r"b\.toml \[x\], key 'reference_batch'"),
        (
            '[x]\nmodel_family = "cnn"\nparam_count = "5M"\nreference_batch = 8',
            r"b\.toml \[x\], key 'param_count': '5M' is not a int",
        ),
        (
            '[x]\nmodel_family = "tabular"\nparam_count = 5\nreference_batch = 8',
            r"b\.toml \[x\], key 'model_family': 'tabular' is not one of",
        ),
        (
            '[x]\nmodel_family = "cnn"\nparam_count = 5\nreference_batch = 8\nsize = 1',
            r"b\.toml \[x\]: unknown key\(s\) size",
        ),
        (
            '[x]\nmodel_family = "cnn"\nparam_count = 5\nreference_batch = -8',
            r"b\.toml \[x\], key 'reference_batch': -8 must be positive",
        ),
        (
            '[x]\nmodel_family = "cnn"\nparam_count = 5\nreference_batch = 8\n'
            "samples_to_train = inf",
            r"b\.toml \[x\], key 'samples_to_train': inf must be positive and finite",
        ),
        ('[x]\nmodel_family = "c\xe9"', r"b\.toml: cannot read the benchmarks file"),  # latin-1
    ],
)
def test_malformed_benchmarks_file_names_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    toml = tmp_path / "b.toml"
    toml.write_bytes(text.encode("latin-1"))
    with pytest.raises(MlperfImportError, match=message):
        load_benchmarks(toml)
    csv = tmp_path / "r.csv"
    pd.DataFrame([_row()]).to_csv(csv, index=False)
    result = CliRunner().invoke(
        app, ["import", "mlperf", str(csv), "--out", str(tmp_path / "o"), "--benchmarks", str(toml)]
    )
    assert result.exit_code == 2 and "b.toml" in result.output


def test_missing_column_and_bad_number_are_named(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    pd.DataFrame([_row()]).drop(columns=["duplicate_of"]).to_csv(path, index=False)
    with pytest.raises(MlperfImportError, match=r"missing required column.*'duplicate_of'"):
        mlperf_events(path)
    pd.DataFrame([_row(), _row(time_to_train_minutes="fast")]).to_csv(path, index=False)
    with pytest.raises(MlperfImportError, match="row 1, column 'time_to_train_minutes': 'fast'"):
        mlperf_events(path)
    pd.DataFrame([_row(), _row(time_to_train_minutes="inf")]).to_csv(path, index=False)
    with pytest.raises(
        MlperfImportError, match="row 1, column 'time_to_train_minutes': inf is not a finite number"
    ):
        mlperf_events(path)
    pd.DataFrame([_row(accelerators_count=8.5)]).to_csv(path, index=False)
    with pytest.raises(MlperfImportError, match=r"'accelerators_count': 8\.5 is not a whole"):
        mlperf_events(path)
    path.write_text("")
    with pytest.raises(MlperfImportError, match="cannot read the results table"):
        mlperf_events(path)


def test_two_rounds_given_the_same_day_follow_one_another(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    rows = [_row(round="v4.0", submitter=s) for s in "ac"] + [_row(submitter="b")]  # v3.1
    pd.DataFrame(rows).to_csv(path, index=False)
    same_day = parse_round_dates([f"v4.0={ROUND_DATES['v3.1'].date().isoformat()}"])
    events, stats = mlperf_events(path, round_dates=same_day)
    assert stats.rows_kept == 3
    submitted = [e for kind, e in events if kind == "submitted"]
    times = [e["event_time"] for e in submitted]
    assert times == sorted(times) and len(set(times)) == 3
    assert [e["job_id"].split("/")[1] for e in submitted] == ["v3.1", "v4.0", "v4.0"]


# --------------------------------------------------------------------------------------------
# The naive predictor


def _toy_history(cells: list[tuple[str, str, float]], num_devices: int = 8) -> pa.Table:
    rows = []
    for i, (model, hardware, throughput) in enumerate(cells):
        base = {"job_id": f"j{i}", "num_devices": num_devices}
        rows.append(
            {
                **base,
                "event_type": "submitted",
                "model_type": model,
                "hardware_type": None,
                "status": None,
                "throughput": None,
            }
        )
        rows.append(
            {
                **base,
                "event_type": "completed",
                "model_type": None,
                "hardware_type": hardware,
                "status": "succeeded",
                "throughput": throughput,
            }
        )
    return pa.Table.from_pylist(rows)


def test_naive_predictor_toy_table_by_hand() -> None:
    # 3 benchmarks x 2 types. For x on A: B measured x at 20; over y and z, A/B is 0.5 and
    # 7/12, median 13/24: 20 x 13/24 = 10.8333. And so on for each of the six results.
    history = _toy_history(
        [
            ("x", "A", 10.0),
            ("x", "B", 20.0),
            ("y", "A", 5.0),
            ("y", "B", 10.0),
            ("z", "A", 7.0),
            ("z", "B", 12.0),
        ]
    )
    preds = naive_ratio_predictions(history)
    expected = {
        ("x", "A"): 20 * (0.5 + 7 / 12) / 2,
        ("x", "B"): 10 * (2 + 12 / 7) / 2,
        ("y", "A"): 10 * (0.5 + 7 / 12) / 2,
        ("y", "B"): 5 * (2 + 12 / 7) / 2,
        ("z", "A"): 12 * 0.5,
        ("z", "B"): 7 * 2.0,
    }
    got = {(r.model_type, r.hardware_type): r.predicted for r in preds.itertuples()}
    assert got == pytest.approx(expected)
    actual = {
        ("x", "A"): 10,
        ("x", "B"): 20,
        ("y", "A"): 5,
        ("y", "B"): 10,
        ("z", "A"): 7,
        ("z", "B"): 12,
    }
    apes = [abs(expected[k] - actual[k]) / actual[k] for k in expected]
    summary = naive_ratio_summary(preds)
    assert summary["n"] == 6
    assert summary["mape"] == pytest.approx(sum(apes) / 6, abs=1e-6)
    assert summary["within"] == pytest.approx(sum(a <= 0.2 for a in apes) / 6)
    # With one reference type every way of picking a prediction agrees.
    assert naive_ratio_summary(preds, "median") == summary == naive_ratio_summary(preds, "all")


def test_naive_predictor_uses_only_the_chosen_device_count_and_picks_most_shared() -> None:
    history = _toy_history(
        [
            ("x", "A", 10.0),
            ("x", "B", 20.0),
            ("y", "A", 5.0),
            ("y", "B", 10.0),
            ("z", "A", 7.0),
            ("z", "B", 12.0),
            ("x", "C", 40.0),
            ("z", "C", 30.0),
        ]
    )
    # C shares only x with A for target (z, A); B shares x and y: most_shared picks B.
    preds = naive_ratio_predictions(history)
    z_on_a = preds[(preds.model_type == "z") & (preds.hardware_type == "A")]
    assert dict(zip(z_on_a.reference_hardware, z_on_a.shared_benchmarks, strict=True)) == {
        "B": 2,
        "C": 1,
    }
    picked = naive_ratio_summary(z_on_a)
    assert picked["mape"] == pytest.approx(abs(12 * 0.5 - 7) / 7)
    # Results on other device counts are neither targets nor references.
    sixteen = _toy_history([("x", "A", 1.0), ("x", "B", 1.0)], num_devices=16)
    assert naive_ratio_predictions(sixteen).empty
    with pytest.raises(ValueError, match="most_shared"):
        naive_ratio_summary(preds, "best")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# The real file


@pytest.mark.skipif(not REAL_CSV.exists(), reason=f"{REAL_CSV} not present")
def test_real_file_imports_and_validates(tmp_path: Path) -> None:
    stats = import_mlperf(REAL_CSV, tmp_path)
    tables = list(read_history_batches(tmp_path / "history.parquet", batch_rows=256))
    rows = sum(t.num_rows for t in tables)
    assert rows == 2 * stats.attempts
    assert len(stats.hardware_types) >= 8
    assert stats.lineages == 12  # every benchmark but MiniGo
    assert stats.rows_read == stats.rows_kept + sum(stats.dropped.values())
    assert stats.dropped["open_division"] == 7 and stats.dropped["duplicate"] == 33
    history = pa.concat_tables(tables).to_pandas()
    # The naive predictor on 8-accelerator results: near the README's 21% MAPE.
    summary = naive_ratio_summary(naive_ratio_predictions(history), "median")
    assert 0.1 < summary["mape"] < 0.3 and summary["n"] > 200
