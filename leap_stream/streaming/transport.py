"""Kafka client settings and calls the streaming shell shares: the traps live here once.

>>> READ_COMMITTED["isolation.level"]
'read_committed'
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message, TopicPartition

__all__ = ["READ_COMMITTED", "consume_available", "log_bounds", "read_to_end"]

READS_TIMEOUT_S = 60.0
"""How long a read, a query or a transaction waits on the broker before it gives up."""

PROGRESS_EVERY_S = 10.0
"""How often a long :func:`read_to_end` logs how far it is."""

log = logging.getLogger("leap_stream.transport")

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

    ``timeout`` bounds a stall, not the read: a worker recovering a week of a large fleet's
    learn log reads for minutes, and gives up only when ``timeout`` seconds pass without a
    record or the end. Every ``PROGRESS_EVERY_S`` it logs how far it is. The consumer is
    assigned, never joins ``group_id`` (its ``-reader`` group) nor commits.
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
        progress = _ReadProgress(reader, partitions)
        reader.assign(partitions)
        open_ = {(tp.topic, tp.partition) for tp in partitions}
        stalled_at = time.monotonic() + timeout
        while open_:
            messages = consume_available(reader, 0.5)
            now = time.monotonic()
            if messages:
                stalled_at = now + timeout
            elif now > stalled_at:
                raise TimeoutError(
                    f"reading {sorted(open_)} to its end: nothing came for {timeout:.0f} s"
                )
            for message in messages:
                error = message.error()
                if error is None:
                    on_message(message)
                    progress.read(message)
                elif error.code() == KafkaError._PARTITION_EOF:
                    open_.discard((message.topic(), message.partition()))
                else:
                    raise KafkaException(error)
            progress.maybe_log(now)
    finally:
        reader.close()


class _ReadProgress:
    """How far :func:`read_to_end` is, in offsets (transaction markers count, as they take
    room in the log), logged every ``PROGRESS_EVERY_S`` of a long read."""

    def __init__(self, reader: Consumer, partitions: list[TopicPartition]) -> None:
        self.started = time.monotonic()
        self.next_log = self.started + PROGRESS_EVERY_S
        self.name = ", ".join(sorted({tp.topic for tp in partitions}))
        self.position: dict[tuple[str, int], int] = {}
        self.start: dict[tuple[str, int], int] = {}
        self.total = 0
        self.records = 0
        for tp in partitions:
            low, high = reader.get_watermark_offsets(tp, timeout=READS_TIMEOUT_S)
            first = tp.offset if tp.offset >= low else low  # OFFSET_BEGINNING is negative
            self.start[(tp.topic, tp.partition)] = self.position[(tp.topic, tp.partition)] = first
            self.total += max(high - first, 0)

    def read(self, message: Message) -> None:
        self.records += 1
        self.position[(message.topic(), message.partition())] = message.offset() + 1

    def maybe_log(self, now: float) -> None:
        if now < self.next_log:
            return
        self.next_log = now + PROGRESS_EVERY_S
        done = sum(self.position[key] - self.start[key] for key in self.position)
        elapsed = now - self.started
        log.info(
            "reading %s to its end: %s of %s offsets (%.0f%%), %s records, %.0f records/s",
            self.name, f"{done:,}", f"{self.total:,}", 100.0 * done / max(self.total, 1),
            f"{self.records:,}", self.records / elapsed,
        )  # fmt: skip


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
