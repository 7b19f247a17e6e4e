"""How fast the replay backtester runs, how much memory it needs, and where the time goes.

Usage (from the repository root)::

    .venv/bin/python benchmarks/replay_speed.py                       # 30 days x 3,000/day
    .venv/bin/python benchmarks/replay_speed.py --days 90 --jobs-per-day 3000
    .venv/bin/python benchmarks/replay_speed.py --fleet out/fleet-30d  # reuse (or fill) a fleet

Without ``--fleet`` the fleet is generated in a temporary directory; with ``--fleet DIR`` it is
reused when ``DIR/history.parquet`` exists and generated there otherwise. Generation runs in a
child process so that the peak RSS printed is the replay's own (plus the imports).

The replay runs with the oracle (decisions scored; ``--no-oracle``: without, as issue 7's target
of 25,000 events/s is stated) and without the HTML report. Printed: events
replayed, events/s (the replay loop, as ``summary.json`` reports it), wall time of the whole
``replay()`` call (setup and summary writing included), peak RSS before and after it, and, unless
``--no-split``, the cost per event of each step of the loop. The split wraps about twenty
methods with a timer (a few hundred nanoseconds a call, a few percent of an event's cost): run
``--no-split`` for the clean events/s. Figures vary with the load of the machine: they are
orders of magnitude, not promises, and no test asserts them.
"""

from __future__ import annotations

import argparse
import functools
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from leap_stream.backtest import replay
from leap_stream.backtest.metrics import Backtest
from leap_stream.core import leap as core
from leap_stream.core.catalog import default_catalog
from leap_stream.core.eligibility import EligibilityRules
from leap_stream.core.features import FeatureEncoder
from leap_stream.core.model import ThroughputModel
from leap_stream.runtime import tune_gc

# (label, owner, attribute, parent label or None): each step of the replay loop that gets timed.
# A child's time is inside its parent's (rank_candidates: inside both rankers' on_submitted;
# FeatureEncoder.job: inside the model's ranking and learning); the parents do not overlap, so
# their sum plus "other" is the whole loop.
STEPS: tuple[tuple[str, Any, str, str | None], ...] = (
    ("read + decode history", replay, "iter_events", None),
    ("eligibility", EligibilityRules, "check", None),
    ("model: a submission's inputs", core.LeapCore, "submission", None),
    ("the lineage's references", core.LeapCore, "_references", "model: a submission's inputs"),
    ("out-of-memory risk", core.LeapCore, "_memory_risk", "model: a submission's inputs"),
    ("model: rank a submission", core.LeapCore, "rank", None),
    ("predict_many", ThroughputModel, "predict_many", "model: rank a submission"),
    ("transfer offsets", core.LeapCore, "_transfer_offsets", "model: rank a submission"),
    ("lookup: rank a submission", core.LookupRanker, "on_submitted", None),
    ("rank_candidates", core, "rank_candidates", "both rankings"),
    ("oracle: next truth vector", replay.OracleStream, "take", None),
    ("score an attempt", replay, "_outcome", None),
    ("decisions (oracle costs)", replay._Decisions, "costs", "score an attempt"),
    ("backtest bookkeeping", Backtest, "observe", None),
    ("backtest bookkeeping", Backtest, "observe_submission", None),
    ("model: learn a completion", core.LeapCore, "on_completed", None),
    ("the join", core.LeapCore, "join", "model: learn a completion"),
    ("AdaGrad steps (every pass)", ThroughputModel, "learn_prepared", "model: learn a completion"),
    ("later passes, their steps too", core.LeapCore, "_learn_again", "model: learn a completion"),
    ("lookup: learn a completion", core.LookupRanker, "on_completed", None),
    ("encode a job", FeatureEncoder, "job", "the model's ranking and learning"),
)


class StepTimer:
    """Wraps functions and methods in place with a perf_counter timer; undone on close."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.calls: defaultdict[str, int] = defaultdict(int)

    def wrap(self, stack: ExitStack, label: str, owner: Any, name: str) -> None:
        original = getattr(owner, name)
        wrapped = self._timed_iter(label, original) if name == "iter_events" else None
        wrapped = wrapped or self._timed(label, original)
        setattr(owner, name, wrapped)
        stack.callback(setattr, owner, name, original)

    def _timed(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        clock, seconds, calls = time.perf_counter, self.seconds, self.calls

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = clock()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[label] += clock() - began
                calls[label] += 1

        return timed

    def _timed_iter(self, label: str, function: Callable[..., Iterator[Any]]) -> Callable[..., Any]:
        clock, seconds, calls = time.perf_counter, self.seconds, self.calls

        def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
            iterator = function(*args, **kwargs)
            while True:
                began = clock()
                item = next(iterator, None)
                seconds[label] += clock() - began
                if item is None:
                    return
                calls[label] += 1
                yield item

        return timed


def peak_rss_mb() -> float:
    """This process's peak resident set size so far (Linux reports ru_maxrss in KiB)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 2**20


