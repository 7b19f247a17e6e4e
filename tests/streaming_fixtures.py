"""pytest fixtures and helpers for the streaming service against the real broker.

Registered from ``tests/conftest.py``. Workers run as real processes (``python -m leap_stream
serve``), so a test can SIGKILL one mid-trace and start it again.

Fixtures
--------
fleet_events
    A small synthetic fleet's events, ``(kind, event)`` in history order (session-scoped).
fleet_topics
    Factory: ``fleet_topics(partitions=4)`` creates the service's topics under a unique
    prefix and returns their :class:`TopicNames`; deleted after the test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_fixtures import unique_name, wait_for_leaders

from leap_stream.core import LeapCore
from leap_stream.core.catalog import default_catalog
from leap_stream.data.codec import decode, encode
from leap_stream.data.fleet import FleetConfig, generate_fleet
from leap_stream.data.history import iter_events
from leap_stream.streaming.topics import TopicNames, create_topics, topic_specs
from leap_stream.streaming.transport import READ_COMMITTED, consume_available

__all__ = [
    "WorkerProcess",
    "committed_offsets",
    "end_offsets",
    "fleet_events",
    "fleet_topics",
    "read_records",
    "reference_run",
    "start_shared_pair",
    "wait_for",
]

DEADLINE_S = 120.0
Events = list[tuple[str, dict[str, Any]]]


@pytest.fixture(scope="session")
def fleet_events(tmp_path_factory: pytest.TempPathFactory) -> Events:
    """Three days of a small fleet: about 1,500 events, some lineages with several attempts."""
    out = tmp_path_factory.mktemp("fleet")
    generate_fleet(FleetConfig(days=3, jobs_per_day=250, seed=5), out, progress=False)
    return list(iter_events(out / "history.parquet"))


@pytest.fixture
def fleet_topics(kafka_bootstrap: str) -> Iterator[Callable[..., TopicNames]]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    made: list[TopicNames] = []

    def create(partitions: int = 4) -> TopicNames:
        names = TopicNames(unique_name("svc") + ".")
        create_topics(admin, names, partitions)
        made.append(names)
        for spec in topic_specs(names, partitions):  # a client started next must see them
            wait_for_leaders(admin, spec.name, spec.partitions)
        return names

    yield create
    doomed = [
        t for t in admin.list_topics(timeout=30).topics if any(t.startswith(n.prefix) for n in made)
    ]
    if doomed:
        for future in admin.delete_topics(doomed, request_timeout=30).values():
            future.result(timeout=30)


def reference_run(events: Events) -> tuple[dict[str, dict[str, Any]], LeapCore, list[dict]]:
    """The in-process core over ``events`` in order: rankings by job id (as decoded from
    Avro), the core, and the LearnExamples in the order it learned them."""
    core = LeapCore(default_catalog())
    rankings: dict[str, dict[str, Any]] = {}
    examples: list[dict[str, Any]] = []
    for kind, event in events:
        if kind == "submitted":
            record = core.on_submitted(event).record()
            rankings[record["job_id"]] = decode(encode("HardwareRanking", record))
        else:
            _, example = core.join(event)
            if example is not None:
                core.learn(example)
                examples.append(decode(encode("LearnExample", example)))
    return rankings, core, examples


def wait_for(what: str, condition: Callable[[], bool], timeout: float = DEADLINE_S) -> None:
    """Poll ``condition`` until it holds; fail the test saying ``what`` never happened."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def _partitions(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return sorted(metadata.topics[topic].partitions)


