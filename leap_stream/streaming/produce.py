"""What tools publish: a history onto the job topics, in event-time order (the traffic a
scheduler would send), and a nightly retrain's models onto the models topic.

Each event goes to its topic keyed by ``lineage_id`` (so a lineage's submissions and
completions share a partition number), Avro single-object encoded, through an idempotent
producer (a retried send is never written twice). Pacing: as fast as the broker takes them
(default), ``rate`` events per second, or the history's own clock sped up ``speedup`` times.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaException, Producer

from leap_stream.data.codec import AvroCodec, default_codec
from leap_stream.streaming.snapshots import NIGHTLY_PREFIX, nightly_record
from leap_stream.streaming.topics import SNAPSHOT_MAX_BYTES, TopicNames

__all__ = ["EventProducer", "ProduceInterrupted", "produce_events", "publish_nightly_models"]

_RECORD = {"submitted": "JobSubmitted", "completed": "JobCompleted"}


class ProduceInterrupted(KeyboardInterrupt):
    """:func:`produce_events` stopped by an interrupt (Ctrl-C): the first ``sent`` events,
    through ``through`` (an event time), are delivered; none after them was sent."""

    def __init__(self, sent: int, through: datetime | None) -> None:
        super().__init__(f"{sent} events sent")
        self.sent = sent
        self.through = through


class EventProducer:
    """Publishes JobSubmitted / JobCompleted records on a fleet's job topics.

    Delivery errors are raised from :meth:`flush` (and from :meth:`send` when a report
    arrives early), never dropped.
    """

    def __init__(
        self, bootstrap: str, topics: TopicNames, codec: AvroCodec | None = None, **config: Any
    ) -> None:
        self.topics = topics
        self.codec = codec or default_codec()
        self._errors: list[str] = []
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,  # acks=all, no duplicates on retry, order kept
                "linger.ms": 5,
                **config,
            }
        )

    def _on_delivery(self, error: Any, message: Any) -> None:
        if error is not None:
            self._errors.append(f"{message.topic()}: {error}")

    def send(self, kind: str, event: dict[str, Any]) -> None:
        """Queue one event (``kind`` is ``submitted`` or ``completed``)."""
        topic = self.topics.submitted if kind == "submitted" else self.topics.completed
        self.send_raw(topic, event["lineage_id"].encode(), self.codec.encode(_RECORD[kind], event))

    def send_raw(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Queue bytes as they are (tests and tools that need a malformed message)."""
        while True:
            try:
                self._producer.produce(topic, key=key, value=value, on_delivery=self._on_delivery)
                break
            except BufferError:  # the local queue is full: let the broker catch up
                self._producer.poll(0.05)
        self._producer.poll(0)
        self._raise_errors()

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until everything queued is acknowledged; raise on any delivery error."""
        left = self._producer.flush(timeout)
        self._raise_errors()
        if left:
            raise KafkaException(f"{left} message(s) not delivered within {timeout:.0f}s")

    def _raise_errors(self) -> None:
        if self._errors:
            errors, self._errors = self._errors, []
            raise KafkaException(f"delivery failed: {'; '.join(errors[:5])}")


def produce_events(
    producer: EventProducer,
    events: Iterable[tuple[str, dict[str, Any]]],
    *,
    rate: float | None = None,
    speedup: float | None = None,
) -> int:
    """Send ``events`` in order, paced by ``rate`` (events/s) or ``speedup``; return the count."""
    if rate is not None and speedup is not None:
        raise ValueError("pace by rate or by speedup, not both")
    began = time.monotonic()
    first_ms: float | None = None
    count = 0
    through = None
    try:
        for kind, event in events:
            if rate is not None:
                due = began + count / rate
            elif speedup is not None:
                ms = event["event_time"].timestamp() * 1000.0
                first_ms = ms if first_ms is None else first_ms
                due = began + (ms - first_ms) / 1000.0 / speedup
            else:
                due = 0.0
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            producer.send(kind, event)
            count += 1
            through = event["event_time"]
    except KeyboardInterrupt:  # what was sent is delivered, and said, so a rerun can go on
        producer.flush()
        raise ProduceInterrupted(count, through) from None
    producer.flush()
    return count


def publish_nightly_models(
    bootstrap: str,
    topics: TopicNames,
    models: Mapping[str, Any],
    trained_until: datetime,
    codec: AvroCodec | None = None,
) -> list[dict[str, Any]]:
    """Publish nightly ``models`` (by name, trained on every completion before
    ``trained_until``) as challengers on the models topic; return the records sent.

    Each goes under key ``nightly:<name>``, replacing that name's previous night on the
    compacted topic; the learner scores it from its cutoff on.
    """
    codec = codec or default_codec()
    producer = EventProducer(bootstrap, topics, codec, **{"message.max.bytes": SNAPSHOT_MAX_BYTES})
    records = []
    for name, model in sorted(models.items()):
        record = nightly_record(name, model, trained_until=trained_until)
        key = NIGHTLY_PREFIX + name.encode()
        producer.send_raw(topics.models, key, codec.encode("ModelSnapshot", record))
        records.append(record)
    producer.flush()
    return records
