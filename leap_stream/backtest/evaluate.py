"""Evaluation protocols: the model, the lookup table and the naive ratio predictor on one split.

Issue 8 phrases its real-data targets as splits, not as the replay's prequential pass:

- ``leave-one-out`` (Gavel: "each job's throughput on one type predicted from the others";
  NeuSight's training rows likewise): every succeeded attempt is predicted by a core that has
  learned every *other* attempt of the history, in time order (their submissions and
  completions), and by nothing else;
- ``by-period`` (MLPerf: "predicted round by round with earlier rounds only"): attempts are
  grouped by period (default: the submission's UTC day; MLPerf results are submitted on their
  round's publication day) and every attempt of a period is predicted by a core that has
  learned the earlier periods only; the period is learned once all of it has been predicted.

Three predictors see the same split: the online model (:class:`~leap_stream.core.LeapCore`),
the lookup table (:class:`~leap_stream.core.LookupRanker`), and :class:`NaiveRatio`, the
realdata README's reference (a job's speed on another type x the median speed ratio of the two
types over the other jobs). Each is scored on the hardware the attempt ran on, against what it
measured; an abstention is a row without a prediction. Everything here is plain Python over
event dicts: no Kafka, no I/O but :func:`evaluate`'s read and :func:`write_evaluation`.

Leave-one-out costs n fresh cores; they are not built from scratch. One core learns the
history in order, and at each held-out attempt a copy of it (everything before the attempt)
learns the rest, skipping the attempt's completion: the same state, weight for weight, as a
fresh core fed every other event in time order (``tests/test_backtest/test_evaluate.py`` holds
the two equal), at half the learning.

>>> from datetime import UTC, datetime, timedelta
>>> from leap_stream.core.catalog import default_catalog
>>> t0 = datetime(2025, 1, 1, tzinfo=UTC)
>>> job = {"model_family": "cnn", "framework": "pytorch", "param_count": 25_000_000,
...     "global_batch_size": 256, "seq_len": None, "precision": "bf16", "num_devices": 8,
...     "tensor_parallel": 1, "pipeline_parallel": 1, "candidate_hardware": None}
>>> events = []
>>> for i, (name, hw, speed) in enumerate([("x", "A100-SXM-80GB", 10.0), ("x", "H100-SXM", 20.0),
...         ("y", "A100-SXM-80GB", 5.0), ("y", "H100-SXM", 10.0),
...         ("z", "A100-SXM-80GB", 7.0), ("z", "H100-SXM", 12.0)]):
...     at, ids = t0 + timedelta(minutes=5 * i), {"job_id": f"j{i}", "lineage_id": name}
...     events += [("submitted", {**job, **ids, "event_id": f"j{i}/s", "event_time": at,
...         "model_type": name, "requested_hardware": hw}),
...         ("completed", {**ids, "event_id": f"j{i}/c", "event_time": at + timedelta(minutes=2),
...         "hardware_type": hw, "num_devices": 8, "status": "succeeded", "throughput": speed,
...         "steps": None})]
>>> result = evaluate_events(events, default_catalog(), "leave-one-out")
>>> {name: block["coverage"] for name, block in result.summary["predictors"].items()}
{'model': 1.0, 'lookup': 0.0, 'naive_ratio': 1.0}
>>> naive = result.rows[(result.rows.predictor == "naive_ratio") & (result.rows.job_id == "j5")]
>>> naive[["hardware", "measured", "predicted"]].to_dict("records")  # 7 x 10/5 = 14
[{'hardware': 'H100-SXM', 'measured': 12.0, 'predicted': 14.0}]
"""

from __future__ import annotations

import copy
import json
import math
import statistics
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
from rich.console import Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from leap_stream.core import LeapCore, LookupRanker
from leap_stream.core.catalog import Catalog
from leap_stream.core.ranking import Ranking
from leap_stream.data.history import iter_events

