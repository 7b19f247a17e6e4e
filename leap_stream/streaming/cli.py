"""The streaming commands of ``leap-stream``: ``serve``, ``topics create``, ``produce``,
``publish-models``, ``models``, ``scheduler``.

Registered on the main command line by :mod:`leap_stream.cli`. Kafka is imported inside the
commands, so ``leap-stream --help`` answers at once.
"""

from __future__ import annotations

import errno
import logging
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape

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
LineageHalfLife = Annotated[
    float,
    typer.Option(
        "--lineage-half-life",
        min=0.01,
        help="Days after which a lineage's priors weigh half (beyond 100,000 lineages, those "
        "idle ~4.3 half-lives, 60 days at the default, are forgotten): a fleet's tempo. Months "
        "for results months apart.",
    ),
]
CatalogOption = Annotated[
    Path | None,
    typer.Option(
        "--catalog",
        help="Hardware catalog TOML (default: the packaged catalog).",
        exists=True,
        dir_okay=False,
    ),
]
Partitions = Annotated[
    int, typer.Option("--partitions", min=1, help="Partitions of the co-partitioned job topics.")
]


def serve(
    bootstrap: Bootstrap,
    topic_prefix: Prefix = "",
    catalog: CatalogOption = None,
    web_port: Annotated[
        int, typer.Option("--web-port", help="HTTP port for /healthz, /metrics, /rankings.")
    ] = 6066,
    web_host: Annotated[
        str, typer.Option("--web-host", help="HTTP address; 0.0.0.0 to serve beyond this host.")
    ] = "127.0.0.1",
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
    max_wait_ms: Annotated[
        int,
        typer.Option(
            "--max-wait-ms",
            min=0,
            help="How long an input partition that is behind may hold back the event-time "
            "merge (and so a ranking), in milliseconds.",
        ),
    ] = 500,
    partitions: Partitions = 4,
    lineage_half_life: LineageHalfLife = 14.0,
    promotion_margin: Annotated[
        float,
        typer.Option(
            "--promotion-margin",
            min=0.0,
            max=0.99,
            help="Champion/challenger: within-10% share by which a nightly model must lead "
            "the serving one over the window to rank instead (0.01 = one point).",
        ),
    ] = 0.01,
    promotion_window: Annotated[
        int, typer.Option("--promotion-window", min=1, help="Trailing days the rule pools.")
    ] = 3,
    promotion_min_attempts: Annotated[
        int,
        typer.Option(
            "--promotion-min-attempts", min=1, help="Fewest completions in the window for a change."
        ),
    ] = 500,
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
        max_wait_ms=max_wait_ms,
        catalog=catalog,
        web_port=web_port,
        web_host=web_host,
        lineage_half_life_days=lineage_half_life,
        promotion_margin=promotion_margin,
        promotion_window_days=promotion_window,
        promotion_min_attempts=promotion_min_attempts,
    )
    _create(settings.bootstrap, settings.topic_prefix, settings.partitions, quiet=True)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    worker = Worker(settings)
    err_console.print(
        f"worker {worker_id} ({mode}) on {escape(bootstrap)}, topics {settings.topics.submitted} "
        f"..., http://{web_host}:{web_port}/healthz"
    )
    try:
        worker.run(stop)
    except OSError as error:  # the HTTP port, bound first thing: taken by another process
        if error.errno != errno.EADDRINUSE:
            raise
        err_console.print(f"[red]error:[/red] --web-port {web_port}: {error.strerror}")
        raise typer.Exit(2) from None


def _create(
    bootstrap: str,
    prefix: str,
    partitions: int,
    quiet: bool = False,
    learn_retention_ms: int | None = None,
) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from leap_stream.streaming.topics import TopicError, TopicNames, create_topics

    try:
        outcome = create_topics(
            AdminClient({"bootstrap.servers": bootstrap}),
            TopicNames(prefix),
            partitions,
            learn_retention_ms=learn_retention_ms,
        )
    except (TopicError, KafkaException) as error:  # the first contact: a broker down shows here
        err_console.print(
            f"[red]error:[/red] {escape(bootstrap)}: {escape(_one_line(error))}", soft_wrap=True
        )
        raise typer.Exit(2) from None
    if not quiet:
        for name, what in outcome.items():
            console.print(f"{what:8} {name}")


def _one_line(error: Exception) -> str:
    """A Kafka client's or a topic's error as one line (a KafkaException holds a KafkaError)."""
    detail = error.args[0] if error.args else error
    return " ".join(str(getattr(detail, "str", lambda: detail)()).split())


def topics_create(
    bootstrap: Bootstrap,
    topic_prefix: Prefix = "",
    partitions: Partitions = 4,
    learn_retention_days: Annotated[
        float | None,
        typer.Option(
            "--learn-retention-days",
            help="Days the learn log keeps (-1: forever), set on it new or existing: a model "
            "rebuilt after an upgrade learns only what it keeps (default for a new topic: 7).",
        ),
    ] = None,
):
    """Create the service's topics (idempotent: existing ones are checked, not changed; the
    learn log's retention is set when given)."""
    from leap_stream.streaming.topics import KEEP_FOREVER

    retention_ms = None
    if learn_retention_days is not None:
        forever = learn_retention_days == -1
        retention_ms = KEEP_FOREVER if forever else round(learn_retention_days * 86_400_000)
    _create(bootstrap, topic_prefix, partitions, learn_retention_ms=retention_ms)


