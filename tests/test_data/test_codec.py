"""The event contract (schemas/*.avsc) and its single-object codec."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fastavro.schema import to_parsing_canonical_form

from leap_stream.core.events import FRAMEWORKS, PRECISIONS, STATUSES
from leap_stream.data import codec as codec_module
from leap_stream.data.codec import (
    ADDED_FIELDS,
    MARKER,
    AvroCodec,
    CodecError,
    decode,
    default_codec,
    encode,
)
from leap_stream.data.history import HISTORY_FILE_SCHEMA

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
EVENT_SCHEMAS = (
    "JobSubmitted",
    "JobCompleted",
    "HardwareRanking",
    "ModelSnapshot",
    "DeadLetter",
    "LearnExample",
    "ServingDecision",
)
T0 = dt.datetime(2024, 5, 1, 12, 30, 15, 123000, tzinfo=dt.UTC)


def _crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO written out from the Avro spec ("Schema Fingerprints"), as a reference."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def _candidate(i: int, eligible: bool = True) -> dict[str, Any]:
    throughput = 950.0 - 37.5 * i
    price = 2.25 + 0.5 * i
    return {
        "hardware_type": f"hw-{i:02d}",
        "rank": i + 1 if eligible else None,
        "eligible": eligible,
        "ineligible_reason": None if eligible else "needs 80 GiB per device, has 24 GiB",
        "predicted_throughput": throughput if eligible else None,
        "throughput_lower": throughput * 0.9 if eligible else None,
        "throughput_upper": throughput * 1.1 if eligible else None,
        "price_per_device_hour": price,
        "predicted_cost_per_1k_samples": (64 * price / 3600) / throughput * 1000
        if eligible
        else None,
        "source": "model" if i % 2 else "lineage_prior",
    }


# One realistic record of each event type, every field present, in the shape decode returns.
RECORDS: dict[str, dict[str, Any]] = {
    "JobSubmitted": {
        "event_id": "6f1c2a9e-3b7d-4c55-9e21-0d8f4b7a1c33",
        "event_time": T0,
        "job_id": "job-000123-a2",
        "lineage_id": "lin-000123",
        "model_type": "llama-7b",
        "model_family": "decoder",
        "framework": "pytorch",
        "param_count": 6_738_415_616,
        "global_batch_size": 512,
        "seq_len": 4096,
        "precision": "bf16",
        "num_devices": 64,
        "tensor_parallel": 8,
        "pipeline_parallel": 2,
        "micro_batches": 16,
        "flops_per_sample": 2.1e14,
        "team": "speech-research",
        "requested_hardware": "hw-03",
        "candidate_hardware": ["hw-00", "hw-01", "hw-03", "hw-07"],
    },
    "JobCompleted": {
        "event_id": "0b9d7e2f-8a14-4f6e-b3c1-5e2a9d0c7f48",
        "event_time": T0 + dt.timedelta(hours=7, minutes=3),
        "job_id": "job-000123-a2",
        "lineage_id": "lin-000123",
        "hardware_type": "hw-01",
        "num_devices": 64,
        "status": "succeeded",
        "throughput": 812.4375,
        "steps": 25_000,
        "failure_reason": None,
    },
    "HardwareRanking": {
        "event_id": "c4e8a1d2-7f3b-4e9a-8c6d-2b1f0e9d8a77",
        "event_time": T0 + dt.timedelta(milliseconds=42),
        "job_id": "job-000123-a2",
        "lineage_id": "lin-000123",
        "model_version": "online-2024-05-01T12:00:00Z-1842",
        "abstained": False,
        "abstain_reason": None,
        "candidates": [_candidate(i) for i in range(22)] + [_candidate(22, eligible=False)],
    },
    "ModelSnapshot": {
        "event_id": "9a7b6c5d-4e3f-4a1b-9c8d-7e6f5a4b3c2d",
        "event_time": T0 + dt.timedelta(minutes=5),
        "model_version": "online-2024-05-01T12:00:00Z-1842",
        "model_kind": "online",
        "trained_on_events": 1842,
        "library_versions": {"python": "3.11.9", "river": "0.26.1", "numpy": "2.4.0"},
        "metrics": {"mape": 0.137, "interval_coverage": 0.902},
        "payload_format": "pickle",
        "payload": pickle.dumps({"weights": [0.25, -1.5, 3.0], "intercept": 7.0}),
        "log_offsets": {"leap.learn:0": 1907},
        "trained_until": None,
    },
    "ServingDecision": {
        "event_id": "5e4d3c2b-1a09-4f8e-9d7c-6b5a4f3e2d1c",
        "event_time": T0 + dt.timedelta(days=1, seconds=3),
        "day": dt.date(2024, 5, 2),
        "serving": "lightgbm",
        "serving_version": "lightgbm-20240502T0000Z",
        "promoted": True,
        "reason": "lightgbm 64.0% beat online 61.5% by >= 1.0%",
        "window_shares": {"online": 0.615, "lightgbm": 0.64},
        "window_attempts": 9120,
    },
    "LearnExample": {
        "job_id": "job-000000042",
        "lineage_id": "lin-00000007",
        "event_time": T0 + dt.timedelta(hours=3),
        "job": {
            "model_type": "decoder-7b-v3",
            "model_family": "dense_llm",
            "framework": "pytorch",
            "param_count": 7_000_000_000,
            "global_batch_size": 1024,
            "seq_len": 4096,
            "precision": "bf16",
            "num_devices": 64,
            "tensor_parallel": 1,
            "pipeline_parallel": 1,
            "micro_batches": None,
            "flops_per_sample": None,
            "team": "speech-research",
        },
        "hardware_type": "H100-SXM",
        "target": 4.3125,
        "source": "transfer",
        "reference": {
            "hardware_type": "MI300X",
            "log_throughput": 4.25,
            "job": {
                "model_type": "decoder-7b-v3",
                "model_family": "dense_llm",
                "framework": "pytorch",
                "param_count": 7_000_000_000,
                "global_batch_size": 512,
                "seq_len": 4096,
                "precision": "bf16",
                "num_devices": 32,
                "tensor_parallel": 1,
                "pipeline_parallel": 4,
                "micro_batches": 8,
                "flops_per_sample": 1.72e14,
                "team": None,
            },
        },
        "exact_references": [{"hardware_type": "MI250", "log_throughput": 3.875}],
        "memory_ratio": 0.625,
        "out_of_memory": False,
        "abs_log_residual": 0.0625,
        "predicted": 76.5,
        "throughput": 81.25,
    },
    "DeadLetter": {
        "event_id": "5d4c3b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1a",
        "event_time": T0 + dt.timedelta(seconds=3),
        "source_topic": "job-completed",
        "partition": 3,
        "offset": 1_048_576,
        "key": b"lin-000123",
        "payload": b'{"job_id": "job-000123-a2"}',
        "error_type": "CodecError",
        "reason": "wrong marker 7b 22: not Avro single-object encoding (expected c3 01)",
    },
}


def _schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / f"{name}.avsc").read_text())


def _release(directory: Path, schema: dict[str, Any]) -> AvroCodec:
    """A codec of another release: the schema directory with ``schema`` in its record's place."""
    for path in SCHEMA_DIR.glob("*.avsc"):
        shutil.copy(path, directory / path.name)
    (directory / f"{schema['name']}.avsc").write_text(json.dumps(schema))
    return AvroCodec(directory)


