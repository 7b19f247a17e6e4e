"""The stream worker on the real broker: rankings, dead letters, crashes, scale-out."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
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
    start_shared_pair,
    wait_for,
)
from typer.testing import CliRunner

from leap_stream.cli import app
from leap_stream.core import LeapCore
from leap_stream.core.catalog import default_catalog
from leap_stream.data.codec import MARKER, encode
from leap_stream.streaming.produce import EventProducer, produce_events
from leap_stream.streaming.snapshots import (
    MODEL_KEY,
    NIGHTLY_PREFIX,
    SERVING_KEY,
    read_snapshot,
    snapshot_record,
)

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


FAR_FUTURE = datetime(2099, 1, 1, tzinfo=UTC)
# a learner that publishes no snapshot of its own until it stops cleanly
_NO_SNAPSHOTS = ("--snapshot-every", "1000000", "--snapshot-interval", "3600")


def _wait_all_committed(bootstrap: str, group: str, inputs: list[str]) -> None:
    ends = end_offsets(bootstrap, inputs)
    wait_for("every input offset committed", lambda: committed_offsets(
        bootstrap, group, inputs) == ends)  # fmt: skip


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
    assert state["pair_counts"] == core.pair_counts
    for source in ("lineage_prior", "model", "cold_start"):
        assert state["intervals"].halfwidth(source) == core.intervals.halfwidth(source)


def test_a_snapshot_this_version_refuses_is_rebuilt_from_the_learn_log(
    kafka_bootstrap: str, fleet_topics, fleet_events, tmp_path: Path
) -> None:
    topics = fleet_topics(partitions=4)
    group = unique_name("g")
    producer = EventProducer(kafka_bootstrap, topics)
    produce_events(producer, fleet_events)
    worker = WorkerProcess(kafka_bootstrap, topics, group, tmp_path)
    models = RecordReader(kafka_bootstrap, topics.models)
    try:
        worker.start().wait_ready()
        _wait_all_committed(kafka_bootstrap, group, [topics.submitted, topics.completed])
        worker.stop()
        # the newest snapshot, as an older version would have left it: learned on other
        # features, and (were it loaded) a model that has learned nothing
        stale = snapshot_record(
            LeapCore(default_catalog()),
            learn_topic=topics.learn,
            learn_offset=end_offsets(kafka_bootstrap, [topics.learn])[(topics.learn, 0)],
        )
        stale["library_versions"]["features"] = "0" * 64
        producer.send_raw(topics.models, MODEL_KEY, encode("ModelSnapshot", stale))
        producer.flush()
        args = ["models", "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]
        shown = CliRunner().invoke(app, args, terminal_width=400)
        worker.start().wait_ready()  # before: the worker stopped at start
        refused = worker.metric("leap_online_snapshots_refused_total")
        ids = lambda: [r["event_id"] for _, r in models.records]  # noqa: E731
        wait_for("the stale snapshot", lambda: models.poll() and stale["event_id"] in ids())
        refused_at = ids().index(stale["event_id"])
        wait_for("a snapshot after it", lambda: models.poll() > refused_at + 1)
    finally:
        worker.stop()
        models.close()
    assert refused == 1
    assert shown.exit_code == 0, shown.output
    assert "online-0, 0 completions learned" in shown.output
    assert "refused here: snapshot online-0 was learned on other features" in shown.output
    assert f"rebuilds it from {topics.learn}" in shown.output
    _, core, examples = reference_run(fleet_events)
    rebuilt = models.records[refused_at + 1][1]
    state, offset = read_snapshot(rebuilt, learn_topic=topics.learn)  # this version's features
    assert offset >= len(examples)
    assert state["model"].learned == core.model.learned == len(examples)
    assert dict(state["model"].regressor._weights) == dict(core.model.regressor._weights)
    assert state["type_counts"] == core.type_counts


def test_models_topic_records_this_version_cannot_read_are_refused_not_fatal(
    kafka_bootstrap: str, fleet_topics, fleet_events, tmp_path: Path
) -> None:
    # what a newer version's learner and publish-models leave: a schema this one lacks
    unreadable = MARKER + bytes.fromhex("ea1f00000000beef") + b"\x02"
    topics = fleet_topics(partitions=2)
    group = unique_name("g")
    producer = EventProducer(kafka_bootstrap, topics)
    for key in (MODEL_KEY, NIGHTLY_PREFIX + b"lightgbm", SERVING_KEY):
        producer.send_raw(topics.models, key, unreadable)
    events = fleet_events[:200]
    produce_events(producer, events)
    args = ["models", "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]
    shown = CliRunner().invoke(app, args, terminal_width=400)
    worker = WorkerProcess(kafka_bootstrap, topics, group, tmp_path).start()
    try:
        worker.wait_ready()  # before: the worker stopped at start
        rankings = read_records(kafka_bootstrap, topics.rankings, len(_submissions(events)))
        _wait_all_committed(kafka_bootstrap, group, [topics.submitted, topics.completed])
        refused = (
            worker.metric("leap_online_snapshots_refused_total"),
            worker.metric("leap_nightly_models_refused_total"),
        )
    finally:
        worker.stop()
    assert refused == (1, 1)
    assert sorted(r["job_id"] for _, r in rankings) == sorted(_submissions(events))
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("refused here: unreadable: unknown writer schema") == 2
    assert f"rebuilds it from {topics.learn}" in shown.output
    assert "serving: unreadable here" in shown.output


def test_completions_retention_dropped_after_the_snapshot_are_skipped_not_the_rest(
    kafka_bootstrap: str, fleet_topics, fleet_events, tmp_path: Path
) -> None:
    """A learner down longer than the learn log's retention: the snapshot's offset is gone."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topics = fleet_topics(partitions=4)
    group = unique_name("g")
    producer = EventProducer(kafka_bootstrap, topics)
    worker = WorkerProcess(kafka_bootstrap, topics, group, tmp_path, *_NO_SNAPSHOTS)
    half = len(fleet_events) // 2
    learn = (topics.learn, 0)
    try:
        for events, stop in (
            (fleet_events[:half], worker.stop),
            (fleet_events[half:], worker.kill),
        ):
            produce_events(producer, events)
            worker.start().wait_ready()
            _wait_all_committed(kafka_bootstrap, group, [topics.submitted, topics.completed])
            stop()  # a clean stop publishes the snapshot; the kill leaves it behind
            if stop == worker.stop:
                snapshot_at = end_offsets(kafka_bootstrap, [topics.learn])[learn]
        # retention drops the oldest half of what the snapshot has not learned
        cut = (snapshot_at + end_offsets(kafka_bootstrap, [topics.learn])[learn]) // 2
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        for future in admin.delete_records([TopicPartition(topics.learn, 0, cut)]).values():
            future.result(timeout=30)
        kept = len(read_records(kafka_bootstrap, topics.learn, 1))
        worker.start().wait_ready()
        worker.stop()
    finally:
        worker.stop()
    models = [
        read_snapshot(record, learn_topic=topics.learn)[0]["model"]
        for message, record in read_records(kafka_bootstrap, topics.models, 1)
        if message.key() == MODEL_KEY
    ]
    # before: the reader's offset was out of range, and it skipped to the log's end
    assert len(models) == 2, "the restarted learner folded nothing (no snapshot at its stop)"
    assert models[-1].learned == models[0].learned + kept
    assert "retention dropped completions" in worker.log_tail(200)


