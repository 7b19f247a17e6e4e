"""pytest fixtures for tests against a real Kafka broker.

Registered from ``tests/conftest.py`` through ``pytest_plugins``. Tests that use them are marked
``@pytest.mark.integration``.

Fixtures
--------
kafka_bootstrap
    Session-scoped bootstrap address (``"host:port"``) of a running broker, found in this order:
    the ``LEAP_KAFKA_BOOTSTRAP`` environment variable (what ``make test`` sets); a
    testcontainers ``KafkaContainer`` when a Docker engine answers; else a local broker from
    Maven Central jars started with ``deploy/kafka/broker start`` (and stopped at the end of the
    session if this fixture started it).
kafka_topic
    Function-scoped factory: ``kafka_topic(partitions=1)`` creates a uniquely named topic, waits
    until every partition has a leader, returns its name, and deletes it after the test.

Examples
--------
A test that writes to and reads from its own topic::

    @pytest.mark.integration
    def test_roundtrip(kafka_bootstrap: str, kafka_topic: TopicFactory) -> None:
        topic = kafka_topic(partitions=1)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap,
                             "group.id": unique_name("group"), ...})
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

if TYPE_CHECKING:  # confluent-kafka is the optional `kafka` extra: import it only when used
    from confluent_kafka import Consumer, Message
    from confluent_kafka.admin import AdminClient

__all__ = [
    "BOOTSTRAP_ENV",
    "BROKER_SCRIPT",
    "KafkaFixtureError",
    "TopicFactory",
    "consume",
    "consumer_config",
    "kafka_bootstrap",
    "kafka_topic",
    "produce",
    "read_topic",
    "unique_name",
    "wait_for_leaders",
]

BOOTSTRAP_ENV = "LEAP_KAFKA_BOOTSTRAP"
"""Environment variable naming an already running broker (``host:port[,host:port...]``)."""

BROKER_SCRIPT = Path(__file__).resolve().parent.parent / "deploy" / "kafka" / "broker"
"""The script that runs a local broker from Maven Central jars (needs Java 17+ and Maven)."""

# Used with Docker only. Confluent Platform 8.0 ships Apache Kafka 4.0; testcontainers'
# KafkaContainer drives Confluent's image entrypoint, so it needs a cp-kafka image.
CONTAINER_IMAGE_ENV = "LEAP_KAFKA_IMAGE"
DEFAULT_CONTAINER_IMAGE = "confluentinc/cp-kafka:8.0.0"

# Admin calls on a local broker take milliseconds; the bound only keeps a broken broker from
# hanging the session.
ADMIN_TIMEOUT_S = 30.0


class KafkaFixtureError(RuntimeError):
    """No broker could be found or started, or a topic could not be created or deleted.

    Examples
    --------
    >>> raise KafkaFixtureError("LEAP_KAFKA_BOOTSTRAP is set but empty")
    Traceback (most recent call last):
    ...
    kafka_fixtures.KafkaFixtureError: LEAP_KAFKA_BOOTSTRAP is set but empty
    """


class TopicFactory(Protocol):
    """Signature of the ``kafka_topic`` fixture's value.

    Examples
    --------
    >>> def fake(partitions: int = 1, *, prefix: str = "test") -> str:
    ...     return unique_name(prefix)
    >>> factory: TopicFactory = fake
    >>> factory().startswith("test-")
    True
    """

    def __call__(self, partitions: int = 1, *, prefix: str = "test") -> str: ...


def unique_name(prefix: str) -> str:
    """Return ``prefix`` followed by a random suffix: a topic or consumer group name no other
    test (or earlier run against the same broker) uses.

    Parameters
    ----------
    prefix
        Readable start of the name: letters, digits, ``.``, ``_`` and ``-`` only, as Kafka
        allows in topic names.

    Examples
    --------
    >>> name = unique_name("orders")
    >>> name.startswith("orders-") and len(name) == len("orders-") + 12
    True
    >>> unique_name("orders") != unique_name("orders")
    True
    >>> unique_name("bad name")
    Traceback (most recent call last):
    ...
    kafka_fixtures.KafkaFixtureError: unique_name: prefix 'bad name' must match [a-zA-Z0-9._-]+
    """
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    if not prefix or not set(prefix) <= allowed:
        raise KafkaFixtureError(f"unique_name: prefix {prefix!r} must match [a-zA-Z0-9._-]+")
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _docker_engine_answers() -> bool:
    """True when a Docker engine answers a ping (the docker SDK comes with testcontainers)."""
    try:
        import docker  # lazy: not needed, and maybe not installed, without Docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no SDK, no socket, engine down: all mean "no Docker"
        return False


def _run_broker_script(command: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [str(BROKER_SCRIPT), command],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as error:
        raise KafkaFixtureError(f"cannot run {BROKER_SCRIPT}: {error}") from error


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address of a running Kafka broker for this test session (see module docs)."""
    if BOOTSTRAP_ENV in os.environ:
        bootstrap = os.environ[BOOTSTRAP_ENV].strip()
        if not bootstrap:
            raise KafkaFixtureError(
                f"{BOOTSTRAP_ENV} is set but empty (did `deploy/kafka/broker start` fail?)"
            )
        yield bootstrap
        return

    if _docker_engine_answers():
        # Lazy import: testcontainers pulls in the docker SDK, needless on most runs.
        from testcontainers.community.kafka import KafkaContainer

        image = os.environ.get(CONTAINER_IMAGE_ENV, DEFAULT_CONTAINER_IMAGE)
        container = (
            KafkaContainer(image)
            .with_kraft()
            .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        )
        with container:
            yield container.get_bootstrap_server()
        return

    # Stop at session end only a broker this fixture started, never a developer's own.
    was_running = _run_broker_script("status").returncode == 0
    started = _run_broker_script("start")
    lines = started.stdout.strip().splitlines()
    if started.returncode != 0 or not lines:
        raise KafkaFixtureError(
            f"`{BROKER_SCRIPT} start` failed (exit {started.returncode}):\n{started.stderr}"
        )
    try:
        yield lines[-1]
    finally:
        if not was_running:
            _run_broker_script("stop")


