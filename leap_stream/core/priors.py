"""Prior throughput of a lineage: what earlier attempts of the same training job measured.

A lineage's state is a plain dict (JSON-able, so a changelog-backed table can hold it) of
``[sum, weight, count, last_time_ms]`` entries, each decayed by age (half-life
``HALF_LIFE_DAYS`` by default: a fleet's tempo; a history of results months apart, like MLPerf
rounds, wants a longer one):

- ``"<config>@<hardware>"``: measured log throughput of this exact configuration on this
  hardware. A repeat of a configuration is predicted from its own measurements alone: nothing
  predicts a rerun better than the run before it.
- ``"<hardware>"``: residuals ``log(measured) - log(model)`` on this hardware, for a changed
  configuration on hardware the lineage knows (the model carries the change, the residual the
  job's own efficiency there), shrunk towards the lineage-wide offset: as they age, what the
  lineage misses anywhere stands in for them;
- ``"*"``: residuals on any hardware: the job's own efficiency, transferred to hardware it has
  not run on through what the model has learned;
- ``"?<config>@<hardware>"``: a rerun far slower than that configuration's entry, held back
  until the next rerun there says whether it was a straggler (``SLOW_RERUN``).

>>> state = update_prior(None, "H100-SXM", "8/256", log_throughput=5.0, residual=0.2, time_ms=0)
>>> view = lineage_view(state, {"H100-SXM": 0, "MI300X": 1}, 2, "8/256", now_ms=3_600_000)
>>> view.exact.tolist(), view.offsets.round(3).tolist(), view.same_hardware.tolist()
([5.0, nan], [0.199, 0.174], [True, False])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

import numpy as np

__all__ = [
    "CONFIG_FIELDS",
    "HALF_LIFE_DAYS",
    "LATEST_KEY",
    "LINEAGE_KEY",
    "PAIR_COMPLETIONS_HALVING",
    "SINGLE_TYPE_OFFSET_KEPT",
    "SLOW_RERUN",
    "LineageEntries",
    "LineageView",
    "config_signature",
    "exact_measurements",
    "last_seen_ms",
    "latest",
    "latest_hardware",
    "lineage_entries",
    "lineage_offset",
    "lineage_view",
    "mark_out_of_memory",
    "model_target_offset",
    "out_of_memory_on",
    "update_prior",
]

HALF_LIFE_DAYS = 14.0
LINEAGE_KEY = "*"
LATEST_KEY = "~latest"  # not a hardware name: '~' never starts one
OUT_OF_MEMORY_PREFIX = "!oom:"  # nor does '!'; then "<config>@<hardware>"
# The submission fields that make up a configuration (what the model's features read).
CONFIG_FIELDS = (
    "model_type",
    "model_family",
    "framework",
    "precision",
    "param_count",
    "global_batch_size",
    "seq_len",
    "num_devices",
    "tensor_parallel",
    "pipeline_parallel",
    "micro_batches",
    "flops_per_sample",
    "team",  # not a configuration, but the model's prediction of one reads it
)
# Shrinkage (pseudo-observations of residual zero): the ratio of measurement noise to the spread
# of true offsets. Small on the same hardware (a repeat measures almost the same thing), larger
# across hardware (lineage x hardware effects do not transfer).
SHRINK_SAME_HARDWARE = 0.05
SHRINK_TRANSFER = 0.15
# A rerun this much slower (log scale) than what its configuration measured on the same hardware
# is held back as a suspected straggler (a slow node, a noisy neighbour): one slow run does not
# set the next attempt's prediction. The next run of that configuration there decides: as slow
# again, the change is real and both are taken; otherwise the suspect is dropped. Run-to-run
# noise is a few percent; 0.25 is 22% slower. Measured on both 60-day fleets and MLPerf by round
# (docs/results.md): within 10% +0.2 to +0.3 points, MLPerf +1.9 points within 20%.
SLOW_RERUN = 0.25
# The share of the lineage-wide offset the model's learning target keeps while the lineage has
# measured one hardware type only and the model has learned nothing of its model type on that
# type (model_target_offset). The share halves by PAIR_COMPLETIONS_HALVING completions of the
# pair learned and fades on from there; none of the offset is kept once the lineage has
# measured two types.
SINGLE_TYPE_OFFSET_KEPT = 0.5
PAIR_COMPLETIONS_HALVING = 100
SUSPECT_PREFIX = "?"  # not a hardware name nor a signature: "?<config>@<hardware>"
_DAY_MS = 86_400_000.0
_SEPARATOR = "@"


def config_signature(job: Mapping[str, object]) -> str:
    """What makes two attempts of a lineage the same run, as far as throughput goes."""
    signature = (
        f"{job['num_devices']}/{job['global_batch_size']}/{job['precision']}/"
        f"{job.get('seq_len')}/{job['tensor_parallel']}/{job['pipeline_parallel']}/"
        f"{job['framework']}"
    )
    # added to the schema later: a configuration that does not say keeps its old signature
    micro_batches = job.get("micro_batches")
    return signature if micro_batches is None else f"{signature}/{micro_batches}"


@dataclass(frozen=True, slots=True)
class LineageView:
    """What a lineage's priors say about each candidate (arrays over candidates)."""

    offsets: np.ndarray  # residual offsets to add to the model's log prediction
    exact: np.ndarray  # measured log throughput of this very configuration (NaN: none)
    same_hardware: np.ndarray  # bool: the lineage has measured this hardware


