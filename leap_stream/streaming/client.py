"""What a scheduler imports: submit a job and get its ranking, or follow every ranking.

Two ways to use the service from a scheduler (public as :mod:`leap_stream.client`):

- :class:`LeapClient`, request and reply: :meth:`LeapClient.submit` publishes a JobSubmitted
  record and waits for that job's HardwareRanking. For a scheduler that asks at the moment
  it places one job.
- :class:`RankingSubscriber`, a consumer group on the rankings topic: every ranking any
  submitter caused is handed to a ``policy`` callable, at least once, with the ones already
  handed in this process skipped. For a scheduler that places whatever gets ranked.

Both read ``read_committed``: the worker publishes each ranking in the transaction that
consumed its submission, so a ranking is seen once it is final and never twice from the
worker. Both need the service's topics (``leap-stream topics create``) and a running worker
(``leap-stream serve``), so the example is not executed::

    from leap_stream.client import LeapClient, RankingSubscriber

    job = {
        "job_id": "j-42", "lineage_id": "train-llama-7b", "model_type": "llama-7b",
        "model_family": "transformer", "framework": "pytorch", "param_count": 6_700_000_000,
        "global_batch_size": 512, "seq_len": 4096, "precision": "bf16", "num_devices": 8,
        "tensor_parallel": 1, "pipeline_parallel": 1, "requested_hardware": "H100-SXM",
    }  # event_id and event_time are filled in when missing
    with LeapClient("localhost:9092", timeout=10.0) as client:
        ranking = client.submit(job)  # the decoded HardwareRanking record of j-42
    # the rank-1 candidate, or None when the ranking abstained (nothing can run the job)
    best = next((c for c in ranking["candidates"] if c["rank"] == 1), None)

    def policy(ranking: dict) -> None:  # runs once per ranking in this process
        ...

    stop = threading.Event()  # set it from a signal handler to stop
    with RankingSubscriber("localhost:9092", policy, group_id="my-scheduler") as subscriber:
        subscriber.run(stop)

Neither class is thread-safe: use one per thread.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from leap_stream.data.codec import CodecError, default_codec
from leap_stream.data.history import check_events
from leap_stream.streaming.produce import EventProducer
from leap_stream.streaming.topics import TopicNames
from leap_stream.streaming.transport import READ_COMMITTED, consume_available

__all__ = ["LeapClient", "RankingSubscriber"]

log = logging.getLogger("leap_stream.client")

METADATA_TIMEOUT_S = 30.0
REMEMBERED_IDS = 100_000
"""Job ids remembered for dedupe, and rankings kept for later, at most (the newest)."""
_ELECTING = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}


class _Recent:
    """The newest ``capacity`` keys, each with a value, oldest forgotten first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Hashable, Any] = OrderedDict()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: Hashable, value: Any = None) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def pop(self, key: Hashable) -> Any:
        return self._items.pop(key, None)


class _ClosedOnExit:
    """``with`` closes it."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        try:  # the error in flight says more than a close that fails after it
            self.close()
        except Exception:
            log.warning("closing after %s failed too", exc_type.__name__, exc_info=True)


def _partitions(consumer: Consumer, topic: str, bootstrap: str) -> list[int]:
    """The partition numbers of ``topic``; :class:`LookupError` when it does not exist."""
    metadata = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S).topics.get(topic)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise LookupError(
            f"topic {topic} does not exist on {bootstrap} (create it: leap-stream topics create)"
        )
    return sorted(metadata.partitions)


def _end_offset(consumer: Consumer, partition: TopicPartition) -> int:
    """The partition's end offset, retried while its leader is being elected (a new topic)."""
    deadline = time.monotonic() + METADATA_TIMEOUT_S
    while True:
        try:
            return consumer.get_watermark_offsets(partition, timeout=METADATA_TIMEOUT_S)[1]
        except KafkaException as error:
            kafka_error = error.args[0]
            electing = kafka_error.retriable() or kafka_error.code() in _ELECTING
            if not electing or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _message_error(message: Message) -> bool:
    """True when ``message`` is an error event: fatal ones raise, the others are logged."""
    error = message.error()
    if error is None:
        return False
    if error.fatal():
        raise KafkaException(error)
    if error.code() != KafkaError._PARTITION_EOF:
        log.warning("rankings consumer: %s", error)
    return True


