"""The worker: the stream topology in one module.

::

    leap.jobs.submitted ─┐                            ┌─> leap.rankings (HardwareRanking, by job_id)
                         ├─ event-time merge ─ core ─┼─> leap.learn    (LearnExample, 1 partition)
    leap.jobs.completed ─┘   (per partition)          ├─> leap.state    (pending + priors changelog)
                                                      └─> leap.dlq      (DeadLetter)
    leap.learn ─ fold ─> model ─> leap.models (ModelSnapshot, compacted) ─> every worker's ranker
                  └─ score ─> rule ─> leap.models (ServingDecision, key serving) ─┘

One loop, one thread, one Kafka transaction per batch of input messages. In each transaction:
the rankings of the batch's submissions, the LearnExamples of its completions, the dead
letters, the changed state, and the input offsets (``send_offsets_to_transaction``). A worker
killed anywhere loses nothing and double-counts nothing: an open transaction is aborted when
the restarted worker (same transactional id) starts, and it resumes from the last committed
offsets with the state and model of that same commit. Consumers of the output topics read
``read_committed`` and see each ranking once.

- **State.** A lineage's prior and its pending submissions are partition-local:
  :class:`~leap_stream.streaming.state.ChangelogMap` objects, restored from ``leap.state``
  when partitions are assigned.
- **Order.** :class:`~leap_stream.streaming.order.EventTimeMerge` releases the assigned input
  partitions' messages in event-time order, so a backlog is processed in the order of the
  history it came from, whatever the fetches deliver first.
- **Model.** One model for the fleet, a fold over ``leap.learn``. ``learning="inline"`` (one
  worker): the worker learns each completion at once and snapshots its model now and then.
  ``learning="shared"`` (several workers): every worker ranks with the newest snapshot on
  ``leap.models``, and the one worker started with ``learner=True`` folds the learn log and
  publishes the snapshots. A restart loads the newest snapshot and folds the log on from the
  offset it records.
- **Champion/challenger.** ``leap-stream publish-models`` puts a nightly retrain's models on
  ``leap.models`` (key ``nightly:<name>``). The learner scores the online model and each
  nightly model on every learn example (:class:`~leap_stream.core.champion.ChampionChallenger`)
  and, at the first completion of each new day, applies the promotion rule and publishes its
  ServingDecision (key ``serving``); every worker ranks with the model it names, sharing the
  online core's priors and state. Until a decision names another, the ensemble ranks: the mean
  of the online model and the nightly models the worker has (the online model alone before
  any). A named nightly model the worker does not have (yet): the online model ranks.
- **Bad input** (undecodable bytes, an unknown schema, a record of the wrong type for its
  topic, a record that breaks the contract or is stamped more than a day after its message
  was sent, a completion with no pending submission to join) goes to ``leap.dlq`` with its
  topic, partition, offset, key, bytes and the reason; processing goes on. A models-topic
  record this version cannot read is refused (logged and counted), as an incompatible one is.

Written against confluent-kafka rather than faust: faust's exactly-once mode leaves an agent's
sends outside the transaction, and a faust Table app restarted on this broker skipped input
offsets and stopped committing (faust-streaming #596; ``docs/service.md``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from http.server import ThreadingHTTPServer
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from prometheus_client import Counter

from leap_stream.core import LeapCore
from leap_stream.core.catalog import Catalog, default_catalog, load_catalog
from leap_stream.core.champion import ONLINE, ChampionChallenger
from leap_stream.core.ensemble import ENSEMBLE, Ensemble
from leap_stream.core.leap import IMPLAUSIBLE_LOG_RESIDUAL, warm_up
from leap_stream.data.codec import CodecError, default_codec
from leap_stream.data.history import check_events
from leap_stream.streaming.order import FIRST, EventTimeMerge
from leap_stream.streaming.settings import ServiceSettings
from leap_stream.streaming.snapshots import (
    MODEL_KEY,
    NIGHTLY_PREFIX,
    SERVING_KEY,
    SnapshotError,
    decision_record,
    read_nightly,
    read_snapshot,
    snapshot_record,
)
from leap_stream.streaming.state import ChangelogMap
from leap_stream.streaming.topics import SNAPSHOT_MAX_BYTES
from leap_stream.streaming.transport import (
    READ_COMMITTED,
    READS_TIMEOUT_S,
    consume_available,
    log_bounds,
    read_to_end,
)
from leap_stream.streaming.web import RecentRankings, ServiceMetrics, serve_http

__all__ = ["Worker"]

log = logging.getLogger("leap_stream.worker")

_KIND_RANK = {"submitted": 0, "completed": 1}
# How far an event's time may run ahead of its message's Kafka timestamp (clock drift).
FUTURE_TOLERANCE_MS = 86_400_000.0
# Messages taken from the client per poll: the merge needs every partition's head, and a fetch
# often delivers one partition's batch before the next one's.
_CONSUME_BATCH = 1_000


@dataclass(slots=True)
class _Input:
    """One input message, decoded (``event``) or rejected (``error``), waiting in the merge."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int
    kind: str
    event: dict[str, Any] | None = None
    error: tuple[str, str] | None = None  # (error type, reason)