def _decay(entry: list[float], now_ms: float, half_life_days: float = HALF_LIFE_DAYS) -> float:
    return 0.5 ** (max(now_ms - entry[3], 0.0) / _DAY_MS / half_life_days)


def _decayed_mean(
    entry: list[float], now_ms: float, half_life_days: float = HALF_LIFE_DAYS
) -> float:
    """An entry's mean, its sums decayed to ``now_ms``: the decay cancels but for rounding,
    and for an entry so old that it underflows to zero (decades: 0/0), where it is left out."""
    d = _decay(entry, now_ms, half_life_days)
    return entry[0] * d / (entry[1] * d) if d > 0.0 else entry[0] / entry[1]


def _mean(
    entry: list[float] | None, now_ms: float, shrink: float, half_life_days: float = HALF_LIFE_DAYS
) -> float:
    if entry is None:
        return 0.0
    d = _decay(entry, now_ms, half_life_days)
    return entry[0] * d / (entry[1] * d + shrink)


def _add(
    state: dict[str, list[float]], key: str, value: float, time_ms: float, half_life_days: float
) -> None:
    entry = state.get(key)
    if entry is None:
        state[key] = [value, 1.0, 1, time_ms]
    else:
        d = _decay(entry, time_ms, half_life_days)
        state[key] = [entry[0] * d + value, entry[1] * d + 1.0, entry[2] + 1, time_ms]


def update_prior(
    state: dict[str, Any] | None,
    hardware: str,
    signature: str,
    *,
    log_throughput: float,
    residual: float,
    time_ms: float,
    config: Mapping[str, Any] | None = None,
    half_life_days: float = HALF_LIFE_DAYS,
) -> dict[str, Any]:
    """Add one succeeded attempt to a lineage's state (a new dict if None).

    ``config`` (the submission's configuration fields) is kept for the latest attempt so that
    its residual can be taken again against the model as it is now (see :func:`lineage_view`).
    A rerun ``SLOW_RERUN`` slower than its configuration's measurements there is held back
    until the next rerun there confirms it (both are then added) or not (it is dropped).
    """
    state = {} if state is None else state
    exact_key = f"{signature}{_SEPARATOR}{hardware}"
    suspect = state.pop(SUSPECT_PREFIX + exact_key, None)
    entry = state.get(exact_key)
    if entry is not None and log_throughput < entry[0] / entry[1] - SLOW_RERUN:
        if suspect is None:
            state[SUSPECT_PREFIX + exact_key] = [log_throughput, residual, time_ms]
            return state
        _add_attempt(state, hardware, exact_key, *suspect, half_life_days)  # slow twice: real
    _add_attempt(state, hardware, exact_key, log_throughput, residual, time_ms, half_life_days)
    if config is not None:
        state[LATEST_KEY] = {
            "hardware": hardware,
            "log_throughput": log_throughput,
            "config": [config.get(key) for key in CONFIG_FIELDS],  # a list: lean, and JSON-able
        }
    return state


def _add_attempt(
    state: dict[str, Any],
    hardware: str,
    exact_key: str,
    log_throughput: float,
    residual: float,
    time_ms: float,
    half_life_days: float,
) -> None:
    _add(state, exact_key, log_throughput, time_ms, half_life_days)
    _add(state, hardware, residual, time_ms, half_life_days)
    _add(state, LINEAGE_KEY, residual, time_ms, half_life_days)


