"""How fast the streaming service runs on a real broker, and what the framework alone costs.

Usage (from the repository root, with a broker running)::

    .venv/bin/python benchmarks/service_speed.py                  # ~4 min
    .venv/bin/python benchmarks/service_speed.py --quick          # ~1 min smoke run
    .venv/bin/python benchmarks/service_speed.py --bootstrap 127.0.0.1:9092 --submissions 50000

Two systems, measured the same way, on fresh topics under one unique ``--topic-prefix``:

- **leap worker**: one ``python -m leap_stream serve`` process (inline learning, 4 partitions).
- **faust pass-through**: a faust-streaming app (``pip install -e '.[bench]'``) whose one agent
  sends each message of a source topic unchanged to an output topic: what the framework alone
  costs. It runs in a child process of this script (``_faust-worker``).

Two figures each:

1. **Sustained throughput.** A synthetic fleet's trace (the first ``--submissions`` submissions
   and the completions that come among them) is produced before the process starts; then the
   process works the backlog off. Timed from the first output message to the last, as a
   ``read_committed`` consumer receives them (rankings for the worker, one per submission; every
   message for faust). Reported as events/s and submissions/s.
2. **Latency at ``--rate`` submissions/s** (default 100/s for ``--latency-seconds``, after a
   ``--warmup-seconds`` warm-up): each submission is timestamped as it is handed to the
   producer (``linger.ms=0``) and again when its output reaches the ``read_committed``
   consumer (a thread of this script): p50 / p99 / max.

For the worker, it also prints where the time goes: its CPU time and the broker's per event
over the backlog; what :class:`~leap_stream.core.LeapCore`, Avro decoding of the inputs and Avro
encoding of the rankings cost on the same events in this process; a bare transaction like the
worker's (one message, ``send_offsets_to_transaction``, commit) back to back and 20 ms apart;
and the worker's own ``leap_submit_to_ranking_seconds`` histogram (a submission's Kafka
timestamp to its transaction's commit) over the latency run.

The broker: ``--bootstrap``, else ``LEAP_KAFKA_BOOTSTRAP``, else ``deploy/kafka/broker
bootstrap``. The processes are stopped with SIGTERM and the topics created are deleted at the
end. Figures vary with the load of the machine: orders of magnitude, not promises.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
FAUST_WORKER = "_faust-worker"  # argv[1] of the child process that runs the faust app
READY_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 30.0  # after the last latency probe is sent
Events = list[tuple[str, dict[str, Any]]]

console = Console(highlight=False, soft_wrap=True)


# --- measuring ------------------------------------------------------------------------------


@dataclass
class Result:
    """What one system did: the backlog run and the latency run."""

    system: str
    events: int = 0  # backlog messages processed in the window
    submissions: int | None = None  # of which submissions (None: not applicable)
    window_s: float = math.nan  # first output to last output
    startup_s: float = math.nan  # process start to first output
    latencies_ms: list[float] = field(default_factory=list)
    lost: int = 0  # latency probes never received
    duplicates: int = 0  # outputs received twice (same key)
    cpu: dict[str, float] = field(default_factory=dict)  # over the window: name -> cpu seconds
    notes: list[str] = field(default_factory=list)  # printed under the system's figures

    def rate(self, count: int | None) -> float:
        return math.nan if count is None else count / self.window_s

    def quantile(self, q: float) -> float:
        values = sorted(self.latencies_ms)
        if not values:
            return math.nan
        return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


class Reader(threading.Thread):
    """Reads every partition of a topic (read_committed, from the start) in a thread of its own,
    noting when each key first arrives (``time.monotonic``)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name=f"reader-{topic}", daemon=True)
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        from leap_stream.streaming.transport import READ_COMMITTED

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-reader-{uuid.uuid4().hex[:8]}",  # assigned, never committed
                **READ_COMMITTED,
                "enable.auto.commit": False,
            }
        )
        partitions = self.consumer.list_topics(topic, timeout=30).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self.arrived: dict[bytes, float] = {}
        self.duplicates = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        arrived, poll, clock = self.arrived, self.consumer.poll, time.monotonic
        try:
            while not self._halt.is_set():
                message = poll(0.1)
                if message is None:
                    continue
                now = clock()
                if message.error() is not None:
                    if message.error().fatal():
                        raise RuntimeError(str(message.error()))
                    continue
                key = message.key() or b""
                if key in arrived:
                    self.duplicates += 1
                else:
                    arrived[key] = now
        except BaseException as error:  # reported by the main thread
            self.error = error
        finally:
            self.consumer.close()

    def wait_for(
        self, keys: list[bytes], timeout: float, on_tick: Callable[[int], None] | None = None
    ) -> int:
        """Wait until every key in ``keys`` arrived (or ``timeout`` passes); return how many did."""
        deadline = time.monotonic() + timeout
        while True:
            if self.error is not None:
                raise RuntimeError(f"reader failed: {self.error}")
            done = sum(1 for k in keys if k in self.arrived)
            if on_tick is not None:
                on_tick(done)
            if done == len(keys) or time.monotonic() > deadline:
                return done
            time.sleep(0.2)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), or NaN."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> float:
    """Busy CPU time of the whole machine so far (all cores; Linux /proc/stat)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def broker_pid(bootstrap: str) -> int | None:
    """The pid of ``deploy/kafka/broker``'s broker when it is the one at ``bootstrap``."""
    run = REPO / "deploy" / "kafka" / ".run"
    try:
        if (run / "bootstrap").read_text().strip() != bootstrap:
            return None
        pid = int((run / "broker.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


class CpuMeter:
    """CPU seconds of some processes and of the whole machine between ``start`` and ``stop``."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid is not None}
        self._began: dict[str, float] = {}
        self.seconds: dict[str, float] = {}

    def _sample(self) -> dict[str, float]:
        sample = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        sample["machine"] = machine_cpu_seconds()
        sample["wall"] = time.monotonic()
        return sample

    @property
    def started(self) -> bool:
        return bool(self._began)

    def start(self) -> None:
        self._began = self._sample()

    def stop(self) -> None:
        end = self._sample()
        self.seconds = {name: end[name] - self._began[name] for name in end}


# --- processes ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Child:
    """A child process with its log file; stopped with SIGTERM."""

    def __init__(self, name: str, command: list[str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.process.pid

    def check(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                console.print(f"[yellow]{self.name} ignored SIGTERM for 60 s: killed[/yellow]")
                self.process.kill()
                self.process.wait(10)


def http_get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def wait_healthy(child: Child, port: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        child.check()
        try:
            if http_get(port, "/healthz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{child.name}: no /healthz 200 after {READY_TIMEOUT_S:.0f} s")


HISTOGRAM = "leap_submit_to_ranking_seconds"


def read_histogram(port: int) -> dict[str, float]:
    """The worker's submit-to-ranking histogram: ``le`` bound (or sum, count) -> value."""
    text = http_get(port, "/metrics")[1].decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(HISTOGRAM):
            continue
        name, value = line.rsplit(" ", 1)
        bound = re.search(r'le="([^"]+)"', name)
        if bound:
            values[bound.group(1)] = float(value)
        elif name in (f"{HISTOGRAM}_sum", f"{HISTOGRAM}_count"):
            values[name.removeprefix(f"{HISTOGRAM}_")] = float(value)
    return values


def histogram_summary(before: dict[str, float], after: dict[str, float]) -> str:
    """Mean and bucket bounds of p50/p99 of the observations between two reads."""
    count = after.get("count", 0) - before.get("count", 0)
    if count <= 0:
        return "no observations"
    mean_ms = 1000 * (after["sum"] - before["sum"]) / count
    bounds = sorted((float(b), b) for b in after if b not in ("sum", "count"))

    def bound(q: float) -> str:
        for value, label in bounds:
            if after[label] - before.get(label, 0) >= q * count:
                return "> 5 s" if math.isinf(value) else f"<= {1000 * value:g} ms"
        return "?"

    return f"mean {mean_ms:.1f} ms, p50 {bound(0.5)}, p99 {bound(0.99)} ({count:.0f} rankings)"


# --- traffic --------------------------------------------------------------------------------


def resolve_bootstrap(given: str | None) -> str:
    if given:
        return given
    if os.environ.get("LEAP_KAFKA_BOOTSTRAP"):
        return os.environ["LEAP_KAFKA_BOOTSTRAP"]
    script = REPO / "deploy" / "kafka" / "broker"
    done = subprocess.run([str(script), "bootstrap"], capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        sys.exit(f"no broker: pass --bootstrap or start one ({script} start)\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def make_trace(
    submissions: int, probes: int, jobs_per_day: int, seed: int, tmp: Path
) -> tuple[Events, Events]:
    """The backlog (the trace up to its ``submissions``-th submission, completions included) and
    the ``probes`` submissions that follow it (for the latency run)."""
    from leap_stream.data.fleet import FleetConfig, generate_fleet
    from leap_stream.data.history import iter_events

    # the generator draws ~85% of jobs_per_day attempts a day: leave a margin
    days = math.ceil((submissions + probes) / (0.75 * jobs_per_day)) + 1
    generate_fleet(
        FleetConfig(days=days, jobs_per_day=jobs_per_day, seed=seed), tmp, progress=False
    )
    backlog: Events = []
    after: Events = []
    taken = 0
    for kind, event in iter_events(tmp / "history.parquet"):
        if taken < submissions:
            backlog.append((kind, event))
            taken += kind == "submitted"
        elif kind == "submitted":
            after.append((kind, event))
            if len(after) == probes:
                break
    if taken < submissions or len(after) < probes:
        raise RuntimeError(f"the fleet has too few submissions ({days} days x {jobs_per_day})")
    return backlog, after


@contextmanager
def progress_bar(description: str, total: int) -> Iterator[Callable[[int], None]]:
    with Progress(
        TextColumn("  {task.description:<34}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(description, total=total)
        yield lambda done: progress.update(task, completed=done)


def produce_backlog(
    send: Callable[[str, dict[str, Any]], None],
    flush: Callable[[], None],
    events: Events,
    what: str,
) -> None:
    began = time.monotonic()
    with progress_bar(f"{what}: producing the backlog", len(events)) as tick:
        for i, (kind, event) in enumerate(events):
            send(kind, event)
            if i % 2000 == 0:
                tick(i)
        flush()
    seconds = time.monotonic() - began
    console.print(f"  produced {len(events):,} events in {seconds:.1f} s")


def send_paced(
    send: Callable[[str, dict[str, Any]], None],
    events: Events,
    rate: float,
    key: Callable[[dict[str, Any]], bytes],
    what: str,
) -> dict[bytes, float]:
    """Send ``events`` at ``rate`` a second; return each one's send time (``time.monotonic``)."""
    sent: dict[bytes, float] = {}
    began = time.monotonic()
    with progress_bar(what, len(events)) as tick:
        for i, (kind, event) in enumerate(events):
            wait = began + i / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            sent[key(event)] = time.monotonic()
            send(kind, event)
            if i % 50 == 0:
                tick(i)
    return sent


def wait_backlog(
    reader: Reader, keys: list[bytes], child: Child, meter: CpuMeter, what: str, timeout: float
) -> float:
    """Wait for every backlog output; start the CPU meter at the first. Return the window."""
    with progress_bar(f"{what}: working off the backlog", len(keys)) as tick:

        def on_tick(done: int) -> None:
            child.check()
            if done and not meter.started:
                meter.start()
            tick(done)

        done = reader.wait_for(keys, timeout, on_tick)
    meter.stop()
    if done < len(keys):
        raise RuntimeError(f"{what}: only {done:,} of {len(keys):,} outputs after {timeout:.0f} s")
    times = [reader.arrived[k] for k in keys]
    return max(times) - min(times)


def latency_run(
    result: Result,
    reader: Reader,
    send: Callable[[str, dict[str, Any]], None],
    key: Callable[[dict[str, Any]], bytes],
    probes: Events,
    warmup: int,
    rate: float,
    after_warmup: Callable[[], None] | None = None,
) -> None:
    what = result.system
    send_paced(send, probes[:warmup], rate, key, f"{what}: warm-up at {rate:g}/s")
    reader.wait_for([key(e) for _, e in probes[:warmup]], DRAIN_TIMEOUT_S)
    if after_warmup is not None:
        after_warmup()
    sent = send_paced(send, probes[warmup:], rate, key, f"{what}: latency at {rate:g}/s")
    keys = list(sent)
    done = reader.wait_for(keys, DRAIN_TIMEOUT_S)
    result.lost = len(keys) - done
    result.latencies_ms = [
        1000 * (reader.arrived[k] - sent[k]) for k in keys if k in reader.arrived
    ]


def job_key(event: dict[str, Any]) -> bytes:
    return event["job_id"].encode()


def event_key(event: dict[str, Any]) -> bytes:
    return event["event_id"].encode()


# --- the leap worker ------------------------------------------------------------------------


def bench_leap(args: argparse.Namespace, backlog: Events, probes: Events, tmp: Path) -> Result:
    from confluent_kafka.admin import AdminClient

    from leap_stream.streaming.produce import EventProducer
    from leap_stream.streaming.topics import TopicNames, create_topics

    console.rule("leap worker")
    bootstrap, prefix = args.bootstrap, args.topic_prefix
    topics = TopicNames(prefix)
    create_topics(AdminClient({"bootstrap.servers": bootstrap}), topics, args.partitions)
    result = Result("leap worker", submissions=sum(k == "submitted" for k, _ in backlog))
    result.events = len(backlog)
    producer = EventProducer(bootstrap, topics)
    produce_backlog(producer.send, producer.flush, backlog, "leap")

    reader = Reader(bootstrap, topics.rankings)
    reader.start()
    port = free_port()
    command = [sys.executable, "-m", "leap_stream", "serve", "--bootstrap", bootstrap,
               "--topic-prefix", prefix, "--group-id", f"{prefix}leap",
               "--partitions", str(args.partitions), "--web-port", str(port)]  # fmt: skip
    worker = Child("leap-worker", command, tmp)
    try:
        wait_healthy(worker, port)
        console.print(
            f"  worker ready (/healthz) {time.monotonic() - worker.started:.1f} s after start"
        )
        meter = CpuMeter({"worker": worker.pid, "broker": broker_pid(bootstrap)})
        keys = [job_key(e) for k, e in backlog if k == "submitted"]
        result.window_s = wait_backlog(reader, keys, worker, meter, "leap", args.timeout)
        result.cpu = meter.seconds
        result.startup_s = min(reader.arrived[k] for k in keys) - worker.started
        console.print(
            f"  {len(keys):,} rankings in {result.window_s:.1f} s (first ranking "
            f"{result.startup_s:.1f} s after start)"
        )

        fast = EventProducer(bootstrap, topics, **{"linger.ms": 0})
        before: dict[str, float] = {}
        warmup = int(args.warmup_seconds * args.rate)
        latency_run(
            result,
            reader,
            fast.send,
            job_key,
            probes,
            warmup,
            args.rate,
            after_warmup=lambda: before.update(read_histogram(port)),
        )
        fast.flush()
        result.duplicates = reader.duplicates
        result.notes.append(
            f"worker's {HISTOGRAM} over the latency run (Kafka timestamp -> commit): "
            + histogram_summary(before, read_histogram(port))
        )
    finally:
        worker.stop()
        reader.stop()
    return result


def in_process_split(backlog: Events) -> str:
    """What the worker's main steps cost over ``backlog`` in this process (no Kafka): the
    ranking core alone, Avro decoding of the inputs, Avro encoding of the rankings."""
    from leap_stream.core import LeapCore
    from leap_stream.core.catalog import default_catalog
    from leap_stream.data.codec import default_codec

    codec = default_codec()
    names = {"submitted": "JobSubmitted", "completed": "JobCompleted"}
    core = LeapCore(default_catalog())
    clock = time.perf_counter
    core_s = encode_s = 0.0
    for kind, event in backlog:
        began = clock()
        if kind == "submitted":
            record = core.on_submitted(event).record()
            core_s += clock() - began
            began = clock()
            codec.encode("HardwareRanking", record)
            encode_s += clock() - began
        else:
            _, example = core.join(event)
            if example is not None:
                core.learn(example)
            core_s += clock() - began
    inputs = [(names[kind], codec.encode(names[kind], event)) for kind, event in backlog]
    began = clock()
    for name, value in inputs:
        codec.decode(value, reader=name)
    decode_s = clock() - began
    n = len(backlog)
    return (
        f"in this process on the same {n:,} events: LeapCore {1e6 * core_s / n:,.0f} us/event "
        f"({n / core_s:,.0f} events/s), Avro decode of the inputs {1e6 * decode_s / n:,.0f} "
        f"us/event, Avro encode of the rankings {1e6 * encode_s / n:,.0f} us/event"
    )


def transaction_probe(bootstrap: str, prefix: str, count: int = 30) -> str:
    """Time bare transactions like the worker's (one message, the input offsets, commit) on a
    topic of their own: back to back, and 20 ms apart. Returns a summary line."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"{prefix}txn-probe"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=30)[topic].result(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}txn-probe"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer = Producer(  # the worker's producer settings
        {"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}txn-probe",
         "transaction.timeout.ms": 30_000, "linger.ms": 2}
    )  # fmt: skip
    producer.init_transactions(30)
    figures = []
    try:
        for gap in (0.0, 0.02):
            total, offsets = [], []
            for i in range(count):
                time.sleep(gap)
                began = time.perf_counter()
                producer.begin_transaction()
                producer.produce(topic, b"x")
                sending = time.perf_counter()
                producer.send_offsets_to_transaction(
                    [TopicPartition(topic, 0, i)], consumer.consumer_group_metadata()
                )
                offsets.append(time.perf_counter() - sending)
                producer.flush()
                producer.commit_transaction()
                total.append(time.perf_counter() - began)
            figures.append((median_ms(total[3:]), median_ms(offsets[3:])))
    finally:
        consumer.close()
    (b2b, b2b_offsets), (spaced, spaced_offsets) = figures
    return (
        f"a bare transaction like the worker's (1 message, offsets, commit): "
        f"back to back {b2b:.1f} ms (of which send_offsets_to_transaction {b2b_offsets:.1f} ms), "
        f"20 ms apart {spaced:.1f} ms ({spaced_offsets:.1f} ms)"
    )


def median_ms(seconds: list[float]) -> float:
    values = sorted(seconds)
    return 1000 * values[len(values) // 2]


# --- the faust pass-through -----------------------------------------------------------------


def bench_faust(args: argparse.Namespace, backlog: Events, probes: Events, tmp: Path) -> Result:
    from confluent_kafka.admin import AdminClient, NewTopic

    from leap_stream.data.codec import default_codec
    from leap_stream.streaming.produce import EventProducer
    from leap_stream.streaming.topics import TopicNames

    console.rule("faust pass-through")
    bootstrap, prefix = args.bootstrap, args.topic_prefix
    source, sink = f"{prefix}faust.in", f"{prefix}faust.out"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=args.partitions, replication_factor=1) for t in (source, sink)],
        request_timeout=30,
    ).values():
        future.result(30)
    codec = default_codec()
    names = {"submitted": "JobSubmitted", "completed": "JobCompleted"}

    def sender(producer: EventProducer) -> Callable[[str, dict[str, Any]], None]:
        def send(kind: str, event: dict[str, Any]) -> None:  # keyed by event_id: unique
            producer.send_raw(source, event_key(event), codec.encode(names[kind], event))

        return send

    result = Result("faust pass-through", events=len(backlog))
    producer = EventProducer(bootstrap, TopicNames(prefix))
    produce_backlog(sender(producer), producer.flush, backlog, "faust")

    reader = Reader(bootstrap, sink)
    reader.start()
    datadir = tmp / "faust-data"
    command = [sys.executable, str(Path(__file__).resolve()), FAUST_WORKER, bootstrap,
               f"{prefix}faust", source, sink, str(datadir), str(args.partitions)]  # fmt: skip
    worker = Child("faust-worker", command, tmp)
    try:
        meter = CpuMeter({"worker": worker.pid, "broker": broker_pid(bootstrap)})
        keys = [event_key(e) for _, e in backlog]
        result.window_s = wait_backlog(reader, keys, worker, meter, "faust", args.timeout)
        result.cpu = meter.seconds
        result.startup_s = min(reader.arrived[k] for k in keys) - worker.started
        console.print(
            f"  {len(keys):,} messages in {result.window_s:.1f} s (first output "
            f"{result.startup_s:.1f} s after start)"
        )
        fast = EventProducer(bootstrap, TopicNames(prefix), **{"linger.ms": 0})
        warmup = int(args.warmup_seconds * args.rate)
        latency_run(result, reader, sender(fast), event_key, probes, warmup, args.rate)
        fast.flush()
        result.duplicates = reader.duplicates
    finally:
        worker.stop()
        reader.stop()
    return result


def faust_worker(argv: list[str]) -> None:
    """The child process: a faust app with one pass-through agent, run as ``faust worker``."""
    import faust

    bootstrap, app_id, source_name, sink_name, datadir, partitions = argv
    Path(datadir).mkdir(parents=True, exist_ok=True)  # faust needs its parent to exist
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        datadir=datadir,
        broker_session_timeout=10,  # the default 60 s makes a (re)join slow
        topic_disable_leader=True,  # no <app>-__assignor-__leader topic
        topic_partitions=int(partitions),
        web_enabled=False,
    )
    raw = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    source = app.topic(source_name, **raw)
    sink = app.topic(sink_name, **raw)

    @app.agent(source)
    async def passthrough(stream: Any) -> None:
        async for key, value in stream.items():
            await sink.send(key=key, value=value)

    sys.argv = [sys.argv[0], "worker", "--without-web", "--loglevel", "warn"]
    app.main()


# --- report ---------------------------------------------------------------------------------


def report(results: list[Result], args: argparse.Namespace) -> None:
    table = Table(title=f"service speed ({os.cpu_count()} cores, broker {args.bootstrap})")
    for column in ("system", "events/s", "submissions/s", "p50 ms", "p99 ms", "max ms"):
        table.add_column(column, justify="left" if column == "system" else "right")

    def fmt(value: float, spec: str) -> str:
        return "-" if value is None or math.isnan(value) else format(value, spec)

    for r in results:
        table.add_row(
            r.system,
            fmt(r.rate(r.events), ",.0f"),
            fmt(r.rate(r.submissions), ",.0f"),
            fmt(r.quantile(0.5), ".1f"),
            fmt(r.quantile(0.99), ".1f"),
            fmt(max(r.latencies_ms, default=math.nan), ".1f"),
        )
    console.print()
    console.print(table)
    for r in results:
        cpu = r.cpu
        window = cpu.get("wall", math.nan)
        per_event = {k: 1e6 * v / r.events for k, v in cpu.items() if k != "wall"}
        parts = [
            f"{name} {per_event[name]:,.0f} us/event ({cpu[name] / window:.0%} of a core)"
            for name in ("worker", "broker")
            if name in per_event
        ]
        parts.append(f"machine {cpu.get('machine', math.nan) / window / os.cpu_count():.0%} busy")
        console.print(
            f"[bold]{r.system}[/bold] backlog: {r.events:,} events in {r.window_s:.1f} s; CPU: "
            + ", ".join(parts)
        )
        console.print(
            f"  latency: {len(r.latencies_ms):,} probes at {args.rate:g}/s, {r.lost} lost, "
            f"{r.duplicates} duplicate outputs; first output {r.startup_s:.1f} s after start"
        )
        for note in r.notes:
            console.print(f"  {note}")


def list_topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def delete_topics(bootstrap: str, prefix: str, keep: set[str]) -> None:
    """Delete the topics under ``prefix`` but those in ``keep`` (there before the run)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.list_topics(timeout=30).topics
    doomed = [t for t in topics if t.startswith(prefix) and t not in keep]
    if doomed:
        for future in admin.delete_topics(doomed, request_timeout=30).values():
            future.result(30)
    groups = [f"{prefix}leap", f"{prefix}faust"]
    for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
        with contextlib.suppress(Exception):  # never created (a run that stopped early)
            future.result(30)
    console.print(f"deleted {len(doomed)} topics under {prefix!r} and their consumer groups")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [FAUST_WORKER]:
        faust_worker(argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="broker (default: LEAP_KAFKA_BOOTSTRAP, deploy/kafka)")
    parser.add_argument("--topic-prefix", help="prefix of every topic (default: a unique one)")
    parser.add_argument("--partitions", type=int, default=4, help="input partitions (default 4)")
    parser.add_argument("--submissions", type=int, help="backlog submissions (default 30,000)")
    parser.add_argument("--rate", type=float, default=100.0, help="latency run: submissions/s")
    parser.add_argument("--latency-seconds", type=float, help="latency run length (default 30)")
    parser.add_argument("--warmup-seconds", type=float, help="before it, not measured (default 5)")
    parser.add_argument("--jobs-per-day", type=int, default=3_000, help="fleet density")
    parser.add_argument("--seed", type=int, default=1, help="fleet seed (default 1)")
    parser.add_argument("--timeout", type=float, default=600.0, help="backlog time limit, s")
    parser.add_argument("--systems", default="leap,faust", help="comma-separated: leap,faust")
    parser.add_argument("--quick", action="store_true", help="a ~1 min smoke run")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {"submissions": 2_000, "latency_seconds": 8.0, "warmup_seconds": 2.0}
    if not quick:
        defaults = {"submissions": 30_000, "latency_seconds": 30.0, "warmup_seconds": 5.0}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.bootstrap = resolve_bootstrap(args.bootstrap)
    args.topic_prefix = args.topic_prefix or f"bench-{uuid.uuid4().hex[:8]}."
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if "faust" in systems and importlib.util.find_spec("faust") is None:
        sys.exit("faust-streaming is not installed: pip install -e '.[bench]' (or --systems leap)")
    probes_needed = int((args.latency_seconds + args.warmup_seconds) * args.rate)

    with tempfile.TemporaryDirectory(prefix="leap-service-speed-") as tmp_name:
        tmp = Path(tmp_name)
        began = time.monotonic()
        backlog, probes = make_trace(
            args.submissions, probes_needed, args.jobs_per_day, args.seed, tmp / "fleet"
        )
        submissions = sum(k == "submitted" for k, _ in backlog)
        console.print(
            f"broker {args.bootstrap}, topics {args.topic_prefix}*, {args.partitions} partitions; "
            f"backlog {len(backlog):,} events ({submissions:,} submissions), "
            f"{len(probes):,} latency probes ({time.monotonic() - began:.1f} s to generate)"
        )
        results: list[Result] = []
        existing = list_topics(args.bootstrap)
        try:
            if "leap" in systems:
                leap = bench_leap(args, backlog, probes, tmp)
                results.append(leap)
                console.print("  timing the worker's steps in this process, and transactions ...")
                leap.notes.append(in_process_split(backlog))
                leap.notes.append(transaction_probe(args.bootstrap, args.topic_prefix))
            if "faust" in systems:
                results.append(bench_faust(args, backlog, probes, tmp))
        finally:
            delete_topics(args.bootstrap, args.topic_prefix, keep=existing)
        report(results, args)


if __name__ == "__main__":
    main()