def _from_the_future(item: _Input) -> tuple[str, str] | None:
    """The contract error of an event stamped later than the message that carries it, by more
    than clocks drift apart (None: no such error, or the message has no timestamp).

    A broken clock or field: let through, one such event would close the champion/challenger's
    days ahead of time and make every lineage look idle at the next daily eviction.
    """
    assert item.event is not None
    when = item.event["event_time"]
    if (
        item.timestamp_ms < 0
        or when.timestamp() * 1000.0 - item.timestamp_ms <= FUTURE_TOLERANCE_MS
    ):
        return None
    sent = datetime.fromtimestamp(item.timestamp_ms / 1000.0, UTC)
    return (
        "ContractError",
        f"column 'event_time': {when.isoformat()} is more than a day after the message was "
        f"sent ({sent.isoformat()}, its Kafka timestamp)",
    )


def _unmatched_reason(event: dict[str, Any]) -> str:
    return (
        f"no pending submission for job {event['job_id']!r}: its JobSubmitted was not seen on "
        f"this partition (keyed by another lineage_id, or stamped later than its completion), "
        f"or the attempt completed already"
    )


def _ensemble_version(online: str, nightly: list[str]) -> str:
    """How rankings and decisions name the ensemble: its members' versions, online first."""
    return f"{ENSEMBLE}:" + "+".join([online, *nightly])