def test_bad_messages_go_to_the_dead_letter_topic_and_the_rest_flows_on(
    kafka_bootstrap: str, fleet_topics, fleet_events, tmp_path: Path
) -> None:
    topics = fleet_topics(partitions=2)
    valid = list(fleet_events[:40])
    submitted = next(e for kind, e in valid if kind == "submitted")
    completed = next(e for kind, e in valid if kind == "completed")
    # a valid pair whose completion's throughput is as small as a float holds
    succeeded = next(e for kind, e in valid if kind == "completed" and e["throughput"])
    its_submission = next(
        e for kind, e in valid if kind == "submitted" and e["job_id"] == succeeded["job_id"]
    )
    valid[20:20] = [("submitted", {**its_submission, "job_id": "tiny-1", "event_id": "tiny-1/s"})]
    tiny = {**succeeded, "job_id": "tiny-1", "event_id": "tiny-1/c", "throughput": 1e-320}
    bad = [  # (topic, key, bytes, error type, words of the reason)
        (topics.submitted, b"garbage", b"not avro at all", "CodecError", "wrong marker"),
        (topics.completed, b"unknown", MARKER + bytes(8) + b"\x02", "CodecError", "fingerprint"),
        (
            topics.submitted,
            b"wrong-type",
            encode("JobCompleted", completed),
            "CodecError",
            "cannot read a leap.v1.JobCompleted message as leap.v1.JobSubmitted",
        ),
        (
            topics.submitted,
            b"contract",
            encode("JobSubmitted", {**submitted, "job_id": "bad-1", "precision": "bf32"}),
            "ContractError",
            "'bf32' is not one of",
        ),
        (
            topics.submitted,
            b"future",
            encode("JobSubmitted", {**submitted, "job_id": "bad-2", "event_time": FAR_FUTURE}),
            "ContractError",
            "more than a day after the message was sent",
        ),
        (
            topics.completed,
            b"ghost",
            encode("JobCompleted", {**completed, "job_id": "ghost-1"}),
            "UnmatchedCompletion",
            "no pending submission for job 'ghost-1'",
        ),
        (
            topics.completed,
            tiny["lineage_id"].encode(),  # its submission's partition
            encode("JobCompleted", tiny),
            "ImplausibleThroughput",
            "throughput 1e-320 of job 'tiny-1' is over e^20 times off the model's prediction",
        ),
    ]
    producer = EventProducer(kafka_bootstrap, topics)
    for i, (kind, event) in enumerate(valid):
        producer.send(kind, event)
        if i % 5 == 4 and i // 5 < len(bad):  # the last one after the tiny submission
            topic, key, value, _, _ = bad[i // 5]
            producer.send_raw(topic, key, value)
    producer.flush()
    group = unique_name("g")
    worker = WorkerProcess(kafka_bootstrap, topics, group, tmp_path).start()
    try:
        worker.wait_ready()
        letters = {r["key"]: (m, r) for m, r in read_records(kafka_bootstrap, topics.dlq, len(bad))}
        jobs = _submissions(valid)
        rankings = read_records(kafka_bootstrap, topics.rankings, len(jobs))
        _wait_all_committed(kafka_bootstrap, group, [topics.submitted, topics.completed])
        dead_letters_counted = worker.metric("leap_dead_letters_total")
        learned = worker.metric("leap_model_version")
    finally:
        worker.stop()
    assert dead_letters_counted == len(bad)
    assert sorted(r["job_id"] for _, r in rankings) == sorted(jobs)  # the rest flowed on
    assert learned == reference_run(valid)[1].model.learned  # not the tiny throughput
    assert set(letters) == {key for _, key, _, _, _ in bad}
    for topic, key, value, error_type, words in bad:
        letter = letters[key][1]
        assert (letter["source_topic"], letter["payload"]) == (topic, value)
        assert letter["error_type"] == error_type and words in letter["reason"], letter
        assert _raw_at(kafka_bootstrap, topic, letter["partition"], letter["offset"]) == value


def test_inputs_written_in_transactions_hold_no_ranking_back(
    kafka_bootstrap: str, fleet_topics, fleet_events, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    # an upstream that writes the job topics in Kafka transactions: each commit leaves a
    # marker at an offset no message is delivered at, after the partition's last message
    topics = fleet_topics(partitions=2)
    events = fleet_events[:120]
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name("upstream")}
    )
    producer.init_transactions(30)
    for start in range(0, len(events), 40):
        producer.begin_transaction()
        for kind, event in events[start : start + 40]:
            topic = topics.submitted if kind == "submitted" else topics.completed
            record = "JobSubmitted" if kind == "submitted" else "JobCompleted"
            producer.produce(topic, key=event["lineage_id"].encode(), value=encode(record, event))
        producer.commit_transaction(30)
    # a partition behind would hold each ranking back this long: longer than the test waits
    an_hour = str(3_600_000)
    worker = WorkerProcess(
        kafka_bootstrap, topics, unique_name("g"), tmp_path, "--max-wait-ms", an_hour
    ).start()
    try:
        worker.wait_ready()
        rankings = read_records(kafka_bootstrap, topics.rankings, len(_submissions(events)))
    finally:
        worker.stop()
    assert sorted(r["job_id"] for _, r in rankings) == sorted(_submissions(events))


