"""Nightly retrains in the replay: each night's batch snapshot scored on the next day's attempts.

``replay --nightly`` (:func:`leap_stream.backtest.replay.replay` with ``nightly=``) runs in two
passes over the history:

1. **Snapshots** (:func:`~leap_stream.backtest.retrain.replay_snapshots`): an online core
   replays the history up to the end of the scored days and hands out, at each night's cutoff
   (the midnight, UTC, that starts each of the last N days), the learn examples completed before
   it and the online model at that moment. Each night is trained in a process pool as soon as
   its next day has been read (:func:`train_night`: the river model refit on the snapshot, the
   LightGBM challenger, and the challenger's predictions for that day's submissions at once).
   With a pool, this pass runs in a process of its own, alongside the second: it does not rank,
   so it runs ahead of the replay proper and the nights are trained by the time it needs them.
2. **Scoring**: the replay proper. At each cutoff it takes that night's models from the pool
   and, on each submission of the next day, ranks a second and a third time: with a shallow copy
   of the online core whose ``model`` is the batch model. The lineage priors, the pairwise
   transfer, the memory risk and every other piece of the online core's state are the live
   ones; only ``predict_many`` (and the counts that mark cold starts) come from the snapshot.
   When the attempt completes, every model is scored on it, as are the online model and the
   lookup table: the same attempts for all.

The per-night figures go to ``nightly.csv``, their means to the summary's ``nightly`` block,
and the champion/challenger rule (:class:`~leap_stream.core.promotion.PromotionRule`) is played
over the nights: what would have served each day, and how accurate that was. docs/nightly.md
explains the figures and the rule.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import pickle
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from leap_stream.backtest.metrics import AttemptOutcome, _accuracy
from leap_stream.backtest.replay import _Decisions, _value_for
from leap_stream.backtest.retrain import MODELS as RETRAINED
from leap_stream.backtest.retrain import replay_snapshots, train_snapshot
from leap_stream.core import LeapCore
from leap_stream.core.batch import (
    BOOSTED_PARAMS,
    BOOSTED_ROUNDS,
    RIVER_PASSES,
    TrainingSet,
    probe_predictions,
)
from leap_stream.core.catalog import Catalog
from leap_stream.core.ensemble import ENSEMBLE, Ensemble
from leap_stream.core.events import job_config
from leap_stream.core.priors import HALF_LIFE_DAYS
from leap_stream.core.promotion import Decision, PromotionRule
from leap_stream.core.ranking import SOURCES, Ranking
from leap_stream.core.submission import Submission
from leap_stream.data.history import HistoryError, read_history_batches
from leap_stream.runtime import tune_gc

__all__ = [
    "CANDIDATES",
    "MODELS",
    "NIGHTLY_FILE",
    "NightlyOptions",
    "NightlyRun",
    "machine_cores",
    "night_pool",
    "nightly_figures",
    "plan_cutoffs",
    "pool_workers",
    "train_night",
]

NIGHTLY_FILE = "nightly.csv"
# Every model scored each night, in the tables' order; the lookup table is a baseline only.
MODELS = ("online", "river_batch", "lightgbm", ENSEMBLE, "lookup")
# The models the champion/challenger rule chooses among: those that rank every submission.
CANDIDATES = ("online", "river_batch", "lightgbm", ENSEMBLE)
_DAY_MS = 86_400_000.0
_SOURCES = SOURCES[:4]  # the online core's own; the lookup's is its name
_WITHIN_10 = np.float32(0.10)
_WITHIN_20 = np.float32(0.20)


def machine_cores() -> int:
    """Cores this process may run on (``os.process_cpu_count()`` from Python 3.13)."""
    counter = getattr(os, "process_cpu_count", None)
    if counter is not None:
        return counter() or 1
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def pool_workers() -> int:
    """The nights' processes by default: the machine's cores but one, at least one.

    The replay proper is the run's critical path (it scores every submission of the nights'
    days, and waits for nothing but the night it reaches): a core of its own ends the run
    sooner than a pool as wide as the machine, whose workers would share it. On the six-month
    fleet's 30 nights (2 cores), one worker: 58 min 25 s; two: 1 h 9 min (docs/nightly.md).
    The spare workers (:class:`NightlyOptions`) come on top, at the lowest priority.
    """
    return max(machine_cores() - 1, 1)


@dataclass(frozen=True)
class NightlyOptions:
    """How ``replay --nightly`` retrains and decides.

    Parameters
    ----------
    nights
        Day boundaries retrained at: the last ``nights`` days of the history are scored.
    passes
        Passes of the river model over its snapshot (:data:`~leap_stream.core.batch.RIVER_PASSES`).
    workers
        Processes training nights (None: :func:`pool_workers`, the machine's cores but
        one; 0: in this process, no pool).
    spare_workers
        More processes training nights at the lowest CPU priority (``nice`` 19, where the
        system has it): they run on what the replay proper and the other workers leave idle,
        above all while the replay waits for a night (ignored with ``workers=0``).
    rule, initial
        The champion/challenger rule and the model serving before any night was scored.
    warmup
        Nights retrained and scored before the first counted one, only for the rule to read:
        a service that has been retraining has the record of the nights before, and without it
        the first counted day would be served by ``initial`` for want of one. Left out of every
        mean; flagged in ``nightly.csv``. Default: the rule's window.
    boosted_params, boosted_rounds
        The LightGBM challenger's settings.
    train_days
        Train each night on the completions of its last ``train_days`` days only (None: every
        completion so far). Bounds a night's cost on a long, busy history; the river model
        still starts from the online model, which has seen everything once.
    fast_forward
        The replay proper learns the days before the first night (warm-up ones included)
        without ranking or scoring them, as pass 1 does (:meth:`LeapCore.remember`): its own
        figures then cover the retrained nights' days only. The nights' models and the online
        model are the same; what the online core learns from its own rankings (the interval
        calibration, the fit of its first choices with an oracle) starts at the first night,
        and the warm-up nights give it time to.
    """

    nights: int = 30
    passes: int = RIVER_PASSES
    workers: int | None = None
    spare_workers: int = 1
    rule: PromotionRule = field(default_factory=PromotionRule)
    initial: str = ENSEMBLE
    warmup: int | None = None
    boosted_params: Mapping[str, Any] = field(default_factory=lambda: dict(BOOSTED_PARAMS))
    boosted_rounds: int = BOOSTED_ROUNDS
    train_days: float | None = None
    fast_forward: bool = False

    def __post_init__(self) -> None:
        if self.nights < 1:
            raise ValueError(f"nights must be >= 1, got {self.nights}")
        if self.spare_workers < 0:
            raise ValueError(f"spare_workers must be >= 0, got {self.spare_workers}")
        if self.train_days is not None and not self.train_days > 0:
            raise ValueError(f"train_days must be > 0, got {self.train_days}")
        if self.initial not in CANDIDATES:
            raise ValueError(f"initial must be one of {', '.join(CANDIDATES)}, not {self.initial}")
        if self.warmup is not None and self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")

    @property
    def warmup_nights(self) -> int:
        """The warm-up nights asked for (the rule's window unless set)."""
        return self.rule.window_days if self.warmup is None else self.warmup


def _submission_days(history: Path, batch_rows: int, strict: bool) -> tuple[date, date]:
    """The first and last UTC day with a submission."""
    lows, highs = [], []
    if history.suffix == ".parquet":  # two columns, without the full validation
        batches = (
            batch
            for batch in pq.ParquetFile(history).iter_batches(
                batch_rows, columns=["event_type", "event_time"]
            )
        )
    else:
        batches = read_history_batches(history, batch_rows, None if strict else [])
    for batch in batches:
        times = pc.filter(
            batch.column("event_time"), pc.equal(batch.column("event_type"), "submitted")
        )
        if len(times):
            bounds = pc.min_max(times)
            lows.append(bounds["min"].as_py())
            highs.append(bounds["max"].as_py())
    if not lows:
        raise HistoryError(f"{history}: no submission to score")
    return _utc_day(min(lows)), _utc_day(max(highs))


def _utc_day(when: datetime) -> date:
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC).date()


