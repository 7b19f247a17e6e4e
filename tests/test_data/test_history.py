"""Tests of leap_stream.data.history:

round trips through every format, one broken file per rule, the collecting (quarantine) mode of
the same rules, and check_events for stream processors.
"""

from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from leap_stream.core.events import HISTORY_SCHEMA, ORACLE_SCHEMA
from leap_stream.data.history import (
    COMPLETED_FIELDS,
    HISTORY_FILE_SCHEMA,
    OPTIONAL_COLUMNS,
    SUBMITTED_FIELDS,
    HistoryError,
    Reject,
    check_events,
    events_to_table,
    iter_events,
    iter_oracle,
    read_history_batches,
    read_oracle_batches,
    write_history,
    write_oracle,
)

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
FORMATS = ["parquet", "csv", "avro"]
T0 = datetime(2025, 9, 3, 10, 15, 0, 123_000, tzinfo=UTC)


def _submitted(i: int, job: str, lineage: str, minutes: int, **overrides: Any) -> dict[str, Any]:
    event = {
        "event_id": f"e{i}",
        "event_time": T0 + timedelta(minutes=minutes),
        "job_id": job,
        "lineage_id": lineage,
        "model_type": "gpt-1.3b",
        "model_family": "decoder-transformer",
        "framework": "pytorch",
        "param_count": 1_300_000_000,
        "global_batch_size": 512,
        "seq_len": 2048,
        "precision": "bf16",
        "num_devices": 8,
        "tensor_parallel": 2,
        "pipeline_parallel": 1,
        "micro_batches": None,
        "flops_per_sample": None,
        "team": None,
        "requested_hardware": None,
        "candidate_hardware": ["H100-SXM", "MI300X", "TPU-v5e"],
    }
    event.update(overrides)
    return event


def _completed(i: int, job: str, lineage: str, minutes: int, **overrides: Any) -> dict[str, Any]:
    event = {
        "event_id": f"e{i}",
        "event_time": T0 + timedelta(minutes=minutes),
        "job_id": job,
        "lineage_id": lineage,
        "hardware_type": "H100-SXM",
        "num_devices": 8,
        "status": "succeeded",
        "throughput": 1234.5,
        "steps": 1000,
        "failure_reason": None,
    }
    event.update(overrides)
    return event


# Two lineages: l1 is preempted then retried as j2; l2 (a CNN, no seq_len) fails out of memory.
# Rows 0-6.
EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("submitted", _submitted(0, "j1", "l1", 0)),
    (
        "submitted",
        _submitted(
            1,
            "j3",
            "l2",
            1,
            model_type="resnet-50",
            model_family="cnn",
            framework="jax",
            param_count=25_600_000,
            seq_len=None,
            precision="fp32",
            num_devices=4,
            tensor_parallel=1,
            requested_hardware="MI300X",
            candidate_hardware=None,
        ),
    ),
    (
        "completed",
        _completed(
            2,
            "j1",
            "l1",
            30,
            status="preempted",
            throughput=None,
            steps=120,
            failure_reason="preempted",
        ),
    ),
    ("submitted", _submitted(3, "j2", "l1", 30)),
    (
        "completed",
        _completed(
            4,
            "j3",
            "l2",
            45,
            hardware_type="MI300X",
            num_devices=4,
            status="failed",
            throughput=None,
            steps=0,
            failure_reason="oom",
        ),
    ),
    ("completed", _completed(5, "j2", "l1", 90, throughput=2345.25)),
    (
        "submitted",
        _submitted(
            6,
            "j4",
            "l1",
            90,
            precision="fp8",
            requested_hardware="H100-SXM",
            pipeline_parallel=2,
            micro_batches=8,
            flops_per_sample=1.6e13,
            team="vision",
        ),
    ),
]


@pytest.fixture
def table() -> pa.Table:
    return events_to_table(EVENTS)


def _nullable(table: pa.Table) -> pa.Table:
    return table.cast(pa.schema([f.with_nullable(True) for f in table.schema]))


