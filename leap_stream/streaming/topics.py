"""The service's topics: names, settings, and their idempotent creation.

The two job topics are co-partitioned (same partition count, keyed by ``lineage_id``) so the
worker that ranks a lineage's submission holds its prior and its pending submissions. The state
changelog has the same partition count: partition p of it holds the state of input partition p.

>>> names = TopicNames("demo-")
>>> names.submitted, names.completed, names.rankings
('demo-leap.jobs.submitted', 'demo-leap.jobs.completed', 'demo-leap.rankings')
>>> [spec.name for spec in topic_specs(names, partitions=4)][-2:]
['demo-leap.learn', 'demo-leap.state']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

__all__ = [
    "KEEP_FOREVER",
    "LEARN_RETENTION_MS",
    "TopicError",
    "TopicNames",
    "TopicSpec",
    "create_topics",
    "topic_specs",
]

# Snapshots are a pickled model of ~10 MB (8.6 MB after a 60-day fleet of 3,000 jobs a day, most of
# it the pairwise transfer); the broker's default limit is 1 MB.
SNAPSHOT_MAX_BYTES = 64 * 1024 * 1024
# The learn log must reach back to the oldest snapshot a restart may load (snapshots come every
# minute or so): a week is plenty, and keeps it replayable for audits. A model rebuilt after an
# upgrade has learned only what it keeps: `topics create --learn-retention-days` raises it.
LEARN_RETENTION_MS = 7 * 24 * 3600 * 1000
KEEP_FOREVER = -1  # Kafka's retention.ms for no time limit
ADMIN_TIMEOUT_S = 30.0


class TopicError(RuntimeError):
    """A topic exists with settings the service cannot work with (e.g. partition counts)."""


@dataclass(frozen=True, slots=True)
class TopicNames:
    """Every topic the service reads or writes, under one prefix."""

    prefix: str = ""

    @property
    def submitted(self) -> str:
        return f"{self.prefix}leap.jobs.submitted"

    @property
    def completed(self) -> str:
        return f"{self.prefix}leap.jobs.completed"

    @property
    def rankings(self) -> str:
        return f"{self.prefix}leap.rankings"

    @property
    def models(self) -> str:
        return f"{self.prefix}leap.models"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}leap.dlq"

    @property
    def learn(self) -> str:
        return f"{self.prefix}leap.learn"

    @property
    def state(self) -> str:
        return f"{self.prefix}leap.state"


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic as the service needs it."""

    name: str
    partitions: int
    config: dict[str, str]


def topic_specs(
    names: TopicNames, partitions: int, learn_retention_ms: int = LEARN_RETENTION_MS
) -> list[TopicSpec]:
    """The topics of one fleet; ``partitions`` for the job topics and their state."""
    compacted = {"cleanup.policy": "compact"}
    return [
        TopicSpec(names.submitted, partitions, {}),
        TopicSpec(names.completed, partitions, {}),
        TopicSpec(names.rankings, partitions, {}),
        TopicSpec(names.dlq, 1, {}),
        TopicSpec(names.models, 1, {**compacted, "max.message.bytes": str(SNAPSHOT_MAX_BYTES)}),
        # one partition: the model is a fold over this log, in its order
        TopicSpec(names.learn, 1, {"retention.ms": str(learn_retention_ms)}),
        TopicSpec(names.state, partitions, compacted),
    ]


def create_topics(
    admin: AdminClient,
    names: TopicNames,
    partitions: int,
    replication_factor: int = 1,
    learn_retention_ms: int | None = None,
) -> dict[str, str]:
    """Create the missing topics; check the existing ones. Returns ``{name: what happened}``.

    Idempotent: run it again and every topic is ``exists``. ``partitions`` applies to a new
    fleet; an existing job topic's count wins. Raises :class:`TopicError` when existing topics
    disagree with it (the job topics and the state are co-partitioned). ``learn_retention_ms``
    (``KEEP_FOREVER`` for no limit; default: a week for a new topic, an existing one's as it
    is) is set on the learn topic, existing or new: the one setting an operator changes later.
    """
    from confluent_kafka.admin import NewTopic

    existing = admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics
    if names.submitted in existing:  # an existing fleet keeps its partition count
        partitions = len(existing[names.submitted].partitions)
    if learn_retention_ms is not None and not (
        learn_retention_ms > 0 or learn_retention_ms == KEEP_FOREVER
    ):
        raise TopicError(f"learn retention {learn_retention_ms} ms: positive, or -1 for forever")
    specs = topic_specs(names, partitions, learn_retention_ms or LEARN_RETENTION_MS)
    outcome: dict[str, str] = {}
    wrong = []
    for spec in specs:
        if spec.name in existing:
            have = len(existing[spec.name].partitions)
            if have != spec.partitions:
                wrong.append(f"{spec.name} has {have} partitions, needs {spec.partitions}")
            outcome[spec.name] = "exists"
    if wrong:
        raise TopicError("; ".join(wrong) + " (the job topics and state are co-partitioned)")
    missing = [
        NewTopic(
            s.name,
            num_partitions=s.partitions,
            replication_factor=replication_factor,
            config=s.config,
        )
        for s in specs
        if s.name not in existing
    ]
    if missing:
        futures = admin.create_topics(missing, request_timeout=ADMIN_TIMEOUT_S)
        for name, future in futures.items():
            try:
                future.result(timeout=ADMIN_TIMEOUT_S)
                outcome[name] = "created"
            except Exception as error:  # created meanwhile by another worker: fine
                if "TOPIC_ALREADY_EXISTS" not in str(error):
                    raise TopicError(f"creating {name}: {error}") from error
                outcome[name] = "exists"
    if (
        learn_retention_ms is not None
        and names.learn in existing
        and _set_retention(admin, names.learn, learn_retention_ms)
    ):
        outcome[names.learn] = "retention set"
    return outcome


def _set_retention(admin: AdminClient, topic: str, retention_ms: int) -> bool:
    """Set ``topic``'s ``retention.ms``; False if it already was that."""
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    resource = ConfigResource(ResourceType.TOPIC, topic)
    (described,) = admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S).values()
    if described.result(timeout=ADMIN_TIMEOUT_S)["retention.ms"].value == str(retention_ms):
        return False
    entry = ConfigEntry(
        "retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    (altered,) = admin.incremental_alter_configs([resource]).values()
    try:
        altered.result(timeout=ADMIN_TIMEOUT_S)
    except Exception as error:
        raise TopicError(f"setting {topic}'s retention.ms: {error}") from error
    return True