def produce(
    history: Annotated[
        Path,
        typer.Argument(
            exists=True, dir_okay=False, help="History file (.parquet, .csv, .avro) to publish."
        ),
    ],
    bootstrap: Bootstrap,
    topic_prefix: Prefix = "",
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="Events per second (default: as fast as the broker takes)."),
    ] = None,
    speedup: Annotated[
        float | None,
        typer.Option("--speedup", help="Replay the history's own clock this many times faster."),
    ] = None,
    partitions: Partitions = 4,
) -> None:
    """Publish a history onto the job topics in event-time order (topics created if missing)."""
    if rate is not None and speedup is not None:
        err_console.print("[red]error:[/red] --rate and --speedup are exclusive: pace by one")
        raise typer.Exit(2)
    for name, value in (("--rate", rate), ("--speedup", speedup)):
        if value is not None and not value > 0:
            err_console.print(f"[red]error:[/red] {name} must be positive, not {value:g}")
            raise typer.Exit(2)
    from confluent_kafka import KafkaException
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from leap_stream.data.history import HistoryError, iter_events
    from leap_stream.streaming.produce import EventProducer, ProduceInterrupted, produce_events
    from leap_stream.streaming.topics import TopicNames

    names = TopicNames(topic_prefix)
    _create(bootstrap, topic_prefix, partitions, quiet=True)
    total = _row_count(history)
    progress = Progress(
        TextColumn("producing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    producer = EventProducer(bootstrap, names)
    began = time.monotonic()
    with progress:
        task = progress.add_task("produce", total=total)

        def counted() -> Iterator[tuple[str, dict]]:
            step = 0
            for item in iter_events(history):
                yield item
                step += 1
                if step == 1_000:
                    progress.advance(task, step)
                    step = 0
            progress.advance(task, step)

        try:
            count = produce_events(producer, counted(), rate=rate, speedup=speedup)
        except HistoryError as error:
            message = " ".join(str(error).split())
            err_console.print(f"[red]error:[/red] {message} (the events before it were sent)")
            raise typer.Exit(2) from None
        except KafkaException as error:
            err_console.print(f"[red]error:[/red] {error}")
            raise typer.Exit(1) from None
        except ProduceInterrupted as stopped:
            through = "" if stopped.through is None else f", through {stopped.through.isoformat()}"
            err_console.print(
                f"interrupted: the first {stopped.sent:,} events of {escape(str(history))} "
                f"sent{through}; produce the rest only (a rerun sends them again)",
                soft_wrap=True,
            )
            raise typer.Exit(130) from None
    elapsed = max(time.monotonic() - began, 1e-9)
    console.print(
        f"{count:,} events produced to {names.submitted} and {names.completed} "
        f"in {elapsed:.1f} s ({count / elapsed:,.0f} events/s)",
        soft_wrap=True,
    )


def publish_models(
    model_dir: Annotated[
        Path,
        typer.Argument(
            exists=True, file_okay=False, help="A model directory written by leap-stream retrain."
        ),
    ],
    bootstrap: Bootstrap,
    topic_prefix: Prefix = "",
    catalog: CatalogOption = None,
    partitions: Partitions = 4,
) -> None:
    """Publish a nightly retrain's models to the service as challengers of the online model.

    The learner scores them on every completion from their cutoff on; the champion/challenger
    rule decides each day which model ranks (docs/nightly.md).
    """
    from confluent_kafka import KafkaException

    from leap_stream.backtest.retrain import ModelStoreError, load_models
    from leap_stream.cli import _load_catalog
    from leap_stream.streaming.produce import publish_nightly_models
    from leap_stream.streaming.topics import TopicError, TopicNames

    try:
        loaded = load_models(model_dir, _load_catalog(catalog))
    except ModelStoreError as error:
        err_console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None
    try:
        _create(bootstrap, topic_prefix, partitions, quiet=True)
        names = TopicNames(topic_prefix)
        records = publish_nightly_models(bootstrap, names, loaded.models, loaded.cutoff)
    except (TopicError, KafkaException) as error:
        err_console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(1) from None
    for record in records:
        console.print(
            f"published {record['model_version']} ({record['trained_on_events']:,} completions, "
            f"{len(record['payload']) / 1e6:.1f} MB) to {names.models}"
        )


def models(bootstrap: Bootstrap, topic_prefix: Prefix = "") -> None:
    """Show what is on the models topic: the online snapshot, the nightly models, and which
    model ranks now and why (the newest ServingDecision).

    Each model says whether this version loads it: run the new version's ``models`` before an
    upgrade to see what its workers will refuse (other libraries or features; a catalog
    change shows only in the worker)."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaException, Message, TopicPartition

    from leap_stream.data.codec import CodecError, default_codec
    from leap_stream.streaming.snapshots import MODEL_KEY, SERVING_KEY
    from leap_stream.streaming.topics import TopicNames
    from leap_stream.streaming.transport import log_bounds, read_to_end

    names = TopicNames(topic_prefix)
    newest: dict[bytes, bytes] = {}

    def keep(message: Message) -> None:
        if message.value():
            newest[message.key() or b""] = message.value()

    try:
        start = [TopicPartition(names.models, 0, OFFSET_BEGINNING)]
        read_to_end(bootstrap, "leap-stream-models", start, keep, timeout=30.0)
    except (KafkaException, TimeoutError) as error:
        err_console.print(f"[red]error:[/red] reading {names.models}: {error}")
        raise typer.Exit(1) from None
    codec = default_codec()
    decision = newest.pop(SERVING_KEY, None)
    console.print(f"{len(newest)} model(s) on {names.models}:")
    for key, value in sorted(newest.items()):
        try:
            record = codec.decode(value, reader="ModelSnapshot")
        except CodecError as error:  # written by another version, say
            refusal = f"unreadable: {error}"
            console.print(
                f"  {key.decode(errors='replace')}: [red]refused here[/red]: {escape(refusal)}",
                soft_wrap=True,
            )
        else:
            until = record.get("trained_until")
            trained = f", trained until {until:%Y-%m-%d %H:%M}" if until else ""
            refusal = _refusal_here(record, names.learn)
            console.print(
                f"  {key.decode(errors='replace')}: {record['model_version']}, "
                f"{record['trained_on_events']:,} completions learned{trained}, "
                f"published {record['event_time']:%Y-%m-%d %H:%M}; "
                + (
                    "loads here"
                    if refusal is None
                    else f"[red]refused here[/red]: {escape(refusal)}"
                ),
                soft_wrap=True,
            )
        if refusal is not None and key == MODEL_KEY:
            first, end = log_bounds(bootstrap, names.learn)
            console.print(
                f"    a learner of this version rebuilds it from {names.learn} "
                f"(offsets {first:,} to {end:,})",
                soft_wrap=True,
            )
    if decision is None:
        console.print("serving: online (no ServingDecision yet)")
        return
    try:
        serving = codec.decode(decision, reader="ServingDecision")
    except CodecError as error:
        console.print(f"serving: [red]unreadable here[/red]: {escape(str(error))}", soft_wrap=True)
        return
    shares = ", ".join(f"{m} {v:.1%}" for m, v in sorted(serving["window_shares"].items()))
    console.print(
        f"serving: {serving['serving']} ({serving['serving_version']}) from {serving['day']}: "
        f"{serving['reason']}; within 10% over the window: {shares or 'none yet'} "
        f"({serving['window_attempts']:,} completions)",
        soft_wrap=True,
    )


def _refusal_here(record: dict, learn_topic: str) -> str | None:
    """Why this version would refuse a ModelSnapshot record (None: it loads)."""
    from leap_stream.streaming.snapshots import SnapshotError, read_nightly, read_snapshot

    try:
        if record["model_kind"] == "nightly":
            read_nightly(record)
        else:
            read_snapshot(record, learn_topic=learn_topic)
    except SnapshotError as error:
        return str(error)
    return None


def _row_count(path: Path) -> int | None:
    """Events in a Parquet history (from its footer); None for the other formats."""
    if path.suffix != ".parquet":
        return None
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception:  # unreadable: iter_events says why
        return None


def scheduler(
    bootstrap: Bootstrap,
    topic_prefix: Prefix = "",
    group_id: Annotated[
        str, typer.Option("--group-id", help="Consumer group of the schedulers.")
    ] = "leap-scheduler",
    from_beginning: Annotated[
        bool,
        typer.Option(
            "--from-beginning",
            help="A group without committed offsets starts at the oldest ranking, not the next.",
        ),
    ] = False,
) -> None:
    """Run the example scheduler: place each ranked job on its rank-1 type, one log line each."""
    from leap_stream.streaming.client import RankingSubscriber
    from leap_stream.streaming.scheduler import place

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    from confluent_kafka import KafkaException

    try:
        subscriber = RankingSubscriber(
            bootstrap, place, topic_prefix, group_id, from_beginning=from_beginning
        )
    except (LookupError, KafkaException) as error:
        err_console.print(
            f"[red]error:[/red] {escape(bootstrap)}: {escape(_one_line(error))}", soft_wrap=True
        )
        raise typer.Exit(2) from None
    with subscriber:
        err_console.print(
            f"scheduler (group {group_id}) on {bootstrap}, following {subscriber.topics.rankings}"
        )
        subscriber.run(stop)
    err_console.print(f"stopped after {subscriber.handed:,} decisions")


def register(app: typer.Typer) -> None:
    """Add the streaming commands to the main command line."""
    topics_app = typer.Typer(help="The service's Kafka topics.", no_args_is_help=True)
    topics_app.command("create")(topics_create)
    app.add_typer(topics_app, name="topics")
    app.command("serve")(serve)
    app.command("produce")(produce)
    app.command("publish-models")(publish_models)
    app.command("models")(models)
    app.command("scheduler")(scheduler)
