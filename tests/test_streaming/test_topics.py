"""`leap-stream topics create` on the real broker: the learn log's retention, new or existing."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from kafka_fixtures import unique_name
from typer.testing import CliRunner

from leap_stream.cli import app
from leap_stream.streaming.topics import LEARN_RETENTION_MS, TopicNames

pytestmark = pytest.mark.integration

DAY_MS = 86_400_000


def _retention(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return int(future.result(timeout=30)["retention.ms"].value)


def _create(bootstrap: str, names: TopicNames, *options: str) -> str:
    result = CliRunner().invoke(
        app,
        ["topics", "create", "--bootstrap", bootstrap, "--topic-prefix", names.prefix, *options],
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_an_existing_learn_log_gets_the_retention_asked_for_and_keeps_it(
    kafka_bootstrap: str, fleet_topics
) -> None:
    names = fleet_topics(partitions=2)  # created with the defaults
    assert _retention(kafka_bootstrap, names.learn) == LEARN_RETENTION_MS
    shown = _create(kafka_bootstrap, names, "--learn-retention-days", "30")
    assert f"retention set {names.learn}" in shown
    assert _retention(kafka_bootstrap, names.learn) == 30 * DAY_MS
    # asked again: nothing to change; not asked: left as it is
    assert f"exists   {names.learn}" in _create(
        kafka_bootstrap, names, "--learn-retention-days", "30"
    )
    _create(kafka_bootstrap, names)
    assert _retention(kafka_bootstrap, names.learn) == 30 * DAY_MS
    _create(kafka_bootstrap, names, "--learn-retention-days", "-1")
    assert _retention(kafka_bootstrap, names.learn) == -1  # every record, forever
    # the other topics keep their own settings
    assert _retention(kafka_bootstrap, names.submitted) != -1


def test_a_retention_of_zero_days_is_refused_in_one_line(
    kafka_bootstrap: str, fleet_topics
) -> None:
    names = fleet_topics(partitions=1)
    result = CliRunner().invoke(
        app,
        ["topics", "create", "--bootstrap", kafka_bootstrap, "--topic-prefix", names.prefix,
         "--learn-retention-days", "0"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "positive, or -1 for forever" in result.output
    assert _retention(kafka_bootstrap, names.learn) == LEARN_RETENTION_MS


def test_a_new_learn_log_is_created_with_the_retention_asked_for(kafka_bootstrap: str) -> None:
    names = TopicNames(unique_name("topics") + ".")
    try:
        shown = _create(kafka_bootstrap, names, "--learn-retention-days", "14")
        assert f"created  {names.learn}" in shown
        assert _retention(kafka_bootstrap, names.learn) == 14 * DAY_MS
    finally:
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        mine = [t for t in admin.list_topics(timeout=30).topics if t.startswith(names.prefix)]
        for future in admin.delete_topics(mine, request_timeout=30).values():
            future.result(timeout=30)