def _job_submitted_v2() -> dict[str, Any]:
    """JobSubmitted as a later release would evolve it: one added field, with a default."""
    v2 = _schema("JobSubmitted")
    v2["fields"].append(
        {
            "name": "activation_checkpointing",
            "type": "boolean",
            "default": False,
            "doc": "Whether activations are recomputed in the backward pass.",
        }
    )
    return v2


@pytest.fixture(scope="module")
def codec() -> AvroCodec:
    return AvroCodec()


@pytest.fixture()
def job_submitted_bytes(codec: AvroCodec) -> bytes:
    return codec.encode("JobSubmitted", RECORDS["JobSubmitted"])


# --- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EVENT_SCHEMAS)
def test_every_event_type_round_trips(codec: AvroCodec, name: str) -> None:
    data = codec.encode(name, RECORDS[name])
    assert codec.writer_name(data) == f"leap.v1.{name}"
    assert codec.decode(data) == RECORDS[name]


def test_short_and_full_names_encode_alike(codec: AvroCodec) -> None:
    record = RECORDS["JobCompleted"]
    assert codec.encode("JobCompleted", record) == codec.encode("leap.v1.JobCompleted", record)


def test_omitted_fields_with_defaults_decode_as_null(codec: AvroCodec) -> None:
    record = {k: v for k, v in RECORDS["JobSubmitted"].items()}
    for field in ("seq_len", "requested_hardware", "candidate_hardware"):
        del record[field]
    decoded = codec.decode(codec.encode("JobSubmitted", record))
    assert (decoded["seq_len"], decoded["requested_hardware"], decoded["candidate_hardware"]) == (
        None,
        None,
        None,
    )