__all__ = [
    "NAIVE_REFERENCES",
    "PREDICTORS",
    "PROTOCOLS",
    "Evaluation",
    "EvaluationError",
    "NaiveRatio",
    "Ranker",
    "accuracy",
    "evaluate",
    "evaluate_events",
    "evaluation_view",
    "write_evaluation",
]

PROTOCOLS = ("leave-one-out", "by-period")
PREDICTORS = ("model", "lookup", "naive_ratio")
NAIVE_REFERENCES = ("most_shared", "median")
NAIVE_SOURCE = "naive_ratio"
# Relative slack on the within-band tests: "exactly 20% off" (120 predicted for 100) stays a hit
# whatever the float rounding of (120 - 100) / 100.
_SLACK = 1e-9
_COLUMNS = ["predictor", "job_id", "period", "hardware", "num_devices", "measured", "predicted"]
_COLUMNS += ["source"]


class EvaluationError(ValueError):
    """An evaluation that cannot run as asked (unknown protocol, period field, reference)."""


class Ranker(Protocol):
    """What a protocol feeds: :class:`LeapCore` and :class:`LookupRanker` both are one."""

    def on_submitted(self, event: dict[str, Any]) -> Ranking: ...

    def on_completed(self, event: dict[str, Any]) -> bool: ...


RankerFactory = Callable[[Catalog], Ranker]


@dataclass(frozen=True)
class Evaluation:
    """One protocol's result: one row per scored attempt and predictor, and the figures.

    ``rows`` columns: predictor, job_id, period (by-period; empty otherwise), hardware (what the
    attempt ran on), num_devices, measured, predicted (NaN: abstained), source (the model's
    ranking ``source`` for that hardware, ``lookup``, ``naive_ratio``).
    """

    rows: pd.DataFrame
    summary: dict[str, Any]


# --------------------------------------------------------------------------------------------
# Attempts


@dataclass(slots=True)
class _Attempt:
    """A submission, where its events sit in the history, and what it measured."""

    job_id: str
    lineage_id: str
    submitted: dict[str, Any]
    sub_pos: int
    comp_pos: int = -1  # -1: never completed
    hardware: str | None = None
    num_devices: int | None = None
    measured: float | None = None  # succeeded with a positive throughput: can be scored
    period: str = ""


def _attempts(events: Sequence[tuple[str, dict[str, Any]]]) -> list[_Attempt]:
    """Pair each submission with the next completion of its job id (an orphan pairs with none)."""
    attempts: list[_Attempt] = []
    open_: dict[str, _Attempt] = {}
    for pos, (kind, event) in enumerate(events):
        if kind == "submitted":
            attempt = _Attempt(event["job_id"], event["lineage_id"], event, pos)
            open_[event["job_id"]] = attempt  # a resubmission starts a new attempt
            attempts.append(attempt)
            continue
        attempt = open_.pop(event["job_id"], None)
        if attempt is None:
            continue
        attempt.comp_pos = pos
        attempt.hardware = event["hardware_type"]
        attempt.num_devices = event["num_devices"]
        throughput = event.get("throughput")
        if event["status"] == "succeeded" and throughput is not None and throughput > 0:
            attempt.measured = float(throughput)
    return attempts


def _period_of(event: dict[str, Any], field: str | None) -> str:
    if field is None:
        return event["event_time"].date().isoformat()
    value = event[field]
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


# --------------------------------------------------------------------------------------------
# The model and the lookup table


class _Rankers:
    """The model and the lookup table fed the same events, the way the replay feeds them."""

    def __init__(self, model: Ranker, lookup: Ranker) -> None:
        self.model = model
        self.lookup = lookup
        self._day: Any = None

    def submit(self, event: dict[str, Any]) -> tuple[Ranking, Ranking]:
        when = event["event_time"]
        if when.date() != self._day:  # once a day, as the replay does: forget idle lineages
            self._day = when.date()
            evict = getattr(self.model, "evict_idle_lineages", None)
            if evict is not None:
                evict(when.timestamp() * 1000.0)
        return self.model.on_submitted(event), self.lookup.on_submitted(event)

    def complete(self, event: dict[str, Any]) -> None:
        self.model.on_completed(event)
        self.lookup.on_completed(event)

    def feed(self, kind: str, event: dict[str, Any]) -> None:
        if kind == "submitted":
            self.submit(event)
        else:
            self.complete(event)


