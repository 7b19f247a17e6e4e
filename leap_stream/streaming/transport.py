"""Kafka client settings and calls the streaming shell shares: the traps live here once.

>>> READ_COMMITTED["isolation.level"]
'read_committed'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message

__all__ = ["READ_COMMITTED", "consume_available"]

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
