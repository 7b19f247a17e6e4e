"""The backtest through the running service: a history's events onto the job topics, and each
submission's ranking read back from the rankings topic for the replay to score.

:class:`KafkaRankings` is a :data:`~leap_stream.backtest.replay.RankingSource`: handed to
:func:`~leap_stream.backtest.replay.replay`, it sends every event it is given to the service
and yields it back with the ``HardwareRanking`` record the worker published for it (read
``read_committed``). The lookup baseline and the scoring stay in the replay, so a history
replayed through a worker gives the in-process replay's figures.

- **Lock-step** (default): an event is sent only once the previous one has been processed by
  the worker: a submission when its ranking arrived, a completion when the worker's consumer
  group has committed an offset past it. The worker then sees the history exactly in order,
  whatever its partitioning.
- **Rate** (``rate`` events/s): sent freely, as a load; rankings are matched as they arrive,
  and the end waits for the last ones.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from leap_stream.data.codec import CodecError, default_codec
from leap_stream.streaming.client import _end_offset, _message_error, _partitions
from leap_stream.streaming.produce import EventProducer
from leap_stream.streaming.topics import TopicNames
from leap_stream.streaming.transport import READ_COMMITTED, consume_available

__all__ = ["KafkaRankings"]

Event = tuple[str, dict[str, Any]]


class _TrackingProducer(EventProducer):
    """An EventProducer that remembers where its last delivered message landed."""

    last: tuple[str, int, int] | None = None

    def _on_delivery(self, error: Any, message: Any) -> None:
        super()._on_delivery(error, message)
        if error is None:
            self.last = (message.topic(), message.partition(), message.offset())


class KafkaRankings:
    """Rank a replay's events with the service at ``bootstrap`` (see the module docstring).

    Parameters
    ----------
    bootstrap
        Kafka bootstrap servers of the running service.
    topic_prefix
        Prefix of the service's topic names.
    group_id
        The workers' consumer group (lock-step waits for its committed offsets).
    rate
        Events per second to send freely; None (default): lock-step.
    timeout
        Seconds to wait for one event to be processed (lock-step), or for the rankings still
        missing once everything is sent (rate), before :class:`TimeoutError`.

    Raises
    ------
    LookupError
        The rankings topic does not exist.
    """

    def __init__(
        self,
        bootstrap: str,
        topic_prefix: str = "",
        group_id: str = "leap-stream",
        *,
        rate: float | None = None,
        timeout: float = 120.0,
    ) -> None:
        if rate is not None and rate <= 0:
            raise ValueError("rate must be positive")
        self.bootstrap = bootstrap
        self.topics = TopicNames(topic_prefix)
        self.group_id = group_id
        self.rate = rate
        self.timeout = timeout
        self.codec = default_codec()
        self.sent = 0
        self.seconds = 0.0  # from the first send to the last ranking or commit waited for
        self._records: dict[str, deque[dict[str, Any]]] = {}  # job_id -> rankings not yet used

    def __call__(self, events: Iterator[Event]) -> Iterator[tuple[str, dict[str, Any], Any]]:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "leap-replay",  # assigned, never joined, never committed
                **READ_COMMITTED,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "fetch.wait.max.ms": 5,
            }
        )
        try:
            # from the end as it is now, before anything is sent: no answer can be missed
            topic = self.topics.rankings
            consumer.assign(
                [
                    TopicPartition(topic, p, _end_offset(consumer, TopicPartition(topic, p)))
                    for p in _partitions(consumer, topic, self.bootstrap)
                ]
            )
            producer = _TrackingProducer(
                self.bootstrap, self.topics, self.codec, **{"linger.ms": 0}
            )
            if self.rate is None:
                yield from self._lock_step(events, producer, consumer)
            else:
                yield from self._paced(events, producer, consumer, self.rate)
        finally:
            consumer.close()

    # --- the two modes ---------------------------------------------------------------------

    def _lock_step(
        self, events: Iterator[Event], producer: _TrackingProducer, consumer: Consumer
    ) -> Iterator[tuple[str, dict[str, Any], Any]]:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        began = time.perf_counter()
        for kind, event in events:
            producer.send(kind, event)
            producer.flush()
            self.sent += 1
            deadline = time.monotonic() + self.timeout
            if kind == "submitted":
                record = self._await_ranking(consumer, event["job_id"], deadline)
                self.seconds = time.perf_counter() - began
                yield kind, event, record
            else:
                assert producer.last is not None
                self._await_commit(admin, *producer.last, deadline)
                self.seconds = time.perf_counter() - began
                yield kind, event, None

    def _paced(
        self,
        events: Iterator[Event],
        producer: _TrackingProducer,
        consumer: Consumer,
        rate: float,
    ) -> Iterator[tuple[str, dict[str, Any], Any]]:
        waiting: deque[Event] = deque()  # sent, not yet handed back (in history order)
        began = time.perf_counter()
        for kind, event in events:
            due = began + self.sent / rate
            while (left := due - time.perf_counter()) > 0:
                self._read(consumer, left)
            producer.send(kind, event)
            self.sent += 1
            waiting.append((kind, event))
            self._read(consumer, 0.0)
            yield from self._ready(waiting)
        producer.flush()
        deadline = time.monotonic() + self.timeout
        while waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(self._missing(waiting[0][1]["job_id"]))
            self._read(consumer, 0.2)
            yield from self._ready(waiting)
        self.seconds = time.perf_counter() - began

    def _ready(self, waiting: deque[Event]) -> Iterator[tuple[str, dict[str, Any], Any]]:
        """Hand back the events sent, in order, up to the first submission still unranked."""
        while waiting:
            kind, event = waiting[0]
            record = None
            if kind == "submitted":
                record = self._take(event["job_id"])
                if record is None:
                    return
            waiting.popleft()
            yield kind, event, record

    # --- waiting for the worker ------------------------------------------------------------

    def _await_ranking(self, consumer: Consumer, job_id: str, deadline: float) -> dict[str, Any]:
        while (record := self._take(job_id)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(self._missing(job_id))
            self._read(consumer, min(left, 0.5))
        return record

    def _await_commit(
        self, admin: AdminClient, topic: str, partition: int, offset: int, deadline: float
    ) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions

        request = [ConsumerGroupTopicPartitions(self.group_id, [TopicPartition(topic, partition)])]
        pause = 0.001
        while True:
            futures = admin.list_consumer_group_offsets(request, require_stable=False)
            result = futures[self.group_id].result(timeout=30)
            if result.topic_partitions[0].offset > offset:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"consumer group {self.group_id} did not commit past {topic}[{partition}]"
                    f"@{offset} within {self.timeout:g} s: is a worker of that group running "
                    "(leap-stream serve --group-id)?"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def _read(self, consumer: Consumer, timeout: float) -> None:
        for message in consume_available(consumer, timeout):
            self._keep(message)

    def _keep(self, message: Message) -> None:
        if _message_error(message) or not message.value():
            return
        try:
            record = self.codec.decode(message.value(), reader="HardwareRanking")
        except CodecError as error:
            raise KafkaException(
                f"unreadable ranking at {message.topic()}[{message.partition()}]"
                f"@{message.offset()}: {error}"
            ) from error
        self._records.setdefault(record["job_id"], deque()).append(record)

    def _take(self, job_id: str) -> dict[str, Any] | None:
        records = self._records.get(job_id)
        if not records:
            return None
        record = records.popleft()
        if not records:
            del self._records[job_id]
        return record

    def _missing(self, job_id: str) -> str:
        return (
            f"no ranking of job {job_id} on {self.topics.rankings} within {self.timeout:g} s: "
            f"is a worker running on {self.bootstrap} (leap-stream serve)?"
        )
