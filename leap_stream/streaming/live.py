"""The live demo: a fleet streamed through a real worker and the example scheduler, on screen.

``leap-stream demo --live --bootstrap B`` (``make live`` starts the local broker first): one
worker process (``leap-stream serve``) on fresh topics, the example scheduler
(:class:`~leap_stream.streaming.client.RankingSubscriber` with the rank-1 policy) in a thread,
and the demo fleet's history sent through the service with
:class:`~leap_stream.streaming.via_kafka.KafkaRankings`. A rich live view shows the decisions
as they arrive; the end is the demo's summary table, scored on the rankings the service made.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from leap_stream.streaming.client import RankingSubscriber
from leap_stream.streaming.scheduler import choose

__all__ = ["LiveView", "running_worker", "stream_demo"]

READY_TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


@contextmanager
def running_worker(
    bootstrap: str, topic_prefix: str, group_id: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``leap-stream serve`` in a process of its own, ready; stopped (SIGTERM) at the end."""
    port = _free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable, "-m", "leap_stream", "serve",
                "--bootstrap", bootstrap,
                "--topic-prefix", topic_prefix,
                "--group-id", group_id,
                "--web-port", str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not _healthy(port):
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the worker did not become ready; see {log}")
                time.sleep(0.2)
            yield worker
        finally:
            worker.terminate()
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()


class LiveView:
    """The scheduler's decisions as they arrive: the newest few, and counts."""

    def __init__(self, shown: int = 12) -> None:
        self.recent: deque[tuple[str, str, str, str]] = deque(maxlen=shown)
        self.decisions = 0
        self.abstentions = 0
        self.by_hardware: dict[str, int] = {}
        self.began = time.monotonic()
        self._lock = threading.Lock()

    def policy(self, ranking: dict[str, Any]) -> None:
        """The example scheduler's policy, recording what it decided."""
        choice = choose(ranking)
        first = ranking["candidates"][0] if ranking["candidates"] else {}
        cost = first.get("predicted_cost_per_1k_samples")
        with self._lock:
            self.decisions += 1
            if ranking["abstained"] or choice is None:
                self.abstentions += 1
                choice = "abstained"
            self.by_hardware[choice] = self.by_hardware.get(choice, 0) + 1
            self.recent.append(
                (
                    ranking["job_id"],
                    choice,
                    f"${cost:.6f}" if cost is not None and not ranking["abstained"] else "",
                    ranking["model_version"],
                )
            )

    def __rich__(self) -> Group:
        with self._lock:
            table = Table(title="rankings arriving (example scheduler: take rank 1)")
            for column in ("job", "placed on", "predicted $ / 1k samples", "model"):
                table.add_column(column)
            for row in self.recent:
                table.add_row(*row)
            seconds = max(time.monotonic() - self.began, 1e-9)
            top = sorted(self.by_hardware.items(), key=lambda kv: -kv[1])[:5]
            summary = Table.grid(padding=(0, 2))
            summary.add_row(
                f"{self.decisions:,} decisions ({self.decisions / seconds:,.0f}/s)",
                f"{self.abstentions:,} abstentions",
                "most placed: " + ", ".join(f"{name} {n:,}" for name, n in top),
            )
            return Group(table, summary)


def stream_demo(
    console: Console,
    bootstrap: str,
    out: Path,
    rate: float,
    replay_fn: Callable[[Any], dict[str, Any]],
) -> dict[str, Any]:
    """Run a worker and the example scheduler, and ``replay_fn(rankings)`` through them.

    ``replay_fn`` replays a history with the given
    :class:`~leap_stream.streaming.via_kafka.KafkaRankings` source and returns its summary;
    the worker's log goes to ``out/worker.log``.
    """
    from confluent_kafka.admin import AdminClient

    from leap_stream.streaming.topics import TopicNames, create_topics
    from leap_stream.streaming.via_kafka import KafkaRankings

    prefix = f"live-{uuid.uuid4().hex[:8]}."
    group = f"{prefix}workers"
    create_topics(AdminClient({"bootstrap.servers": bootstrap}), TopicNames(prefix), 4)
    view = LiveView()
    stop = threading.Event()
    with running_worker(bootstrap, prefix, group, out / "worker.log"):
        subscriber = RankingSubscriber(
            bootstrap, view.policy, topic_prefix=prefix, group_id=f"{prefix}scheduler",
            from_beginning=True,
        )  # fmt: skip
        scheduler = threading.Thread(target=subscriber.run, args=(stop,), daemon=True)
        scheduler.start()
        try:
            with Live(view, console=console, refresh_per_second=4):
                summary = replay_fn(KafkaRankings(bootstrap, prefix, group, rate=rate))
                time.sleep(1.0)  # the scheduler's last decisions
        finally:
            stop.set()
            scheduler.join(10)
            subscriber.close()
    return summary
