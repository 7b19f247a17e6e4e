"""The streaming commands of ``leap-stream``: ``serve``, ``topics create``, ``produce``.

Registered on the main command line by :mod:`leap_stream.cli`. Kafka is imported inside the
commands, so ``leap-stream --help`` answers at once.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console

__all__ = ["register"]

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

Bootstrap = Annotated[
    str,
    typer.Option(
        "--bootstrap", envvar="LEAP_KAFKA_BOOTSTRAP", help="Kafka bootstrap servers, host:port."
    ),
]
Prefix = Annotated[
    str,
    typer.Option("--topic-prefix", envvar="LEAP_TOPIC_PREFIX", help="Prefix of every topic name."),
]
Partitions = Annotated[
    int, typer.Option("--partitions", min=1, help="Partitions of the co-partitioned job topics.")
]


def serve(
    bootstrap: Bootstrap,
    topic_prefix: Prefix = "",
    catalog: Annotated[
        Path | None,
        typer.Option("--catalog", exists=True, dir_okay=False, help="Hardware catalog TOML."),
    ] = None,
    web_port: Annotated[
        int, typer.Option("--web-port", help="HTTP port for /healthz, /metrics, /rankings.")
    ] = 6066,
    worker_id: Annotated[
        str,
        typer.Option(
            "--worker-id",
            envvar="LEAP_WORKER_ID",
            help="Stable id of this worker; a restarted worker reuses it.",
        ),
    ] = "0",
    group_id: Annotated[
        str, typer.Option("--group-id", help="Consumer group of the workers.")
    ] = "leap-stream",
    learning: Annotated[
        str,
        typer.Option(
            "--learning",
            help="inline: one worker learns every completion at once. shared: several workers "
            "rank with the learner's newest snapshot.",
        ),
    ] = "inline",
    learner: Annotated[
        bool,
        typer.Option(
            "--learner/--no-learner", help="Shared mode: this worker folds the learn log."
        ),
    ] = True,
    snapshot_every: Annotated[
        int, typer.Option("--snapshot-every", min=1, help="Learned completions per snapshot.")
    ] = 5_000,
    snapshot_interval: Annotated[
        float, typer.Option("--snapshot-interval", help="Seconds between snapshots, at most.")
    ] = 60.0,
    max_batch: Annotated[
        int, typer.Option("--max-batch", min=1, help="Input messages per transaction, at most.")
    ] = 500,
    partitions: Partitions = 4,
) -> None:
    """Run a stream worker: rank every submission, learn from every completion."""
    from leap_stream.streaming.app import Worker
    from leap_stream.streaming.settings import ServiceSettings

    if learning not in ("inline", "shared"):
        raise typer.BadParameter("--learning is inline or shared")
    mode: Literal["inline", "shared"] = "inline" if learning == "inline" else "shared"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = ServiceSettings(
        bootstrap=bootstrap,
        topic_prefix=topic_prefix,
        group_id=group_id,
        worker_id=worker_id,
        partitions=partitions,
        learning=mode,
        learner=learner,
        snapshot_every=snapshot_every,
        snapshot_interval_s=snapshot_interval,
        max_batch=max_batch,
        catalog=catalog,
        web_port=web_port,
    )
    _create(settings.bootstrap, settings.topic_prefix, settings.partitions, quiet=True)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    worker = Worker(settings)
    err_console.print(
        f"worker {worker_id} ({mode}) on {bootstrap}, topics {settings.topics.submitted} ..., "
        f"http://127.0.0.1:{web_port}/healthz"
    )
    worker.run(stop)


def _create(bootstrap: str, prefix: str, partitions: int, quiet: bool = False) -> None:
    from confluent_kafka.admin import AdminClient

    from leap_stream.streaming.topics import TopicNames, create_topics

    outcome = create_topics(
        AdminClient({"bootstrap.servers": bootstrap}), TopicNames(prefix), partitions
    )
    if not quiet:
        for name, what in outcome.items():
            console.print(f"{what:8} {name}")


def topics_create(bootstrap: Bootstrap, topic_prefix: Prefix = "", partitions: Partitions = 4):
    """Create the service's topics (idempotent: existing ones are checked, not changed)."""
    from leap_stream.streaming.topics import TopicError

    try:
        _create(bootstrap, topic_prefix, partitions)
    except TopicError as error:
        err_console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    """Add the streaming commands to the main command line."""
    topics_app = typer.Typer(help="The service's Kafka topics.", no_args_is_help=True)
    topics_app.command("create")(topics_create)
    app.add_typer(topics_app, name="topics")
    app.command("serve")(serve)
