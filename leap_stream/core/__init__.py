"""The functional core: plain Python and numpy (a few loops compiled by numba), no Kafka, no
files.

A submission in, a ranking out; a completion in, the model learns. The replay backtester and the
stream processors both drive this package, so what a backtest measures is what production runs.
Nothing here imports a shell (:mod:`leap_stream.backtest`, :mod:`leap_stream.streaming`) or a
data edge (:mod:`leap_stream.data`).

Modules: ``events`` (the contract in plain data), ``catalog`` and ``hardware`` (the accelerator
catalog), ``memory`` and ``eligibility`` (what can run where), ``features`` and ``model`` (the
online throughput model; ``adagrad``, its compiled learning step), ``priors`` (what a lineage
measured before), ``intervals``, ``lookup`` (the baseline), ``ranking``, ``submission`` (what a
ranking reads that no model changes) and ``leap`` (:class:`LeapCore`); ``inputs`` (the input
groups an ablation removes), ``transfer``, ``memory_risk``, ``batch``, ``promotion`` and
``champion`` (the service's daily scoreboard for the promotion rule).
"""

from leap_stream.core.leap import LeapCore, LearnExample, LookupRanker

__all__ = ["LeapCore", "LearnExample", "LookupRanker"]