def mark_out_of_memory(
    state: dict[str, Any] | None, hardware: str, signature: str, time_ms: float
) -> dict[str, Any]:
    """Remember that this configuration ran out of memory on ``hardware`` (a new dict if None)."""
    state = {} if state is None else state
    state[f"{OUT_OF_MEMORY_PREFIX}{signature}{_SEPARATOR}{hardware}"] = [time_ms]
    return state


def out_of_memory_on(state: Mapping[str, Any] | None, signature: str) -> set[str]:
    """The hardware types this configuration of the lineage ran out of memory on."""
    if not state:
        return set()
    prefix = f"{OUT_OF_MEMORY_PREFIX}{signature}{_SEPARATOR}"
    return {key[len(prefix) :] for key in state if key.startswith(prefix)}


def latest_hardware(state: Mapping[str, Any] | None) -> str | None:
    """The hardware type of the lineage's latest succeeded attempt (:func:`latest` without
    building its configuration)."""
    entry = None if not state else state.get(LATEST_KEY)
    return None if entry is None else entry["hardware"]


def latest(state: Mapping[str, Any] | None) -> tuple[str, float, dict[str, Any]] | None:
    """The lineage's latest succeeded attempt: hardware, log throughput and configuration."""
    entry = None if not state else state.get(LATEST_KEY)
    if entry is None:
        return None
    # (a state from before micro_batches holds one value fewer: read as unknown)
    config = dict(zip_longest(CONFIG_FIELDS, entry["config"]))
    return entry["hardware"], entry["log_throughput"], config


def exact_measurements(
    state: Mapping[str, Any] | None,
    signature: str,
    now_ms: float,
    half_life_days: float = HALF_LIFE_DAYS,
    since_ms: float = float("-inf"),
) -> dict[str, float]:
    """Hardware type -> measured log throughput of this very configuration, where it ran (last
    at or after ``since_ms``)."""
    if not state:
        return {}
    prefix = signature + _SEPARATOR
    found = {}
    for key, entry in state.items():
        if key.startswith(prefix) and entry[3] >= since_ms:
            found[key[len(prefix) :]] = _decayed_mean(entry, now_ms, half_life_days)
    return found


def last_seen_ms(state: dict[str, list[float]]) -> float:
    """When the lineage last measured anything (its lineage-wide entry's time)."""
    entry = state.get(LINEAGE_KEY)
    return entry[3] if entry else float("-inf")


def lineage_offset(
    state: dict[str, list[float]] | None, now_ms: float, half_life_days: float = HALF_LIFE_DAYS
) -> float:
    """The lineage-wide offset (log scale): how much better this job runs than the model thinks."""
    if not state:
        return 0.0
    return _mean(state.get(LINEAGE_KEY), now_ms, SHRINK_TRANSFER, half_life_days)


def model_target_offset(
    state: dict[str, Any] | None,
    now_ms: float,
    half_life_days: float = HALF_LIFE_DAYS,
    *,
    pair_completions: int = 0,
) -> float:
    """What the model's learning target takes out of a measurement: the lineage-wide offset
    (:func:`lineage_offset`), less a share of it while the lineage has measured a single
    hardware type.

    Measured on one type only, a lineage cannot tell its own efficiency from how its model type
    runs on that type: every residual carries both. Taken out whole, what a model type's lineages
    share on a type (which ranks that type for the lineages that have not run there) never
    reaches the model, since each lineage's offset absorbs it; left in whole, each lineage's own
    efficiency is noise in the model's target. So ``SINGLE_TYPE_OFFSET_KEPT`` of it stays in
    the target while the model knows the pair little, and less as the model learns the pair
    from other lineages: ``pair_completions`` is how many completions of the lineage's model
    type on that type it has learned. Measured on several types, the lineage-wide offset is the
    lineage's own, and all of it is taken out.

    >>> state = update_prior(None, "A", "8/256", log_throughput=5.0, residual=0.4, time_ms=0)
    >>> lineage_offset(state, 0.0), model_target_offset(state, 0.0)
    (0.3478260869565218, 0.1739130434782609)
    >>> learned = model_target_offset(state, 0.0, pair_completions=PAIR_COMPLETIONS_HALVING)
    >>> round(learned / lineage_offset(state, 0.0), 4)  # a quarter of it is kept
    0.75
    >>> state = update_prior(state, "B", "8/256", log_throughput=5.0, residual=0.4, time_ms=0)
    >>> model_target_offset(state, 0.0) == lineage_offset(state, 0.0)
    True
    """
    offset = lineage_offset(state, now_ms, half_life_days)
    if state and _hardware_measured(state) == 1:
        unknown = PAIR_COMPLETIONS_HALVING / (PAIR_COMPLETIONS_HALVING + pair_completions)
        return (1.0 - SINGLE_TYPE_OFFSET_KEPT * unknown) * offset
    return offset


