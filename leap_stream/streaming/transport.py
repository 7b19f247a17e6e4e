"""Kafka client settings and calls the streaming shell shares: the traps live here once.

>>> READ_COMMITTED["isolation.level"]
'read_committed'
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message, TopicPartition

__all__ = ["READ_COMMITTED", "consume_available", "log_bounds", "read_to_end"]

READS_TIMEOUT_S = 60.0

READ_COMMITTED = {"isolation.level": "read_committed", "fetch.wait.max.ms": 10}
"""Consumer settings for the service's transactional outputs: only committed records, and a
short fetch wait, since a read_committed fetch waiting at the broker is not always woken when
a transaction commits."""


def consume_available(consumer: Consumer, timeout: float, limit: int = 1_000) -> list[Message]:
    """Wait up to ``timeout`` s for one message, then take what else has arrived (``limit``).

    ``Consumer.consume(n, timeout)`` returns only when ``n`` messages are there or the timeout
    ran out: asked for a batch on a quiet topic it holds every message for the whole timeout
    (measured: every ranking half a second late).
    """
    messages = consumer.consume(1, timeout=timeout)
    if messages and limit > 1:
        messages += consumer.consume(limit - 1, timeout=0)
    return messages


def read_to_end(
    bootstrap: str,
    group_id: str,
    partitions: list[TopicPartition],
    on_message: Callable[[Message], None],
    timeout: float = READS_TIMEOUT_S,
) -> None:
    """Read ``partitions`` (read_committed) from their given offsets to their current end.

    The consumer is assigned, never joins ``group_id`` (its ``-reader`` group) nor commits.
    """
    from confluent_kafka import Consumer, KafkaError, KafkaException

    if not partitions:
        return
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{group_id}-reader",  # never joined, never committed
            **READ_COMMITTED,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # an offset retention has dropped reads on from the log's start, never its end
            "auto.offset.reset": "earliest",
        }
    )
    try:
        reader.assign(partitions)
        open_ = {(tp.topic, tp.partition) for tp in partitions}
        deadline = time.monotonic() + timeout
        while open_:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {sorted(open_)} to its end took too long")
            for message in consume_available(reader, 0.5):
                error = message.error()
                if error is None:
                    on_message(message)
                elif error.code() == KafkaError._PARTITION_EOF:
                    open_.discard((message.topic(), message.partition()))
                else:
                    raise KafkaException(error)
    finally:
        reader.close()


def log_bounds(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """The first offset ``topic``'s ``partition`` still holds (retention moves it past 0) and
    the next it will write."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "leap-log-bounds"})
    try:
        return consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=READS_TIMEOUT_S
        )
    finally:
        consumer.close()
