"""The backtest's figures: accuracy, coverage, interval calibration and decision quality.

The replay feeds a fleet history through the core prequentially and, at each completion, hands
:class:`Backtest` one flat :class:`AttemptOutcome`; at each submission it reports coverage with
:meth:`Backtest.observe_submission`. Nothing is aggregated while observing: each attempt becomes
one fixed-width row (54 bytes) in a chunk of a numpy structured array, so ``observe`` stays at a
few microseconds and millions of attempts fit in bounded, compact memory. The figures (medians
need every error) are computed at the end with numpy. ``docs/metrics.md`` explains each figure.

>>> from datetime import date
>>> bt = Backtest()
>>> bt.observe_submission(date(2025, 1, 1), has_eligible=True, model_ranked=True,
...                       lookup_ranked=False)
>>> bt.observe(AttemptOutcome(
...     day=date(2025, 1, 1), family="cnn", hardware="H100-SXM", status="succeeded",
...     actual=105.0, model_predicted=100.0, model_lower=90.0, model_upper=110.0,
...     model_source="model", lookup_predicted=None, has_eligible=True, model_ranked=True,
...     lookup_ranked=False, device_hours=8.0))
>>> s = bt.summary({"submitted": 1, "completed": 1}, events_per_second=1000.0)
>>> s["accuracy"]["within_10pct"], s["accuracy"]["mdape"], s["intervals"]["coverage"]
(1.0, 0.047619, 1.0)
>>> s["baselines"]["lookup"]["within_10pct_abstain_as_miss"], "decisions" in s
(0.0, False)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

import numpy as np
import pandas as pd

from leap_stream.core.events import STATUSES
from leap_stream.core.ranking import SOURCES

__all__ = ["SOURCE_LABELS", "AttemptOutcome", "Backtest", "MetricsError", "source_label"]

# How tables name the prediction sources (``source_label``); a source not listed here (the core
# may add one) is shown by its key.
SOURCE_LABELS = {
    "lineage_prior": "lineage prior",
    "transfer": "transfer",
    "model": "first attempt (model)",
    "cold_start": "cold start",
}

# Thresholds are float32 because the errors are stored as float32: comparing in one precision
# keeps "exactly 10% off" (110 predicted for 100) inside the band instead of a hair outside.
_WITHIN_10 = np.float32(0.10)
_WITHIN_20 = np.float32(0.20)

# One row per completed attempt. Errors are signed relative errors (pred - actual) / actual,
# NaN when there is nothing to score; costs are NaN when not given. float32 keeps the row
# compact (54 bytes: ~270 MB for 5 million attempts), far more precise than the figures need.
_ROW = np.dtype(
    [
        ("day", "<i4"),  # date.toordinal() of the submission day
        ("family", "<i2"),  # index into Backtest._families
        ("hardware", "<i2"),  # index into Backtest._hardware
        ("status", "i1"),  # index into STATUSES
        ("source", "i1"),  # index into SOURCES, -1 when none
        ("eligible", "?"),
        ("model_ranked", "?"),
        ("lookup_ranked", "?"),
        ("measured", "?"),  # succeeded with a measured throughput: accuracy can be judged
        ("interval", "i1"),  # 1 actual inside [lower, upper], 0 outside, -1 not scored
        ("pick_source", "i1"),  # source of the model's prediction for its top pick, -1 none
        ("unrunnable", "i1"),  # bit 0: the model's first choice could not run; bit 1: lookup's
        ("holdout", "?"),  # a held-out hardware type's scored attempt (replay --holdout-*)
        ("err_model", "<f4"),
        ("err_lookup", "<f4"),
        ("err_oracle", "<f4"),  # the oracle's noise-free throughput against the measured one
        ("width", "<f4"),  # (upper - lower) / predicted
        ("device_hours", "<f4"),
        ("cost_model", "<f4"),
        ("cost_lookup", "<f4"),
        ("cost_requested", "<f4"),
        ("cost_best", "<f4"),
    ]
)
# Rows are written into fixed chunks (no copy on growth, at most one chunk of slack) that are
# merged into one array only when figures are asked for.
_CHUNK_ROWS = 1 << 16
_MAX_CODES = np.iinfo(np.int16).max
_NAN = math.nan
_INF = math.inf
_STATUS_CODE = {status: i for i, status in enumerate(STATUSES)}
_SUCCEEDED = _STATUS_CODE["succeeded"]
_SOURCE_CODE: dict[str | None, int] = {None: -1} | {s: i for i, s in enumerate(SOURCES)}
_DIGITS = 6
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


class MetricsError(ValueError):
    """An outcome, a submission or an argument that cannot be scored; the message says which.

    Examples
    --------
    >>> try:
    ...     Backtest(interval_level=90)
    ... except MetricsError as error:
    ...     print(error)
    interval_level must be strictly between 0 and 1, got 90
    """


@dataclass(slots=True)
class AttemptOutcome:
    """What the replay knows about one attempt when it completes (see ``docs/metrics.md``).

    Predictions are the ones made at submission for the hardware the attempt actually ran on;
    None (or NaN, as in a :class:`~leap_stream.core.ranking.Ranking`) means nothing was predicted.
    The ``cost_*`` fields are USD to process the attempt's samples with the true throughput on
    the hardware each policy picks; they are given only when the replay has an oracle, and so
    are ``oracle_predicted`` (the oracle's expected, noise-free throughput on the hardware the
    attempt ran on: the ceiling that run-to-run noise leaves) and the ``*_pick_unrunnable``
    flags (that policy's first choice cannot run the job: its cost includes the failed try).
    ``model_pick_source`` is the source of the model's prediction for its top pick;
    ``holdout`` marks one of a held-out hardware type's first scored attempts.

    Examples
    --------
    >>> o = AttemptOutcome(day=date(2025, 1, 1), family="cnn", hardware="MI300X",
    ...                    status="failed", actual=None, model_predicted=None,
    ...                    model_lower=None, model_upper=None, model_source=None,
    ...                    lookup_predicted=None, has_eligible=True, model_ranked=False,
    ...                    lookup_ranked=False, device_hours=2.0)
    >>> o.cost_model is None, o.pairwise_total
    (True, 0)
    """

    day: date
    family: str
    hardware: str
    status: str
    actual: float | None
    model_predicted: float | None
    model_lower: float | None
    model_upper: float | None
    model_source: str | None
    lookup_predicted: float | None
    has_eligible: bool
    model_ranked: bool
    lookup_ranked: bool
    device_hours: float
    cost_model: float | None = None
    cost_lookup: float | None = None
    cost_requested: float | None = None
    cost_best: float | None = None
    pairwise_correct: int = 0
    pairwise_total: int = 0
    oracle_predicted: float | None = None
    model_pick_source: str | None = None
    model_pick_unrunnable: bool = False
    lookup_pick_unrunnable: bool = False
    holdout: bool = False


class Backtest:
    """Accumulates attempt outcomes and submissions; computes the backtest's figures at the end.

    Parameters
    ----------
    interval_level
        Nominal coverage of the model's prediction intervals (0.9: a 90% interval), the line
        empirical interval coverage is judged against.

    Attributes
    ----------
    attempts
        Completed attempts observed so far.
    submissions
        Submissions observed so far.

    Examples
    --------
    >>> from datetime import date
    >>> bt = Backtest(interval_level=0.8)
    >>> for predicted, actual in [(100.0, 105.0), (100.0, 150.0)]:
    ...     bt.observe(AttemptOutcome(
    ...         day=date(2025, 1, 2), family="decoder-transformer", hardware="TPU-v5p",
    ...         status="succeeded", actual=actual, model_predicted=predicted,
    ...         model_lower=None, model_upper=None, model_source="model",
    ...         lookup_predicted=predicted, has_eligible=True, model_ranked=True,
    ...         lookup_ranked=True, device_hours=1.0, cost_model=2.0, cost_best=1.0))
    >>> bt.attempts
    2
    >>> bt.summary({}, 0.0)["decisions"]["top1_regret"]
    1.0
    >>> bt.daily()[["succeeded", "within_10pct", "mdape"]].round(4).to_dict("records")
    [{'succeeded': 2, 'within_10pct': 0.5, 'mdape': 0.1905}]
    """

    __slots__ = (
        "_chunk",
        "_chunks",
        "_families",
        "_family_codes",
        "_hardware",
        "_hardware_codes",
        "_i",
        "_pairs_correct",
        "_pairs_total",
        "_submissions",
        "attempts",
        "interval_level",
        "submissions",
    )

    def __init__(self, interval_level: float = 0.9) -> None:
        if not 0.0 < interval_level < 1.0:
            raise MetricsError(
                f"interval_level must be strictly between 0 and 1, got {interval_level!r}"
            )
        self.interval_level = float(interval_level)
        self.attempts = 0
        self.submissions = 0
        self._chunks: list[np.ndarray] = []
        self._chunk = np.empty(_CHUNK_ROWS, dtype=_ROW)
        self._i = 0
        self._family_codes: dict[str, int] = {}
        self._families: list[str] = []
        self._hardware_codes: dict[str, int] = {}
        self._hardware: list[str] = []
        self._pairs_correct = 0
        self._pairs_total = 0
        # day ordinal -> [submissions, with an eligible candidate, model ranked, lookup ranked]
        self._submissions: dict[int, list[int]] = {}

    # -- observing (hot path: keep it to plain Python scalars and one row write) -------------

    def observe_submission(
        self, day: date, has_eligible: bool, model_ranked: bool, lookup_ranked: bool
    ) -> None:
        """Count one submission for coverage: did each policy rank its eligible candidates?"""
        if (model_ranked or lookup_ranked) and not has_eligible:
            raise MetricsError(
                f"submission #{self.submissions + 1} ({day}): a ranking without an eligible "
                f"candidate (model_ranked={model_ranked}, lookup_ranked={lookup_ranked}, "
                "has_eligible=False)"
            )
        key = day.toordinal()
        counts = self._submissions.get(key)
        if counts is None:
            counts = self._submissions[key] = [0, 0, 0, 0]
        counts[0] += 1
        if has_eligible:
            counts[1] += 1
            if model_ranked:
                counts[2] += 1
            if lookup_ranked:
                counts[3] += 1
        self.submissions += 1

    def observe(self, outcome: AttemptOutcome) -> None:
        """Record one completed attempt (O(1): one row write, no aggregation)."""
        o = outcome
        status = _STATUS_CODE.get(o.status)
        source = _SOURCE_CODE.get(o.model_source, -2)
        pick_source = _SOURCE_CODE.get(o.model_pick_source, -2)
        dh = o.device_hours
        if (
            status is None
            or source == -2
            or pick_source == -2
            or not 0.0 <= dh < _INF  # also rejects NaN
            or ((o.model_ranked or o.lookup_ranked) and not o.has_eligible)
        ):
            raise MetricsError(self._where(o) + _first_problem(o))
        err_m = err_l = err_o = width = _NAN
        interval = -1
        actual = o.actual
        if actual is not None:
            if status != _SUCCEEDED or not 0.0 < actual < _INF:
                raise MetricsError(self._where(o) + _actual_problem(o))
            p = o.model_predicted
            if p is not None and p == p:  # NaN means "not predicted", as in a Ranking
                if p == _INF or p == -_INF:
                    raise MetricsError(self._where(o) + f"model_predicted is {p!r}")
                err_m = (p - actual) / actual
                lo, hi = o.model_lower, o.model_upper
                if lo is not None and hi is not None and lo == lo and hi == hi:
                    if not -_INF < lo <= hi < _INF:
                        raise MetricsError(
                            self._where(o) + f"the interval [{lo!r}, {hi!r}] is not a finite "
                            "range (model_lower <= model_upper)"
                        )
                    interval = 1 if lo <= actual <= hi else 0
                    if p > 0.0:
                        width = (hi - lo) / p
            q = o.lookup_predicted
            if q is not None and q == q:
                if q == _INF or q == -_INF:
                    raise MetricsError(self._where(o) + f"lookup_predicted is {q!r}")
                err_l = (q - actual) / actual
            t = o.oracle_predicted
            if t is not None and t == t:
                if not 0.0 < t < _INF:
                    raise MetricsError(
                        self._where(o) + f"oracle_predicted must be finite and > 0, got {t!r}"
                    )
                err_o = (t - actual) / actual
        cm, cl, cr, cb = o.cost_model, o.cost_lookup, o.cost_requested, o.cost_best
        if cm is None and cl is None and cr is None and cb is None:
            cm = cl = cr = cb = _NAN
        else:
            cm = _NAN if cm is None else cm
            cl = _NAN if cl is None else cl
            cr = _NAN if cr is None else cr
            cb = _NAN if cb is None else cb
            # NaN, like None, means "not given"; negative or infinite costs are replay bugs
            if (
                cm < 0.0 or cl < 0.0 or cr < 0.0 or cb < 0.0
                or cm == _INF or cl == _INF or cr == _INF or cb == _INF
            ):  # fmt: skip
                raise MetricsError(self._where(o) + _cost_problem(o))
        pt = o.pairwise_total
        if pt or o.pairwise_correct:
            if not 0 <= o.pairwise_correct <= pt:
                raise MetricsError(
                    self._where(o) + f"pairwise_correct {o.pairwise_correct!r} must lie in "
                    f"[0, pairwise_total={pt!r}]"
                )
            self._pairs_correct += o.pairwise_correct
            self._pairs_total += pt
        family = self._family_codes.get(o.family)
        if family is None:
            family = _register(
                self._family_codes, self._families, o.family, self._where(o) + "family"
            )
        hardware = self._hardware_codes.get(o.hardware)
        if hardware is None:
            hardware = _register(
                self._hardware_codes, self._hardware, o.hardware, self._where(o) + "hardware"
            )
        i = self._i
        if i == _CHUNK_ROWS:
            self._chunks.append(self._chunk)
            self._chunk = np.empty(_CHUNK_ROWS, dtype=_ROW)
            i = 0
        self._chunk[i] = (
            o.day.toordinal(),
            family,
            hardware,
            status,
            source,
            o.has_eligible,
            o.model_ranked,
            o.lookup_ranked,
            actual is not None,
            interval,
            pick_source,
            o.model_pick_unrunnable | (o.lookup_pick_unrunnable << 1),
            o.holdout,
            err_m,
            err_l,
            err_o,
            width,
            dh,
            cm,
            cl,
            cr,
            cb,
        )
        self._i = i + 1
        self.attempts += 1

    def _where(self, o: AttemptOutcome) -> str:
        return f"attempt #{self.attempts + 1} ({o.day}, {o.family!r} on {o.hardware!r}): "

    # -- figures ------------------------------------------------------------------------------

    def _rows(self) -> np.ndarray:
        """Every observed row as one structured array (merging the chunks, once)."""
        if not self._chunks:
            return self._chunk[: self._i]
        if len(self._chunks) == 1 and self._i == 0:
            return self._chunks[0]
        merged = np.concatenate([*self._chunks, self._chunk[: self._i]])
        self._chunks = [merged]
        self._chunk = np.empty(_CHUNK_ROWS, dtype=_ROW)
        self._i = 0
        return merged

    def summary(self, events: Mapping[str, int], events_per_second: float) -> dict[str, Any]:
        """The headline figures as JSON-ready plain data (floats rounded to 6 decimals).

        Parameters
        ----------
        events
            Event counts of the replay (e.g. ``{"submitted": ..., "completed": ...}``), copied
            into the summary as they are.
        events_per_second
            The replay's throughput, copied into the summary.

        Returns
        -------
        dict
            Keys ``events``, ``submissions``, ``attempts``, ``succeeded``, ``coverage``,
            ``coverage_gpu_hours``, ``accuracy``, ``by_source``, ``intervals``, ``baselines``,
            ``decisions`` (only when any cost was given), ``oracle_ceiling`` (only when any
            oracle value was given), ``holdout`` (only when an attempt was marked held out) and
            ``events_per_second``. A figure with nothing to compute it from is None.
        """
        rows = self._rows()
        eligible_subs = sum(c[1] for c in self._submissions.values())
        model_subs = sum(c[2] for c in self._submissions.values())
        lookup_subs = sum(c[3] for c in self._submissions.values())
        hours = rows["device_hours"].astype(np.float64)
        eligible_hours = float(hours[rows["eligible"]].sum())
        scored = rows["measured"]
        err_m, err_l = rows["err_model"], rows["err_lookup"]
        has_m, has_l = ~np.isnan(err_m), ~np.isnan(err_l)

        accuracy = _accuracy(err_m[has_m])
        accuracy |= _abstain_as_miss(err_m, int(scored.sum()))
        accuracy["by_source"] = {
            SOURCES[code]: _accuracy(err_m[has_m & (rows["source"] == code)], brief=True)
            for code in np.unique(rows["source"][has_m]).tolist()
            if code >= 0
        }
        scored_interval = rows["interval"] >= 0
        hits = rows["interval"] == 1
        by_source = {}
        for name, block in accuracy["by_source"].items():
            mine = rows["source"] == SOURCES.index(name)
            n_interval = int((scored_interval & mine).sum())
            by_source[name] = block | {
                "share": _share(block["n"], accuracy["n"]),
                "interval_n": n_interval,
                "interval_coverage": _share(int((hits & mine).sum()), n_interval),
            }
        intervals = {
            "nominal": _r(self.interval_level),
            "n": int(scored_interval.sum()),
            "coverage": _share(int(hits.sum()), int(scored_interval.sum())),
            "median_relative_width": _median(rows["width"][scored_interval]),
            "by_source": {
                SOURCES[code]: {
                    "n": int((scored_interval & (rows["source"] == code)).sum()),
                    "coverage": _share(
                        int((hits & (rows["source"] == code)).sum()),
                        int((scored_interval & (rows["source"] == code)).sum()),
                    ),
                }
                for code in np.unique(rows["source"][scored_interval]).tolist()
                if code >= 0
            },
        }
        both = has_m & has_l
        comparison = {
            "n": int(both.sum()),
            "model_within_10pct": _within_share(err_m[both], _WITHIN_10),
            "lookup_within_10pct": _within_share(err_l[both], _WITHIN_10),
        }
        lookup_accuracy = _accuracy(err_l[has_l])
        lookup_miss = _abstain_as_miss(err_l, int(scored.sum()))
        model_10 = accuracy["within_10pct_abstain_as_miss"]
        lookup_10 = lookup_miss["within_10pct_abstain_as_miss"]
        comparison["advantage_abstain_as_miss_points"] = (
            None if model_10 is None or lookup_10 is None else _r(100.0 * (model_10 - lookup_10))
        )
        result: dict[str, Any] = {
            "events": {str(k): int(v) for k, v in events.items()},
            "submissions": self.submissions,
            "attempts": self.attempts,
            "succeeded": int((rows["status"] == _SUCCEEDED).sum()),
            "coverage": _share(model_subs, eligible_subs),
            "coverage_gpu_hours": _fraction(
                float(hours[rows["eligible"] & rows["model_ranked"]].sum()), eligible_hours
            ),
            "accuracy": accuracy,
            "by_source": by_source,
            "intervals": intervals,
            "baselines": {
                "lookup": {
                    "coverage": _share(lookup_subs, eligible_subs),
                    "coverage_gpu_hours": _fraction(
                        float(hours[rows["eligible"] & rows["lookup_ranked"]].sum()),
                        eligible_hours,
                    ),
                    "accuracy": lookup_accuracy,
                    **lookup_miss,
                    "comparison": comparison,
                }
            },
        }
        decisions = self._decisions(rows)
        if decisions is not None:
            result["decisions"] = decisions
        err_o = rows["err_oracle"]
        if not np.isnan(err_o).all():
            # over the very attempts `accuracy` and `by_source` score, so each gap reads
            # against what run-to-run noise leaves even to a perfect predictor
            has_o = has_m & ~np.isnan(err_o)
            result["oracle_ceiling"] = _accuracy(err_o[has_o]) | {
                "by_source": {
                    SOURCES[code]: _accuracy(err_o[has_o & (rows["source"] == code)], brief=True)
                    for code in np.unique(rows["source"][has_o]).tolist()
                    if code >= 0
                }
            }
        if rows["holdout"].any():
            result["holdout"] = self.holdout_figures()
        result["events_per_second"] = _r(events_per_second)
        return result

    def holdout_figures(self) -> dict[str, Any]:
        """Accuracy on the attempts marked ``holdout`` (a held-out type's first attempts).

        Every policy over the same attempts, an abstention counting as a miss (the lookup table
        never saw the type, so it abstains by design); ``oracle`` only when oracle values were
        given. ``by_hardware`` per held-out type; ``model_sources``: how many of the model's
        predictions came from each source.
        """
        rows = self._rows()
        held = rows["holdout"] & rows["measured"]
        n = int(held.sum())
        block: dict[str, Any] = {
            "n": n,
            "model": _policy(rows["err_model"][held]),
            "lookup": _policy(rows["err_lookup"][held]),
        }
        err_o = rows["err_oracle"][held]
        if not np.isnan(err_o).all():
            block["oracle"] = _policy(err_o)
        sources = rows["source"][held]
        block["model_sources"] = {
            SOURCES[code]: int((sources == code).sum())
            for code in np.unique(sources).tolist()
            if code >= 0
        }
        hardware = rows["hardware"][held]
        block["by_hardware"] = {}
        for code in np.unique(hardware).tolist():
            mine = hardware == code
            model = _policy(rows["err_model"][held][mine])
            lookup = _policy(rows["err_lookup"][held][mine])
            block["by_hardware"][self._hardware[code]] = {
                "n": int(mine.sum()),
                "model_within_10pct_abstain_as_miss": model["within_10pct_abstain_as_miss"],
                "model_mdape": model["mdape"],
                "lookup_within_10pct_abstain_as_miss": lookup["within_10pct_abstain_as_miss"],
            }
        return block

    def _decisions(self, rows: np.ndarray) -> dict[str, Any] | None:
        # float32 columns as stored; sums and means accumulate in float64
        costs = {k: rows[k] for k in ("cost_model", "cost_lookup", "cost_requested", "cost_best")}
        given = {k: ~np.isnan(v) for k, v in costs.items()}
        if not any(g.any() for g in given.values()) and self._pairs_total == 0:
            return None
        cm, cl, cr, cb = (costs[k] for k in costs)
        best_ok = given["cost_best"] & (cb > 0.0)  # a zero-sample attempt has no regret

        def regret(cost: np.ndarray, has: np.ndarray) -> float | None:
            mask = has & best_ok
            if not mask.any():
                return None
            return _r(np.mean(cost[mask].astype(np.float64) / cb[mask]) - 1.0)

        def savings(other: np.ndarray, has: np.ndarray) -> float | None:
            mask = has & given["cost_model"]
            total = float(other[mask].sum(dtype=np.float64))
            return _r(1.0 - float(cm[mask].sum(dtype=np.float64)) / total) if total > 0.0 else None

        model_unrunnable = (rows["unrunnable"] & 1) > 0
        pick_source = rows["pick_source"]
        by_source = {}
        for code in np.unique(pick_source[given["cost_model"]]).tolist():
            if code < 0:
                continue
            mine = pick_source == code
            by_source[SOURCES[code]] = {
                "n": int((given["cost_model"] & best_ok & mine).sum()),
                "top1_regret": regret(cm, given["cost_model"] & mine),
                "savings_vs_requested": savings(cr, given["cost_requested"] & mine),
                "n_vs_requested": int((given["cost_requested"] & given["cost_model"] & mine).sum()),
                "unrunnable_picks": int((model_unrunnable & mine).sum()),
            }
        return {
            "unrunnable_picks": int(model_unrunnable.sum()),
            "lookup_unrunnable_picks": int(((rows["unrunnable"] & 2) > 0).sum()),
            "by_source": by_source,
            "n": int((given["cost_model"] & best_ok).sum()),
            "top1_regret": regret(cm, given["cost_model"]),
            "lookup_top1_regret": regret(cl, given["cost_lookup"]),
            "requested_regret": regret(cr, given["cost_requested"]),
            "savings_vs_requested": savings(cr, given["cost_requested"]),
            "n_vs_requested": int((given["cost_requested"] & given["cost_model"]).sum()),
            "savings_vs_lookup": savings(cl, given["cost_lookup"]),
            "n_vs_lookup": int((given["cost_lookup"] & given["cost_model"]).sum()),
            "pairwise_order_accuracy": _share(self._pairs_correct, self._pairs_total),
            "pairwise_total": self._pairs_total,
        }

    def daily(self) -> pd.DataFrame:
        """One row per UTC submission day (sorted); NaN where a figure has nothing to go on.

        Columns: day, submissions, coverage, lookup_coverage, succeeded, within_10pct,
        within_20pct, mdape, lookup_within_10pct, lookup_within_10pct_abstain_as_miss,
        interval_coverage, top1_regret, savings_vs_requested, savings_vs_lookup.
        """
        rows = self._rows()
        days = np.union1d(
            np.fromiter(self._submissions, dtype=np.int64, count=len(self._submissions)),
            rows["day"].astype(np.int64),
        )
        k = len(days)
        idx = np.searchsorted(days, rows["day"])
        subs = np.array(
            [self._submissions.get(int(d), [0, 0, 0, 0]) for d in days], dtype=np.float64
        ).reshape(k, 4)
        succeeded = rows["status"] == _SUCCEEDED
        scored = rows["measured"]
        err_m, err_l = np.abs(rows["err_model"]), np.abs(rows["err_lookup"])
        has_m, has_l = ~np.isnan(err_m), ~np.isnan(err_l)
        n_m = _count(idx, k, has_m)
        n_l = _count(idx, k, has_l)
        n_scored = _count(idx, k, scored)
        n_interval = _count(idx, k, rows["interval"] >= 0)
        cm, cl, cr, cb = (
            rows[c] for c in ("cost_model", "cost_lookup", "cost_requested", "cost_best")
        )
        regret_ok = ~np.isnan(cm) & ~np.isnan(cb) & (cb > 0.0)
        regret = cm[regret_ok].astype(np.float64) / cb[regret_ok] - 1.0
        frame = pd.DataFrame(
            {
                "day": _as_datetime(days),
                "submissions": subs[:, 0].astype(np.int64),
                "coverage": _ratio(subs[:, 2], subs[:, 1]),
                "lookup_coverage": _ratio(subs[:, 3], subs[:, 1]),
                "succeeded": _count(idx, k, succeeded).astype(np.int64),
                "within_10pct": _ratio(_count(idx, k, has_m & (err_m <= _WITHIN_10)), n_m),
                "within_20pct": _ratio(_count(idx, k, has_m & (err_m <= _WITHIN_20)), n_m),
                "mdape": _group_median(idx[has_m], err_m[has_m], k),
                "lookup_within_10pct": _ratio(_count(idx, k, has_l & (err_l <= _WITHIN_10)), n_l),
                "lookup_within_10pct_abstain_as_miss": _ratio(
                    _count(idx, k, has_l & (err_l <= _WITHIN_10)), n_scored
                ),
                "interval_coverage": _ratio(_count(idx, k, rows["interval"] == 1), n_interval),
                "top1_regret": _ratio(
                    np.bincount(idx[regret_ok], regret, minlength=k),
                    _count(idx, k, regret_ok),
                ),
                "savings_vs_requested": _daily_savings(idx, k, cm, cr),
                "savings_vs_lookup": _daily_savings(idx, k, cm, cl),
            }
        )
        return frame

    def by_hardware(self) -> pd.DataFrame:
        """Accuracy per hardware type the attempts ran on, most succeeded attempts first.

        Columns: hardware, n (succeeded attempts with a measured throughput), model_n,
        model_within_10pct, model_mdape, lookup_n, lookup_within_10pct, lookup_mdape, and on
        the attempts both predicted (like for like: the lookup table abstains on all but the
        configurations it has seen, the easiest to predict) both_n, both_model_mdape,
        both_lookup_mdape.
        """
        rows = self._rows()
        return _breakdown(rows, rows["hardware"], self._hardware, "hardware")

    def by_family(self) -> pd.DataFrame:
        """Accuracy per model family, with the same columns as :meth:`by_hardware`."""
        rows = self._rows()
        return _breakdown(rows, rows["family"], self._families, "family")

    def calibration(self) -> pd.DataFrame:
        """Empirical interval coverage per (day, source), plus source ``"all"`` for each day.

        Columns: day, source, n (succeeded attempts with an interval), covered (actual inside
        it), coverage (covered / n), nominal. Sorted by day, then source (``all`` first, then
        in :data:`~leap_stream.core.ranking.SOURCES` order); only pairs with n > 0 appear.
        """
        rows = self._rows()
        scored = rows["interval"] >= 0
        day, interval, source = (rows[f][scored] for f in ("day", "interval", "source"))
        columns = ["day", "source", "n", "covered", "coverage", "nominal"]
        if len(day) == 0:
            return pd.DataFrame({c: [] for c in columns}).astype(
                {
                    "day": "datetime64[ns]",
                    "source": object,
                    "n": np.int64,
                    "covered": np.int64,
                    "coverage": float,
                    "nominal": float,
                }
            )
        days, idx = np.unique(day, return_inverse=True)
        sources = ["all", *SOURCES]
        k, s = len(days), len(sources)
        hit = interval == 1
        known = source >= 0
        flat = idx[known] * s + source[known].astype(np.int64) + 1  # column 0 is "all"
        n = np.bincount(flat, minlength=k * s).reshape(k, s)
        covered = np.bincount(flat, hit[known], minlength=k * s).reshape(k, s).astype(np.int64)
        n[:, 0] = np.bincount(idx, minlength=k)
        covered[:, 0] = np.bincount(idx, hit, minlength=k)
        day_index, source_index = np.nonzero(n)
        return pd.DataFrame(
            {
                "day": _as_datetime(days[day_index]),
                "source": [sources[j] for j in source_index],
                "n": n[day_index, source_index],
                "covered": covered[day_index, source_index],
                "coverage": covered[day_index, source_index] / n[day_index, source_index],
                "nominal": self.interval_level,
            },
            columns=columns,
        )


# -- helpers -------------------------------------------------------------------------------


def source_label(source: str) -> str:
    """A prediction source as tables show it.

    >>> source_label("model"), source_label("some_new_source")
    ('first attempt (model)', 'some new source')
    """
    return SOURCE_LABELS.get(source, source.replace("_", " "))


def _first_problem(o: AttemptOutcome) -> str:
    if o.status not in _STATUS_CODE:
        return f"status {o.status!r} is not one of {'|'.join(STATUSES)}"
    if o.model_source not in _SOURCE_CODE:
        return f"model_source {o.model_source!r} is not one of {'|'.join(SOURCES)} or None"
    if o.model_pick_source not in _SOURCE_CODE:
        return (
            f"model_pick_source {o.model_pick_source!r} is not one of {'|'.join(SOURCES)} or None"
        )
    if not 0.0 <= o.device_hours < _INF:
        return f"device_hours must be finite and >= 0, got {o.device_hours!r}"
    return (
        f"a ranking without an eligible candidate (model_ranked={o.model_ranked}, "
        f"lookup_ranked={o.lookup_ranked}, has_eligible=False)"
    )


def _actual_problem(o: AttemptOutcome) -> str:
    if o.status != "succeeded":
        return f"actual throughput {o.actual!r} given for a {o.status} attempt (succeeded only)"
    return f"actual throughput must be finite and > 0 samples/s, got {o.actual!r}"


def _cost_problem(o: AttemptOutcome) -> str:
    for name in ("cost_model", "cost_lookup", "cost_requested", "cost_best"):
        value = getattr(o, name)
        if value is not None and (value < 0.0 or value == _INF):
            return f"{name} must be a finite cost >= 0 USD, got {value!r}"
    return "a cost is negative or infinite"  # unreachable: observe() checked the same values


def _register(codes: dict[str, int], names: list[str], name: str, what: str) -> int:
    if not isinstance(name, str) or not name:
        raise MetricsError(f"{what} must be a non-empty string, got {name!r}")
    if len(names) >= _MAX_CODES:
        raise MetricsError(f"{what}: more than {_MAX_CODES} distinct values")
    codes[name] = len(names)
    names.append(name)
    return codes[name]


def _as_datetime(ordinals: np.ndarray) -> np.ndarray:
    """date.toordinal() values as datetime64[ns] midnights (UTC days, naive)."""
    days = np.asarray(ordinals, dtype=np.int64) - _EPOCH_ORDINAL
    return days.astype("datetime64[D]").astype("datetime64[ns]")


def _r(value: float) -> float:
    return round(float(value), _DIGITS)


def _share(part: int, whole: int) -> float | None:
    return _r(part / whole) if whole else None


def _fraction(part: float, whole: float) -> float | None:
    return _r(part / whole) if whole > 0.0 else None


def _median(values: np.ndarray) -> float | None:
    return _r(np.median(values.astype(np.float64))) if values.size else None


def _within_share(err: np.ndarray, limit: np.float32) -> float | None:
    return _r(np.count_nonzero(np.abs(err) <= limit) / err.size) if err.size else None


def _accuracy(err: np.ndarray, brief: bool = False) -> dict[str, Any]:
    """Accuracy over signed relative errors (one per scored prediction, no NaN)."""
    ape = np.abs(err)
    n = int(ape.size)
    block: dict[str, Any] = {
        "n": n,
        "within_10pct": _within_share(err, _WITHIN_10),
        "within_20pct": _within_share(err, _WITHIN_20),
        "mdape": _median(ape),
    }
    if not brief:
        block["mape"] = _r(ape.mean(dtype=np.float64)) if n else None
        block["median_signed_error"] = _median(err)
    return block


def _policy(err: np.ndarray) -> dict[str, Any]:
    """A policy's accuracy over signed errors of a set of attempts, NaN where it abstained."""
    return _accuracy(err[~np.isnan(err)]) | _abstain_as_miss(err, int(err.size))


def _abstain_as_miss(err: np.ndarray, scored: int) -> dict[str, float | None]:
    """Within-band shares over every scoreable attempt, a missing prediction counting as a miss."""
    ape = np.abs(err)  # NaN compares False: an abstention is a miss
    return {
        "within_10pct_abstain_as_miss": _share(int(np.count_nonzero(ape <= _WITHIN_10)), scored),
        "within_20pct_abstain_as_miss": _share(int(np.count_nonzero(ape <= _WITHIN_20)), scored),
    }


def _count(idx: np.ndarray, k: int, mask: np.ndarray) -> np.ndarray:
    return np.bincount(idx[mask], minlength=k).astype(np.float64)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.full(len(num), np.nan), where=den > 0)


def _daily_savings(idx: np.ndarray, k: int, cm: np.ndarray, other: np.ndarray) -> np.ndarray:
    both = ~np.isnan(cm) & ~np.isnan(other)
    spent = np.bincount(idx[both], cm[both], minlength=k)
    baseline = np.bincount(idx[both], other[both], minlength=k)
    return 1.0 - _ratio(spent, baseline)


def _group_median(idx: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """Median of ``values`` per group ``idx`` in [0, k); NaN for empty groups."""
    # pandas' grouped median is a selection per group, ~8x faster than sorting everything
    medians = pd.Series(values.astype(np.float64)).groupby(idx).median()
    return medians.reindex(range(k)).to_numpy(dtype=np.float64)


def _breakdown(rows: np.ndarray, codes: np.ndarray, names: list[str], key: str) -> pd.DataFrame:
    k = len(names)
    scored = rows["measured"]
    columns: dict[str, Any] = {key: list(names), "n": _count(codes, k, scored).astype(np.int64)}
    ape = {"model": np.abs(rows["err_model"]), "lookup": np.abs(rows["err_lookup"])}
    for policy, errors in ape.items():
        has = ~np.isnan(errors)
        n = _count(codes, k, has)
        columns[f"{policy}_n"] = n.astype(np.int64)
        columns[f"{policy}_within_10pct"] = _ratio(
            _count(codes, k, has & (errors <= _WITHIN_10)), n
        )
        columns[f"{policy}_mdape"] = _group_median(codes[has], errors[has], k)
    # like for like: the lookup predicts mostly repeats, the easiest attempts
    both = ~np.isnan(ape["model"]) & ~np.isnan(ape["lookup"])
    columns["both_n"] = _count(codes, k, both).astype(np.int64)
    for policy, errors in ape.items():
        columns[f"both_{policy}_mdape"] = _group_median(codes[both], errors[both], k)
    frame = pd.DataFrame(columns)
    return frame.sort_values(["n", key], ascending=[False, True], kind="stable").reset_index(
        drop=True
    )