class LeapClient(_ClosedOnExit):
    """Submit jobs and receive their rankings: request and reply over the job topics.

    The client's consumer is assigned every partition of the rankings topic, positioned at
    its end when the client is created, before anything is produced, so no answer to a later
    :meth:`submit` can be missed. Rankings of other jobs that arrive while it waits are kept
    (the newest :data:`REMEMBERED_IDS`) for later calls of :meth:`submit` or
    :meth:`ranking_for`. Each job's ranking is handed out once: a second copy of it is dropped.

    Parameters
    ----------
    bootstrap
        Kafka bootstrap servers, ``host:port[,host:port]``.
    topic_prefix
        Prefix of every topic name (one fleet per prefix, see
        :class:`~leap_stream.streaming.topics.TopicNames`).
    timeout
        Seconds :meth:`submit` waits for a ranking before it raises :class:`TimeoutError`.
    **config
        More librdkafka settings for the producer and the consumer (e.g. security settings:
        ``security.protocol``, ``sasl.mechanism``, ...).

    Raises
    ------
    LookupError
        The rankings topic does not exist.
    KafkaException
        No broker answered at ``bootstrap`` (within librdkafka's metadata timeout, 30 s).

    Notes
    -----
    Partitions added to the rankings topic after the client was created are not read.
    """

    def __init__(
        self, bootstrap: str, topic_prefix: str = "", timeout: float = 10.0, **config: Any
    ) -> None:
        self.topics = TopicNames(topic_prefix)
        self.timeout = timeout
        self.codec = default_codec()
        self._kept = _Recent(REMEMBERED_IDS)  # job_id -> ranking that arrived, not handed out
        self._handed = _Recent(REMEMBERED_IDS)  # job ids whose ranking was handed out
        self._consumer = Consumer(
            {
                **config,  # security settings and the like: both clients need them
                "bootstrap.servers": bootstrap,
                "group.id": f"leap-client-{uuid.uuid4().hex[:12]}",  # assigned, never joined
                **READ_COMMITTED,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
            }
        )
        try:
            # The end now, as an explicit offset: an OFFSET_END given to assign() would be
            # looked up later, after the submission, and could skip past its answer.
            topic = self.topics.rankings
            self._consumer.assign(
                [
                    TopicPartition(topic, p, _end_offset(self._consumer, TopicPartition(topic, p)))
                    for p in _partitions(self._consumer, topic, bootstrap)
                ]
            )
            self._producer = EventProducer(bootstrap, self.topics, self.codec, **config)
        except BaseException:
            self._consumer.close()
            raise
        self._closed = False

    def submit(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """Publish ``job`` as a JobSubmitted record and return its HardwareRanking record.

        Parameters
        ----------
        job
            A JobSubmitted record (``docs/events.md``). ``event_id`` (a new UUID) and
            ``event_time`` (now) are filled in when missing; fields with a default
            (``seq_len``, ``micro_batches``, ``flops_per_sample``, ``team``,
            ``requested_hardware``, ``candidate_hardware``) may be left out.

        Returns
        -------
        dict
            The ranking as the codec decodes it: ``job_id``, ``model_version``,
            ``abstained``, ``abstain_reason``, ``candidates`` best first, ...

        Raises
        ------
        ValueError
            The job breaks the event contract (:class:`~leap_stream.data.codec.CodecError`
            for a missing or mistyped field, else the rule it breaks); nothing was published.
        TimeoutError
            No ranking of the job arrived within ``timeout`` seconds (is a worker running?).
            Should it arrive later, a later ``submit`` or :meth:`ranking_for` of the same job
            returns it.
        KafkaException
            The submission could not be delivered to the broker.
        """
        deadline = time.monotonic() + self.timeout
        event = self._checked(job)
        job_id = event["job_id"]
        self._handed.pop(job_id)  # submitted again: a new ranking is to be handed out
        self._producer.send("submitted", event)
        self._producer.flush(max(deadline - time.monotonic(), 1.0))
        ranking = self._await(job_id, deadline)
        if ranking is None:
            raise TimeoutError(
                f"no ranking for job {job_id} on {self.topics.rankings} within "
                f"{self.timeout:g} s: is a worker running (leap-stream serve)?"
            )
        return ranking

    def ranking_for(self, job_id: str, timeout: float = 0.0) -> dict[str, Any] | None:
        """The ranking of ``job_id`` if it arrives within ``timeout`` seconds, else None.

        For a job submitted by someone else, or whose :meth:`submit` timed out. Only rankings
        that arrived after this client was created are seen, and each is handed out once: a
        second call for the same job returns None.
        """
        return self._await(job_id, time.monotonic() + timeout)

    def close(self) -> None:
        """Deliver what is queued and close the consumer (idempotent)."""
        if not self._closed:
            self._closed = True
            try:
                self._producer.flush(10.0)
            finally:
                self._consumer.close()

    def _checked(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """The job as the worker will decode it; a contract error raised here, not lost."""
        event = {"event_id": str(uuid.uuid4()), "event_time": datetime.now(UTC), **job}
        decoded = self.codec.decode(self.codec.encode("JobSubmitted", event))
        rejects = check_events([("submitted", decoded)])
        if rejects:
            raise ValueError(f"job {event['job_id']}: {rejects[0].column}: {rejects[0].reason}")
        return event

    def _await(self, job_id: str, deadline: float) -> dict[str, Any] | None:
        while True:
            ranking = self._kept.pop(job_id)
            if ranking is not None:
                self._handed.put(job_id)
                return ranking
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for message in consume_available(self._consumer, min(left, 0.5), 500):
                self._keep(message)

    def _keep(self, message: Message) -> None:
        if _message_error(message) or not message.value():
            return
        try:
            record = self.codec.decode(message.value(), reader="HardwareRanking")
        except CodecError as error:
            log.warning("skipping an unreadable ranking at offset %d: %s", message.offset(), error)
            return
        job_id = record["job_id"]
        if job_id not in self._handed and job_id not in self._kept:  # else: a second copy
            self._kept.put(job_id, record)


class RankingSubscriber(_ClosedOnExit):
    """Hands every ranking on the rankings topic to ``policy``: at least once, deduplicated.

    A consumer group on the rankings topic (``read_committed``, no auto commit). Offsets are
    committed only after ``policy`` returned for the rankings before them, so a crash loses
    nothing: the group's next member starts after the last committed ranking, and may hand
    again only the ones handed but not yet committed. Within one subscriber, a job id already
    handed (the newest ``remember`` of them) is skipped, so redelivery after a rebalance or a
    second copy on the topic does not reach the policy twice.

    Parameters
    ----------
    bootstrap
        Kafka bootstrap servers, ``host:port[,host:port]``.
    policy
        Called with each ranking record (as the codec decodes it). Whatever it raises
        propagates out of :meth:`poll_once` and :meth:`run`; that ranking and the ones after
        it are not committed and come again (to this subscriber, or after a restart).
    topic_prefix
        Prefix of every topic name.
    group_id
        The consumer group: schedulers in one group share the partitions.
    from_beginning
        Where a group without committed offsets starts: the oldest ranking kept on the topic
        (True) or the next one published (False).
    remember
        Job ids remembered for the dedupe.
    max_batch
        Rankings read, handed and committed at a time, at most.
    **config
        More librdkafka consumer settings.

    Raises
    ------
    LookupError
        The rankings topic does not exist.
    """

    def __init__(
        self,
        bootstrap: str,
        policy: Callable[[dict[str, Any]], None],
        topic_prefix: str = "",
        group_id: str = "leap-scheduler",
        *,
        from_beginning: bool = False,
        remember: int = REMEMBERED_IDS,
        max_batch: int = 500,
        **config: Any,
    ) -> None:
        self.policy = policy
        self.topics = TopicNames(topic_prefix)
        self.group_id = group_id
        self.max_batch = max_batch
        self.handed = 0
        """Rankings handed to the policy so far."""
        self.codec = default_codec()
        self._seen = _Recent(remember)
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group_id,
                **READ_COMMITTED,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest" if from_beginning else "latest",
                **config,
            }
        )
        try:
            _partitions(self._consumer, self.topics.rankings, bootstrap)
        except BaseException:
            self._consumer.close()
            raise
        self._consumer.subscribe([self.topics.rankings])
        self._closed = False

    def poll_once(self, timeout: float = 1.0) -> int:
        """Read what arrives within ``timeout`` seconds, hand it over, commit it.

        Returns
        -------
        int
            How many rankings were handed to the policy (duplicates skipped are not counted).
        """
        messages = consume_available(self._consumer, timeout, self.max_batch)
        done: dict[tuple[str, int], int] = {}  # next offset per partition, policy returned
        handed = 0
        try:
            for message in messages:
                if _message_error(message):
                    continue
                source = (message.topic(), message.partition())
                record = self._decode(message)
                if record is not None and record["job_id"] not in self._seen:
                    self.policy(record)
                    self._seen.put(record["job_id"])
                    handed += 1
                    self.handed += 1
                done[source] = message.offset() + 1
        except BaseException:
            self._commit(done)
            self._rewind(messages, done)
            raise
        self._commit(done)
        return handed

    def run(self, stop: threading.Event, poll_timeout: float = 0.5) -> None:
        """Hand rankings to the policy until ``stop`` is set (e.g. from a signal handler)."""
        while not stop.is_set():
            self.poll_once(poll_timeout)

    def close(self) -> None:
        """Leave the group (everything handed is committed already). Idempotent."""
        if not self._closed:
            self._closed = True
            self._consumer.close()

    def _decode(self, message: Message) -> dict[str, Any] | None:
        if not message.value():
            return None
        try:
            return self.codec.decode(message.value(), reader="HardwareRanking")
        except CodecError as error:  # skipped and committed: it would fail every time
            log.warning(
                "skipping an unreadable ranking %s[%d]@%d: %s",
                message.topic(),
                message.partition(),
                message.offset(),
                error,
            )
            return None

    def _commit(self, done: dict[tuple[str, int], int]) -> None:
        if not done:
            return
        try:
            self._consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in done.items()],
                asynchronous=False,
            )
        except KafkaException as error:  # e.g. a rebalance: they come again, deduplicated
            log.warning("commit failed, the rankings may be redelivered: %s", error)

    def _rewind(self, messages: list[Message], done: dict[tuple[str, int], int]) -> None:
        """Seek back to the first ranking of each partition the policy did not finish."""
        first: dict[tuple[str, int], int] = {}
        for message in messages:
            if message.error() is None:
                source = (message.topic(), message.partition())
                if message.offset() >= done.get(source, 0):
                    first.setdefault(source, message.offset())
        for (topic, partition), offset in first.items():
            try:
                self._consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as error:  # not assigned any more: its next owner reads it
                log.warning("cannot rewind %s[%d] to %d: %s", topic, partition, offset, error)
