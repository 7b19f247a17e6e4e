"""Interpreter settings for leap-stream's long runs: replays, retrains, evaluations, workers.

A replay allocates a few dicts and small arrays for every event and keeps millions of
long-lived objects (the lineages' priors, the pending submissions, the snapshots' examples).
At CPython's default thresholds, (700, 10, 10), the cyclic garbage collector then runs a young
collection every 700 allocations and a full one ever more often as the heap grows, walking
every live container each time. Measured on this project's fleets (learn-only passes, the
collector's own time from ``gc.callbacks``): 11% to 12% of the CPU, and 25% less CPU in all
on the 60-day fleet with the thresholds below (the walks also evict the caches the replay
works in). Cyclic garbage is still collected, only later: memory grows by what 100,000
allocations leave in cycles at most, and the replay's objects rarely form any.

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