def _prediction(ranking: Ranking, hardware: str) -> tuple[float, str]:
    """The ranking's prediction for ``hardware`` (NaN when none) and its source."""
    try:
        i = ranking.hardware.index(hardware)
    except ValueError:  # not a candidate (not in the catalog, or not among those listed)
        return math.nan, ""
    value = float(ranking.predicted[i])
    return (value if math.isfinite(value) else math.nan), str(ranking.source[i])


def _leave_one_out_rankings(
    events: Sequence[tuple[str, dict[str, Any]]],
    targets: Sequence[_Attempt],
    make: Callable[[], _Rankers],
    advance: Callable[[], None],
) -> Iterator[tuple[_Attempt, Ranking, Ranking]]:
    """Each target ranked by a core that learned every other event, in history order."""
    prefix = make()
    fed = 0
    for target in sorted(targets, key=lambda a: a.sub_pos):
        while fed < target.sub_pos:  # the prefix learns everything before the target...
            prefix.feed(*events[fed])
            fed += 1
        held_out = copy.deepcopy(prefix)
        for pos in range(target.sub_pos + 1, len(events)):  # ...its copy everything after
            if pos != target.comp_pos:
                held_out.feed(*events[pos])
        model, lookup = held_out.submit(target.submitted)
        advance()
        yield target, model, lookup


# --------------------------------------------------------------------------------------------
# The naive ratio predictor


class NaiveRatio:
    """The realdata README's naive cross-type predictor, over the results it has been given.

    A job is a (lineage, device count); a cell is the median throughput of a job on a type. A
    result of job ``j`` on type ``t`` is predicted from each other type ``s`` that ``j`` ran on:
    ``cell(j, s) x`` the median over the other jobs ``j'`` with the same device count measured
    on both types of ``cell(j', t) / cell(j', s)``. The target's own type never enters its
    prediction (a cross-type predictor), so adding the target's own result changes nothing:
    leave-one-out needs no refit. ``reference`` picks one prediction per result as
    :func:`leap_stream.data.importers.naive_ratio_summary` does: ``most_shared`` (the type
    sharing the most other jobs with ``t``; ties: first by name) or ``median`` (over types).
    With the lineage as the job and one device count it is
    :func:`leap_stream.data.importers.naive_ratio_predictions`.

    >>> naive = NaiveRatio()
    >>> for job, hw, speed in [("x", "A", 10.0), ("x", "B", 20.0), ("y", "A", 5.0),
    ...         ("y", "B", 10.0), ("z", "A", 7.0)]:
    ...     naive.add(job, 8, hw, speed)
    >>> naive.predict("z", 8, "B"), naive.predict("z", 8, "C"), naive.predict("z", 1, "B")
    ((14.0, 'A'), None, None)
    """

    def __init__(self, reference: str = "most_shared") -> None:
        if reference not in NAIVE_REFERENCES:
            raise EvaluationError(
                f"naive reference must be one of {', '.join(NAIVE_REFERENCES)}, got {reference!r}"
            )
        self.reference = reference
        self._values: dict[tuple[str, int], dict[str, list[float]]] = {}
        self._cells: dict[tuple[str, int], dict[str, float]] = {}
        self._jobs_by_devices: dict[int, list[str]] = {}
        # (devices, target type, reference type) -> sorted ratios, and each job's own ratio
        self._pairs: dict[tuple[int, str, str], tuple[list[float], dict[str, float]]] = {}

    def add(self, job: str, num_devices: int, hardware: str, throughput: float) -> None:
        """Learn one measured result."""
        key = (job, num_devices)
        if key not in self._values:
            self._values[key] = {}
            self._jobs_by_devices.setdefault(num_devices, []).append(job)
        values = self._values[key].setdefault(hardware, [])
        values.append(throughput)
        self._cells.setdefault(key, {})[hardware] = statistics.median(values)
        self._pairs.clear()

    def _pair(self, num_devices: int, target: str, reference: str) -> tuple[list[float], dict]:
        key = (num_devices, target, reference)
        pair = self._pairs.get(key)
        if pair is None:
            own: dict[str, float] = {}
            for job in self._jobs_by_devices.get(num_devices, ()):
                cells = self._cells[(job, num_devices)]
                if target in cells and reference in cells:
                    own[job] = cells[target] / cells[reference]
            pair = self._pairs[key] = (sorted(own.values()), own)
        return pair

    def predict(self, job: str, num_devices: int, hardware: str) -> tuple[float, str] | None:
        """The prediction for ``job`` on ``hardware`` and the reference type it came from."""
        cells = self._cells.get((job, num_devices))
        if not cells:
            return None
        found: list[tuple[int, str, float]] = []
        for reference in sorted(cells):
            if reference == hardware:
                continue
            ratios, own = self._pair(num_devices, hardware, reference)
            ratio = _median_without(ratios, own.get(job))
            if ratio is not None:
                found.append((len(ratios) - (job in own), reference, cells[reference] * ratio))
        if not found:
            return None
        if self.reference == "median":
            return float(np.median([p for _, _, p in found])), f"median of {len(found)}"
        _, reference, predicted = min(found, key=lambda f: (-f[0], f[1]))
        return predicted, reference