def plan_cutoffs(
    history: Path, nights: int, *, batch_rows: int = 65_536, strict: bool = False
) -> list[datetime]:
    """The cutoffs of the last ``nights`` days with submissions possible: midnight (UTC)
    starting each of the history's last ``nights`` days, never its first (nothing has
    completed before it)."""
    first, last = _submission_days(history, batch_rows, strict)
    start = max(first + timedelta(days=1), last - timedelta(days=nights - 1))
    days = [start + timedelta(days=i) for i in range((last - start).days + 1)]
    if not days:
        raise HistoryError(
            f"{history}: nightly retrains need submissions on two days at least "
            f"(a night's models train on the days before it); its are all on {first}"
        )
    return [datetime(d.year, d.month, d.day, tzinfo=UTC) for d in days]


# -- one night, in a worker process ----------------------------------------------------------


@dataclass(slots=True)
class NightTask:
    """What a worker needs to train one night (files, not data: chunks are shared)."""

    index: int
    cutoff_ms: float
    chunks: list[str]  # pickled TrainingSet chunks, in time order, together the snapshot
    online: str  # the pickled online model at the cutoff
    configs: list[dict[str, Any]]  # the next day's submissions' configurations (to prime)
    passes: int
    boosted_params: dict[str, Any]
    boosted_rounds: int
    train_days: float | None = None