class RecordReader:
    """Reads a topic read_committed from the start, decoding each value, as it grows."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique_name("reader"),
                **READ_COMMITTED,
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in _partitions(bootstrap, topic)]
        )
        self.records: list[tuple[Any, dict[str, Any]]] = []  # (message, decoded value)

    def poll(self) -> int:
        for message in consume_available(self.consumer, 0.2):
            assert message.error() is None, message.error()
            self.records.append((message, decode(message.value())))
        return len(self.records)

    def close(self) -> None:
        self.consumer.close()


def read_records(bootstrap: str, topic: str, count: int) -> list[tuple[Any, dict[str, Any]]]:
    """The first ``count`` committed records of ``topic`` (fails if they never come)."""
    reader = RecordReader(bootstrap, topic)
    try:
        wait_for(f"{count} records on {topic}", lambda: reader.poll() >= count)
        time.sleep(0.5)
        reader.poll()  # and anything beyond, so a test can see duplicates
        return reader.records
    finally:
        reader.close()


def end_offsets(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("ends")})
    try:
        return {
            (t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=30)[1]
            for t in topics
            for p in _partitions(bootstrap, t)
        }
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topics: list[str]) -> dict[tuple[str, int], int]:
    """The group's committed offset of every partition of ``topics`` (-1001: none yet).

    Not ``require_stable``: right after a kill, the dead worker's open transaction holds
    offsets pending, and a stable read would wait for it to be aborted.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [TopicPartition(t, p) for t in topics for p in _partitions(bootstrap, t)]
    request = [ConsumerGroupTopicPartitions(group, wanted)]
    futures = admin.list_consumer_group_offsets(request, require_stable=False)
    result = futures[group].result(timeout=30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WorkerProcess:
    """``leap-stream serve`` in a process of its own, with its HTTP port."""

    def __init__(
        self,
        bootstrap: str,
        topics: TopicNames,
        group: str,
        log_dir: Path,
        *args: str,
        worker_id: str = "0",
    ) -> None:
        self.command = [
            sys.executable, "-m", "leap_stream", "serve",
            "--bootstrap", bootstrap,
            "--topic-prefix", topics.prefix,
            "--group-id", group,
            "--worker-id", worker_id,
            *args,
        ]  # fmt: skip
        self.log_dir = log_dir
        self.worker_id = worker_id
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.starts = 0

    def start(self) -> WorkerProcess:
        self.port = _free_port()
        self.starts += 1
        log = open(self.log_dir / f"worker-{self.worker_id}-{self.starts}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [*self.command, "--web-port", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        return self

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"worker exited with {self.process.returncode}: {self.log_tail()}")
        try:
            return self.get("/healthz")[0] == 200
        except OSError:
            return False

    def wait_ready(self) -> WorkerProcess:
        wait_for(f"worker {self.worker_id} /healthz", self.healthy)
        return self

    def metric(self, name: str) -> float:
        """Sum of a Prometheus metric's samples (all labels)."""
        text = self.get("/metrics")[1].decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and not line.startswith("#")
            and line[len(name)] in " {"
        )  # fmt: skip

    def ranking(self, job_id: str) -> dict[str, Any] | None:
        status, body = self.get(f"/rankings/{job_id}")
        return json.loads(body) if status == 200 else None

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        """SIGTERM, and wait for a clean exit (which publishes a final snapshot)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                raise

    def log_tail(self, lines: int = 30) -> str:
        logs = sorted(self.log_dir.glob(f"worker-{self.worker_id}-*.log"))
        return "\n".join(logs[-1].read_text(errors="replace").splitlines()[-lines:]) if logs else ""


def start_shared_pair(
    bootstrap: str, topics: TopicNames, log_dir: Path, *args: str
) -> list[WorkerProcess]:
    """Two workers in shared mode, the learner (``0``) and a ranker (``1``), started, ready and
    holding four input partitions each; stop them in a ``finally``."""
    group = unique_name("g")
    shared = ("--learning", "shared", *args)
    workers = [
        WorkerProcess(bootstrap, topics, group, log_dir, *shared, worker_id="0"),
        WorkerProcess(bootstrap, topics, group, log_dir, *shared, "--no-learner", worker_id="1"),
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.wait_ready()
    held = lambda: [w.metric("leap_assigned_partitions") for w in workers]  # noqa: E731
    wait_for("both workers holding 4 input partitions", lambda: held() == [4.0, 4.0])
    return workers
