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
# minute or so): a week is plenty, and keeps it replayable for audits.
LEARN_RETENTION_MS = 7 * 24 * 3600 * 1000
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


def topic_specs(names: TopicNames, partitions: int) -> list[TopicSpec]:
    """The topics of one fleet; ``partitions`` for the job topics and their state."""
    compacted = {"cleanup.policy": "compact"}
    return [
        TopicSpec(names.submitted, partitions, {}),
        TopicSpec(names.completed, partitions, {}),
        TopicSpec(names.rankings, partitions, {}),
        TopicSpec(names.dlq, 1, {}),
        TopicSpec(names.models, 1, {**compacted, "max.message.bytes": str(SNAPSHOT_MAX_BYTES)}),
        # one partition: the model is a fold over this log, in its order
        TopicSpec(names.learn, 1, {"retention.ms": str(LEARN_RETENTION_MS)}),
        TopicSpec(names.state, partitions, compacted),
    ]


def create_topics(
    admin: AdminClient, names: TopicNames, partitions: int, replication_factor: int = 1
) -> dict[str, str]:
    """Create the missing topics; check the existing ones. Returns ``{name: what happened}``.

    Idempotent: run it again and every topic is ``exists``. ``partitions`` applies to a new
    fleet; an existing job topic's count wins. Raises :class:`TopicError` when existing topics
    disagree with it (the job topics and the state are co-partitioned).
    """
    from confluent_kafka.admin import NewTopic

    existing = admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics
    if names.submitted in existing:  # an existing fleet keeps its partition count
        partitions = len(existing[names.submitted].partitions)
    specs = topic_specs(names, partitions)
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
    return outcome
