"""What a scheduler uses, on the real broker: LeapClient, RankingSubscriber, the example
policy, and ``leap-stream produce``.

Tests that need the broker are marked ``integration`` one by one: the example policy's and the
command line's checks run without it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kafka_fixtures import unique_name
from streaming_fixtures import (
    WorkerProcess,
    committed_offsets,
    end_offsets,
    read_records,
    wait_for,
)
from typer.testing import CliRunner

from leap_stream.cli import app
from leap_stream.client import LeapClient, RankingSubscriber
from leap_stream.data.history import events_to_table, write_history
from leap_stream.streaming.produce import EventProducer, ProduceInterrupted, produce_events
from leap_stream.streaming.scheduler import choose, describe
from leap_stream.streaming.topics import TopicNames

integration = pytest.mark.integration


def _ranking(abstained: bool = False) -> dict[str, Any]:
    return {
        "job_id": "j-7",
        "model_version": "online-42",
        "abstained": abstained,
        "abstain_reason": "no eligible candidate: too little memory" if abstained else None,
        "candidates": [
            {"hardware_type": "v100-16g", "rank": None, "predicted_cost_per_1k_samples": None},
            {"hardware_type": "H100-SXM", "rank": 2, "predicted_cost_per_1k_samples": 0.02},
            {"hardware_type": "MI300X", "rank": 1, "predicted_cost_per_1k_samples": 0.0151},
        ],
    }


def _as_served(record: dict[str, Any]) -> dict[str, Any]:
    """A record as the worker's ``/rankings/{job_id}`` serves it (JSON, ISO timestamps)."""

    def default(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.isoformat()
        raise TypeError(type(value).__name__)

    return json.loads(json.dumps(record, default=default))


def _submissions(events) -> list[dict[str, Any]]:
    return [event for kind, event in events if kind == "submitted"]


# --- the example policy, no broker ------------------------------------------------------------


def test_choose_takes_the_rank_1_candidate_wherever_it_is_listed() -> None:
    assert choose(_ranking()) == "MI300X"
    assert describe(_ranking()) == "job j-7: MI300X at $0.0151 per 1k samples (model online-42)"


def test_choose_keeps_the_requested_hardware_when_the_ranking_abstained() -> None:
    assert choose(_ranking(abstained=True)) is None
    assert describe(_ranking(abstained=True)) == (
        "job j-7: abstained: no eligible candidate: too little memory; "
        "keeps its requested hardware (model online-42)"
    )
    unranked = {**_ranking(), "candidates": [{**c, "rank": None} for c in _ranking()["candidates"]]}
    assert choose(unranked) is None


def test_produce_refuses_rate_and_speedup_together(tmp_path: Path) -> None:
    history = tmp_path / "h.parquet"
    history.write_bytes(b"")
    args = ["produce", str(history), "--bootstrap", "127.0.0.1:1", "--rate", "5"]
    result = CliRunner().invoke(app, [*args, "--speedup", "60"])
    assert result.exit_code == 2
    assert "--rate and --speedup are exclusive" in result.output
    result = CliRunner().invoke(app, [*args[:-1], "0"])
    assert result.exit_code == 2
    assert "--rate must be positive" in result.output


# --- against the broker -----------------------------------------------------------------------


@integration
def test_submit_returns_that_jobs_ranking_and_keeps_the_others_for_later(
    kafka_bootstrap: str, fleet_topics, fleet_events, tmp_path: Path
) -> None:
    topics = fleet_topics(partitions=4)
    mine, theirs = _submissions(fleet_events)[:2]
    worker = WorkerProcess(kafka_bootstrap, topics, unique_name("g"), tmp_path).start()
    try:
        worker.wait_ready()
        with LeapClient(kafka_bootstrap, topics.prefix, timeout=20.0) as client:
            other = EventProducer(kafka_bootstrap, topics)  # another submitter, same topics
            other.send("submitted", theirs)
            other.flush()
            began = time.monotonic()
            ranking = client.submit(mine)
            took = time.monotonic() - began
            assert ranking["job_id"] == mine["job_id"]
            assert ranking["lineage_id"] == mine["lineage_id"]
            assert ranking["candidates"]
            assert _as_served(ranking) == worker.ranking(mine["job_id"])
            # the other submitter's ranking came by meanwhile: kept, handed out once
            kept = client.ranking_for(theirs["job_id"], timeout=20.0)
            assert kept is not None and kept["job_id"] == theirs["job_id"]
            assert _as_served(kept) == worker.ranking(theirs["job_id"])
            assert client.ranking_for(theirs["job_id"], timeout=0.5) is None
        assert took < 10.0
    finally:
        worker.stop()


@integration
def test_submit_without_a_worker_times_out_and_a_bad_job_is_refused_before_sending(
    kafka_bootstrap: str, fleet_topics, fleet_events
) -> None:
    topics = fleet_topics(partitions=2)
    job = _submissions(fleet_events)[0]
    with LeapClient(kafka_bootstrap, topics.prefix, timeout=2.0) as client:
        began = time.monotonic()
        with pytest.raises(TimeoutError, match=job["job_id"]):
            client.submit(job)
        assert 2.0 <= time.monotonic() - began < 5.0
        with pytest.raises(ValueError, match="precision"):
            client.submit({**job, "job_id": "bad-1", "precision": "bf32"})
        with pytest.raises(ValueError, match="num_devices"):
            client.submit({k: v for k, v in job.items() if k != "num_devices"})
    ends = end_offsets(kafka_bootstrap, [topics.submitted])
    assert sum(ends.values()) == 1  # only the good job was published
    with pytest.raises(LookupError, match="topics create"):
        LeapClient(kafka_bootstrap, unique_name("none") + ".")


@integration
def test_an_interrupted_produce_says_what_it_delivered(
    kafka_bootstrap: str, fleet_topics, fleet_events
) -> None:
    topics = fleet_topics(partitions=2)

    def interrupted_after(n: int):
        yield from fleet_events[:n]
        raise KeyboardInterrupt  # Ctrl-C while the next event is read

    with pytest.raises(ProduceInterrupted) as stopped:
        produce_events(EventProducer(kafka_bootstrap, topics), interrupted_after(7))
    assert stopped.value.sent == 7
    assert stopped.value.through == fleet_events[6][1]["event_time"]
    ends = end_offsets(kafka_bootstrap, [topics.submitted, topics.completed])
    assert sum(ends.values()) == 7  # delivered, not left in the producer's queue


@integration
def test_subscriber_hands_every_ranking_once_across_a_restart_of_its_group(
    kafka_bootstrap: str, fleet_topics, fleet_events, tmp_path: Path
) -> None:
    topics = fleet_topics(partitions=4)
    jobs = [event["job_id"] for event in _submissions(fleet_events)]
    produce_events(EventProducer(kafka_bootstrap, topics), fleet_events)
    worker = WorkerProcess(kafka_bootstrap, topics, unique_name("g"), tmp_path).start()
    try:
        records = read_records(kafka_bootstrap, topics.rankings, len(jobs))
    finally:
        worker.stop()
    where = {record["job_id"]: message for message, record in records}
    assert sorted(where) == sorted(jobs)
    group = unique_name("sched")

    # the first scheduler's policy fails half-way: it has been handed that ranking
    first: list[str] = []

    def crashing(ranking: dict[str, Any]) -> None:
        first.append(ranking["job_id"])
        if len(first) == len(jobs) // 2:
            raise RuntimeError("scheduler crashed")

    with RankingSubscriber(
        kafka_bootstrap, crashing, topics.prefix, group, from_beginning=True
    ) as subscriber:
        deadline = time.monotonic() + 30
        with pytest.raises(RuntimeError, match="crashed"):
            while time.monotonic() < deadline:
                subscriber.poll_once(1.0)
        assert subscriber.handed == len(first) - 1  # the one it failed on does not count
    committed = committed_offsets(kafka_bootstrap, group, [topics.rankings])

    # a second copy of a ranking not handed yet, after the original
    copied = next(job for job in jobs if job not in first)
    original = where[copied]
    copy = _produce_copy(kafka_bootstrap, original)

    second: list[str] = []
    with RankingSubscriber(  # configured as the first: a partition never committed is read
        kafka_bootstrap,
        lambda r: second.append(r["job_id"]),
        topics.prefix,
        group,
        from_beginning=True,
    ) as subscriber:

        def read_past_the_copy() -> bool:
            subscriber.poll_once(0.5)
            now = committed_offsets(kafka_bootstrap, group, [topics.rankings])
            return now[(topics.rankings, original.partition())] > copy

        wait_for("the copy read and committed", read_past_the_copy, timeout=30)
        assert subscriber.handed == len(second)

    assert max(Counter(first).values()) == 1  # within one subscriber: at most once
    assert max(Counter(second).values()) == 1  # ... the copy skipped
    assert set(first) | set(second) == set(jobs)  # every ranking handed
    again = set(first) & set(second)
    for job in again:  # across the restart: only what the first had not committed
        message = where[job]
        assert message.offset() >= committed[(topics.rankings, message.partition())], job
    assert again == {first[-1]}  # everything but the failed one was committed


def _produce_copy(bootstrap: str, message: Any) -> int:
    """Append ``message`` again to its partition; its new offset."""
    from confluent_kafka import Producer

    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(
        message.topic(),
        key=message.key(),
        value=message.value(),
        partition=message.partition(),
        on_delivery=lambda error, m: offsets.append(m.offset() if error is None else -1),
    )
    producer.flush(30)
    assert offsets and offsets[0] > message.offset()
    return offsets[0]


@integration
def test_produce_command_writes_one_message_per_event(
    kafka_bootstrap: str, fleet_events, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient

    events = fleet_events[:300]
    history = tmp_path / "history.parquet"
    write_history([events_to_table(events)], history)
    names = TopicNames(unique_name("cli") + ".")
    try:
        args = ["produce", str(history), "--bootstrap", kafka_bootstrap]
        result = CliRunner().invoke(app, [*args, "--topic-prefix", names.prefix, "--rate", "2000"])
        assert result.exit_code == 0, result.output
        assert "300 events produced" in result.output
        ends = end_offsets(kafka_bootstrap, [names.submitted, names.completed])
        kinds = Counter(kind for kind, _ in events)
        for kind, topic in (("submitted", names.submitted), ("completed", names.completed)):
            assert sum(end for (t, _), end in ends.items() if t == topic) == kinds[kind]
    finally:
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        doomed = [t for t in admin.list_topics(timeout=30).topics if t.startswith(names.prefix)]
        if doomed:
            for future in admin.delete_topics(doomed, request_timeout=30).values():
                future.result(timeout=30)