@dataclass(slots=True)
class NightResult:
    """One night's models and what the replay checks and reports of them."""

    index: int
    examples: int
    first_ms: float | None
    last_ms: float | None
    online_learned: int
    online_probe: list[float]
    models: dict[str, Any]
    primed: dict[str, dict[Any, np.ndarray]]  # per model, predictions made ahead (see prime)
    seconds: float  # wall
    cpu_seconds: float  # the worker's CPU: with more processes than cores, well under the wall


def train_night(task: NightTask) -> NightResult:
    """Train one night's batch models on its snapshot (the process pool's task)."""
    began, began_cpu = time.perf_counter(), time.process_time()
    parts = [pickle.loads(Path(path).read_bytes()) for path in task.chunks]
    snapshot = TrainingSet.concat(parts)
    training = snapshot.window(task.cutoff_ms, task.train_days)
    if len(snapshot) and not snapshot.time_ms.max() < task.cutoff_ms:
        raise RuntimeError(f"night {task.index}: the snapshot holds a completion after its cutoff")
    online = pickle.loads(Path(task.online).read_bytes())
    learned, probe = online.learned, probe_predictions(online)
    models = train_snapshot(
        snapshot,
        online.encoder,
        online=online,
        recent=training,
        passes=task.passes,
        boosted_params=task.boosted_params,
        boosted_rounds=task.boosted_rounds,
    )
    primed: dict[str, dict[Any, np.ndarray]] = {}
    for name, model in models.items():
        if hasattr(model, "prime"):  # predict the next day's configurations in one call
            model.prime(model.encoder.job(config) for config in task.configs)
            primed[name] = dict(model.predictions)
    times = training.time_ms
    return NightResult(
        index=task.index,
        examples=len(training),
        first_ms=float(times.min()) if len(times) else None,
        last_ms=float(times.max()) if len(times) else None,
        online_learned=learned,
        online_probe=probe,
        models=models,
        primed=primed,
        seconds=time.perf_counter() - began,
        cpu_seconds=time.process_time() - began_cpu,
    )


def night_pool(workers: int, spare_workers: int) -> ProcessPoolExecutor:
    """The process pool nights train in: ``workers`` processes, then ``spare_workers`` more at
    the lowest CPU priority (spawned, not forked: the replay's process has threads)."""
    context = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(
        workers + spare_workers,
        mp_context=context,
        initializer=_start_worker,
        initargs=(context.Value("i", 0), workers),
    )


def _start_worker(started: Any, full_priority: int) -> None:
    """A pool process's start: the collector tuned for long runs; the ``full_priority``
    first to start keep the CPU priority they were born with, the rest (the spare workers)
    take the lowest: while the replay proper ranks they get what its core leaves, and while it
    waits for a night, the core.
    """
    tune_gc()
    with started.get_lock():
        rank = started.value
        started.value += 1
    if rank >= full_priority and hasattr(os, "nice"):
        os.nice(19)


# -- pass 1: the snapshots, in a process of its own -------------------------------------------


@dataclass(frozen=True, slots=True)
class _SnapshotPass:
    """What pass 1 needs (picklable: it runs in a process of its own)."""

    history: Path
    catalog: Catalog
    ends: list[datetime]  # the nights' cutoffs, then the end of the last scored day
    half_life: float
    batch_rows: int
    strict: bool
    work: Path  # where the examples and online models go, one file each per cutoff

    def run(self, put: Callable[[tuple[Any, ...]], None]) -> None:
        """Replay to the last end, writing each cutoff's files; ``put`` hears of the events
        read (``("events", n)``), of each night whose next day has been read
        (``("night", k, configs)``: its files are complete) and of the end (``("done",
        seconds)``)."""
        began = time.perf_counter()
        cutoff_ms = [c.timestamp() * 1000.0 for c in self.ends[:-1]]
        configs: list[dict[tuple[Any, ...], dict[str, Any]]] = [{} for _ in cutoff_ms]

        def remember(event: dict[str, Any]) -> None:  # the configurations to prime
            now = event["event_time"].timestamp() * 1000.0
            k = int(np.searchsorted(cutoff_ms, now, side="right")) - 1
            if k >= 0 and now < cutoff_ms[k] + _DAY_MS:
                config = job_config(event)
                configs[k].setdefault(tuple(config.values()), config)

        snapshots = replay_snapshots(
            self.history,
            self.catalog,
            self.ends,
            lineage_half_life_days=self.half_life,
            batch_rows=self.batch_rows,
            strict=self.strict,
            on_event=lambda n: put(("events", n)),
            on_submitted=remember,
        )
        for snapshot in snapshots:
            k = snapshot.index
            _examples_file(self.work, k).write_bytes(pickle.dumps(snapshot.examples, protocol=5))
            if k < len(cutoff_ms):
                _online_file(self.work, k).write_bytes(snapshot.online)
            if k >= 1:  # night k - 1's next day has been read: it can be trained
                put(("night", k - 1, list(configs[k - 1].values())))
                configs[k - 1] = {}
        put(("done", time.perf_counter() - began))