def test_timestamps_accept_epoch_millis_and_come_back_utc_aware(codec: AvroCodec) -> None:
    millis = int(T0.timestamp() * 1000)
    record = {**RECORDS["JobCompleted"], "event_time": millis}
    decoded = codec.decode(codec.encode("JobCompleted", record))
    assert decoded["event_time"] == T0
    assert decoded["event_time"].utcoffset() == dt.timedelta(0)


def test_module_level_helpers_use_one_cached_codec() -> None:
    assert default_codec() is default_codec()
    data = encode("DeadLetter", RECORDS["DeadLetter"])
    assert data == default_codec().encode("DeadLetter", RECORDS["DeadLetter"])
    assert decode(data) == RECORDS["DeadLetter"]


# --- the single-object header --------------------------------------------------------------------


def test_reference_crc64_matches_the_spec_test_vector() -> None:
    # The Avro projects' fingerprint tests pin the schema "int" at 0x7275d51a3f395c8f, whose
    # single-object header is c3 01 8f 5c 39 3f 1a d5 75 72 (little-endian).
    assert _crc64_avro(b'"int"') == 0x7275D51A3F395C8F
    assert MARKER + _crc64_avro(b'"int"').to_bytes(8, "little") == bytes.fromhex(
        "c3018f5c393f1ad57572"
    )


def test_header_is_marker_then_little_endian_crc64_of_the_canonical_form() -> None:
    codec = AvroCodec()
    # Docs, defaults, logical types and the separate namespace all drop out of the canonical form.
    tiny = {
        "type": "record",
        "name": "Tiny",
        "namespace": "leap.v1",
        "doc": "A tiny record.",
        "fields": [
            {
                "name": "t",
                "type": {"type": "long", "logicalType": "timestamp-millis"},
                "doc": "A time.",
            }
        ],
    }
    canonical = b'{"name":"leap.v1.Tiny","type":"record","fields":[{"name":"t","type":"long"}]}'
    expected = _crc64_avro(canonical)
    assert codec.register(tiny) == expected
    data = codec.encode("Tiny", {"t": 0})
    assert data == MARKER + expected.to_bytes(8, "little") + b"\x00"


@pytest.mark.parametrize("name", EVENT_SCHEMAS)
def test_every_event_header_carries_its_schema_fingerprint(codec: AvroCodec, name: str) -> None:
    canonical = to_parsing_canonical_form(_schema(name)).encode()
    data = codec.encode(name, RECORDS[name])
    assert data[:10] == MARKER + _crc64_avro(canonical).to_bytes(8, "little")


# --- evolution: add fields with defaults only ----------------------------------------------------


def test_old_bytes_decode_with_the_new_reader_filling_the_default(
    codec: AvroCodec, job_submitted_bytes: bytes
) -> None:
    decoded = codec.decode(job_submitted_bytes, reader=_job_submitted_v2())
    assert decoded == {**RECORDS["JobSubmitted"], "activation_checkpointing": False}