class Worker:
    """One stream worker (see the module docstring). ``run`` until ``stop`` is set.

    Parameters
    ----------
    settings
        Connection, topics, learning mode and limits (:class:`ServiceSettings`).
    catalog
        The hardware catalog; default: ``settings.catalog`` or the packaged one.
    """

    def __init__(self, settings: ServiceSettings, catalog: Catalog | None = None) -> None:
        self.settings = settings
        self.topics = settings.topics
        if catalog is None:
            catalog = load_catalog(settings.catalog) if settings.catalog else default_catalog()
        self.pending = ChangelogMap("pending")
        self.priors = ChangelogMap("prior")
        half_life = settings.lineage_half_life_days
        self.core = LeapCore(
            catalog, pending=self.pending, priors=self.priors, lineage_half_life_days=half_life
        )
        shared = settings.learning == "shared"
        # the model being learned: the ranking core itself when inline, a core of its own
        # (never ranking) for the learner in shared mode, none for a plain shared ranker
        self.learner: LeapCore | None = None
        if not shared:
            self.learner = self.core
        elif settings.learner:
            self.learner = LeapCore(catalog, lineage_half_life_days=half_life)
        # champion/challenger: the learner keeps the scoreboard; every worker ranks with the
        # model the newest ServingDecision names, among the nightly models it has loaded
        self.board = None if self.learner is None else ChampionChallenger(settings.promotion_rule)
        warm_up(catalog)  # compiled now, not while the first submissions wait for their rankings
        self.nightly: dict[str, tuple[Any, str]] = {}  # name -> (model, version)
        self.serving = ENSEMBLE  # as the scoreboard starts (ChampionChallenger)
        self._decisions: list[dict[str, Any]] = []  # taken, not yet published
        self.codec = default_codec()
        self.metrics = ServiceMetrics()
        self.recent = RecentRankings()
        self.merge = EventTimeMerge(settings.max_wait_ms)
        self.ready = threading.Event()
        self.http_port: int | None = None
        self._fetched: dict[tuple[str, int], int] = {}  # next offset the consumer delivers
        self._high_at_assign: dict[tuple[str, int], int] = {}  # each partition's end back then
        self._learn_next = 0  # next learn-log offset the learner has not folded
        self._models_next = 0  # next models-topic offset this worker has not read
        self._learned_since_snapshot = 0
        self._snapshot_due_at = 0.0
        self._day: date | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._models: Consumer | None = None
        self._learn_log: Consumer | None = None
        self._http: ThreadingHTTPServer | None = None

    # --- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Recover, then process until ``stop`` is set; close cleanly (nothing half-done)."""
        settings = self.settings
        if settings.web_port is not None:
            self._http = serve_http(
                settings.web_port, self.ready, self.metrics, self.recent, settings.web_host
            )
            self.http_port = self._http.server_address[1]
        self._producer = Producer(
            {
                "bootstrap.servers": settings.bootstrap,
                "transactional.id": settings.transactional_id,
                # a crashed worker's open transaction blocks read_committed readers until its
                # successor starts or this runs out; keep it short
                "transaction.timeout.ms": 30_000,
                "linger.ms": 2,
                "compression.type": "lz4",
                # a transaction begun right after a commit waits for it in steps of this
                # (default 100 ms: a floor under every ranking's latency)
                "retry.backoff.ms": 5,
                "retry.backoff.max.ms": 100,
                "message.max.bytes": SNAPSHOT_MAX_BYTES,
            }
        )
        self._producer.init_transactions(READS_TIMEOUT_S)  # aborts a predecessor's leftovers
        self._recover_model()
        self._consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap,
                "group.id": settings.group_id,
                "group.instance.id": f"{settings.group_id}-{settings.worker_id}",
                **READ_COMMITTED,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                # range gives partition p of both job topics to the same worker
                "partition.assignment.strategy": "range",
                "session.timeout.ms": settings.session_timeout_ms,
                "heartbeat.interval.ms": 1_000,
            }
        )
        self._consumer.subscribe(
            [self.topics.submitted, self.topics.completed],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        try:
            while not stop.is_set():
                self._poll_inputs()
                batch = self._take_ready()
                if batch:
                    self._process(batch)
                self._follow_model()
            self._publish_decisions()
            if self.learner is not None and self._learned_since_snapshot:
                self.publish_snapshot()  # a clean stop leaves the newest model for a restart
        finally:
            self._close()

    def _close(self) -> None:
        for consumer in (self._consumer, self._models, self._learn_log):
            if consumer is not None:
                consumer.close()
        if self._producer is not None:
            self._producer.flush(10)
        if self._http is not None:
            self._http.shutdown()

    # --- inputs ----------------------------------------------------------------------------

    def _poll_inputs(self) -> None:
        assert self._consumer is not None
        # wait for one message (a batch call would wait its whole timeout for a full batch),
        # then take whatever else is already here
        messages = consume_available(
            self._consumer, 0.005 if len(self.merge) else 0.05, _CONSUME_BATCH
        )
        inputs = []
        for message in messages:
            if message.error() is not None:
                if message.error().fatal():
                    raise KafkaException(message.error())
                log.warning("consumer: %s", message.error())
                continue
            inputs.append(self._decode(message))
        decoded = [i for i in inputs if i.event is not None]
        if decoded:
            for reject in check_events([(i.kind, i.event) for i in decoded]):
                bad = decoded[reject.row]
                if bad.error is None:
                    bad.error = ("ContractError", f"column {reject.column!r}: {reject.reason}")
            for item in decoded:
                if item.error is None:
                    item.error = _from_the_future(item)
        for item in inputs:
            source = (item.topic, item.partition)
            self._fetched[source] = item.offset + 1
            if item.error is not None:
                key: tuple[Any, ...] = FIRST
            else:
                assert item.event is not None
                ms = int(item.event["event_time"].timestamp() * 1000)
                key = (ms, item.event["job_id"], _KIND_RANK[item.kind])
            self.merge.push(source, key, item)

    def _decode(self, message: Message) -> _Input:
        topic = message.topic()
        kind = "submitted" if topic == self.topics.submitted else "completed"
        item = _Input(
            topic,
            message.partition(),
            message.offset(),
            message.key(),
            message.value() or b"",
            message.timestamp()[1],
            kind,
        )
        expected = "JobSubmitted" if kind == "submitted" else "JobCompleted"
        try:
            item.event = self.codec.decode(item.value, reader=expected)
        except CodecError as error:
            item.error = ("CodecError", str(error))
        return item

    def _caught_up(self, source: tuple[str, int]) -> bool:
        assert self._consumer is not None
        partition = TopicPartition(*source)
        _, high = self._consumer.get_watermark_offsets(partition, cached=True)
        if high < 0:  # the client learns a partition's end from its messages: none fetched yet
            high = self._high_at_assign.get(source, -1)
        if high < 0:
            return False
        if self._fetched.get(source, 0) >= high:
            return True
        # a transactional producer's commit marker takes an offset no message is delivered
        # at, after its last message: the client's position moves past it
        return self._consumer.position([partition])[0].offset >= high

    def _take_ready(self) -> list[_Input]:
        batch: list[_Input] = []
        now_ms = time.monotonic() * 1000.0
        while len(batch) < self.settings.max_batch:
            item = self.merge.pop(self._caught_up, now_ms)
            if item is None:
                break
            batch.append(item)
        return batch

    # --- one transaction -------------------------------------------------------------------

    def _process(self, batch: list[_Input]) -> None:
        producer, consumer = self._producer, self._consumer
        assert producer is not None and consumer is not None
        topics, metrics = self.topics, self.metrics
        offsets: dict[tuple[str, int], int] = {}
        published: list[tuple[dict[str, Any], int]] = []
        ranker = self._ranker()
        producer.begin_transaction()
        for item in batch:
            offsets[(item.topic, item.partition)] = item.offset + 1
            if item.error is not None:
                self._dead_letter(item)
                continue
            event = item.event
            assert event is not None
            self.pending.partition = self.priors.partition = item.partition
            metrics.events.labels(item.kind).inc()
            if item.kind == "submitted":
                self._evict_daily(event["event_time"])
                record = ranker.on_submitted(event).record()
                producer.produce(
                    topics.rankings,
                    key=record["job_id"].encode(),
                    value=self.codec.encode("HardwareRanking", record),
                )
                published.append((record, item.timestamp_ms))
            else:
                item.error = self._completed(event)
                if item.error is not None:
                    self._dead_letter(item)
        for changelog in (self.pending, self.priors):
            for partition, key, value in changelog.drain():
                producer.produce(topics.state, key=key, value=value, partition=partition)
        producer.send_offsets_to_transaction(
            [TopicPartition(t, p, o) for (t, p), o in offsets.items()],
            consumer.consumer_group_metadata(),
        )
        producer.flush()  # serves the learn log's delivery reports before the commit
        # GET /rankings/ answers as soon as a client can read the ranking, not a moment after
        # (a failed commit restarts the worker, and this store with it)
        for record, _ in published:
            self.recent.put(record)
        producer.commit_transaction()
        now_ms = time.time() * 1000.0
        for record, submitted_ms in published:
            metrics.ranking(record["abstained"])
            metrics.latency.observe(max(now_ms - submitted_ms, 0.0) / 1000.0)
        # decisions first: a snapshot's scoreboard never gets ahead of the decisions published
        self._publish_decisions()
        if self.learner is self.core:
            self._maybe_snapshot()
        self._update_lag(offsets)

    def _completed(self, event: dict[str, Any]) -> tuple[str, str] | None:
        """Join a completion to its pending submission and learn from it (inline) or log it
        for the learner; the dead letter's error type and reason when it cannot be used."""
        assert self._producer is not None
        implausible = self.core.implausible_completions
        matched, example = self.core.join(event)
        if not matched:
            self.metrics.completions.labels("unmatched").inc()
            return "UnmatchedCompletion", _unmatched_reason(event)
        if self.core.implausible_completions > implausible:
            self.metrics.completions.labels("implausible").inc()
            return "ImplausibleThroughput", (
                f"throughput {event['throughput']!r} of job {event['job_id']!r} is over e^"
                f"{IMPLAUSIBLE_LOG_RESIDUAL:g} times off the model's prediction on "
                f"{event['hardware_type']}: not learned (a broken measurement or unit?)"
            )
        if example is None:
            self.metrics.completions.labels("not_learned").inc()
            return None
        self.metrics.completions.labels("learned").inc()
        self.metrics.score(example["predicted"], example["throughput"])
        self._producer.produce(
            self.topics.learn,
            key=example["job_id"].encode(),
            value=self.codec.encode("LearnExample", example),
            on_delivery=self._on_learn_delivered,
        )
        if self.learner is self.core:  # inline: learn at once, as the replay does
            self._score(example)
            self.core.learn(example)
            self._learned_since_snapshot += 1
            self.metrics.model_version.set(self.core.model.learned)
        return None

    def _on_learn_delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            raise KafkaException(error)  # the transaction fails; the worker restarts clean
        if self.learner is self.core:
            self._learn_next = max(self._learn_next, message.offset() + 1)

    def _dead_letter(self, item: _Input) -> None:
        assert self._producer is not None and item.error is not None
        error_type, reason = item.error
        self.metrics.dead_letters.labels(error_type).inc()
        log.warning("dead letter %s[%d]@%d: %s", item.topic, item.partition, item.offset, reason)
        record = {
            "event_id": str(uuid.uuid4()),
            "event_time": datetime.now(UTC),
            "source_topic": item.topic,
            "partition": item.partition,
            "offset": item.offset,
            "key": item.key,
            "payload": item.value,
            "error_type": error_type,
            "reason": reason,
        }
        self._producer.produce(
            self.topics.dlq, key=item.key, value=self.codec.encode("DeadLetter", record)
        )

    def _evict_daily(self, when: datetime) -> None:
        """Once per event day, forget idle lineages and stale submissions (as the replay
        does)."""
        if when.date() != self._day:
            self._day = when.date()
            now_ms = when.timestamp() * 1000.0
            self.core.evict_idle_lineages(now_ms)
            self.core.forget_stale_pending(now_ms)

    def _update_lag(self, offsets: dict[tuple[str, int], int]) -> None:
        assert self._consumer is not None
        for (topic, partition), offset in offsets.items():
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), cached=True
            )
            if high >= 0:
                self.metrics.lag.labels(topic, str(partition)).set(max(high - offset, 0))

    # --- rebalances ------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = sorted({tp.partition for tp in partitions})
        log.info("assigned partitions %s; restoring their state", numbers)
        # the offsets first: their read waits for a previous owner's transaction still open
        # (read_committed), so the state read after it holds that transaction's writes too
        committed = consumer.committed(partitions, timeout=READS_TIMEOUT_S)
        self._restore_state(numbers)
        for tp in committed:
            low, high = consumer.get_watermark_offsets(tp, timeout=READS_TIMEOUT_S)
            self._fetched[(tp.topic, tp.partition)] = max(tp.offset, low)
            self._high_at_assign[(tp.topic, tp.partition)] = high
        self.merge.assign((tp.topic, tp.partition) for tp in partitions)
        self.metrics.assigned.set(len(self._fetched))
        if self.learner is self.core:
            total = len(
                consumer.list_topics(self.topics.submitted, 10)
                .topics[self.topics.submitted]
                .partitions
            )
            if len({tp.partition for tp in partitions}) < total:
                log.warning(
                    "learning inline while other workers hold partitions: each would learn "
                    "a model of its own; run several workers with --learning shared"
                )
        self.ready.set()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        sources = [(tp.topic, tp.partition) for tp in partitions]
        self.merge.revoke(sources)  # queued, never processed nor committed: fetched again
        for source in sources:
            self._fetched.pop(source, None)
            self._high_at_assign.pop(source, None)
        numbers = {tp.partition for tp in partitions}
        self.pending.forget(numbers)
        self.priors.forget(numbers)
        self.metrics.assigned.set(len(self._fetched))
        if not self._fetched:
            self.ready.clear()

    def _restore_state(self, partitions: list[int]) -> None:
        self.pending.forget(partitions)
        self.priors.forget(partitions)

        def restore(message: Message) -> None:
            key, value = message.key(), message.value()
            for changelog in (self.pending, self.priors):
                if changelog.restore(message.partition(), key, value):
                    return

        read_to_end(
            self.settings.bootstrap,
            self.settings.group_id,
            [TopicPartition(self.topics.state, p, OFFSET_BEGINNING) for p in partitions],
            restore,
        )

    # --- the model -------------------------------------------------------------------------

    def _recover_model(self) -> None:
        """The models topic to its end (the newest online snapshot, nightly models, serving
        decision); the learner also folds the learn log on from the snapshot's offset, or from
        the log's start when there is no snapshot it can load."""
        newest: dict[bytes, Message] = {}

        def keep(message: Message) -> None:
            self._models_next = message.offset() + 1
            if message.value():
                newest[message.key() or b""] = message

        read_to_end(
            self.settings.bootstrap,
            self.settings.group_id,
            [TopicPartition(self.topics.models, 0, OFFSET_BEGINNING)],
            keep,
        )
        snapshot = newest.pop(MODEL_KEY, None)
        record = None
        if snapshot is not None:
            record = self._model_record(
                snapshot.value(), "ModelSnapshot", self.metrics.refused_snapshots
            )
        loaded = record is not None and self._load_snapshot(record)
        for key, message in sorted(newest.items(), key=lambda item: item[1].offset()):
            self._on_model_record(key, message.value())
        if self.learner is not None:
            start, _ = log_bounds(self.settings.bootstrap, self.topics.learn)
            if loaded and start > self._learn_next:
                log.warning(
                    "the learn log starts at offset %d, after the snapshot's %d: its retention "
                    "dropped completions the model had not learned; folding on from %d",
                    start, self._learn_next, start,
                )  # fmt: skip
            read_to_end(
                self.settings.bootstrap,
                self.settings.group_id,
                [TopicPartition(self.topics.learn, 0, max(self._learn_next, start))],
                self._fold,
            )
            log.info("model recovered: %s", self.learner.model_version)
            if snapshot is not None and not loaded:
                log.warning(
                    "rebuilt the online model from the %d records of the learn log (what its "
                    "retention has dropped is not in it): %s",
                    self._learned_since_snapshot, self.learner.model_version,
                )  # fmt: skip
                self.publish_snapshot()  # for the next restart and the rankers
        self._snapshot_due_at = time.monotonic() + self.settings.snapshot_interval_s
        self.metrics.model_version.set(self.core.model.learned)
        self._models = self._follower(self.topics.models, self._models_next)
        if self.settings.learning == "shared" and self.learner is not None:
            self._learn_log = self._follower(self.topics.learn, self._learn_next)
        self._publish_decisions()  # the refold's, taken again the same way

    def _load_snapshot(self, record: dict[str, Any]) -> bool:
        """Rank (and learn) with an online snapshot's model; False if this version refuses it.

        A snapshot written with other libraries, learned on other features or over another
        catalog (an upgrade changed them) is refused, never loaded: the learner then rebuilds
        the model by folding the learn log from its start, and a plain ranker ranks with a fresh
        model until the learner publishes one it can load.
        """
        cores = {id(c): c for c in (self.core, self.learner) if c is not None}.values()
        try:
            for core in cores:  # each its own copy: the learner moves on
                state, learn_next = read_snapshot(record, learn_topic=self.topics.learn)
                core.load_model_state(state)
        except (SnapshotError, ValueError) as error:
            self._refuse_snapshot(record, error)
            return False
        self._learn_next = learn_next
        if self.board is not None and state.get("champion_challenger"):
            self.board.load_state(state["champion_challenger"])
        log.info("loaded snapshot %s", record["model_version"])
        return True

    def _model_record(
        self, value: bytes, reader: str, refused: Counter | None = None
    ) -> dict[str, Any] | None:
        """A models-topic record, or None (logged, and counted in ``refused``) when this
        version cannot read it: a newer version's schema, say. The topic is compacted and read
        again at every start, so such a record must not stop the worker."""
        try:
            return self.codec.decode(value, reader=reader)
        except CodecError as error:
            log.warning("models topic: a %s this version cannot read: %s", reader, error)
            if refused is not None:
                refused.inc()
            return None

    def _refuse_snapshot(self, record: dict[str, Any], error: Exception) -> None:
        log.warning("online snapshot %s refused: %s", record["model_version"], error)
        self.metrics.refused_snapshots.inc()

    def _follower(self, topic: str, offset: int) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": self.settings.bootstrap,
                "group.id": f"{self.settings.group_id}-follower",  # assigned, never committed
                **READ_COMMITTED,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",  # as read_to_end
            }
        )
        consumer.assign([TopicPartition(topic, 0, offset)])
        return consumer

    def _fold(self, message: Message) -> None:
        assert self.learner is not None
        example = self.codec.decode(message.value(), reader="LearnExample")
        self._score(example)
        self.learner.learn(example)
        self._learn_next = message.offset() + 1
        self._learned_since_snapshot += 1

    def _follow_model(self) -> None:
        """Fold new learn records (the shared learner); read new models and decisions (all)."""
        if self._learn_log is not None:
            for message in self._learn_log.consume(self.settings.max_batch, timeout=0):
                if message.error() is None:
                    self._fold(message)
            self._publish_decisions()
            self._maybe_snapshot()
        if self._models is None:
            return
        newest_online = None
        for message in self._models.consume(100, timeout=0):
            if message.error() is not None or not message.value():
                continue
            if message.key() == MODEL_KEY:
                newest_online = message
            else:
                self._on_model_record(message.key(), message.value())
        # the online model is the ranking core's own when it learns inline
        if newest_online is not None and self.learner is not self.core:
            refused = self.metrics.refused_snapshots
            record = self._model_record(newest_online.value(), "ModelSnapshot", refused)
            if record is not None and record["trained_on_events"] > self.core.model.learned:
                try:
                    state, _ = read_snapshot(record, learn_topic=self.topics.learn)
                    self.core.load_model_state(state)
                except (SnapshotError, ValueError) as error:  # a learner not yet upgraded
                    self._refuse_snapshot(record, error)
                else:
                    self.metrics.model_version.set(self.core.model.learned)

    # --- champion/challenger ---------------------------------------------------------------

    def _on_model_record(self, key: bytes | None, value: bytes) -> None:
        """A nightly model or a serving decision read from the models topic."""
        key = key or b""
        if key.startswith(NIGHTLY_PREFIX):
            name = key[len(NIGHTLY_PREFIX) :].decode()
            record = self._model_record(value, "ModelSnapshot", self.metrics.refused_models)
            if record is None:
                return
            try:
                model, cutoff_ms = read_nightly(record)
                self.core.with_model(model, record["model_version"])  # the same catalog?
            except (SnapshotError, ValueError) as error:
                log.warning("nightly model %s refused: %s", name, error)
                self.metrics.refused_models.inc()
                return
            self.nightly[name] = (model, record["model_version"])
            if self.board is not None:
                self.board.add_challenger(name, model, cutoff_ms, record["model_version"])
            log.info("nightly model %s loaded (%s)", name, record["model_version"])
        elif key == SERVING_KEY:
            decision = self._model_record(value, "ServingDecision")
            if decision is not None:
                self._apply(decision)
        elif key != MODEL_KEY:
            log.warning("models topic: ignoring a record with unknown key %r", key)

    def _ranker(self) -> LeapCore:
        """The core that ranks: the online one, or one ranking with the serving nightly model
        or the ensemble of the online model and the nightly models loaded here."""
        if self.serving == ENSEMBLE and self.nightly:
            members = [self.core.model, *(model for model, _ in self.nightly.values())]
            version = _ensemble_version(
                self.core.model_version, [v for _, v in self.nightly.values()]
            )
            return self.core.with_model(Ensemble(members), version)
        chosen = self.nightly.get(self.serving)
        if self.serving == ONLINE or chosen is None:  # not (yet) loaded here: online ranks
            return self.core
        model, version = chosen
        return self.core.with_model(model, version)

    def _score(self, example: dict[str, Any]) -> None:
        """Score every model on a learn example before the learner learns it (the learner)."""
        assert self.board is not None and self.learner is not None
        late = self.board.late
        decision = self.board.learn_one(example, self.learner.model)
        self.metrics.late_examples.inc(self.board.late - late)
        if decision is None:
            return
        serving = self.board.challengers.get(decision.serving)
        version = self.learner.model_version if serving is None else serving.version
        if decision.serving == ENSEMBLE and self.board.challengers:
            nightly = [c.version for c in self.board.challengers.values()]
            version = _ensemble_version(self.learner.model_version, nightly)
        day = example["event_time"].date()
        self._decisions.append(decision_record(decision, day=day, version=version))

    def _publish_decisions(self) -> None:
        """Publish the decisions taken (a transaction of their own); every worker follows."""
        if not self._decisions:
            return
        assert self._producer is not None
        self._producer.begin_transaction()
        for record in self._decisions:
            value = self.codec.encode("ServingDecision", record)
            self._producer.produce(self.topics.models, key=SERVING_KEY, value=value)
        self._producer.commit_transaction()
        log.info("published %d serving decision(s)", len(self._decisions))
        self._apply(self._decisions[-1])  # at once here; the other workers read it
        self._decisions.clear()

    def _apply(self, decision: dict[str, Any]) -> None:
        """Rank from now on with the model a ServingDecision names."""
        if decision["serving"] != self.serving:
            log.info(
                "serving %s from %s: %s", decision["serving"], decision["day"], decision["reason"]
            )
        self.serving = decision["serving"]
        self.metrics.serve(self.serving, decision["window_shares"])

    def _maybe_snapshot(self) -> None:
        learner = self.learner
        if learner is None or self._learned_since_snapshot == 0:
            return
        due = time.monotonic() >= self._snapshot_due_at
        if self._learned_since_snapshot < self.settings.snapshot_every and not due:
            return
        self.publish_snapshot()

    def publish_snapshot(self) -> None:
        """Publish the learner's model now, in a transaction of its own."""
        assert self.learner is not None and self._producer is not None
        extra = None if self.board is None else {"champion_challenger": self.board.state()}
        record = snapshot_record(
            self.learner, learn_topic=self.topics.learn, learn_offset=self._learn_next, extra=extra
        )
        self._producer.begin_transaction()
        self._producer.produce(
            self.topics.models, key=MODEL_KEY, value=self.codec.encode("ModelSnapshot", record)
        )
        self._producer.commit_transaction()
        self._learned_since_snapshot = 0
        self._snapshot_due_at = time.monotonic() + self.settings.snapshot_interval_s
        log.info("published snapshot %s", record["model_version"])