def _examples_file(work: Path, k: int) -> Path:
    return work / f"examples-{k:03d}.pkl"


def _online_file(work: Path, k: int) -> Path:
    return work / f"online-{k:03d}.pkl"


def _run_pass(task: _SnapshotPass, messages: Any) -> None:
    """Pass 1 in a child process: every outcome, an error included, goes to ``messages``."""
    parent = os.getppid()
    tune_gc()

    def put(message: tuple[Any, ...]) -> None:
        if os.getppid() != parent:  # the replay was killed: nobody will read the nights
            os._exit(1)
        messages.put(message)

    try:
        task.run(put)
    except BaseException:  # the parent raises it where it waits for a night
        messages.put(("error", traceback.format_exc()))


class _Inline:
    """An executor that runs each task at once in this process (``workers=0``)."""

    def submit(self, fn: Any, *args: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args))
        except Exception as error:  # handed to whoever reads the result, as a pool would
            future.set_exception(error)
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Nothing runs in the background."""


# -- the run: pass 1, the pool, the tap of pass 2, the figures --------------------------------


class NightlyRun:
    """One ``replay --nightly``'s retrains (see the module docstring).

    Use: :meth:`prepare` (pass 1, before the replay), :meth:`tap` for the replay's session,
    :meth:`finish` after it, :meth:`close` always.
    """

    def __init__(
        self,
        history: Path,
        catalog: Catalog,
        options: NightlyOptions,
        *,
        lineage_half_life_days: float = HALF_LIFE_DAYS,
        batch_rows: int = 65_536,
        strict: bool = False,
        progress: bool = False,
    ) -> None:
        self.history = history
        self.catalog = catalog
        self.options = options
        self.half_life = lineage_half_life_days
        self.batch_rows = batch_rows
        self.strict = strict
        self.cutoffs = plan_cutoffs(
            history, options.nights + options.warmup_nights, batch_rows=batch_rows, strict=strict
        )
        # a short history keeps the counted nights and gives up warm-up ones first
        self.warmup = max(len(self.cutoffs) - options.nights, 0)
        self.cutoff_ms = [c.timestamp() * 1000.0 for c in self.cutoffs]
        workers = pool_workers() if options.workers is None else options.workers
        self.workers = min(workers, len(self.cutoffs))
        spare = min(options.spare_workers, len(self.cutoffs) - self.workers)
        self.spare_workers = spare if self.workers else 0
        self._work = tempfile.TemporaryDirectory(prefix="leap-nightly-")
        self._executor: Any = None
        self.futures: list[Future | None] = [None] * len(self.cutoffs)
        self.results: dict[int, NightResult] = {}
        self.trained: set[int] = set()  # nights with a snapshot to train on
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            disable=not progress,
        )
        self._events_task = self.progress.add_task("pass 1: snapshots", total=None)
        self._nights_task = self.progress.add_task("nights retrained", total=len(self.cutoffs))
        self.seconds = {"snapshots": 0.0, "waiting": 0.0, "training": 0.0, "training_cpu": 0.0}
        self._handed = [threading.Event() for _ in self.cutoffs]  # night k is in the pool
        self._pass: Any = None  # pass 1's process, if it has one
        self._listener: threading.Thread | None = None
        self._pass_error: str | None = None
        self.began = time.perf_counter()
        self.tap: NightlyTap | None = None

    # -- pass 1 -----------------------------------------------------------------------------

    def prepare(self) -> None:
        """Start pass 1: the history replayed to the end of the last scored day, each night
        handed to the pool as soon as its next day has been read.

        With a pool, the pass runs in a process of its own, alongside the replay proper, which
        waits at each cutoff only for that night's models (:meth:`result`). Without one
        (``workers=0``), it runs here, to the end, before this returns.
        """
        work = Path(self._work.name)
        task = _SnapshotPass(
            self.history,
            self.catalog,
            # one more end, the last scored day's: its submissions prime the last night's
            # challenger, and reading stops there
            [*self.cutoffs, self.cutoffs[-1] + timedelta(days=1)],
            self.half_life,
            self.batch_rows,
            self.strict,
            work,
        )
        if self.workers == 0:
            self._executor = _Inline()
            with self.progress:
                task.run(self._hear)
            return
        context = multiprocessing.get_context("spawn")  # no fork of a threaded parent
        self._executor = night_pool(self.workers, self.spare_workers)
        messages = context.Queue()
        self._pass = context.Process(target=_run_pass, args=(task, messages), daemon=True)
        self._pass.start()
        self._listener = threading.Thread(target=self._listen, args=(messages,), daemon=True)
        self._listener.start()

    def _listen(self, messages: Any) -> None:
        """Hand pass 1's messages on as they come, until it ends."""
        while True:
            message = messages.get()
            self._hear(message)
            if message[0] in ("done", "error"):
                return

    def _hear(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "events":
            self.progress.update(self._events_task, completed=message[1])
        elif kind == "night":
            k, configs = message[1], message[2]
            self._submit(k, [str(_examples_file(Path(self._work.name), i)) for i in range(k + 1)],
                         configs)  # fmt: skip
            self._handed[k].set()
            self._collect()
        else:
            if kind == "error":
                self._pass_error = message[1]
            else:
                self.seconds["snapshots"] = message[1]
            self.progress.update(self._events_task, visible=False)
            for handed in self._handed:  # no more nights will come
                handed.set()

    def _submit(self, k: int, chunks: list[str], configs: list[dict[str, Any]]) -> None:
        task = NightTask(
            index=k,
            cutoff_ms=self.cutoff_ms[k],
            chunks=chunks,
            online=str(_online_file(Path(self._work.name), k)),
            configs=configs,
            passes=self.options.passes,
            boosted_params=dict(self.options.boosted_params),
            boosted_rounds=self.options.boosted_rounds,
            train_days=self.options.train_days,
        )
        self.futures[k] = self._executor.submit(train_night, task)

    def _collect(self) -> None:
        done = sum(1 for f in self.futures if f is not None and f.done())
        self.progress.update(self._nights_task, completed=done)

    def result(self, k: int) -> NightResult:
        """Night ``k``'s models (waiting for the pool if need be)."""
        began = time.perf_counter()
        while not self._handed[k].wait(timeout=0.5):
            if self._pass is not None and not self._pass.is_alive():
                self._handed[k].wait(timeout=5.0)  # its last messages may be on their way
                if not self._handed[k].is_set():
                    raise RuntimeError(f"pass 1 stopped (exit code {self._pass.exitcode})")
        if self._pass_error is not None:
            raise RuntimeError(f"pass 1 failed:\n{self._pass_error}")
        future = self.futures[k]
        if future is None:
            raise RuntimeError(f"night {k} was never handed to the pool (prepare() first)")
        while True:
            try:
                result = future.result(timeout=0.5)
                break
            except TimeoutError:
                self._collect()
        self.seconds["waiting"] += time.perf_counter() - began
        self._collect()
        self.seconds["training"] += result.seconds
        self.seconds["training_cpu"] += result.cpu_seconds
        self.futures[k] = None  # release the pool's copy
        for name, predictions in result.primed.items():
            result.models[name].predictions.update(predictions)
        if result.models:
            self.trained.add(k)
        self.results[k] = result
        return result

    def make_tap(self, core: LeapCore) -> NightlyTap:
        """The tap the replay's session calls at each submission and completion."""
        self.tap = NightlyTap(self, core)
        return self.tap

    # -- after pass 2 -----------------------------------------------------------------------

    def finish(self, out_dir: Path, has_oracle: bool) -> tuple[dict[str, Any], pd.DataFrame]:
        """Write ``nightly.csv``; return the summary's ``nightly`` block and the table."""
        if self.tap is None:
            raise RuntimeError("finish() before the replay ran with the tap")
        self.progress.stop()
        rows = self.tap.rows()
        frame, block = nightly_figures(
            rows,
            self.cutoffs,
            self.options.rule,
            self.options.initial,
            examples={k: r.examples for k, r in self.results.items()},
            has_oracle=has_oracle,
            warmup=self.warmup,
        )
        block = {
            "retrains": len(self.trained),
            "nights": len(self.cutoffs) - self.warmup,
            "warmup_nights": self.warmup,
            "first_day": self.cutoffs[self.warmup].date().isoformat(),
            "last_day": self.cutoffs[-1].date().isoformat(),
            "river_passes": self.options.passes,
            "boosted_rounds": self.options.boosted_rounds,
            "train_days": self.options.train_days,
            "workers": self.workers,
            "spare_workers": self.spare_workers,
            "seconds": {
                "total": round(time.perf_counter() - self.began, 1),
                **{k: round(v, 1) for k, v in self.seconds.items()},
            },
            **block,
        }
        frame.to_csv(out_dir / NIGHTLY_FILE, index=False)
        return block, frame

    def close(self) -> None:
        """Stop pass 1, the pool and the progress display; delete the snapshot files."""
        self.progress.stop()
        if self._pass is not None and self._pass.is_alive():  # the replay stopped early
            self._pass.terminate()
        if self._pass is not None:
            self._pass.join()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self._work.cleanup()


# -- pass 2: the tap ------------------------------------------------------------------------


@dataclass(slots=True)
class _Flight:
    night: int
    job: dict[str, Any]
    positions: np.ndarray
    has_eligible: bool
    truth: np.ndarray | None
    rankings: dict[str, Ranking]


class NightlyTap:
    """Ranks the scored days' submissions with each night's batch models, scores them all.

    The replay's session calls :meth:`submitted` after the online core ranked a submission and
    :meth:`completed` before it learns from a completion.
    """

    def __init__(self, run: NightlyRun, core: LeapCore) -> None:
        self.run = run
        self.decisions = _Decisions(core)
        self.next = 0  # the next cutoff to cross
        self.night: int | None = None
        self.day_end = -math.inf
        self.models: dict[str, Any] = {}
        self.flights: dict[str, _Flight] = {}
        self._events = 0
        self._columns: dict[str, list[Any]] = {
            "night": [], "done_ms": [], "measured": [], "source": [], "cost_best": [],
            **{f"err_{m}": [] for m in MODELS}, **{f"cost_{m}": [] for m in MODELS},
        }  # fmt: skip

    def _advance(self, core: LeapCore, now: float) -> None:
        cutoffs = self.run.cutoff_ms
        while self.next < len(cutoffs) and now >= cutoffs[self.next]:
            k = self.next
            result = self.run.result(k)
            # pass 1's online model at the cutoff must be this replay's, or the snapshot is
            # not what this replay had learned
            same = core.model.learned == result.online_learned and np.allclose(
                probe_predictions(core.model), result.online_probe, rtol=0.0, atol=1e-9
            )
            if not same:
                raise RuntimeError(
                    f"night {k}: the snapshot pass learned {result.online_learned} examples "
                    f"by {self.run.cutoffs[k].isoformat()}, the replay {core.model.learned} "
                    "(or other weights): the two passes diverged"
                )
            if self.night is not None:  # the previous night's models are done with
                previous = self.run.results[self.night]
                previous.models, previous.primed = {}, {}
            self.models = result.models
            if self.models:  # the ensemble reads the online model as it learns through the day
                members = [core.model, *self.models.values()]
                self.models = {**self.models, ENSEMBLE: Ensemble(members)}
            self.night, self.day_end = k, cutoffs[k] + _DAY_MS
            self.next += 1

    def submitted(self, core: LeapCore, submission: Submission, truth: np.ndarray | None) -> None:
        """Rank a submission of a scored day with each batch model (the online core's state,
        the batch model's predictions), after the online core ranked it."""
        event, check = submission.event, submission.check
        now = event["event_time"].timestamp() * 1000.0
        self._tick()
        self._advance(core, now)
        if self.night is None or now >= self.day_end or not self.models:
            return
        rankings = {
            # the online core's ranking remembered the submission: completions join that one
            name: core.with_model(model, name).rank(submission, remember=False)
            for name, model in self.models.items()
        }
        self.flights[event["job_id"]] = _Flight(
            self.night, event, check.positions, bool(check.eligible.any()), truth, rankings
        )

    def completed(
        self, core: LeapCore, event: dict[str, Any], outcome: AttemptOutcome | None
    ) -> None:
        """Score every model on an attempt of a scored day."""
        self._tick()
        self._advance(core, event["event_time"].timestamp() * 1000.0)
        flight = self.flights.pop(event["job_id"], None)
        if flight is None or outcome is None:
            return
        actual = outcome.actual
        hardware = event["hardware_type"]
        predicted = {
            "online": outcome.model_predicted,
            "lookup": outcome.lookup_predicted,
            **{n: _value_for(r, hardware)[0] for n, r in flight.rankings.items()},
        }
        costs = {"online": outcome.cost_model, "lookup": outcome.cost_lookup}
        if flight.truth is not None and flight.rankings:
            hours = (event["event_time"] - flight.job["event_time"]).total_seconds() / 3600.0
            any_ranking = next(iter(flight.rankings.values()))
            attempt = self.decisions.attempt(
                flight.job, flight.truth, flight.positions, any_ranking.eligible, event,
                max(hours, 0.0),
            )  # fmt: skip
            if attempt is not None:  # priced once, picked by each ranking
                for name, ranking in flight.rankings.items():
                    costs[name] = attempt.pick(ranking)[0]
        c = self._columns
        c["night"].append(flight.night)
        c["done_ms"].append(event["event_time"].timestamp() * 1000.0)
        c["measured"].append(actual is not None)
        c["source"].append(
            _SOURCES.index(outcome.model_source) if outcome.model_source in _SOURCES else -1
        )
        c["cost_best"].append(_nan(outcome.cost_best))
        for model in MODELS:
            p = predicted.get(model)
            ok = actual is not None and p is not None and p == p
            c[f"err_{model}"].append((p - actual) / actual if ok else math.nan)
            c[f"cost_{model}"].append(_nan(costs.get(model)))

    def _tick(self) -> None:
        self._events += 1
        if self._events % 20_000 == 0:
            self.run._collect()

    def rows(self) -> dict[str, np.ndarray]:
        """The scored attempts, one entry per attempt in each array."""
        c = self._columns
        out = {
            "night": np.array(c["night"], dtype=np.int64),
            "done_ms": np.array(c["done_ms"], dtype=np.float64),
            "measured": np.array(c["measured"], dtype=bool),
            "source": np.array(c["source"], dtype=np.int64),
            "cost_best": np.array(c["cost_best"], dtype=np.float64),
        }
        for model in MODELS:
            # float32, as the backtest stores errors: the same attempt is in the same band
            out[f"err_{model}"] = np.array(c[f"err_{model}"], dtype=np.float32)
            out[f"cost_{model}"] = np.array(c[f"cost_{model}"], dtype=np.float64)
        return out


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


# -- figures ----------------------------------------------------------------------------------


def _band(err: np.ndarray, limit: np.float32, n: int) -> float | None:
    """Share of ``n`` attempts within ``limit``; NaN (no prediction) counts as a miss."""
    return round(int(np.count_nonzero(np.abs(err) <= limit)) / n, 6) if n else None


def _figures(err: np.ndarray) -> dict[str, Any]:
    """One model's figures over a set of scored attempts (NaN: it did not predict)."""
    n = int(err.size)
    predicted = err[~np.isnan(err)]
    accuracy = _accuracy(predicted)
    return {
        "n": n,
        "predicted": int(predicted.size),
        "within_10pct": _band(err, _WITHIN_10, n),
        "within_20pct": _band(err, _WITHIN_20, n),
        "mape": accuracy["mape"],
        "mdape": accuracy["mdape"],
    }


def _regret(cost: np.ndarray, best: np.ndarray) -> float | None:
    ok = ~np.isnan(cost) & ~np.isnan(best) & (best > 0.0)
    return round(float(np.mean(cost[ok] / best[ok]) - 1.0), 6) if ok.any() else None


def _scores(rows: Mapping[str, np.ndarray], mask: np.ndarray) -> dict[str, tuple[int, int]]:
    """(within 10%, attempts) of each candidate over the masked scored attempts."""
    n = int(np.count_nonzero(mask))
    scores = {}
    for model in CANDIDATES:
        err = rows[f"err_{model}"][mask]
        if n and not np.isnan(err).all():  # a model without a snapshot that night has none
            scores[model] = (int(np.count_nonzero(np.abs(err) <= _WITHIN_10)), n)
    return scores


def serve(
    rows: Mapping[str, np.ndarray],
    cutoff_ms: Sequence[float],
    rule: PromotionRule,
    initial: str,
) -> list[Decision]:
    """Play the rule over the nights: the decision taken at each cutoff, on what had completed.

    The decision at night ``k``'s cutoff reads each earlier scored day's attempts that had
    completed by then (an attempt still running cannot be scored yet), so it uses nothing a
    service would not have known at midnight.
    """
    decisions = []
    serving = initial
    measured = rows["measured"]
    for k, cutoff in enumerate(cutoff_ms):
        known = measured & (rows["done_ms"] < cutoff)
        days = [_scores(rows, known & (rows["night"] == j)) for j in range(k)]
        decision = rule.decide(serving, days)
        serving = decision.serving
        decisions.append(decision)
    return decisions


def nightly_figures(
    rows: Mapping[str, np.ndarray],
    cutoffs: Sequence[datetime],
    rule: PromotionRule,
    initial: str = ENSEMBLE,
    *,
    examples: Mapping[int, int] | None = None,
    has_oracle: bool = False,
    warmup: int = 0,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The ``nightly.csv`` table (one row per night and model) and the summary's block.

    Parameters
    ----------
    rows
        Per scored attempt (:meth:`NightlyTap.rows`): ``night``, ``done_ms``, ``measured``,
        ``source`` (index into the online core's sources, -1 none), ``cost_best`` and per
        model ``err_<model>`` (signed relative error, NaN: no prediction) and ``cost_<model>``.
    cutoffs
        Each night's cutoff.
    rule, initial
        The champion/challenger rule and the model serving at first.
    examples
        Each night's snapshot size (examples), reported beside the batch models.
    has_oracle
        Whether costs were priced (the regret figures).
    warmup
        The first nights are warm-up ones (:class:`NightlyOptions`): in the table, flagged,
        and out of the block's figures; the rule reads them.
    """
    cutoff_ms = [c.timestamp() * 1000.0 for c in cutoffs]
    decisions = serve(rows, cutoff_ms, rule, initial)
    measured = rows["measured"]
    records = []
    for k, cutoff in enumerate(cutoffs):
        night = rows["night"] == k
        scored = night & measured
        for model in MODELS:
            err = rows[f"err_{model}"]
            figures = _figures(err[scored])
            if model in (*RETRAINED, ENSEMBLE) and figures["predicted"] == 0:
                figures = {key: (0 if key in ("n", "predicted") else None) for key in figures}
            record: dict[str, Any] = {
                "cutoff": cutoff.isoformat(),
                "day": cutoff.date().isoformat(),
                "model": model,
                "warmup": k < warmup,
                "served": decisions[k].serving == model,
                "snapshot_examples": (examples or {}).get(k) if model in RETRAINED else None,
                **figures,
                "top1_regret": _regret(rows[f"cost_{model}"][night], rows["cost_best"][night])
                if has_oracle
                else None,
            }
            for code, source in enumerate(_SOURCES):
                mine = _figures(err[scored & (rows["source"] == code)])
                for key in ("n", "within_10pct", "within_20pct", "mape", "mdape"):
                    record[f"{source}_{key}"] = mine[key]
            records.append(record)
    frame = pd.DataFrame.from_records(records)
    counted = frame[~frame["warmup"]]
    return frame, _block(counted, decisions[warmup:], cutoffs[warmup:], rule, initial, has_oracle)


def _mean(values: pd.Series) -> float | None:
    values = values.dropna().astype(float)
    return round(float(values.mean()), 6) if len(values) else None


def _block(
    frame: pd.DataFrame,
    decisions: Sequence[Decision],
    cutoffs: Sequence[datetime],
    rule: PromotionRule,
    initial: str,
    has_oracle: bool,
) -> dict[str, Any]:
    models = {}
    for model in MODELS:
        mine = frame[(frame["model"] == model) & (frame["predicted"] > 0)]
        models[model] = {
            "nights": len(mine),
            "within_10pct": _mean(mine["within_10pct"]),
            "within_20pct": _mean(mine["within_20pct"]),
            "mape": _mean(mine["mape"]),
            "mdape": _mean(mine["mdape"]),
            "top1_regret": _mean(mine["top1_regret"]) if has_oracle else None,
            "attempts": int(mine["n"].sum()),
        }
    served = frame[frame["served"]]
    # the single models: the ensemble is measured against each of them, not counted as one
    candidates = {
        m: models[m] for m in CANDIDATES if m != ENSEMBLE and models[m]["within_10pct"] is not None
    }
    best = max(candidates, key=lambda m: candidates[m]["within_10pct"]) if candidates else None
    scored = frame[frame["model"].isin(CANDIDATES) & (frame["predicted"] > 0)]
    hindsight = scored.groupby("day")["within_10pct"].max()
    served_within = _mean(served["within_10pct"])
    nights_by_model = {m: int((served["model"] == m).sum()) for m in CANDIDATES}
    block_served = {
        "nights": nights_by_model,
        "promotions": sum(d.promoted for d in decisions),
        "within_10pct": served_within,
        "within_20pct": _mean(served["within_20pct"]),
        "mape": _mean(served["mape"]),
        "mdape": _mean(served["mdape"]),
        "top1_regret": _mean(served["top1_regret"]) if has_oracle else None,
        "best_single_model": best,
        "best_single_within_10pct": candidates[best]["within_10pct"] if best else None,
        "points_vs_best_single": round(
            100.0 * (served_within - candidates[best]["within_10pct"]), 2
        )
        if best and served_within is not None
        else None,
        "top1_regret_vs_best_single": round(
            _mean(served["top1_regret"]) - candidates[best]["top1_regret"], 6
        )
        if has_oracle
        and best
        and candidates[best]["top1_regret"] is not None
        and _mean(served["top1_regret"]) is not None
        else None,
        "hindsight_within_10pct": _mean(hindsight),
        "decisions": [
            {
                "day": c.date().isoformat(),
                "serving": d.serving,
                "promoted": d.promoted,
                "reason": d.reason,
            }
            for c, d in zip(cutoffs, decisions, strict=True)
        ],
    }
    return {
        "models": models,
        "rule": {
            "margin": rule.margin,
            "window_days": rule.window_days,
            "min_attempts": rule.min_attempts,
            "initial": initial,
            "candidates": list(CANDIDATES),
        },
        "served": block_served,
    }
