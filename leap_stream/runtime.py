"""Interpreter settings for leap-stream's long runs: replays, retrains, evaluations, workers.

A replay allocates a few dicts and small arrays for every event and keeps millions of
long-lived objects (the lineages' priors, the pending submissions, the snapshots' examples).
At CPython's default thresholds, (700, 10, 10), the cyclic garbage collector then runs a young
collection every 700 allocations of containers, a middle one every 10 of those, and a full one,
which walks every live object, each time the long-lived heap has grown by a quarter. Measured on
this project's fleets (learn-only passes, beside other work): 11% to 12% of the CPU in the
collector itself (``gc.callbacks``), 2% with the thresholds below; 18.7 -> 15.3 CPU seconds on a
3-day fleet of 30,000 jobs a day, 56.5 -> 42.5 on the 60-day fleet. Memory does not grow: the
replay's objects leave almost no cyclic garbage (15 objects collected over the 3-day pass), and
its peak RSS stays the same (575 and 572 MB). A replay that ranks every submission gains
nothing measurable: ``benchmarks/replay_speed.py`` on the 20-day fleet of issue 7, the two
settings side by side, 2,219 events/s tuned and 2,287 with the defaults.

The command line applies this to its own process (:func:`leap_stream.cli.app`'s callback) and
the processes it starts (the nightly pass 1 and training pool, the ablation pool) apply it as
they start. A library caller keeps its own settings unless it calls :func:`tune_gc`.

>>> import gc
>>> before = gc.get_threshold()
>>> tune_gc()
>>> gc.get_threshold() == GC_THRESHOLDS
True
>>> gc.set_threshold(*before)
"""

from __future__ import annotations

import gc

__all__ = ["GC_THRESHOLDS", "tune_gc"]

# A young collection every 100,000 net allocations of containers; the middle generation every 50
# of those, the oldest every 100 of the middle's (and, as always in CPython, only once the
# objects awaiting their first full collection are a quarter of those that had one).
GC_THRESHOLDS = (100_000, 50, 100)


def tune_gc() -> None:
    """Set this process's garbage collector to :data:`GC_THRESHOLDS` (see the module docstring)."""
    gc.set_threshold(*GC_THRESHOLDS)