def _raw_at(bootstrap: str, topic: str, partition: int, offset: int) -> bytes:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("raw")})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        message = consumer.consume(1, timeout=30)[0]
        return message.value()
    finally:
        consumer.close()


def test_two_workers_on_four_partitions_rank_from_one_model_version_sequence(
    kafka_bootstrap: str, fleet_topics, fleet_events, tmp_path: Path
) -> None:
    topics = fleet_topics(partitions=4)
    snapshots = ("--snapshot-every", "40", "--snapshot-interval", "1")
    workers = start_shared_pair(kafka_bootstrap, topics, tmp_path, *snapshots)
    try:
        # paced, as live traffic: snapshots come out while the rankers rank
        produce_events(EventProducer(kafka_bootstrap, topics), fleet_events, rate=400)
        jobs = _submissions(fleet_events)
        rankings = read_records(kafka_bootstrap, topics.rankings, len(jobs))
        events_each = [w.metric("leap_events_total") for w in workers]
    finally:
        for worker in workers:
            worker.stop()
    snapshots = [
        r for m, r in read_records(kafka_bootstrap, topics.models, 2) if m.key() == b"online"
    ]
    published = [s["trained_on_events"] for s in snapshots]
    assert published == sorted(published) and len(set(published)) >= 2
    versions = {f"online-{n}" for n in [0, *published]}
    assert Counter(r["job_id"] for _, r in rankings) == Counter(jobs)
    assert all(events > 0 for events in events_each), events_each  # both did work
    # every ranking names a published snapshot, and each partition's versions never go back
    partition_of = {
        record["job_id"]: message.partition()
        for message, record in read_records(kafka_bootstrap, topics.submitted, len(jobs))
    }
    order = {job: i for i, job in enumerate(jobs)}
    by_partition: dict[int, list[int]] = {}
    for _, record in sorted(rankings, key=lambda mr: order[mr[1]["job_id"]]):
        assert record["model_version"] in versions, record["model_version"]
        learned = int(record["model_version"].removeprefix("online-"))
        by_partition.setdefault(partition_of[record["job_id"]], []).append(learned)
    assert len(by_partition) == 4
    assert all(seq == sorted(seq) for seq in by_partition.values())
    assert len({v for seq in by_partition.values() for v in seq}) >= 2  # the model moved on


