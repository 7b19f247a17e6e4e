"""A real broker round trip: what later stream-processor tests build on."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient
from kafka_fixtures import TopicFactory, unique_name

pytestmark = pytest.mark.integration

# Bounds a broken broker so the test fails instead of hanging; no assertion depends on it.
CONSUME_DEADLINE_S = 60.0


def consumer_config(bootstrap: str) -> dict[str, object]:
    """Consumer settings for tests: a fresh group that reads from the start and joins fast."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": unique_name("test-group"),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        # 6 s is the broker's default group.min.session.timeout.ms: the shortest it accepts.
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }


def consume(consumer: Consumer, count: int) -> list[Message]:
    """Poll until ``count`` messages arrived (or the deadline passed), failing on any error."""
    received: list[Message] = []
    deadline = time.monotonic() + CONSUME_DEADLINE_S
    while len(received) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        assert message.error() is None, message.error()
        received.append(message)
    return received


def test_keyed_messages_come_back_identical_and_in_order(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = kafka_topic(partitions=1)
    sent = [(f"job-{i % 3}".encode(), f"payload {i} \x00\xff".encode("latin-1")) for i in range(7)]

    delivery_errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            delivery_errors.append(error)

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    for key, value in sent:
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
    assert producer.flush(30) == 0, "messages still queued after flush"
    assert delivery_errors == []

    consumer = Consumer(consumer_config(kafka_bootstrap))
    try:
        consumer.subscribe([topic])
        received = consume(consumer, len(sent))
    finally:
        consumer.close()

    assert [(m.key(), m.value()) for m in received] == sent
    assert [m.topic() for m in received] == [topic] * len(sent)
    assert [m.offset() for m in received] == list(range(len(sent)))


def test_kafka_topic_creates_distinct_topics_with_the_requested_partitions(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    first = kafka_topic(partitions=3, prefix="orders")
    second = kafka_topic(partitions=1, prefix="orders")

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    topics = admin.list_topics(timeout=10).topics

    assert first != second
    assert first.startswith("orders-")
    assert len(topics[first].partitions) == 3
    assert len(topics[second].partitions) == 1
