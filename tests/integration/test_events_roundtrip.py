"""Every event type through a real Kafka broker, Avro single-object encoded, back identical."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kafka_fixtures import TopicFactory, produce, read_topic

from leap_stream.core import LeapCore
from leap_stream.core.catalog import default_catalog
from leap_stream.data.codec import MARKER, decode, encode

pytestmark = pytest.mark.integration

WHEN = datetime(2025, 11, 3, 9, 30, 15, 123000, tzinfo=UTC)


def one_of_each() -> list[tuple[str, dict[str, Any]]]:
    """A realistic record of every event type, the ranking made by the real core."""
    submitted = {
        "event_id": "job-000000042/submitted",
        "event_time": WHEN,
        "job_id": "job-000000042",
        "lineage_id": "lin-00000007",
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
        "flops_per_sample": 1.72e14,
        "team": "llm-pretraining",
        "requested_hardware": "H100-SXM",
        "candidate_hardware": ["H100-SXM", "MI300X", "TPU-v5p", "L4"],
    }
    ranking = LeapCore(default_catalog()).on_submitted(submitted).record()
    completed = {
        "event_id": "job-000000042/completed",
        "event_time": WHEN,
        "job_id": "job-000000042",
        "lineage_id": "lin-00000007",
        "hardware_type": "H100-SXM",
        "num_devices": 64,
        "status": "succeeded",
        "throughput": 81.25,
        "steps": 12_000,
        "failure_reason": None,
    }
    snapshot = {
        "event_id": "snapshot-1",
        "event_time": WHEN,
        "model_version": "online-1000",
        "model_kind": "online",
        "trained_on_events": 1000,
        "library_versions": {"river": "0.26.1"},
        "metrics": {"within_10pct": 0.61},
        "payload_format": "pickle",
        "payload": b"\x80\x05\x95 not really a model",
        "log_offsets": {"leap.learn:0": 1000},
        "trained_until": None,
    }
    decision = {
        "event_id": "serving-1",
        "event_time": WHEN,
        "day": WHEN.date(),
        "serving": "lightgbm",
        "serving_version": "lightgbm-20260301T0000Z",
        "promoted": True,
        "reason": "lightgbm 64.0% beat online 61.5% by >= 1.0%",
        "window_shares": {"online": 0.615, "lightgbm": 0.64},
        "window_attempts": 9120,
    }
    dead_letter = {
        "event_id": "dead-1",
        "event_time": WHEN,
        "source_topic": "job-submitted",
        "partition": 0,
        "offset": 17,
        "key": b"lin-00000007",
        "payload": b"\xc3\x01garbage",
        "error_type": "CodecError",
        "reason": "unknown writer schema fingerprint 0x0102030405060708",
    }
    return [
        ("JobSubmitted", submitted),
        ("JobCompleted", completed),
        ("HardwareRanking", ranking),
        ("ModelSnapshot", snapshot),
        ("DeadLetter", dead_letter),
        ("ServingDecision", decision),
    ]


def test_every_event_type_round_trips_through_the_broker(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = kafka_topic(partitions=1, prefix="events")
    records = one_of_each()
    produce(kafka_bootstrap, topic, [(n.encode(), encode(n, r)) for n, r in records])
    received = read_topic(kafka_bootstrap, topic, len(records))

    assert len(received) == len(records)
    for (name, record), message in zip(records, received, strict=True):
        value = message.value()
        assert value[:2] == MARKER  # single-object encoding on the wire
        assert message.key() == name.encode()
        assert decode(value) == record
