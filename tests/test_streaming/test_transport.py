"""Reading a topic to its end on the real broker: long reads, offsets, progress."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition
from kafka_fixtures import TopicFactory, produce, unique_name

from leap_stream.streaming import transport
from leap_stream.streaming.transport import read_to_end

pytestmark = pytest.mark.integration

RECORDS = 2_000


@pytest.fixture
def filled_topic(kafka_bootstrap: str, kafka_topic: TopicFactory) -> str:
    topic = kafka_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(b"k", str(i).encode()) for i in range(RECORDS)])
    return topic


def test_a_read_longer_than_the_timeout_goes_on_while_records_come(
    kafka_bootstrap: str,
    filled_topic: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The timeout bounds a stall: a worker folding a week's learn log reads for minutes."""
    monkeypatch.setattr(transport, "PROGRESS_EVERY_S", 0.5)
    values: list[int] = []

    def slow(message: Message) -> None:  # a fold of about 1 ms a record
        time.sleep(0.001)
        values.append(int(message.value()))

    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="leap_stream.transport"):
        read_to_end(
            kafka_bootstrap,
            unique_name("group"),
            [TopicPartition(filled_topic, 0, OFFSET_BEGINNING)],
            slow,
            timeout=1.0,
        )
    assert time.monotonic() - started > 2.0  # the read outlived its timeout twice over
    assert values == list(range(RECORDS))
    progress = [r.getMessage() for r in caplog.records if "to its end" in r.getMessage()]
    assert progress, "a read of several seconds logs how far it is"
    assert f"of {RECORDS:,} offsets" in progress[-1]


def test_a_read_from_an_offset_reads_from_there(kafka_bootstrap: str, filled_topic: str) -> None:
    values: list[int] = []
    read_to_end(
        kafka_bootstrap,
        unique_name("group"),
        [TopicPartition(filled_topic, 0, 1_500)],
        lambda message: values.append(int(message.value())),
    )
    assert values == list(range(1_500, RECORDS))
