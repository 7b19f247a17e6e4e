"""One settings object for a worker: CLI flags and ``LEAP_*`` environment variables fill it.

>>> settings = ServiceSettings(bootstrap="127.0.0.1:9092", topic_prefix="test-")
>>> settings.topics.submitted, settings.transactional_id
('test-leap.jobs.submitted', 'leap-stream-worker-0')
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from leap_stream.core.promotion import PromotionRule
from leap_stream.streaming.topics import TopicNames

__all__ = ["ServiceSettings"]


class ServiceSettings(BaseModel, frozen=True):
    """How one worker connects, what it reads and writes, and how it learns."""

    bootstrap: str = Field(description="Kafka bootstrap servers, host:port[,host:port]")
    topic_prefix: str = Field("", description="prefix of every topic name (one fleet per prefix)")
    group_id: str = Field("leap-stream", description="consumer group of the workers")
    worker_id: str = Field(
        "0",
        description="stable id of this worker: its static group membership and transactional "
        "id, so a restarted worker takes its predecessor's place at once",
    )
    partitions: int = Field(4, ge=1, description="partitions of the co-partitioned job topics")
    learning: Literal["inline", "shared"] = Field(
        "inline",
        description="inline: one worker learns every completion at once; shared: workers rank "
        "with the newest snapshot that the learner worker publishes",
    )
    learner: bool = Field(
        True, description="in shared mode, whether this worker folds the learn log (one per fleet)"
    )
    snapshot_every: int = Field(5_000, ge=1, description="learned completions between snapshots")
    snapshot_interval_s: float = Field(60.0, gt=0, description="at most this long between them")
    max_batch: int = Field(500, ge=1, description="input messages per transaction, at most")
    max_wait_ms: int = Field(
        500,
        ge=0,
        description="how long a partition that is behind may hold back the event-time merge",
    )
    session_timeout_ms: int = Field(10_000, ge=6_000, description="consumer group session")
    catalog: Path | None = Field(None, description="hardware catalog TOML (default: packaged)")
    web_port: int | None = Field(6066, description="HTTP port (health, metrics); None: none")
    web_host: str = Field("127.0.0.1", description="HTTP address (0.0.0.0 in a container)")
    lineage_half_life_days: float = Field(
        14.0, gt=0, description="days after which a lineage's priors weigh half"
    )
    promotion_margin: float = Field(
        0.01, ge=0, lt=1, description="within-10% share by which a nightly model must lead"
    )
    promotion_window_days: int = Field(3, ge=1, description="trailing days the rule pools")
    promotion_min_attempts: int = Field(
        500, ge=1, description="fewest completions in the window for any change of model"
    )

    @property
    def promotion_rule(self) -> PromotionRule:
        """The champion/challenger rule the learner applies each day."""
        return PromotionRule(
            self.promotion_margin, self.promotion_window_days, self.promotion_min_attempts
        )

    @property
    def topics(self) -> TopicNames:
        """The topic names under :attr:`topic_prefix`."""
        return TopicNames(self.topic_prefix)

    @property
    def transactional_id(self) -> str:
        """Stable per worker: a restarted worker fences and aborts its predecessor's transaction."""
        return f"{self.group_id}-worker-{self.worker_id}"