def _write_unchecked(table: pa.Table, path: Path) -> None:
    """Write ``table`` in the format of ``path`` without any validation (to make broken files)."""
    if path.suffix == ".parquet":
        pq.write_table(_nullable(table), path)
    elif path.suffix == ".csv":
        arrays = [
            pc.strftime(col, format="%Y-%m-%dT%H:%M:%SZ")
            if pa.types.is_timestamp(col.type)
            else pc.binary_join(col, ";")
            if pa.types.is_list(col.type)
            else col
            for col in table.columns
        ]
        pacsv.write_csv(pa.table(arrays, names=table.column_names), path)
    else:
        schema = fastavro.parse_schema(json.loads((SCHEMAS / "HistoryRow.avsc").read_text()))
        with open(path, "wb") as fo:
            fastavro.writer(fo, schema, table.to_pylist())


def _replace(table: pa.Table, column: str, row: int, value: Any) -> pa.Table:
    values = table.column(column).to_pylist()
    values[row] = value
    index = table.schema.get_field_index(column)
    return table.set_column(index, column, pa.array(values, table.schema.field(column).type))


def _read_all(path: Path, batch_rows: int = 65_536) -> pa.Table:
    return pa.concat_tables(read_history_batches(path, batch_rows))


# ---------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".avro", ".csv.gz"])
def test_history_round_trips(tmp_path: Path, table: pa.Table, suffix: str) -> None:
    path = tmp_path / f"history{suffix}"
    assert write_history([table.slice(0, 3), table.slice(3)], path) == len(EVENTS)

    assert _read_all(path).equals(table)
    assert [b.num_rows for b in read_history_batches(path, batch_rows=3)] == [3, 3, 1]
    events = list(iter_events(path, batch_rows=2))
    assert events == EVENTS
    for kind, event in events:
        assert tuple(event) == (SUBMITTED_FIELDS if kind == "submitted" else COMPLETED_FIELDS)
        assert event["event_time"].utcoffset() == timedelta(0)
    assert events_to_table(events).equals(table)


@pytest.mark.parametrize("fmt", FORMATS)
def test_names_are_one_object_across_events_and_batches(
    tmp_path: Path, table: pa.Table, fmt: str
) -> None:
    # the core's dicts keyed by them then hash each once and compare by identity
    path = tmp_path / f"history.{fmt}"
    write_history([table], path)
    events = [event for _, event in iter_events(path, batch_rows=2)]
    first: dict[str, str] = {}
    names = 0
    for event in events:
        for field in ("lineage_id", "model_type", "hardware_type", "candidate_hardware"):
            for value in (
                event.get(field) or () if field == "candidate_hardware" else [event.get(field)]
            ):
                if value is not None:
                    assert first.setdefault(value, value) is value, (field, value)
                    names += 1
    assert names > len(first)  # some names repeat, across batches of two rows


def test_write_history_accepts_dataframes(tmp_path: Path, table: pa.Table) -> None:
    frame = table.to_pandas()
    path = tmp_path / "history.parquet"
    assert write_history([frame.iloc[:4], frame.iloc[4:]], path) == len(EVENTS)
    assert _read_all(path).equals(table)


def test_csv_layout_is_iso_times_and_joined_candidates(tmp_path: Path, table: pa.Table) -> None:
    path = tmp_path / "history.csv"
    write_history([table], path)
    with open(path, newline="") as fo:
        reader = csv.DictReader(fo)
        assert reader.fieldnames == list(HISTORY_FILE_SCHEMA.names)
        row0, row1 = next(reader), next(reader)
    assert row0["event_time"] == "2025-09-03T10:15:00.123Z"
    assert row0["candidate_hardware"] == "H100-SXM;MI300X;TPU-v5e"
    assert row1["candidate_hardware"] == row1["seq_len"] == ""


def test_csv_reads_zone_offsets_as_utc_and_ignores_extra_columns(
    tmp_path: Path, table: pa.Table
) -> None:
    path = tmp_path / "history.csv"
    write_history([table], path)
    lines = path.read_text().splitlines()
    lines = [f"{line},cluster-{i}" for i, line in enumerate(lines)]
    lines[1] = lines[1].replace("2025-09-03T10:15:00.123Z", "2025-09-03T12:15:00.123+02:00")
    path.write_text("\n".join(lines) + "\n")
    assert _read_all(path).equals(table)


