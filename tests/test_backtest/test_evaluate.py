"""Tests of leap_stream.backtest.evaluate: the splits, the naive predictor, the figures, the CLI.

The hand-made history (``EVENTS``), ResNet-50-sized jobs on 8 devices unless said, each
completing an hour after its submission (``a2``'s three hours later, after ``f1`` ran):

======  =======  ======  =============  ===========  ==========
period  job      lineage  hardware       throughput   note
======  =======  ======  =============  ===========  ==========
day 0   a1       a       H100-SXM       1000
day 0   b1       b       H100-SXM       500
day 0   c1       c       A100-SXM-80GB  300
day 0   a2       a       A100-SXM-80GB  600          completes after f1
day 0   f1       b       MI300X         -            failed
day 1   b2       b       A100-SXM-80GB  250
day 1   c2       c       H100-SXM       520
day 1   a3       a       H100-SXM       1900         16 devices
day 1   d1       d       MI300X         800
day 2   c3       c       MI300X         700
======  =======  ======  =============  ===========  ==========

Worked out by hand for the naive ratio predictor by period: day 0 has nothing to learn from;
b2 = 500 (b on H100) x 600 / 1000 (a's A100 / H100) = 300; c2 = 300 x 1000 / 600 = 500; a3
has no other 16-device job and d1 no other type: both abstain; c3 (MI300X) shares no job with
c's types: abstains.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
from core_fixtures import T0, completed_event, hours, submitted_event
from realdata_paths import REALDATA
from typer.testing import CliRunner

from leap_stream.backtest.evaluate import (
    EvaluationError,
    NaiveRatio,
    accuracy,
    evaluate,
    evaluate_events,
)
from leap_stream.cli import app
from leap_stream.core import LeapCore, LookupRanker
from leap_stream.core.catalog import Catalog
from leap_stream.core.ranking import Ranking, rank_candidates
from leap_stream.data.history import events_to_table, write_history
from leap_stream.data.importers import import_gavel, naive_ratio_predictions, naive_ratio_summary

GAVEL_CSV = REALDATA / "gavel_throughputs.csv"

# job, lineage, submitted (hours after T0), hardware, throughput (None: failed), devices
ATTEMPTS = [
    ("a1", "a", 0.0, "H100-SXM", 1000.0, 8),
    ("b1", "b", 1.0, "H100-SXM", 500.0, 8),
    ("c1", "c", 2.0, "A100-SXM-80GB", 300.0, 8),
    ("a2", "a", 3.0, "A100-SXM-80GB", 600.0, 8),
    ("f1", "b", 4.0, "MI300X", None, 8),
    ("b2", "b", 24.0, "A100-SXM-80GB", 250.0, 8),
    ("c2", "c", 25.0, "H100-SXM", 520.0, 8),
    ("a3", "a", 26.0, "H100-SXM", 1900.0, 16),
    ("d1", "d", 27.0, "MI300X", 800.0, 8),
    ("c3", "c", 48.0, "MI300X", 700.0, 8),
]
PERIOD = {job: (T0 + pd.Timedelta(hours=h)).date().isoformat() for job, _, h, *_ in ATTEMPTS}
SUCCEEDED = [job for job, *_, throughput, _ in ATTEMPTS if throughput is not None]
COMPLETED = [job for job, *_ in ATTEMPTS]


def _events() -> list[tuple[str, dict[str, Any]]]:
    timed: list[tuple[float, str, dict[str, Any]]] = []
    for job, lineage, at, hardware, throughput, devices in ATTEMPTS:
        done = at + (3.0 if job == "a2" else 1.0)
        submitted = submitted_event(job, lineage, hours(at), num_devices=devices)
        submitted["model_type"] = f"model-{lineage}"
        completed = completed_event(
            job,
            lineage,
            hours(done),
            hardware,
            throughput=throughput,
            status="succeeded" if throughput else "failed",
            num_devices=devices,
        )
        timed += [(at, "submitted", submitted), (done, "completed", completed)]
    timed.sort(key=lambda item: item[0])
    return [(kind, event) for _, kind, event in timed]


EVENTS = _events()


class SpyRanker:
    """Predicts, for every candidate, a token naming what it had learned at that moment.

    The registry is a class attribute: shared by every copy a protocol makes of a ranker.
    """

    registry: ClassVar[list[frozenset[str]]] = []

    def __init__(self, catalog: Catalog) -> None:
        self.names = catalog.names
        self.learned: list[str] = []
        self.pending: set[str] = set()

    def on_submitted(self, event: dict[str, Any]) -> Ranking:
        SpyRanker.registry.append(frozenset(self.learned))
        self.pending.add(event["job_id"])
        n = len(self.names)
        token = np.full(n, float(len(SpyRanker.registry)))
        return rank_candidates(
            job_id=event["job_id"],
            lineage_id=event["lineage_id"],
            event_time=event["event_time"],
            model_version="spy",
            num_devices=event["num_devices"],
            hardware=self.names,
            eligible=np.ones(n, dtype=bool),
            reasons=lambda i: None,
            predicted=token,
            lower=token,
            upper=token,
            price=np.ones(n),
            source=np.full(n, "spy"),
        )

    def on_completed(self, event: dict[str, Any]) -> bool:
        if event["job_id"] not in self.pending:
            return False
        self.pending.discard(event["job_id"])
        self.learned.append(event["job_id"])
        return True

    @classmethod
    def learned_at(cls, token: float) -> frozenset[str]:
        return cls.registry[int(token) - 1]


@pytest.fixture
def spy() -> type[SpyRanker]:
    SpyRanker.registry = []
    return SpyRanker


def _rows(result: Any, predictor: str) -> pd.DataFrame:
    return result.rows[result.rows["predictor"] == predictor].set_index("job_id")


# --------------------------------------------------------------------------------------------
# The splits


def test_leave_one_out_learns_every_other_attempt_only(hw_catalog: Catalog, spy: Any) -> None:
    result = evaluate_events(
        EVENTS, hw_catalog, "leave-one-out", model_factory=spy, lookup_factory=spy
    )
    for predictor in ("model", "lookup"):
        rows = _rows(result, predictor)
        assert sorted(rows.index) == sorted(SUCCEEDED)  # f1 failed: learned, never scored
        for job, token in rows["predicted"].items():
            # every other attempt, the failed one included, and never the attempt itself
            assert spy.learned_at(token) == frozenset(COMPLETED) - {job}


def test_by_period_learns_earlier_periods_only(hw_catalog: Catalog, spy: Any) -> None:
    result = evaluate_events(EVENTS, hw_catalog, "by-period", model_factory=spy, lookup_factory=spy)
    assert [p["period"] for p in result.summary["periods"]] == sorted(set(PERIOD.values()))
    for predictor in ("model", "lookup"):
        rows = _rows(result, predictor)
        assert sorted(rows.index) == sorted(SUCCEEDED)
        for job, row in rows.iterrows():
            assert row["period"] == PERIOD[job]
            earlier = {j for j in COMPLETED if PERIOD[j] < PERIOD[job]}
            assert spy.learned_at(row["predicted"]) == earlier


def _fresh_predictions(
    catalog: Catalog, learn: Sequence[tuple[str, dict[str, Any]]], target: dict[str, Any]
) -> tuple[float, float]:
    """The literal protocol: fresh predictors learn ``learn`` in order, then rank ``target``."""
    model, lookup = LeapCore(catalog), LookupRanker(catalog)
    for kind, event in learn:
        for ranker in (model, lookup):
            if kind == "submitted":
                ranker.on_submitted(event)
            else:
                ranker.on_completed(event)
    hardware = next(
        e["hardware_type"]
        for k, e in EVENTS
        if k == "completed" and e["job_id"] == target["job_id"]
    )
    values = []
    for ranker in (model, lookup):
        ranking = ranker.on_submitted(target)
        values.append(float(ranking.predicted[ranking.hardware.index(hardware)]))
    return values[0], values[1]


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_leave_one_out_is_fresh_cores_fed_every_other_event(hw_catalog: Catalog) -> None:
    # the shared prefix and the copies are an optimisation: the figures are the literal ones
    result = evaluate_events(EVENTS, hw_catalog, "leave-one-out")
    model, lookup = _rows(result, "model"), _rows(result, "lookup")
    submissions = {e["job_id"]: e for k, e in EVENTS if k == "submitted"}
    for job in SUCCEEDED:
        others = [(k, e) for k, e in EVENTS if e["job_id"] != job]
        expected = _fresh_predictions(hw_catalog, others, submissions[job])
        assert _same(model.at[job, "predicted"], expected[0]), job
        assert _same(lookup.at[job, "predicted"], expected[1]), job
    assert model["predicted"].notna().all()
    # the lookup keys on (model type, hardware, devices): no two attempts share one here
    assert lookup["predicted"].isna().all()


def test_by_period_is_a_fresh_core_fed_the_earlier_periods(hw_catalog: Catalog) -> None:
    result = evaluate_events(EVENTS, hw_catalog, "by-period")
    model, lookup = _rows(result, "model"), _rows(result, "lookup")
    submissions = {e["job_id"]: e for k, e in EVENTS if k == "submitted"}
    for job in SUCCEEDED:
        earlier = [(k, e) for k, e in EVENTS if PERIOD[e["job_id"]] < PERIOD[job]]
        expected = _fresh_predictions(hw_catalog, earlier, submissions[job])
        assert _same(model.at[job, "predicted"], expected[0]), job
        assert _same(lookup.at[job, "predicted"], expected[1]), job


def test_period_field_groups_by_a_submission_field(hw_catalog: Catalog, spy: Any) -> None:
    result = evaluate_events(
        EVENTS,
        hw_catalog,
        "by-period",
        period_field="lineage_id",
        model_factory=spy,
        lookup_factory=spy,
    )
    # periods in order of their first submission: a, b, c, d
    assert [p["period"] for p in result.summary["periods"]] == ["a", "b", "c", "d"]
    assert result.summary["periods_overlap"] is True
    order = "abcd"
    rows = _rows(result, "model")
    for _, row in rows.iterrows():
        lineage = row["period"]
        earlier = {j for j, lin, *_ in ATTEMPTS if order.index(lin) < order.index(lineage)}
        assert spy.learned_at(row["predicted"]) == earlier


def test_devices_scores_only_those_attempts(hw_catalog: Catalog) -> None:
    result = evaluate_events(EVENTS, hw_catalog, "by-period", devices=16)
    assert set(result.rows["job_id"]) == {"a3"}
    assert result.summary["scored"] == 1 and result.summary["devices"] == 16


@pytest.mark.parametrize(
    ("protocol", "options", "message"),
    [
        ("k-fold", {}, "protocol must be one of"),
        ("leave-one-out", {"period_field": "lineage_id"}, "by-period protocol only"),
        ("by-period", {"period_field": "nope"}, "no JobSubmitted field 'nope'"),
        ("by-period", {"naive_reference": "all"}, "naive reference must be one of"),
    ],
)
def test_bad_arguments(
    hw_catalog: Catalog, protocol: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(EvaluationError, match=message):
        evaluate_events(EVENTS, hw_catalog, protocol, **options)


# --------------------------------------------------------------------------------------------
# The naive ratio predictor


def test_naive_by_period_worked_out(hw_catalog: Catalog) -> None:
    naive = _rows(evaluate_events(EVENTS, hw_catalog, "by-period"), "naive_ratio")["predicted"]
    assert naive["b2"] == pytest.approx(300.0) and naive["c2"] == pytest.approx(500.0)
    assert naive.drop(["b2", "c2"]).isna().all()


def test_naive_leave_one_out_ignores_the_target_measurement(hw_catalog: Catalog) -> None:
    base = _rows(evaluate_events(EVENTS, hw_catalog, "leave-one-out"), "naive_ratio")
    for job in SUCCEEDED:
        changed = [
            (k, {**e, "throughput": e["throughput"] * 7.0})
            if k == "completed" and e["job_id"] == job
            else (k, e)
            for k, e in EVENTS
        ]
        again = _rows(evaluate_events(changed, hw_catalog, "leave-one-out"), "naive_ratio")
        assert _same(again.at[job, "predicted"], base.at[job, "predicted"]), job


def test_naive_median_leaves_one_job_out() -> None:
    naive = NaiveRatio("median")
    for job, ratio in [("x", 1.0), ("y", 2.0), ("z", 4.0), ("w", 8.0)]:
        naive.add(job, 1, "A", 10.0)
        naive.add(job, 1, "B", 10.0 * ratio)
    # w's ratio (8) is left out of its own: the median of 1, 2, 4 is 2
    assert naive.predict("w", 1, "B") == (20.0, "median of 1")
    assert naive.predict("w", 1, "A") == (80.0 * 0.5, "median of 1")


# --------------------------------------------------------------------------------------------
# Figures, files and the command


def test_accuracy_counts_abstentions_as_misses() -> None:
    measured = np.array([100.0, 100.0, 100.0, 100.0])
    block = accuracy(measured, np.array([120.0, 80.0, 150.0, np.nan]))  # 20% off is a hit
    assert block["count"] == 4 and block["predicted"] == 3 and block["coverage"] == 0.75
    assert block["within_20pct"] == pytest.approx(2 / 3, abs=1e-6)
    assert block["within_20pct_abstain_as_miss"] == 0.5
    assert block["mape"] == pytest.approx(0.3) and block["mdape"] == pytest.approx(0.2)
    empty = accuracy(measured, np.full(4, np.nan))
    assert empty["coverage"] == 0.0 and empty["mape"] is None and empty["within_20pct"] is None


def test_summary_blocks(hw_catalog: Catalog) -> None:
    summary = evaluate_events(EVENTS, hw_catalog, "by-period").summary
    assert summary["attempts"] == 10 and summary["succeeded"] == 9 and summary["scored"] == 9
    naive = summary["predictors"]["naive_ratio"]
    assert naive["predicted"] == 2 and naive["by_source"]["naive_ratio"]["share"] == 1.0
    model = summary["predictors"]["model"]
    assert sum(b["predicted"] for b in model["by_source"].values()) == model["predicted"] == 9
    assert summary["common"]["count"] <= 2


def test_command_writes_rows_and_summary(tmp_path: Path) -> None:
    history = tmp_path / "history.parquet"
    write_history([events_to_table(EVENTS)], history)
    out = tmp_path / "eval"
    args = ["evaluate", str(history), "--protocol", "by-period", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "naive" in result.output and "cold_start" in result.output
    rows = pd.read_csv(out / "evaluation.csv")
    assert list(rows.columns[:2]) == ["predictor", "job_id"]
    assert {"hardware", "measured", "predicted", "source"} <= set(rows.columns)
    assert len(rows) == 3 * len(SUCCEEDED)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["protocol"] == "by-period" and summary["history"] == str(history)

    bad = CliRunner().invoke(app, [*args[:3], "k-fold", "--out", str(out)])
    assert bad.exit_code == 2 and "protocol must be one of" in bad.output


@pytest.mark.skipif(not GAVEL_CSV.exists(), reason="shared/realdata is not beside the checkout")
def test_real_gavel_counts_match(tmp_path: Path, hw_catalog: Catalog) -> None:
    import_gavel(GAVEL_CSV, tmp_path)
    result = evaluate(tmp_path / "history.parquet", hw_catalog, "leave-one-out")
    predictors = result.summary["predictors"]
    assert {name: block["count"] for name, block in predictors.items()} == {
        "model": 71,
        "lookup": 71,
        "naive_ratio": 71,
    }
    assert predictors["model"]["predicted"] == 71

    history = pd.read_parquet(tmp_path / "history.parquet")
    # the lookup predicts where another attempt ran the same model type on the same type
    done = history[history["event_type"] == "completed"].set_index("job_id")["hardware_type"]
    subs = history[history["event_type"] == "submitted"].set_index("job_id")["model_type"]
    cells = pd.DataFrame({"model": subs, "hardware": done}).value_counts()
    assert predictors["lookup"]["predicted"] == int(cells[cells > 1].sum())

    # the naive predictor is the importers' one, by job type (lineage)
    history["model_type"] = history["lineage_id"]
    expected = naive_ratio_summary(naive_ratio_predictions(history, num_devices=1))
    naive = predictors["naive_ratio"]
    assert naive["predicted"] == expected["n"] == 71
    assert naive["mape"] == pytest.approx(expected["mape"], abs=1e-6)
    assert naive["within_20pct_abstain_as_miss"] == pytest.approx(expected["within"], abs=1e-6)