def wait_for_leaders(admin: AdminClient, topic: str, partitions: int) -> None:
    """Wait until the broker's metadata shows every partition of ``topic`` with a leader, so a
    producer or consumer started right after never sees UNKNOWN_TOPIC_OR_PART."""
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic=topic, timeout=5)
        found = metadata.topics.get(topic)
        if (
            found is not None
            and found.error is None
            and len(found.partitions) == partitions
            and all(p.leader >= 0 for p in found.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise KafkaFixtureError(
        f"topic {topic!r}: partitions without a leader after {ADMIN_TIMEOUT_S:.0f}s"
    )


@pytest.fixture
def kafka_topic(kafka_bootstrap: str) -> Iterator[TopicFactory]:
    """Factory creating uniquely named topics on the session's broker; deletes them afterwards.

    Call it as ``kafka_topic(partitions=1, prefix="test")``; it returns the topic name once the
    topic exists and every partition has a leader. Replication factor is 1.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created: list[str] = []

    def create(partitions: int = 1, *, prefix: str = "test") -> str:
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise KafkaFixtureError(
                f"kafka_topic: partitions must be a positive int, got {partitions!r}"
            )
        name = unique_name(prefix)
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            request_timeout=ADMIN_TIMEOUT_S,
        )
        try:
            futures[name].result(timeout=ADMIN_TIMEOUT_S)
        except Exception as error:
            raise KafkaFixtureError(f"kafka_topic: creating {name!r} failed: {error}") from error
        created.append(name)
        wait_for_leaders(admin, name, partitions)
        return name

    yield create

    if created:
        futures = admin.delete_topics(created, request_timeout=ADMIN_TIMEOUT_S)
        failures = []
        for name, future in futures.items():
            try:
                future.result(timeout=ADMIN_TIMEOUT_S)
            except Exception as error:
                failures.append(f"{name}: {error}")
        if failures:
            raise KafkaFixtureError("kafka_topic: deleting topics failed: " + "; ".join(failures))


# --- helpers for tests that produce and consume ----------------------------------------------

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


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    """Send keyed ``messages`` with acks=all and wait until every one is delivered."""
    from confluent_kafka import Producer

    errors: list[object] = []

    def on_delivery(error: object, _message: object) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for key, value in messages:
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
    assert producer.flush(30) == 0, "messages still queued after flush"
    assert errors == [], errors


def read_topic(bootstrap: str, topic: str, count: int) -> list[Message]:
    """Read ``count`` messages of ``topic`` from the start with a fresh consumer group."""
    from confluent_kafka import Consumer

    consumer = Consumer(consumer_config(bootstrap))
    try:
        consumer.subscribe([topic])
        return consume(consumer, count)
    finally:
        consumer.close()