def test_avro_file_uses_the_history_row_schema(tmp_path: Path, table: pa.Table) -> None:
    path = tmp_path / "history.avro"
    write_history([table], path)
    with open(path, "rb") as fo:
        reader = fastavro.reader(fo)
        assert reader.writer_schema["name"] == "leap.v1.HistoryRow"
        first = next(reader)
    assert first["event_time"] == EVENTS[0][1]["event_time"]
    assert first["candidate_hardware"] == EVENTS[0][1]["candidate_hardware"]


def test_history_row_avsc_matches_history_schema() -> None:
    avsc = json.loads((SCHEMAS / "HistoryRow.avsc").read_text())
    assert f"{avsc['namespace']}.{avsc['name']}" == "leap.v1.HistoryRow"
    assert [f["name"] for f in avsc["fields"]] == list(HISTORY_FILE_SCHEMA.names)
    primitive = {
        pa.string(): "string",
        pa.int32(): "int",
        pa.int64(): "long",
        pa.float64(): "double",
        pa.list_(pa.string()): {"type": "array", "items": "string"},
        pa.timestamp("ms", tz="UTC"): {"type": "long", "logicalType": "timestamp-millis"},
    }
    for avro_field, arrow_field in zip(avsc["fields"], HISTORY_FILE_SCHEMA, strict=True):
        assert avro_field["doc"].strip(), avro_field["name"]
        expected = primitive[arrow_field.type]
        if arrow_field.nullable:
            assert avro_field["type"] == ["null", expected], avro_field["name"]
            assert "default" in avro_field and avro_field["default"] is None
        else:
            assert avro_field["type"] == expected, avro_field["name"]


def test_empty_history_round_trips(tmp_path: Path) -> None:
    for fmt in FORMATS:
        path = tmp_path / f"history.{fmt}"
        assert write_history([], path) == 0
        assert list(iter_events(path)) == []


# ---------------------------------------------------------------------------- broken files


