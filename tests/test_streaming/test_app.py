"""The stream worker on the real broker: rankings, dead letters, crashes, scale-out."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from kafka_fixtures import unique_name
from streaming_fixtures import (
    WorkerProcess,
    read_records,
    reference_run,
)

from leap_stream.streaming.produce import EventProducer, produce_events

pytestmark = pytest.mark.integration


def _submissions(events) -> list[str]:
    return [e["job_id"] for kind, e in events if kind == "submitted"]


def test_every_submission_gets_the_in_process_cores_ranking(
    kafka_bootstrap: str, fleet_topics, fleet_events, tmp_path: Path
) -> None:
    topics = fleet_topics(partitions=4)
    produce_events(EventProducer(kafka_bootstrap, topics), fleet_events)
    worker = WorkerProcess(kafka_bootstrap, topics, unique_name("g"), tmp_path).start()
    try:
        worker.wait_ready()
        jobs = _submissions(fleet_events)
        records = read_records(kafka_bootstrap, topics.rankings, len(jobs))
        expected, _, _ = reference_run(fleet_events)
        got = {record["job_id"]: record for _, record in records}
        assert Counter(r["job_id"] for _, r in records) == Counter(jobs)  # each exactly once
        mismatched = [job for job in jobs if got[job] != expected[job]]
        assert not mismatched, (mismatched[:3], got[mismatched[0]], expected[mismatched[0]])
        assert worker.ranking(jobs[-1])["candidates"] == [
            {**c} for c in got[jobs[-1]]["candidates"]
        ]
        assert worker.metric("leap_rankings_published_total") == len(jobs)
    finally:
        worker.stop()