def test_shared_workers_refuse_a_snapshot_learned_on_other_features_and_rank_on(
    kafka_bootstrap: str, fleet_topics, fleet_events, tmp_path: Path
) -> None:
    """A rolling upgrade: a learner of another version publishes a snapshot mid-trace."""
    topics = fleet_topics(partitions=4)
    # no snapshot of the learner's own in between: each worker reads the stale one as newest
    workers = start_shared_pair(kafka_bootstrap, topics, tmp_path, *_NO_SNAPSHOTS)
    producer = EventProducer(kafka_bootstrap, topics)
    half = len(fleet_events) // 2
    jobs = _submissions(fleet_events)
    try:
        produce_events(producer, fleet_events[:half], rate=400)
        stale = snapshot_record(
            LeapCore(default_catalog()), learn_topic=topics.learn, learn_offset=0
        )
        stale["library_versions"]["features"] = "0" * 64
        stale["trained_on_events"] = 10**9  # newer than anything the rankers hold
        producer.send_raw(topics.models, MODEL_KEY, encode("ModelSnapshot", stale))
        produce_events(producer, fleet_events[half:], rate=400)
        rankings = read_records(kafka_bootstrap, topics.rankings, len(jobs))
        refused = lambda: [w.metric("leap_online_snapshots_refused_total") for w in workers]  # noqa: E731
        wait_for("both workers refusing it", lambda: refused() == [1, 1])
        healthy = [w.healthy() for w in workers]
    finally:
        for worker in workers:
            worker.stop()
    assert healthy == [True, True]
    assert Counter(r["job_id"] for _, r in rankings) == Counter(jobs)