def test_unknown_precision_in_csv(tmp_path: Path, table: pa.Table) -> None:
    path = tmp_path / "history.csv"
    write_history([table], path)
    lines = path.read_text().splitlines()
    lines[4] = lines[4].replace('"bf16"', "bf32")  # data row 3
    path.write_text("\n".join(lines) + "\n")
    expected = "history.csv row 3, column 'precision': 'bf32' is not one of fp32|bf16|fp16|fp8"
    with pytest.raises(HistoryError, match=re.escape(expected)):
        _read_all(path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_required_column(tmp_path: Path, table: pa.Table, fmt: str) -> None:
    path = tmp_path / f"history.{fmt}"
    broken = table.drop_columns(["precision"])
    if fmt == "avro":  # the Avro writer needs every field of its schema: archive without one
        schema = json.loads((SCHEMAS / "HistoryRow.avsc").read_text())
        schema["fields"] = [f for f in schema["fields"] if f["name"] != "precision"]
        with open(path, "wb") as fo:
            fastavro.writer(fo, fastavro.parse_schema(schema), broken.to_pylist())
    else:
        _write_unchecked(broken, path)
    expected = r"history\.\w+: missing required column\(s\) 'precision'"
    with pytest.raises(HistoryError, match=expected):
        _read_all(path)


def test_throughput_on_a_failed_attempt(tmp_path: Path, table: pa.Table) -> None:
    path = tmp_path / "history.parquet"
    _write_unchecked(_replace(table, "throughput", 4, 99.0), path)
    expected = r"row 4, column 'throughput': 99\.0 is set on an attempt that did not succeed"
    with pytest.raises(HistoryError, match=expected):
        _read_all(path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_time_going_backwards_across_a_batch_boundary(
    tmp_path: Path, table: pa.Table, fmt: str
) -> None:
    # Row 4 goes back before row 3; with batch_rows=4 they sit in different batches, and each
    # batch on its own is in order.
    path = tmp_path / f"history.{fmt}"
    _write_unchecked(_replace(table, "event_time", 4, T0 + timedelta(minutes=10)), path)
    expected = (
        "row 4, column 'event_time': 2025-09-03T10:25:00.123Z is earlier than the previous "
        "row's 2025-09-03T10:45:00.123Z"
    )
    with pytest.raises(HistoryError, match=re.escape(expected)):
        _read_all(path, batch_rows=4)
    with pytest.raises(HistoryError, match=re.escape(expected)):  # and within one batch
        _read_all(path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_non_positive_num_devices(tmp_path: Path, table: pa.Table, fmt: str) -> None:
    path = tmp_path / f"history.{fmt}"
    _write_unchecked(_replace(table, "num_devices", 5, 0), path)
    with pytest.raises(HistoryError, match=r"row 5, column 'num_devices': 0 is not a positive"):
        _read_all(path, batch_rows=2)


def test_bad_timestamp_in_csv(tmp_path: Path, table: pa.Table) -> None:
    path = tmp_path / "history.csv"
    write_history([table], path)
    text = path.read_text().replace("2025-09-03T10:16:00.123Z", "2025-09-03 25:61")  # row 1
    path.write_text(text)
    expected = "history.csv row 1, column 'event_time': '2025-09-03 25:61' is not an ISO-8601 time"
    with pytest.raises(HistoryError, match=re.escape(expected)):
        _read_all(path)


def test_time_without_zone_in_csv_is_rejected(tmp_path: Path, table: pa.Table) -> None:
    path = tmp_path / "history.csv"
    write_history([table], path)
    path.write_text(path.read_text().replace("2025-09-03T10:16:00.123Z", "2025-09-03T10:16:00"))
    with pytest.raises(HistoryError, match=r"row 1, column 'event_time'"):
        _read_all(path)


def test_text_in_an_integer_column_of_csv(tmp_path: Path, table: pa.Table) -> None:
    path = tmp_path / "history.csv"
    write_history([table], path)
    lines = path.read_text().splitlines()
    lines[7] = lines[7].replace(",512,", ',"lots",')  # data row 6
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(HistoryError, match=r"row 6, column 'global_batch_size': 'lots' is not"):
        _read_all(path, batch_rows=4)


@pytest.mark.parametrize(
    ("row", "column", "value", "message"),
    [
        (0, "model_family", None, "is null on a submitted row"),
        (2, "precision", "bf16", "'bf16' is set on a completed row"),
        (2, "status", None, "is null on a completed row"),
        (3, "steps", 5, "5 is set on a submitted row"),
        (6, "event_type", "started", "'started' is not one of submitted|completed"),
        (3, "framework", "mxnet", "'mxnet' is not one of pytorch|jax|tensorflow"),
        (4, "status", "crashed", "'crashed' is not one of succeeded|failed|preempted"),
        (5, "throughput", float("nan"), "nan is not a positive"),
        (6, "tensor_parallel", -2, "-2 is not a positive"),
        (3, "candidate_hardware", [], "is an empty list"),
        (3, "candidate_hardware", ["H100-SXM", ""], "['H100-SXM', ''] has an empty entry"),
        (5, "event_id", "e2", "'e2' repeats row 2"),
        (1, "job_id", None, "is null; every row needs it"),
        (5, "failure_reason", "oom", "'oom' is set on an attempt that succeeded"),
        (3, "failure_reason", "error", "'error' is set on a submitted row"),
        (4, "failure_reason", "", "is empty; use null for no reason"),
        (6, "micro_batches", 0, "0 is not a positive"),
        (4, "micro_batches", 4, "4 is set on a completed row"),
        (6, "flops_per_sample", 0.0, "0.0 is not a positive"),
        (6, "flops_per_sample", float("inf"), "inf is not a positive (finite)"),
        (6, "flops_per_sample", 1e-300, "1e-300 is below 1 (FLOPs of one sample"),
        (4, "flops_per_sample", 5e9, "5000000000.0 is set on a completed row"),
        (4, "team", "vision", "'vision' is set on a completed row"),
        (6, "team", "", "is empty; use null when not known"),
    ],
)
def test_each_rule_names_row_and_column(
    tmp_path: Path, table: pa.Table, row: int, column: str, value: Any, message: str
) -> None:
    path = tmp_path / "history.parquet"
    _write_unchecked(_replace(table, column, row, value), path)
    with pytest.raises(HistoryError, match=re.escape(f"row {row}, column {column!r}: {message}")):
        _read_all(path)


def test_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match=r"history\.json: unknown format"):
        _read_all(tmp_path / "history.json")


def test_write_history_refuses_a_broken_table_and_leaves_no_file(
    tmp_path: Path, table: pa.Table
) -> None:
    path = tmp_path / "history.csv"
    broken = _replace(table, "status", 4, "exploded")
    with pytest.raises(HistoryError, match=r"history\.csv row 4, column 'status': 'exploded'"):
        write_history([table.slice(0, 2), broken.slice(2)], path)  # row 2 of the second table
    assert list(tmp_path.iterdir()) == []


def test_write_history_checks_order_across_tables(tmp_path: Path, table: pa.Table) -> None:
    with pytest.raises(HistoryError, match=r"row 4, column 'event_time'"):  # row 0 of table 2
        write_history([table.slice(3), table.slice(0, 3)], tmp_path / "history.avro")


def test_events_to_table_rejects_an_unknown_event_type() -> None:
    with pytest.raises(HistoryError, match=r"events row 1, column 'event_type': 'started'"):
        events_to_table([EVENTS[0], ("started", EVENTS[1][1])])


# ---------------------------------------------------------------------------- oracle

ORACLE = pd.DataFrame(
    {
        "job_id": ["j1", "j1", "j1", "j3", "j3", "j2", "j2", "j2"],
        "hardware_type": [
            *("H100-SXM", "MI300X", "TPU-v5e"),
            *("H100-SXM", "MI300X"),
            *("H100-SXM", "MI300X", "TPU-v5e"),
        ],
        "throughput": [1200.0, 1100.0, None, 300.0, 280.5, 1250.0, 1000.0, None],
    }
)
ORACLE_JOBS = [
    ("j1", {"H100-SXM": 1200.0, "MI300X": 1100.0, "TPU-v5e": None}),
    ("j3", {"H100-SXM": 300.0, "MI300X": 280.5}),
    ("j2", {"H100-SXM": 1250.0, "MI300X": 1000.0, "TPU-v5e": None}),
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_oracle_groups_jobs_across_batch_boundaries(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"oracle.{fmt}"
    assert write_oracle([ORACLE.iloc[:4], ORACLE.iloc[4:]], path) == len(ORACLE)
    batches = list(read_oracle_batches(path, batch_rows=2))
    assert [b.num_rows for b in batches] == [2, 2, 2, 2]
    assert all(b.schema.equals(ORACLE_SCHEMA) for b in batches)
    # batch_rows=2 splits j1 (rows 0-2) and j3 (rows 3-4) over two batches each
    assert list(iter_oracle(path, batch_rows=2)) == ORACLE_JOBS


def test_oracle_job_rows_must_be_contiguous(tmp_path: Path) -> None:
    path = tmp_path / "oracle.parquet"
    write_oracle([ORACLE.iloc[[0, 3, 1]]], path)
    with pytest.raises(HistoryError, match=r"row 2, column 'job_id': 'j1' reappears"):
        list(iter_oracle(path))


def test_oracle_hardware_type_once_per_job(tmp_path: Path) -> None:
    path = tmp_path / "oracle.csv"
    write_oracle([ORACLE.iloc[[0, 1, 0]]], path)
    with pytest.raises(HistoryError, match=r"row 2, column 'hardware_type': 'H100-SXM' repeats"):
        list(iter_oracle(path, batch_rows=2))


def test_oracle_throughput_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "oracle.csv"
    frame = ORACLE.copy()
    frame.loc[6, "throughput"] = -3.0
    frame.to_csv(path, index=False)
    with pytest.raises(HistoryError, match=r"oracle\.csv row 6, column 'throughput': -3\.0"):
        list(iter_oracle(path, batch_rows=4))


def test_the_docs_csv_example_is_a_valid_history(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "history-format.md").read_text()
    example = re.search(r"```csv\n(.*?)```", doc, re.DOTALL)
    assert example is not None
    path = tmp_path / "example.csv"
    path.write_text(example.group(1))
    events = list(iter_events(path))
    assert [kind for kind, _ in events] == [kind for kind, _ in EVENTS[:6]]
    assert events[5] == EVENTS[5]
    assert [e["failure_reason"] for k, e in events if k == "completed"] == [
        "preempted",
        "oom",
        None,
    ]


# ------------------------------------------ failure_reason, micro_batches, flops_per_sample, team


def test_history_file_schema_is_the_core_schema_and_the_optional_columns() -> None:
    assert OPTIONAL_COLUMNS == ("failure_reason", "micro_batches", "flops_per_sample", "team")
    assert HISTORY_FILE_SCHEMA.names == [*HISTORY_SCHEMA.names, *OPTIONAL_COLUMNS]
    assert HISTORY_FILE_SCHEMA.field("failure_reason").type == pa.string()
    assert HISTORY_FILE_SCHEMA.field("micro_batches").type == pa.int32()
    assert HISTORY_FILE_SCHEMA.field("flops_per_sample").type == pa.float64()
    assert HISTORY_FILE_SCHEMA.field("team").type == pa.string()
    assert COMPLETED_FIELDS[-1] == "failure_reason"
    assert {"micro_batches", "flops_per_sample", "team"} <= set(SUBMITTED_FIELDS)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("column", OPTIONAL_COLUMNS)
def test_a_history_from_before_an_optional_column_still_reads(
    tmp_path: Path, table: pa.Table, fmt: str, column: str
) -> None:
    """Histories written before the column existed read with it null."""
    path = tmp_path / f"history.{fmt}"
    old = table.drop_columns([column])
    if fmt == "avro":  # archived with the HistoryRow schema of the time
        schema = json.loads((SCHEMAS / "HistoryRow.avsc").read_text())
        schema["fields"] = [f for f in schema["fields"] if f["name"] != column]
        with open(path, "wb") as fo:
            fastavro.writer(fo, fastavro.parse_schema(schema), old.to_pylist())
    else:
        _write_unchecked(old, path)
    read = _read_all(path, batch_rows=3)
    assert read.schema.equals(HISTORY_FILE_SCHEMA)
    assert read.column(column).null_count == len(EVENTS)
    assert read.drop_columns([column]).equals(old)
    events = list(iter_events(path))
    assert [tuple(e) for _, e in events] == [
        SUBMITTED_FIELDS if kind == "submitted" else COMPLETED_FIELDS for kind, _ in events
    ]
    assert all(e.get(column) is None for _, e in events)
    # ... and converting it writes the column, null
    converted = tmp_path / "converted.parquet"
    write_history(read_history_batches(path), converted)
    assert pq.read_schema(converted).names == HISTORY_FILE_SCHEMA.names


@pytest.mark.parametrize("column", OPTIONAL_COLUMNS)
def test_old_records_without_an_optional_column_are_valid_events(
    table: pa.Table, column: str
) -> None:
    old = [(k, {f: v for f, v in e.items() if f != column}) for k, e in EVENTS]
    assert check_events(old) == []
    assert events_to_table(old).drop_columns([column]).equals(table.drop_columns([column]))
    assert events_to_table(old).column(column).null_count == len(EVENTS)


# ---------------------------------------------------------------------------- null steps


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_completed_row_may_lack_steps(tmp_path: Path, fmt: str) -> None:
    events = [
        (kind, {**e, "steps": None}) if kind == "completed" else (kind, e) for kind, e in EVENTS
    ]
    path = tmp_path / f"history.{fmt}"
    write_history([events_to_table(events)], path)
    assert list(iter_events(path)) == events


# ---------------------------------------------------------------------------- collecting mode

_ORDER = "; rows must be in event-time order"
_NOT_SUCCEEDED = (
    "99.0 is set on an attempt that did not succeed; "
    "throughput is null unless status is 'succeeded'"
)


def _dirty(table: pa.Table) -> pa.Table:
    """EVENTS with five rows broken; rows 0 and 6 stay valid."""
    broken = _replace(table, "precision", 1, "bf32")
    broken = _replace(broken, "event_time", 2, T0 - timedelta(minutes=5))  # before row 0
    broken = _replace(broken, "framework", 3, "mxnet")  # broken twice: reported once,
    broken = _replace(broken, "tensor_parallel", 3, -2)  # for the first rule
    broken = _replace(broken, "throughput", 4, 99.0)  # on a failed attempt; so rejected,
    broken = _replace(broken, "event_time", 4, T0 + timedelta(minutes=100))  # its time is moot
    return _replace(broken, "event_id", 5, "e0")


DIRTY_REJECTS = [
    Reject(1, "precision", "'bf32' is not one of fp32|bf16|fp16|fp8"),
    Reject(
        2,
        "event_time",
        "2025-09-03T10:10:00.123Z is earlier than the previous row's 2025-09-03T10:15:00.123Z"
        + _ORDER,
    ),
    Reject(3, "framework", "'mxnet' is not one of pytorch|jax|tensorflow"),
    Reject(4, "throughput", _NOT_SUCCEEDED),
    Reject(5, "event_id", "'e0' repeats row 0"),
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_collecting_rejects_every_broken_row_once_and_keeps_the_rest(
    tmp_path: Path, table: pa.Table, fmt: str
) -> None:
    path = tmp_path / f"history.{fmt}"
    dirty = _dirty(table)
    _write_unchecked(dirty, path)
    rejects: list[Reject] = []

    kept = pa.concat_tables(read_history_batches(path, rejects=rejects))

    assert rejects == DIRTY_REJECTS
    assert kept.schema.equals(HISTORY_FILE_SCHEMA)
    assert kept.to_pylist() == dirty.take([0, 6]).to_pylist()
    # strict reads stop at the first broken rule, as before
    with pytest.raises(HistoryError, match=r"row 1, column 'precision': 'bf32'"):
        _read_all(path)


def test_collecting_iter_events_skips_the_rejected_rows(tmp_path: Path, table: pa.Table) -> None:
    path = tmp_path / "history.parquet"
    _write_unchecked(_dirty(table), path)
    rejects: list[Reject] = []
    events = list(iter_events(path, batch_rows=3, rejects=rejects))
    # the duplicate of row 0 sits in another batch: uniqueness is checked within a batch
    assert [event["event_id"] for _, event in events] == ["e0", "e0", "e6"]
    assert rejects == DIRTY_REJECTS[:4]


def test_collecting_turns_values_that_do_not_cast_into_rejects(
    tmp_path: Path, table: pa.Table
) -> None:
    path = tmp_path / "history.csv"
    write_history([table], path)
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace("2025-09-03T10:16:00.123Z", "2025-09-03 25:61")  # row 1
    lines[6] = lines[6].replace("2345.25", '"fast"')  # row 5
    lines[7] = lines[7].replace(",512,", ',"lots",')  # row 6
    path.write_text("\n".join(lines) + "\n")
    rejects: list[Reject] = []

    kept = pa.concat_tables(read_history_batches(path, batch_rows=4, rejects=rejects))

    assert [(r.row, r.column) for r in rejects] == [
        (1, "event_time"),
        (5, "throughput"),
        (6, "global_batch_size"),
    ]
    assert rejects[1].reason == "'fast' is not a valid double"
    assert rejects[0].reason.startswith("'2025-09-03 25:61' is not an ISO-8601 time")
    assert kept.equals(table.take([0, 2, 3, 4]))


@pytest.mark.parametrize("fmt", FORMATS)
def test_collecting_order_across_a_batch_boundary(
    tmp_path: Path, table: pa.Table, fmt: str
) -> None:
    path = tmp_path / f"history.{fmt}"
    _write_unchecked(_replace(table, "event_time", 4, T0 + timedelta(minutes=10)), path)
    expected = [
        Reject(
            4,
            "event_time",
            "2025-09-03T10:25:00.123Z is earlier than the previous row's "
            "2025-09-03T10:45:00.123Z" + _ORDER,
        )
    ]
    for batch_rows in (4, 65_536):
        rejects: list[Reject] = []
        kept = pa.concat_tables(read_history_batches(path, batch_rows, rejects=rejects))
        assert rejects == expected
        assert kept.column("event_id").to_pylist() == ["e0", "e1", "e2", "e3", "e5", "e6"]


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_collecting_still_raises_for_a_missing_column(
    tmp_path: Path, table: pa.Table, fmt: str
) -> None:
    path = tmp_path / f"history.{fmt}"
    _write_unchecked(table.drop_columns(["status"]), path)
    with pytest.raises(HistoryError, match=r"missing required column\(s\) 'status'"):
        list(read_history_batches(path, rejects=[]))


def test_collecting_still_raises_for_a_column_of_the_wrong_type(
    tmp_path: Path, table: pa.Table
) -> None:
    path = tmp_path / "history.parquet"
    steps = pa.array([[1]] * table.num_rows, pa.list_(pa.int64()))
    pq.write_table(_nullable(table).set_column(20, "steps", steps), path)
    with pytest.raises(HistoryError, match=r"column 'steps' has type list<\w+: int64>"):
        list(read_history_batches(path, rejects=[]))


def test_collecting_oracle_is_strict_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "oracle.csv"
    frame = ORACLE.copy()
    frame.loc[6, "throughput"] = -3.0
    frame.to_csv(path, index=False)
    with pytest.raises(HistoryError, match=r"row 6, column 'throughput'"):
        list(read_oracle_batches(path))


# ---------------------------------------------------------------------------- check_events


def test_check_events_accepts_valid_events_and_a_completion_without_steps() -> None:
    no_steps = ("completed", _completed(7, "j4", "l1", 95, steps=None))
    assert check_events([*EVENTS, no_steps]) == []
    assert check_events([]) == []


def test_check_events_rejects_contract_breaking_records() -> None:
    events = [
        EVENTS[0],
        ("submitted", _submitted(1, "j5", "l3", 1, precision="bf32")),
        ("submitted", _submitted(2, "j6", "l3", 2, num_devices=0)),
        ("completed", _completed(3, "j1", "l1", 3, status="exploded", throughput=None)),
        ("completed", _completed(4, "j2", "l1", 4, num_devices="eight")),  # wrong type
        ("completed", _completed(5, "j3", "l2", 5, status="failed")),  # throughput set
        ("submitted", _submitted(6, "j7", "l3", 6, steps=3)),  # a JobCompleted field
        ("started", _submitted(7, "j8", "l3", 7)),
        EVENTS[2],
    ]
    assert check_events(events) == [
        Reject(1, "precision", "'bf32' is not one of fp32|bf16|fp16|fp8"),
        Reject(2, "num_devices", "0 is not a positive (finite) number"),
        Reject(3, "status", "'exploded' is not one of succeeded|failed|preempted"),
        Reject(4, "num_devices", "'eight' is not a valid int32"),
        Reject(
            5,
            "throughput",
            "1234.5 is set on an attempt that did not succeed; "
            "throughput is null unless status is 'succeeded'",
        ),
        Reject(6, "steps", "3 is set on a submitted row; it belongs to completed rows only"),
        Reject(7, "event_type", "'started' is not one of submitted|completed"),
    ]


def test_check_events_leaves_order_and_duplicates_to_the_stream(table: pa.Table) -> None:
    late_and_repeated = [*reversed(EVENTS), EVENTS[0], EVENTS[0]]
    assert check_events(late_and_repeated) == []
    # the same events as a history break its stream-level rules
    with pytest.raises(HistoryError, match=r"column 'event_time'"):
        events_to_table(late_and_repeated)


def test_check_events_takes_what_fastavro_decodes() -> None:
    from leap_stream.data.codec import AvroCodec

    codec = AvroCodec()
    decoded = [
        ("submitted", codec.decode(codec.encode("JobSubmitted", EVENTS[0][1]))),
        ("completed", codec.decode(codec.encode("JobCompleted", {**EVENTS[5][1], "steps": None}))),
        ("completed", codec.decode(codec.encode("JobCompleted", {**EVENTS[5][1], "steps": -1}))),
    ]
    assert check_events(decoded) == [Reject(2, "steps", "-1 is negative")]
