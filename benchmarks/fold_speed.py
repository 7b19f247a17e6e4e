"""How fast a learner folds the learn log: what rebuilding the online model costs after an upgrade.

Usage (from the repository root)::

    .venv/bin/python benchmarks/fold_speed.py                       # 3 days x 30,000/day, seed 5
    .venv/bin/python benchmarks/fold_speed.py --fleet out/fleet-60d

A worker whose online snapshot is refused (an upgrade changed libraries, features or catalog)
rebuilds the model by folding ``leap.learn`` from its first offset (docs/service.md); a
restarted one folds what came after its snapshot. Per record that is the Avro decoding of a
``LearnExample``, the champion/challenger scoring of the online model on it, and the learning.
This script builds a fleet's learn examples the way a worker writes them (an in-process core
joins each completion to its submission), encodes them as on the topic, and times a fresh
core's fold over them, without a broker: the broker's reading is not in the figure. Printed:
records, records/s and microseconds a record for each step and in all. Figures vary with the
load of the machine: orders of magnitude, not promises, and no test asserts them.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from replay_speed import add_fleet_arguments, ensure_fleet

from leap_stream.core import LeapCore
from leap_stream.core.catalog import default_catalog
from leap_stream.core.champion import ChampionChallenger
from leap_stream.data.codec import default_codec
from leap_stream.data.history import iter_events


def learn_log(history: Path) -> list[bytes]:
    """The fleet's learn examples, Avro-encoded as on ``leap.learn``, in completion order."""
    codec, core = default_codec(), LeapCore(default_catalog())
    log = []
    for kind, event in iter_events(history):
        if kind == "submitted":
            core.remember(event)
            continue
        _, example = core.join(event)
        if example is not None:
            core.learn(example)
            log.append(codec.encode("LearnExample", example))
    return log


def fold(log: list[bytes]) -> dict[str, float]:
    """Seconds a fresh learner spends on each step of folding ``log``."""
    codec, learner, board = default_codec(), LeapCore(default_catalog()), ChampionChallenger()
    seconds = {"decode": 0.0, "score": 0.0, "learn": 0.0}
    clock = time.perf_counter
    for record in log:
        began = clock()
        example = codec.decode(record, reader="LearnExample")
        decoded = clock()
        board.learn_one(example, learner.model)
        scored = clock()
        learner.learn(example)
        seconds["decode"] += decoded - began
        seconds["score"] += scored - decoded
        seconds["learn"] += clock() - scored
    return seconds


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, get a fleet, fold its learn log."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_fleet_arguments(parser, days=3, jobs_per_day=30_000, seed=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fleet = args.fleet or Path(tmp) / "fleet"
        ensure_fleet(fleet, args.days, args.jobs_per_day, args.seed)
        log = learn_log(fleet / "history.parquet")
    seconds = fold(log)
    total = sum(seconds.values())
    print(f"learn records        {len(log):,}")
    print(f"fold                 {len(log) / total:,.0f} records/s ({total:.1f} s)")
    for step, spent in {**seconds, "total": total}.items():
        print(f"  {step:<19}{1e6 * spent / len(log):>6.1f} us/record")


if __name__ == "__main__":
    main()