def _median_without(ordered: list[float], value: float | None) -> float | None:
    """The median of a sorted list with one occurrence of ``value`` left out (None: keep all).

    >>> _median_without([1.0, 2.0, 4.0], 4.0), _median_without([1.0, 2.0, 4.0], None)
    (1.5, 2.0)
    """
    n = len(ordered) - (value is not None)
    if n <= 0:
        return None
    skip = bisect_left(ordered, value) if value is not None else len(ordered)

    def rank(k: int) -> float:  # the k-th smallest once ``skip`` is removed
        return ordered[k] if k < skip else ordered[k + 1]

    mid = n // 2
    return rank(mid) if n % 2 else (rank(mid - 1) + rank(mid)) / 2.0


# --------------------------------------------------------------------------------------------
# The protocols


def _periods(attempts: Sequence[_Attempt], field: str | None) -> list[list[_Attempt]]:
    """Attempts grouped by period, periods in the order of their first submission."""
    groups: dict[str, list[_Attempt]] = {}
    for attempt in attempts:
        attempt.period = _period_of(attempt.submitted, field)
        groups.setdefault(attempt.period, []).append(attempt)
    return list(groups.values())


def _progress(enabled: bool, label: str, total: int) -> tuple[Callable[[], None], Any]:
    """A rich progress bar's ``advance`` and the context that shows it (nothing if disabled)."""
    if not enabled:
        return (lambda: None), nullcontext()
    columns = [TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    bar = Progress(*columns)
    task = bar.add_task(label, total=total)
    return (lambda: bar.advance(task)), bar


def evaluate_events(
    events: Sequence[tuple[str, dict[str, Any]]],
    catalog: Catalog,
    protocol: str,
    *,
    period_field: str | None = None,
    devices: int | None = None,
    naive_reference: str = "most_shared",
    progress: bool = False,
    model_factory: RankerFactory = LeapCore,
    lookup_factory: RankerFactory = LookupRanker,
) -> Evaluation:
    """Score the three predictors on one protocol's split of a history's events.

    Parameters
    ----------
    events
        ``(event_type, event dict)`` pairs in time order, as
        :func:`leap_stream.data.history.iter_events` yields them.
    catalog
        The hardware catalog the model and the lookup table rank over.
    protocol
        ``leave-one-out`` or ``by-period`` (see the module docstring).
    period_field
        By-period only: the JobSubmitted field whose value names an attempt's period; None
        (default) is the submission's UTC day. Periods are ordered by their first submission;
        an attempt's completion is learned with its period, whenever it came.
    devices
        Score only attempts that ran on this many devices (every attempt is still learned).
    naive_reference
        Which of the naive predictor's reference types gives a result's prediction
        (:class:`NaiveRatio`).
    progress
        Show a progress bar (leave-one-out: per held-out attempt; by-period: per period).
    model_factory, lookup_factory
        Build a fresh predictor from the catalog (tests spy on the protocols through them).

    Returns
    -------
    Evaluation
    """
    if protocol not in PROTOCOLS:
        raise EvaluationError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    if period_field is not None and protocol != "by-period":
        raise EvaluationError("a period field applies to the by-period protocol only")
    naive = NaiveRatio(naive_reference)
    began = time.perf_counter()
    attempts = _attempts(events)
    if period_field is not None and attempts and period_field not in attempts[0].submitted:
        known = ", ".join(sorted(attempts[0].submitted))
        raise EvaluationError(f"no JobSubmitted field {period_field!r}; fields: {known}")

    def scored(attempt: _Attempt) -> bool:
        return attempt.measured is not None and devices in (None, attempt.num_devices)

    def make() -> _Rankers:
        return _Rankers(model_factory(catalog), lookup_factory(catalog))

    rows: list[dict[str, Any]] = []

    def score(attempt: _Attempt, model: Ranking, lookup: Ranking) -> None:
        hardware = attempt.hardware
        assert hardware is not None  # scored attempts completed
        common = {
            "job_id": attempt.job_id,
            "period": attempt.period,
            "hardware": hardware,
            "num_devices": attempt.num_devices,
            "measured": attempt.measured,
        }
        for name, ranking in (("model", model), ("lookup", lookup)):
            value, source = _prediction(ranking, hardware)
            rows.append({"predictor": name, **common, "predicted": value, "source": source})
        found = naive.predict(attempt.lineage_id, attempt.num_devices or 0, hardware)
        predicted = math.nan if found is None else found[0]
        rows.append(
            {"predictor": NAIVE_SOURCE, **common, "predicted": predicted, "source": NAIVE_SOURCE}
        )

    def learn_naive(group: Iterable[_Attempt]) -> None:
        for a in group:
            if a.measured is not None:
                naive.add(a.lineage_id, a.num_devices or 0, a.hardware or "", a.measured)

    extra: dict[str, Any] = {}
    if protocol == "leave-one-out":
        learn_naive(attempts)  # cross-type: a target's own result never enters its prediction
        targets = [a for a in attempts if scored(a)]
        advance, bar = _progress(progress, "leave-one-out", len(targets))
        with bar:
            for attempt, model, lookup in _leave_one_out_rankings(events, targets, make, advance):
                score(attempt, model, lookup)
    else:
        periods = _periods(attempts, period_field)
        advance, bar = _progress(progress, "by period", len(periods))
        rankers = make()
        with bar:
            for members in periods:
                # ranked by a copy: the learning core sees each event once, in history order
                frozen = copy.deepcopy(rankers)
                for attempt in members:
                    model, lookup = frozen.submit(attempt.submitted)
                    if scored(attempt):
                        score(attempt, model, lookup)
                positions = [a.sub_pos for a in members] + [a.comp_pos for a in members]
                for pos in sorted(p for p in positions if p >= 0):
                    rankers.feed(*events[pos])
                learn_naive(members)
                advance()
        extra["periods"] = [
            {"period": p[0].period, "attempts": len(p), "scored": sum(map(scored, p))}
            for p in periods
        ]
        extra["periods_overlap"] = _overlap(periods)

    frame = pd.DataFrame(rows, columns=_COLUMNS)
    summary = _summary(frame, protocol, attempts, extra)
    summary |= {
        "period_field": period_field if protocol == "by-period" else None,
        "devices": devices,
        "naive_reference": naive_reference,
        "seconds": round(time.perf_counter() - began, 3),
    }
    return Evaluation(frame, summary)


def _overlap(periods: Sequence[list[_Attempt]]) -> bool:
    """True when a period's submissions start before an earlier period's last one ends."""
    last = -1
    for members in periods:
        first = min(a.sub_pos for a in members)
        if first < last:
            return True
        last = max(last, max(a.sub_pos for a in members))
    return False


def evaluate(
    history: Path,
    catalog: Catalog,
    protocol: str,
    **options: Any,
) -> Evaluation:
    """Read a history file (every row must be valid) and :func:`evaluate_events` it.

    ``options`` are :func:`evaluate_events`'s keywords. Raises
    :class:`~leap_stream.data.history.HistoryError` on the first broken row.
    """
    events = list(iter_events(history))
    result = evaluate_events(events, catalog, protocol, **options)
    result.summary["history"] = str(history)
    return result


# --------------------------------------------------------------------------------------------
# Figures


def _r(value: float) -> float | None:
    return round(float(value), 6) if math.isfinite(value) else None


def accuracy(measured: np.ndarray, predicted: np.ndarray) -> dict[str, Any]:
    """The figures of one predictor over its scored attempts (``predicted`` NaN: abstained).

    ``count`` attempts scored; ``predicted`` how many got a prediction; ``coverage`` the share;
    ``within_20pct_abstain_as_miss`` hits over every scored attempt; ``within_20pct``,
    ``within_10pct``, ``mape``, ``mdape``, ``median_signed_error`` over the predicted ones
    (fractions, None when there is nothing to take them over).

    >>> block = accuracy(np.array([100.0, 100.0, 100.0]), np.array([120.0, 95.0, np.nan]))
    >>> block["coverage"], block["within_20pct"], block["within_20pct_abstain_as_miss"]
    (0.666667, 1.0, 0.666667)
    >>> block["within_10pct"], block["mape"], block["mdape"]
    (0.5, 0.125, 0.125)
    """
    n = int(measured.size)
    has = np.isfinite(predicted)
    k = int(has.sum())
    err = (predicted[has] - measured[has]) / measured[has]
    ape = np.abs(err)
    hits20 = int(np.count_nonzero(ape <= 0.2 + _SLACK))
    hits10 = int(np.count_nonzero(ape <= 0.1 + _SLACK))
    nan = math.nan
    return {
        "count": n,
        "predicted": k,
        "coverage": _r(k / n if n else nan),
        "within_20pct_abstain_as_miss": _r(hits20 / n if n else nan),
        "within_10pct_abstain_as_miss": _r(hits10 / n if n else nan),
        "within_20pct": _r(hits20 / k if k else nan),
        "within_10pct": _r(hits10 / k if k else nan),
        "mape": _r(float(ape.mean()) if k else nan),
        "mdape": _r(float(np.median(ape)) if k else nan),
        "median_signed_error": _r(float(np.median(err)) if k else nan),
    }


def _block(rows: pd.DataFrame) -> dict[str, Any]:
    return accuracy(rows["measured"].to_numpy(float), rows["predicted"].to_numpy(float))


def _summary(
    frame: pd.DataFrame, protocol: str, attempts: Sequence[_Attempt], extra: dict[str, Any]
) -> dict[str, Any]:
    by_predictor = {name: frame[frame["predictor"] == name] for name in PREDICTORS}
    predictors: dict[str, Any] = {}
    for name, rows in by_predictor.items():
        block = _block(rows)
        predicted = rows[rows["predicted"].notna()]
        block["by_source"] = {
            str(source): _block(group) | {"share": _r(len(group) / len(predicted))}
            for source, group in predicted.groupby("source", sort=True)
        }
        predictors[name] = block
    # the attempts every predictor predicted: the three compared on the very same targets
    predicted_by_all = None
    for rows in by_predictor.values():
        ids = set(rows.loc[rows["predicted"].notna(), "job_id"])
        predicted_by_all = ids if predicted_by_all is None else predicted_by_all & ids
    common = {
        name: _block(rows[rows["job_id"].isin(predicted_by_all or set())])
        for name, rows in by_predictor.items()
    }
    model_hits = predictors["model"]["within_20pct_abstain_as_miss"]
    comparison = {}
    for other in ("lookup", NAIVE_SOURCE):
        theirs = predictors[other]["within_20pct_abstain_as_miss"]
        comparison[f"model_vs_{other}_within_20pct_points"] = (
            None if model_hits is None or theirs is None else round(100 * (model_hits - theirs), 2)
        )
    return {
        "protocol": protocol,
        "attempts": len(attempts),
        "succeeded": sum(a.measured is not None for a in attempts),
        "scored": len(by_predictor["model"]),
        **extra,
        "predictors": predictors,
        "common": {"count": len(predicted_by_all or ()), **common},
        "comparison": comparison,
    }


def write_evaluation(evaluation: Evaluation, out_dir: Path) -> None:
    """Write ``evaluation.csv`` (the rows) and ``summary.json`` into ``out_dir`` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    evaluation.rows.to_csv(out_dir / "evaluation.csv", index=False)
    text = json.dumps(evaluation.summary, indent=2, sort_keys=True)
    (out_dir / "summary.json").write_text(text + "\n")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


_FIGURES = (
    ("coverage (predicted / scored)", "coverage"),
    ("within 20%, abstention = miss", "within_20pct_abstain_as_miss"),
    ("within 20%, on what it predicts", "within_20pct"),
    ("within 10%, on what it predicts", "within_10pct"),
    ("MAPE", "mape"),
    ("MdAPE", "mdape"),
    ("median signed error", "median_signed_error"),
)


def evaluation_view(summary: dict[str, Any]) -> Group:
    """The summary as rich tables: the figures per predictor, then the model's by source."""
    predictors = summary["predictors"]
    history = summary.get("history", "events")
    scope = "" if summary.get("devices") is None else f", {summary['devices']}-device attempts"
    table = Table(title=f"{summary['protocol']} evaluation of {history}{scope}")
    table.add_column("figure", no_wrap=True)
    for name in PREDICTORS:
        table.add_column(name.replace("_", " "), justify="right")
    table.add_row("attempts scored", *(f"{predictors[n]['count']:,}" for n in PREDICTORS))
    for label, key in _FIGURES:
        table.add_row(label, *(_pct(predictors[n][key]) for n in PREDICTORS))
    common = summary["common"]
    table.add_row(
        f"within 20% where all three predict ({common['count']:,})",
        *(_pct(common[n]["within_20pct"]) for n in PREDICTORS),
    )
    sources = Table(title="the model by prediction source")
    by_source = predictors["model"]["by_source"]
    widest = max(map(len, by_source), default=6)
    sources.add_column("source", no_wrap=True, min_width=widest)
    for column in ("predicted", "share", "within 20%", "within 10%", "MAPE", "MdAPE"):
        sources.add_column(column, justify="right")
    for source, block in by_source.items():
        sources.add_row(
            source,
            f"{block['predicted']:,}",
            _pct(block["share"]),
            _pct(block["within_20pct"]),
            _pct(block["within_10pct"]),
            _pct(block["mape"]),
            _pct(block["mdape"]),
        )
    parts: list[Any] = [table, sources]
    if summary["protocol"] == "by-period":
        periods = summary["periods"]
        line = ", ".join(f"{p['period']} ({p['scored']})" for p in periods[:8])
        more = f" and {len(periods) - 8} more" if len(periods) > 8 else ""
        parts.append(f"{len(periods)} periods (scored attempts): {line}{more}")
        if summary["periods_overlap"]:
            parts.append("[yellow]warning:[/yellow] periods overlap in time")
    parts.append(f"evaluated in {summary['seconds']:.1f} s")
    return Group(*parts)