def test_new_bytes_decode_with_the_old_reader_dropping_the_new_field(tmp_path: Path) -> None:
    # The new release: the same schema directory, with JobSubmitted at v2.
    v2 = _job_submitted_v2()
    new = _release(tmp_path, v2)
    new_bytes = new.encode(
        "JobSubmitted", {**RECORDS["JobSubmitted"], "activation_checkpointing": True}
    )
    assert new.decode(new_bytes)["activation_checkpointing"] is True

    old = AvroCodec()
    # The old reader must know the new writer schema first: that is the rollout order.
    with pytest.raises(CodecError, match="unknown writer schema fingerprint"):
        old.decode(new_bytes)
    old.register(v2)
    assert old.decode(new_bytes) == RECORDS["JobSubmitted"]
    # Registering a writer schema does not change what the old codec writes.
    assert (
        old.encode("JobSubmitted", RECORDS["JobSubmitted"])[:10]
        == (AvroCodec().encode("JobSubmitted", RECORDS["JobSubmitted"])[:10])
    )


def test_a_field_added_without_default_breaks_old_bytes(
    codec: AvroCodec, job_submitted_bytes: bytes
) -> None:
    # Why the rule says "with defaults": the new reader has nothing to fill the field with.
    broken = _job_submitted_v2()
    del broken["fields"][-1]["default"]
    with pytest.raises(CodecError, match="activation_checkpointing"):
        codec.decode(job_submitted_bytes, reader=broken)


def _job_completed_v1() -> dict[str, Any]:
    """JobCompleted as first published, before failure_reason."""
    v1 = _schema("JobCompleted")
    v1["fields"] = [f for f in v1["fields"] if f["name"] != "failure_reason"]
    return v1


def test_job_completed_gained_failure_reason_by_the_rule() -> None:
    field = _schema("JobCompleted")["fields"][-1]
    assert field["name"] == "failure_reason"
    assert field["type"] == ["null", "string"] and field["default"] is None
    assert ADDED_FIELDS["leap.v1.JobCompleted"] == ("failure_reason",)


def test_job_completed_bytes_from_before_failure_reason_still_decode(tmp_path: Path) -> None:
    # A producer of the previous release: its schema directory has JobCompleted v1.
    old = _release(tmp_path, _job_completed_v1())
    record = {k: v for k, v in RECORDS["JobCompleted"].items() if k != "failure_reason"}
    old_bytes = old.encode("JobCompleted", record)
    # The current codec registers v1 itself (no register() call), and fills the default.
    assert AvroCodec().decode(old_bytes) == {**record, "failure_reason": None}
    assert decode(old_bytes)["failure_reason"] is None
    # New bytes carry the reason, and an old reader that registered the new schema drops it.
    new_bytes = encode(
        "JobCompleted", {**record, "status": "failed", "throughput": None, "failure_reason": "oom"}
    )
    assert decode(new_bytes)["failure_reason"] == "oom"
    assert new_bytes[:10] != old_bytes[:10]  # a new fingerprint
    old.register(_schema("JobCompleted"))
    assert "failure_reason" not in old.decode(new_bytes)


def test_learn_example_bytes_from_before_exact_references_read_them_as_empty(
    tmp_path: Path,
) -> None:
    # (the release before exact_references had no JobConfig.flops_per_sample nor team either)
    v1 = _schema("LearnExample")
    v1["fields"] = [f for f in v1["fields"] if f["name"] != "exact_references"]
    job_config = next(f for f in v1["fields"] if f["name"] == "job")["type"]
    later = ("flops_per_sample", "team")
    job_config["fields"] = [f for f in job_config["fields"] if f["name"] not in later]
    record = {k: v for k, v in RECORDS["LearnExample"].items() if k != "exact_references"}
    record = _example_without(record, later)
    old_bytes = _release(tmp_path, v1).encode("LearnExample", record)
    assert old_bytes[:10] != encode("LearnExample", RECORDS["LearnExample"])[:10]
    decoded = decode(old_bytes)
    assert decoded["exact_references"] == []
    assert decoded["job"] == {**record["job"], "flops_per_sample": None, "team": None}


