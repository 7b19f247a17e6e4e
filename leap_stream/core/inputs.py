"""The predictor's input groups: what an ablation can take away from it.

Each group names something the core knows at submission time. Removing one
(``LeapCore(catalog, without={...})``) leaves every other part as it is, so a replay without it
measures what it is worth; ``leap-stream ablate`` runs one replay per group removed.

>>> sorted(INPUT_GROUPS)[:3]
['hardware_specs', 'interactions', 'job_configuration']
>>> check_groups(["prior_throughput"])
frozenset({'prior_throughput'})
>>> check_groups(["priors"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: unknown input group(s): priors (known: hardware_specs, interactions, ...)
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["INPUT_GROUPS", "check_groups"]

INPUT_GROUPS: dict[str, str] = {
    "prior_throughput": (
        "what the job's earlier attempts measured: the lineage's priors, their transfer to other"
        " hardware and its out-of-memory record (every attempt is a job of its own)"
    ),
    "hardware_specs": (
        "the catalog's figures the model reads (peak FLOP/s, memory bandwidth, links, devices"
        " per node): every type gets the median part's; eligibility still uses memory sizes"
    ),
    "job_configuration": (
        "the job's own features (family, model type, precision, framework, sizes, parallelism);"
        " the roofline below still uses parameters, sequence length and device count"
    ),
    "interactions": (
        "the job x hardware terms: a type's one-hots per family, precision, model type and"
        " framework, and per-family and per-model-type slopes of its figures (global ones stay)"
    ),
    "roofline": (
        "the spec-sheet roofline the model's target is a ratio to: the model learns raw log"
        " throughput"
    ),
    "learned_model": (
        "the online model's learning: its weights stay zero, so predictions are the roofline"
        " at the assumed 40% utilisation, corrected by the lineage's priors"
    ),
}


def check_groups(groups: Iterable[str]) -> frozenset[str]:
    """``groups`` as a frozenset, or a ValueError naming the unknown ones."""
    chosen = frozenset(groups)
    unknown = sorted(chosen - INPUT_GROUPS.keys())
    if unknown:
        known = ", ".join(sorted(INPUT_GROUPS))
        raise ValueError(f"unknown input group(s): {', '.join(unknown)} (known: {known})")
    return chosen