def add_fleet_arguments(
    parser: argparse.ArgumentParser, days: int, jobs_per_day: int, seed: int
) -> None:
    """``--fleet`` to reuse, or the ``--days``, ``--jobs-per-day`` and ``--seed`` of one to
    generate (:func:`ensure_fleet`), with these defaults."""
    parser.add_argument("--fleet", type=Path, help="fleet directory to reuse (or generate into)")
    parser.add_argument("--days", type=int, default=days, help=f"days to generate ({days})")
    parser.add_argument(
        "--jobs-per-day", type=int, default=jobs_per_day, help=f"attempts a day ({jobs_per_day:,})"
    )
    parser.add_argument("--seed", type=int, default=seed, help=f"generator seed ({seed})")


def ensure_fleet(fleet: Path, days: int, jobs_per_day: int, seed: int) -> None:
    """Generate a fleet into ``fleet`` (in a child process) unless it already holds one."""
    if (fleet / "history.parquet").exists() and (fleet / "oracle.parquet").exists():
        print(f"reusing the fleet in {fleet}")
        return
    print(f"generating {days} days x {jobs_per_day:,} attempts/day (seed {seed}) in {fleet}")
    command = [sys.executable, "-m", "leap_stream.cli", "generate", "--out", str(fleet)]
    command += ["--days", str(days), "--jobs-per-day", str(jobs_per_day), "--seed", str(seed)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def run(fleet: Path, out: Path, split: bool, oracle: bool = True) -> None:
    """Replay ``fleet`` (with its oracle unless told) and no report; print speed, memory and
    the split."""
    catalog = default_catalog()
    rss_before = peak_rss_mb()
    timer = StepTimer()
    with ExitStack() as stack:
        if split:
            for label, owner, name, _ in STEPS:
                timer.wrap(stack, label, owner, name)
        began = time.perf_counter()
        summary = replay.replay(
            fleet / "history.parquet",
            out,
            catalog,
            oracle=fleet / "oracle.parquet" if oracle else None,
            progress=False,
            report=False,
        )
        wall = time.perf_counter() - began
    events = summary["events"]["submitted"] + summary["events"]["completed"]
    loop = events / summary["events_per_second"]
    print(f"events replayed      {events:,}")
    print(f"events/s             {summary['events_per_second']:,.0f}  (replay loop, {loop:.1f} s)")
    print(f"wall time            {wall:.1f} s  (the whole replay() call)")
    print(
        f"peak RSS             {peak_rss_mb():,.0f} MB  (before the replay: {rss_before:,.0f} MB)"
    )
    if split:
        print_split(timer, events, loop)


def print_split(timer: StepTimer, events: int, loop_seconds: float) -> None:
    """Microseconds per replayed event of each timed step, children indented under parents."""
    print(f"\nper-event cost split ({'split on' if timer.seconds else 'nothing timed'})")
    print(f"  {'step':<34}{'us/event':>10}{'share':>8}{'calls':>12}")
    parents = {label: parent for label, _, _, parent in STEPS}
    shared = [label for label, parent in parents.items() if parent and parent not in parents]

    def line(label: str, seconds: float, calls: int | None, indent: str = "") -> None:
        shown = "" if calls is None else f"{calls:,}"
        print(
            f"  {indent + label:<34}{1e6 * seconds / events:>10.1f}"
            f"{seconds / loop_seconds:>8.0%}{shown:>12}"
        )

    top = 0.0
    for label, parent in parents.items():
        if label in shared:
            continue
        seconds = timer.seconds.get(label, 0.0)
        top += seconds if parent is None else 0.0
        line(label, seconds, timer.calls.get(label, 0), "    " if parent else "")
    line("other (loop, in-flight table)", max(loop_seconds - top, 0.0), None)
    line("total", loop_seconds, None)
    for label in shared:
        print(f"  of which, inside {parents[label]}:")
        line(label, timer.seconds.get(label, 0.0), timer.calls.get(label, 0), "    ")


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, get a fleet, replay it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_fleet_arguments(parser, days=30, jobs_per_day=3_000, seed=1)
    parser.add_argument(
        "--no-split", dest="split", action="store_false", help="skip the per-step timers"
    )
    parser.add_argument(
        "--no-oracle", dest="oracle", action="store_false", help="replay without the oracle"
    )
    parser.add_argument(
        "--default-gc",
        dest="tune_gc",
        action="store_false",
        help="keep CPython's default garbage collector thresholds (the CLI's: leap_stream.runtime)",
    )
    args = parser.parse_args(argv)
    if args.tune_gc:  # as the leap-stream command does
        tune_gc()
    with tempfile.TemporaryDirectory(prefix="leap-replay-speed-") as tmp:
        fleet = args.fleet or Path(tmp, "fleet")
        ensure_fleet(fleet, args.days, args.jobs_per_day, args.seed)
        run(fleet, Path(tmp, "replay"), args.split, args.oracle)


if __name__ == "__main__":
    main()