# JobSubmitted's fields added since its first release (as JobConfig's), each with those after it
JOB_FIELDS_ADDED = [
    ("micro_batches", ("flops_per_sample", "team")),
    ("flops_per_sample", ("team",)),
    ("team", ()),
]


def _example_without(record: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """A LearnExample record without the JobConfig fields ``names`` (its job's and its
    reference's)."""
    job = {k: v for k, v in record["job"].items() if k not in names}
    reference = record["reference"]
    reference = {**reference, "job": {k: v for k, v in reference["job"].items() if k not in names}}
    return {**record, "job": job, "reference": reference}


@pytest.mark.parametrize(("field", "later"), JOB_FIELDS_ADDED)
def test_learn_example_bytes_from_before_a_job_field_still_decode(
    tmp_path: Path, field: str, later: tuple[str, ...]
) -> None:
    # A field added inside a nested record (JobConfig, used twice) follows the same rule; the
    # release before it had none of those added after it (ADDED_FIELDS is in release order).
    gone = (field, *later)
    v1 = _schema("LearnExample")
    if field == "micro_batches":  # exact_references came between the two
        v1["fields"] = [f for f in v1["fields"] if f["name"] != "exact_references"]
    job_config = next(f for f in v1["fields"] if f["name"] == "job")["type"]
    job_config["fields"] = [f for f in job_config["fields"] if f["name"] not in gone]
    record = RECORDS["LearnExample"]
    if field == "micro_batches":
        record = {k: v for k, v in record.items() if k != "exact_references"}
    old_bytes = _release(tmp_path, v1).encode("LearnExample", _example_without(record, gone))
    new_bytes = encode("LearnExample", RECORDS["LearnExample"])
    assert old_bytes[:10] != new_bytes[:10]  # a new fingerprint
    decoded = decode(old_bytes)
    for name in gone:
        assert decoded["job"][name] is None
        assert decoded["reference"]["job"][name] is None
    assert decoded["reference"]["job"]["pipeline_parallel"] == 4
    if field != "micro_batches":
        assert decoded["reference"]["job"]["micro_batches"] == 8


@pytest.mark.parametrize(("field", "later"), JOB_FIELDS_ADDED)
def test_job_submitted_bytes_from_before_a_field_read_it_as_unknown(
    tmp_path: Path, field: str, later: tuple[str, ...]
) -> None:
    gone = (field, *later)
    v1 = _schema("JobSubmitted")
    v1["fields"] = [f for f in v1["fields"] if f["name"] not in gone]
    record = {k: v for k, v in RECORDS["JobSubmitted"].items() if k not in gone}
    assert decode(_release(tmp_path, v1).encode("JobSubmitted", record)) == {
        **record,
        **dict.fromkeys(gone),
    }


def test_reading_into_another_record_is_refused_in_one_line(
    codec: AvroCodec, job_submitted_bytes: bytes
) -> None:
    with pytest.raises(CodecError) as info:
        codec.decode(job_submitted_bytes, reader="JobCompleted")
    assert str(info.value) == "cannot read a leap.v1.JobSubmitted message as leap.v1.JobCompleted"


# --- corrupt bytes -------------------------------------------------------------------------------


def test_wrong_marker(codec: AvroCodec, job_submitted_bytes: bytes) -> None:
    with pytest.raises(CodecError, match=r"wrong marker 7b 22: not Avro single-object encoding"):
        codec.decode(b'{"job_id": "job-000123-a2", "lineage_id": "lin-000123"}')
    with pytest.raises(CodecError, match="wrong marker c3 02"):
        codec.decode(b"\xc3\x02" + job_submitted_bytes[2:])


@pytest.mark.parametrize("size", [0, 1, 2, 9])
def test_truncated_header(codec: AvroCodec, job_submitted_bytes: bytes, size: int) -> None:
    with pytest.raises(CodecError, match=f"truncated header: .* needs 10 header bytes, got {size}"):
        codec.decode(job_submitted_bytes[:size])


def test_every_truncated_body_is_reported_as_truncated(
    codec: AvroCodec, job_submitted_bytes: bytes
) -> None:
    for size in range(10, len(job_submitted_bytes)):
        with pytest.raises(CodecError, match=r"truncated body of leap\.v1\.JobSubmitted"):
            codec.decode(job_submitted_bytes[:size])


def test_unknown_fingerprint(codec: AvroCodec, job_submitted_bytes: bytes) -> None:
    data = MARKER + (0x0123456789ABCDEF).to_bytes(8, "little") + job_submitted_bytes[10:]
    with pytest.raises(CodecError, match="unknown writer schema fingerprint 0x0123456789abcdef"):
        codec.decode(data)
    with pytest.raises(CodecError, match="unknown writer schema fingerprint"):
        codec.writer_name(data)


def test_garbage_body(codec: AvroCodec, job_submitted_bytes: bytes) -> None:
    # event_id claims 2 bytes, which are not UTF-8.
    data = job_submitted_bytes[:10] + b"\x04\xff\xfe" + job_submitted_bytes[12:]
    with pytest.raises(
        CodecError, match=r"corrupt body of leap\.v1\.JobSubmitted: UnicodeDecodeError: "
    ):
        codec.decode(data)


def test_bad_union_branch(codec: AvroCodec) -> None:
    record = {**RECORDS["JobCompleted"], "status": "failed", "throughput": None}
    data = codec.encode("JobCompleted", record)
    # [null, double] branch 0, then `steps`: [null, long] branch 1 and 25000 (3 bytes), then
    # `failure_reason`: [null, string] branch 0
    branch = len(data) - 6
    assert data[branch] == 0
    corrupt = data[:branch] + b"\x0a" + data[branch + 1 :]  # branch 5 of a 2-branch union
    with pytest.raises(CodecError, match=r"corrupt body of leap\.v1\.JobCompleted: IndexError"):
        codec.decode(corrupt)


def test_trailing_bytes(codec: AvroCodec, job_submitted_bytes: bytes) -> None:
    with pytest.raises(CodecError, match=r"corrupt body of .*: 3 trailing byte\(s\) after the"):
        codec.decode(job_submitted_bytes + b"\x00\x00\x00")


@pytest.mark.parametrize("name", EVENT_SCHEMAS)
def test_random_bodies_decode_or_raise_codec_error_only(codec: AvroCodec, name: str) -> None:
    header = codec.encode(name, RECORDS[name])[:10]
    rng = random.Random(20240501)
    for _ in range(500):
        body = rng.randbytes(rng.randrange(0, 200))
        with contextlib.suppress(CodecError):  # anything else escapes and fails the test
            codec.decode(header + body)


# --- records that do not fit on encode -----------------------------------------------------------


def test_missing_required_field_names_it(codec: AvroCodec) -> None:
    record = {k: v for k, v in RECORDS["JobCompleted"].items() if k != "hardware_type"}
    with pytest.raises(
        CodecError, match=r"record does not fit leap\.v1\.JobCompleted: .*hardware_type"
    ):
        codec.encode("JobCompleted", record)


def test_missing_field_of_a_nested_candidate_names_it(codec: AvroCodec) -> None:
    record = copy.deepcopy(RECORDS["HardwareRanking"])
    del record["candidates"][4]["eligible"]
    with pytest.raises(CodecError, match="eligible"):
        codec.encode("HardwareRanking", record)


def test_unknown_field_is_refused_not_dropped(codec: AvroCodec) -> None:
    record = {**RECORDS["JobSubmitted"], "seqlen": 2048}
    with pytest.raises(CodecError, match="seqlen"):
        codec.encode("JobSubmitted", record)


def test_wrong_type_names_the_field(codec: AvroCodec) -> None:
    record = {**RECORDS["JobCompleted"], "num_devices": "64"}
    with pytest.raises(CodecError, match="num_devices"):
        codec.encode("JobCompleted", record)


def test_unknown_record_name_and_non_dict(codec: AvroCodec) -> None:
    with pytest.raises(
        CodecError, match=r"unknown record name 'JobStarted'; known: .*JobSubmitted"
    ):
        codec.encode("JobStarted", {})
    with pytest.raises(CodecError, match="must be a dict, got list"):
        codec.encode("JobCompleted", [])


def test_empty_schema_dir(tmp_path: Path) -> None:
    with pytest.raises(CodecError, match=r"no \*\.avsc files in"):
        AvroCodec(tmp_path)


def test_default_schema_dir_is_the_repository_one() -> None:
    assert codec_module.default_schema_dir() == SCHEMA_DIR


# --- the schema files themselves -----------------------------------------------------------------


def _records_in(schema: Any) -> list[dict[str, Any]]:
    """Every record schema defined in ``schema``, nested ones included."""
    if isinstance(schema, list):
        return [r for branch in schema for r in _records_in(branch)]
    if not isinstance(schema, dict):
        return []
    found = []
    if schema.get("type") == "record":
        found.append(schema)
        for field in schema["fields"]:
            found += _records_in(field["type"])
    found += _records_in(schema.get("items")) + _records_in(schema.get("values"))
    return found


def test_the_event_schemas_exist_one_record_per_file() -> None:
    for name in EVENT_SCHEMAS:
        schema = _schema(name)
        assert (schema["name"], schema["namespace"]) == (name, "leap.v1")


@pytest.mark.parametrize("path", sorted(SCHEMA_DIR.glob("*.avsc")), ids=lambda p: p.name)
def test_every_record_and_field_has_a_doc(path: Path) -> None:
    records = _records_in(json.loads(path.read_text()))
    assert records
    for record in records:
        assert record.get("doc", "").strip(), f"{path.name}: record {record['name']} has no doc"
        for field in record["fields"]:
            assert field.get("doc", "").strip(), (
                f"{path.name}: field {record['name']}.{field['name']} has no doc"
            )


def test_candidate_score_is_nested_in_hardware_ranking() -> None:
    names = [r["name"] for r in _records_in(_schema("HardwareRanking"))]
    assert names == ["HardwareRanking", "CandidateScore"]


_ARROW_OF_AVRO = {
    "string": pa.string(),
    "int": pa.int32(),
    "long": pa.int64(),
    "double": pa.float64(),
}


def _arrow_type(avro_type: Any) -> pa.DataType:
    if isinstance(avro_type, list):  # [null, T]
        (inner,) = [t for t in avro_type if t != "null"]
        return _arrow_type(inner)
    if isinstance(avro_type, dict):
        if avro_type.get("logicalType") == "timestamp-millis":
            return pa.timestamp("ms", tz="UTC")
        if avro_type["type"] == "array":
            return pa.list_(_arrow_type(avro_type["items"]))
    return _ARROW_OF_AVRO[avro_type]


def test_job_events_match_the_history_table_columns() -> None:
    columns = {f.name: f.type for f in HISTORY_FILE_SCHEMA}
    seen = {"event_type"}
    for name in ("JobSubmitted", "JobCompleted"):
        for field in _schema(name)["fields"]:
            assert field["name"] in columns, f"{name}.{field['name']} is not a history column"
            assert _arrow_type(field["type"]) == columns[field["name"]], f"{name}.{field['name']}"
            seen.add(field["name"])
    assert seen == set(columns)


@pytest.mark.parametrize(
    ("name", "field", "allowed"),
    [
        ("JobSubmitted", "precision", PRECISIONS),
        ("JobSubmitted", "framework", FRAMEWORKS),
        ("JobCompleted", "status", STATUSES),
    ],
)
def test_documented_allowed_values_match_the_enumerations(
    name: str, field: str, allowed: tuple[str, ...]
) -> None:
    (doc,) = [f["doc"] for f in _schema(name)["fields"] if f["name"] == field]
    listed = doc.split("Allowed values:")[1].strip().rstrip(".")
    assert tuple(v.strip() for v in listed.split(",")) == allowed
