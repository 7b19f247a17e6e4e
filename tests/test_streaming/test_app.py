"""The stream worker on the real broker: rankings, dead letters, crashes, scale-out."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from kafka_fixtures import unique_name
from streaming_fixtures import (
    RecordReader,
    WorkerProcess,
    committed_offsets,
    end_offsets,
    read_records,
    reference_run,
    wait_for,
)

from leap_stream.streaming.produce import EventProducer, produce_events
from leap_stream.streaming.snapshots import read_snapshot

pytestmark = pytest.mark.integration


def _difference(got: dict, expected: dict, count: int) -> str:
    fields = [k for k in expected if got[k] != expected[k]]
    if "candidates" in fields:
        pairs = zip(got["candidates"], expected["candidates"], strict=False)
        first = next((g, e) for g, e in pairs if g != e)
        return f"{count} rankings differ; {got['job_id']}: {fields}, first candidate: {first}"
    return f"{count} rankings differ; {got['job_id']}: {[(got[k], expected[k]) for k in fields]}"


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


def test_a_worker_killed_twice_mid_trace_loses_nothing_and_learns_each_completion_once(
    kafka_bootstrap: str, fleet_topics, fleet_events, tmp_path: Path
) -> None:
    topics = fleet_topics(partitions=4)
    inputs = [topics.submitted, topics.completed]
    group = unique_name("g")
    produce_events(EventProducer(kafka_bootstrap, topics), fleet_events)
    ends = end_offsets(kafka_bootstrap, inputs)
    jobs = _submissions(fleet_events)
    # small transactions and frequent snapshots: kills land mid-trace, restarts use snapshots
    worker = WorkerProcess(
        kafka_bootstrap, topics, group, tmp_path, "--max-batch", "2", "--snapshot-every", "150"
    )
    rankings = RecordReader(kafka_bootstrap, topics.rankings)
    try:
        committed_before = 0
        for share in (0.3, 0.6):
            worker.start()
            enough = share * len(jobs)
            wait_for(f"{share:.0%} of the rankings", lambda n=enough: rankings.poll() >= n)
            worker.kill()
            committed = committed_offsets(kafka_bootstrap, group, inputs)
            progress = sum(max(offset, 0) for offset in committed.values())
            assert committed_before < progress < sum(ends.values()), "killed mid-trace"
            committed_before = progress
        worker.start().wait_ready()
        wait_for(
            "every input offset committed",
            lambda: worker.healthy() and committed_offsets(kafka_bootstrap, group, inputs) == ends,
        )
        worker.stop()  # a clean stop publishes the final snapshot
        rankings.poll()
    finally:
        worker.stop()
        rankings.close()

    expected, core, examples = reference_run(fleet_events)
    got = [record for _, record in rankings.records]
    assert Counter(r["job_id"] for r in got) == Counter(jobs)  # none lost, none twice
    learn_log = read_records(kafka_bootstrap, topics.learn, len(examples))
    learned = [record for _, record in learn_log]
    first = next(
        (i for i, (a, b) in enumerate(zip(learned, examples, strict=False)) if a != b), None
    )
    assert first is None and len(learned) == len(examples), (
        len(learned),
        len(examples),
        first,
        first is not None and (learned[first], examples[first]),
    )  # each completion learned once, in the uninterrupted order
    wrong = [r for r in got if r != expected[r["job_id"]]]
    assert not wrong, _difference(wrong[0], expected[wrong[0]["job_id"]], len(wrong))
    snapshot = read_records(kafka_bootstrap, topics.models, 1)[-1][1]
    state, offset = read_snapshot(snapshot, learn_topic=topics.learn)
    model = state["model"]
    assert offset >= len(examples)
    assert model.learned == core.model.learned == len(examples)
    assert dict(model.regressor._weights) == dict(core.model.regressor._weights)
    assert model.regressor.intercept == core.model.regressor.intercept
    assert (model.seen == core.model.seen).all()
    assert state["type_counts"] == core.type_counts
    for source in ("lineage_prior", "model", "cold_start"):
        assert state["intervals"].halfwidth(source) == core.intervals.halfwidth(source)