def _hardware_measured(state: Mapping[str, Any]) -> int:
    """How many hardware types the lineage's residuals are on (two: as good as any more)."""
    count = 0
    for key in state:  # a hardware type's key is its bare name; the others are marked
        if key != LINEAGE_KEY and key != LATEST_KEY and _SEPARATOR not in key:
            count += 1
            if count == 2:
                break
    return count


@dataclass(slots=True)
class LineageEntries:
    """What a lineage's priors say of each candidate before the model's view of its latest
    attempt is taken (:func:`lineage_entries`); :meth:`view` adds it."""

    n: int
    exact: np.ndarray  # measured log throughput of this very configuration (NaN: none)
    same_hardware: np.ndarray  # bool: the lineage has measured this hardware
    # (candidate, decayed sum, decayed weight) of the residuals on each hardware it measured
    residuals: tuple[tuple[int, float, float], ...]
    lineage_mean: float  # the lineage-wide offset (lineage_offset)
    latest: int | None  # the candidate the latest attempt ran on (None: none of them)

    def view(self, latest_residual: float | None) -> LineageView:
        """The view (see :func:`lineage_view`) given the latest attempt's residual against
        the model as it is now."""
        if latest_residual is None:
            transfer = self.lineage_mean
        else:
            transfer = latest_residual / (1.0 + SHRINK_TRANSFER)
        offsets = _filled(self.n, transfer)
        for i, total, weight in self.residuals:
            # a stale residual on this hardware gives way to the lineage's own, not to 0
            offsets[i] = (total + SHRINK_SAME_HARDWARE * transfer) / (weight + SHRINK_SAME_HARDWARE)
        if latest_residual is not None and self.latest is not None:
            offsets[self.latest] = latest_residual / (1.0 + SHRINK_SAME_HARDWARE)
        return LineageView(offsets, self.exact, self.same_hardware)


def lineage_entries(
    state: dict[str, Any] | None,
    index: Mapping[str, int],
    n: int,
    signature: str,
    now_ms: float,
    half_life_days: float = HALF_LIFE_DAYS,
) -> LineageEntries:
    """The model-free half of :func:`lineage_view`: what ranking the submission with any model
    reads of the lineage's priors."""
    exact = _filled(n, np.nan)
    same = np.zeros(n, dtype=bool)
    if not state:
        return LineageEntries(n, exact, same, (), 0.0, None)
    residuals = []
    prefix = signature + _SEPARATOR
    for key, entry in state.items():  # a handful of entries: cheaper than one per candidate
        if key == LATEST_KEY:
            continue
        if key.startswith(prefix):
            i = index.get(key[len(prefix) :])
            if i is not None:
                exact[i] = _decayed_mean(entry, now_ms, half_life_days)
        else:
            i = index.get(key)
            if i is not None:
                d = _decay(entry, now_ms, half_life_days)
                residuals.append((i, entry[0] * d, entry[1] * d))
                same[i] = True
    latest_entry = state.get(LATEST_KEY)
    return LineageEntries(
        n,
        exact,
        same,
        tuple(residuals),
        _mean(state.get(LINEAGE_KEY), now_ms, SHRINK_TRANSFER, half_life_days),
        None if latest_entry is None else index.get(latest_entry["hardware"]),
    )


def _filled(n: int, value: float) -> np.ndarray:
    """``np.full(n, value)`` without its Python wrapper (twice a submission)."""
    array = np.empty(n)
    array.fill(value)
    return array


def lineage_view(
    state: dict[str, Any] | None,
    index: Mapping[str, int],
    n: int,
    signature: str,
    now_ms: float,
    latest_residual: float | None = None,
    half_life_days: float = HALF_LIFE_DAYS,
) -> LineageView:
    """The priors of ``n`` candidates; ``index`` maps a hardware type to its candidate position.

    A residual is taken against the model of its day; while the model is young it moves, and old
    residuals go stale. ``latest_residual``, the latest attempt's residual against the model as it
    is now, replaces the lineage-wide offset and that hardware's own when given.
    """
    entries = lineage_entries(state, index, n, signature, now_ms, half_life_days)
    return entries.view(latest_residual if state else None)
