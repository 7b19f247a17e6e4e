"""A real broker round trip: what later stream-processor tests build on."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient
from kafka_fixtures import TopicFactory, produce, read_topic

pytestmark = pytest.mark.integration


def test_keyed_messages_come_back_identical_and_in_order(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = kafka_topic(partitions=1)
    sent = [(f"job-{i % 3}".encode(), f"payload {i} \x00\xff".encode("latin-1")) for i in range(7)]

    produce(kafka_bootstrap, topic, sent)
    received = read_topic(kafka_bootstrap, topic, len(sent))

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
