"""Tests of leap_stream.backtest.metrics:

a hand-scored fleet of six attempts, edge cases, bad input.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import date
from typing import Any

import numpy as np
import pandas as pd
import pytest

from leap_stream.backtest import metrics
from leap_stream.backtest.metrics import AttemptOutcome, Backtest, MetricsError

DAY1, DAY2 = date(2025, 3, 1), date(2025, 3, 2)


def _attempt(**fields: Any) -> AttemptOutcome:
    base: dict[str, Any] = {
        "day": DAY1,
        "family": "decoder-transformer",
        "hardware": "H100-SXM",
        "status": "succeeded",
        "actual": 100.0,
        "model_predicted": 100.0,
        "model_lower": None,
        "model_upper": None,
        "model_source": "model",
        "lookup_predicted": None,
        "has_eligible": True,
        "model_ranked": True,
        "lookup_ranked": False,
        "device_hours": 1.0,
    }
    base.update(fields)
    return AttemptOutcome(**base)


# The hand-scored fleet. Signed relative errors (pred - actual) / actual:
#   A1 model -5/105 = -0.047619, lookup -0.047619    A2 model -10/150 = -0.066667, lookup abstains
#   A3 model +0.1 (exactly 10%: inside), lookup +0.3  A4 failed: nothing to score
#   A5 model abstains, lookup -0.1 (inside)          A6 no eligible candidate, nobody predicts
FLEET = [
    _attempt(  # A1
        actual=105.0, model_predicted=100.0, model_lower=90.0, model_upper=110.0,
        lookup_predicted=100.0, lookup_ranked=True, device_hours=10.0,
        cost_model=10.0, cost_lookup=12.0, cost_requested=15.0, cost_best=10.0,
        pairwise_correct=3, pairwise_total=3,
    ),
    _attempt(  # A2
        actual=150.0, model_predicted=140.0, model_lower=130.0, model_upper=145.0,
        model_source="lineage_prior", device_hours=20.0,
        cost_model=12.0, cost_lookup=12.0, cost_requested=12.0, cost_best=10.0,
        pairwise_correct=1, pairwise_total=3,
    ),
    _attempt(  # A3
        day=DAY2, hardware="MI300X", family="cnn", actual=100.0, model_predicted=110.0,
        model_lower=100.0, model_upper=130.0, model_source="cold_start",
        lookup_predicted=130.0, lookup_ranked=True, device_hours=5.0,
        cost_model=8.0, cost_lookup=8.0, cost_requested=None, cost_best=8.0,
        pairwise_correct=2, pairwise_total=2,
    ),
    _attempt(  # A4
        day=DAY2, hardware="MI300X", family="cnn", status="failed", actual=None,
        model_predicted=50.0, lookup_predicted=None, device_hours=4.0,
        cost_model=1.0, cost_lookup=2.0, cost_requested=2.0, cost_best=1.0,
    ),
    _attempt(  # A5
        day=DAY2, hardware="TPU-v5p", actual=200.0, model_predicted=None, model_source=None,
        model_ranked=False, lookup_predicted=180.0, lookup_ranked=True, device_hours=1.0,
        cost_model=None, cost_lookup=5.0, cost_requested=5.0, cost_best=4.0,
    ),
    _attempt(  # A6
        day=DAY2, hardware="TPU-v5p", actual=100.0, model_predicted=None, model_source=None,
        has_eligible=False, model_ranked=False, device_hours=100.0,
    ),
]  # fmt: skip


@pytest.fixture
def fleet() -> Backtest:
    bt = Backtest(interval_level=0.9)
    for o in FLEET:
        bt.observe_submission(o.day, o.has_eligible, o.model_ranked, o.lookup_ranked)
        bt.observe(o)
    bt.observe_submission(DAY2, True, True, True)  # S7: still running at the end of the replay
    return bt


def test_counts_and_coverage(fleet: Backtest) -> None:
    s = fleet.summary({"submitted": 7, "completed": 6}, events_per_second=1234.5678901)
    assert s["events"] == {"submitted": 7, "completed": 6}
    assert (s["submissions"], s["attempts"], s["succeeded"]) == (7, 6, 5)
    assert s["coverage"] == pytest.approx(5 / 6, abs=1e-6)  # A6 has no eligible candidate
    assert s["coverage_gpu_hours"] == pytest.approx(39 / 40, abs=1e-6)  # A6's 100 h excluded
    lookup = s["baselines"]["lookup"]
    assert lookup["coverage"] == pytest.approx(4 / 6, abs=1e-6)
    assert lookup["coverage_gpu_hours"] == pytest.approx(16 / 40, abs=1e-6)
    assert s["events_per_second"] == 1234.56789


def test_model_accuracy(fleet: Backtest) -> None:
    acc = fleet.summary({}, 0.0)["accuracy"]
    assert acc["n"] == 3  # A1, A2, A3: succeeded, measured, predicted
    assert acc["within_10pct"] == 1.0  # A3's exactly-10% error counts as within
    assert acc["within_20pct"] == 1.0
    assert acc["mdape"] == pytest.approx(10 / 150, abs=1e-6)
    assert acc["mape"] == pytest.approx((5 / 105 + 10 / 150 + 0.1) / 3, abs=1e-6)
    assert acc["median_signed_error"] == pytest.approx(-5 / 105, abs=1e-6)
    # over the five measured successes (A1, A2, A3, A5, A6); A5 and A6 are abstentions
    assert acc["within_10pct_abstain_as_miss"] == 0.6
    assert acc["by_source"] == {
        "lineage_prior": {
            "n": 1, "within_10pct": 1.0, "within_20pct": 1.0,
            "mdape": pytest.approx(10 / 150, abs=1e-6),
        },
        "model": {
            "n": 1, "within_10pct": 1.0, "within_20pct": 1.0,
            "mdape": pytest.approx(5 / 105, abs=1e-6),
        },
        "cold_start": {"n": 1, "within_10pct": 1.0, "within_20pct": 1.0, "mdape": 0.1},
    }  # fmt: skip


def test_by_source_headline_block(fleet: Backtest) -> None:
    by_source = fleet.summary({}, 0.0)["by_source"]
    # one scored, predicted attempt per source; A2's 150 lies above its interval [130, 145]
    assert by_source["lineage_prior"] == pytest.approx(
        {
            "n": 1, "share": 1 / 3, "within_10pct": 1.0, "within_20pct": 1.0,
            "mdape": 10 / 150, "interval_n": 1, "interval_coverage": 0.0,
        },
        abs=1e-6,
    )  # fmt: skip
    assert by_source["model"]["interval_coverage"] == 1.0
    assert by_source["cold_start"]["mdape"] == 0.1
    assert list(by_source) == ["lineage_prior", "model", "cold_start"]  # SOURCES order


def test_by_source_bands_differ_per_source() -> None:
    bt = Backtest()
    for err in (0.05, 0.15, 0.30):  # transfers: one within 10%, two within 20%
        bt.observe(_attempt(model_predicted=100.0 * (1 + err), model_source="transfer"))
    bt.observe(_attempt(model_predicted=102.0, model_source="lineage_prior"))
    by_source = bt.summary({}, 0.0)["by_source"]
    transfer = by_source["transfer"]
    assert transfer["n"] == 3 and transfer["share"] == 0.75
    assert transfer["within_10pct"] == pytest.approx(1 / 3, abs=1e-6)
    assert transfer["within_20pct"] == pytest.approx(2 / 3, abs=1e-6)
    assert transfer["mdape"] == pytest.approx(0.15, abs=1e-6)
    assert transfer["interval_n"] == 0 and transfer["interval_coverage"] is None
    assert by_source["lineage_prior"]["within_10pct"] == 1.0


def test_oracle_ceiling_scores_the_oracle_on_the_models_attempts() -> None:
    bt = Backtest()
    # (model's prediction, oracle's expected throughput, source); actual 100 throughout
    cases = [(100.0, 104.0, "lineage_prior"), (130.0, 92.0, "transfer"),
             (90.0, 115.0, "transfer"), (None, 100.0, None)]  # fmt: skip
    for predicted, oracle, source in cases:
        ranked = source is not None
        bt.observe(
            _attempt(model_predicted=predicted, model_source=source, model_ranked=ranked,
                     oracle_predicted=oracle)
        )  # fmt: skip
    bt.observe(_attempt(status="failed", actual=None, oracle_predicted=50.0))  # not scored
    ceiling = bt.summary({}, 0.0)["oracle_ceiling"]
    # the model abstained on the fourth: it is left out, like in `accuracy`
    assert ceiling["n"] == 3
    assert ceiling["within_10pct"] == pytest.approx(2 / 3, abs=1e-6)
    assert ceiling["within_20pct"] == 1.0
    assert ceiling["mdape"] == pytest.approx(0.08, abs=1e-6)
    assert ceiling["median_signed_error"] == pytest.approx(0.04, abs=1e-6)
    assert ceiling["by_source"]["transfer"] == pytest.approx(
        {"n": 2, "within_10pct": 0.5, "within_20pct": 1.0, "mdape": 0.115}, abs=1e-6
    )
    assert ceiling["by_source"]["lineage_prior"]["mdape"] == pytest.approx(0.04, abs=1e-6)


def test_no_oracle_means_no_ceiling(fleet: Backtest) -> None:
    assert "oracle_ceiling" not in fleet.summary({}, 0.0)


def test_holdout_figures_count_abstentions_as_misses() -> None:
    bt = Backtest()
    # held out on B300: the model predicts 3 of 4 (errors 5%, 15%, 40%), the lookup none
    for predicted in (105.0, 115.0, 140.0, None):
        bt.observe(
            _attempt(hardware="B300", model_predicted=predicted, oracle_predicted=101.0,
                     model_source="cold_start" if predicted else None, holdout=True)
        )  # fmt: skip
    bt.observe(_attempt(hardware="B300", model_predicted=100.0))  # after the holdout
    s = bt.summary({}, 0.0)
    h = s["holdout"]
    assert h == bt.holdout_figures()
    assert h["n"] == 4
    assert h["model"]["n"] == 3
    assert h["model"]["within_10pct_abstain_as_miss"] == 0.25
    assert h["model"]["within_20pct_abstain_as_miss"] == 0.5
    assert h["model"]["within_10pct"] == pytest.approx(1 / 3, abs=1e-6)
    assert h["model"]["mdape"] == pytest.approx(0.15, abs=1e-6)
    assert h["lookup"]["n"] == 0 and h["lookup"]["within_10pct_abstain_as_miss"] == 0.0
    assert h["oracle"]["within_10pct_abstain_as_miss"] == 1.0
    assert h["model_sources"] == {"cold_start": 3}
    assert h["by_hardware"]["B300"]["n"] == 4
    assert h["by_hardware"]["B300"]["model_within_10pct_abstain_as_miss"] == 0.25
    assert s["accuracy"]["n"] == 4  # held-out attempts are scored in the overall figures too
    assert "holdout" not in _fleet_summary()


def _fleet_summary() -> dict[str, Any]:
    bt = Backtest()
    for o in FLEET:
        bt.observe(o)
    return bt.summary({}, 0.0)


def test_intervals(fleet: Backtest) -> None:
    iv = fleet.summary({}, 0.0)["intervals"]
    assert iv["nominal"] == 0.9
    assert iv["n"] == 3
    assert iv["coverage"] == pytest.approx(2 / 3, abs=1e-6)  # A2's 150 is above [130, 145]
    assert iv["median_relative_width"] == pytest.approx(0.2, abs=1e-6)  # 0.107, 0.2, 0.273
    assert iv["by_source"] == {
        "lineage_prior": {"n": 1, "coverage": 0.0},
        "model": {"n": 1, "coverage": 1.0},
        "cold_start": {"n": 1, "coverage": 1.0},  # 100 on the lower bound is inside
    }


def test_lookup_baseline_and_comparison(fleet: Backtest) -> None:
    lookup = fleet.summary({}, 0.0)["baselines"]["lookup"]
    acc = lookup["accuracy"]
    assert acc["n"] == 3  # A1, A3, A5
    assert acc["within_10pct"] == pytest.approx(2 / 3, abs=1e-6)  # A5 exactly 10% under
    assert acc["mdape"] == 0.1
    assert acc["mape"] == pytest.approx((5 / 105 + 0.3 + 0.1) / 3, abs=1e-6)
    assert lookup["within_10pct_abstain_as_miss"] == 0.4  # 2 of 5 measured successes
    assert lookup["within_20pct_abstain_as_miss"] == 0.4
    assert lookup["comparison"] == {
        "n": 2,  # A1 and A3: both predicted
        "model_within_10pct": 1.0,
        "lookup_within_10pct": 0.5,
        "advantage_abstain_as_miss_points": 20.0,  # 60% - 40%
    }


def test_decisions(fleet: Backtest) -> None:
    d = fleet.summary({}, 0.0)["decisions"]
    assert d["n"] == 4  # A5 (model abstained) and A6 (no costs) have no model regret
    assert d["top1_regret"] == pytest.approx((0 + 0.2 + 0 + 0) / 4, abs=1e-6)
    assert d["lookup_top1_regret"] == pytest.approx((0.2 + 0.2 + 0 + 1.0 + 0.25) / 5, abs=1e-6)
    assert d["requested_regret"] == pytest.approx((0.5 + 0.2 + 1.0 + 0.25) / 4, abs=1e-6)
    assert d["savings_vs_requested"] == pytest.approx(1 - 23 / 29, abs=1e-6)  # A1, A2, A4
    assert d["n_vs_requested"] == 3
    assert d["savings_vs_lookup"] == pytest.approx(1 - 31 / 34, abs=1e-6)  # A1..A4
    assert d["n_vs_lookup"] == 4
    assert d["pairwise_order_accuracy"] == 0.75
    assert d["pairwise_total"] == 8


def test_unrunnable_picks_and_decisions_by_pick_source() -> None:
    bt = Backtest()
    # a transfer pick that could not run: charged the failed try plus the next choice (15 + 10)
    bt.observe(
        _attempt(
            cost_model=25.0,
            cost_lookup=10.0,
            cost_requested=20.0,
            cost_best=10.0,
            model_pick_source="transfer",
            model_pick_unrunnable=True,
        )
    )
    bt.observe(
        _attempt(
            cost_model=10.0,
            cost_lookup=30.0,
            cost_requested=10.0,
            cost_best=10.0,
            model_pick_source="transfer",
            lookup_pick_unrunnable=True,
        )
    )
    bt.observe(_attempt(cost_model=12.0, cost_lookup=12.0, cost_requested=12.0, cost_best=8.0,
                        model_pick_source="lineage_prior"))  # fmt: skip
    d = bt.summary({}, 0.0)["decisions"]
    assert (d["unrunnable_picks"], d["lookup_unrunnable_picks"]) == (1, 1)
    assert d["top1_regret"] == pytest.approx((1.5 + 0 + 0.5) / 3, abs=1e-6)
    transfer = d["by_source"]["transfer"]
    assert transfer == pytest.approx(
        {"n": 2, "top1_regret": 0.75, "savings_vs_requested": 1 - 35 / 30, "n_vs_requested": 2,
         "unrunnable_picks": 1},
        abs=1e-6,
    )  # fmt: skip
    assert d["by_source"]["lineage_prior"]["top1_regret"] == pytest.approx(0.5, abs=1e-6)
    assert d["by_source"]["lineage_prior"]["unrunnable_picks"] == 0


def test_daily(fleet: Backtest) -> None:
    daily = fleet.daily()
    assert list(daily.columns) == [
        "day", "submissions", "coverage", "lookup_coverage", "succeeded", "within_10pct",
        "within_20pct", "mdape", "lookup_within_10pct", "lookup_within_10pct_abstain_as_miss",
        "interval_coverage", "top1_regret", "savings_vs_requested", "savings_vs_lookup",
    ]  # fmt: skip
    assert list(daily["day"]) == [pd.Timestamp(DAY1), pd.Timestamp(DAY2)]
    got = daily.drop(columns="day").to_dict("records")
    expected = [
        {
            "submissions": 2, "coverage": 1.0, "lookup_coverage": 0.5, "succeeded": 2,
            "within_10pct": 1.0, "within_20pct": 1.0, "mdape": (5 / 105 + 10 / 150) / 2,
            "lookup_within_10pct": 1.0, "lookup_within_10pct_abstain_as_miss": 0.5,
            "interval_coverage": 0.5, "top1_regret": 0.1,
            "savings_vs_requested": 1 - 22 / 27, "savings_vs_lookup": 1 - 22 / 24,
        },
        {
            "submissions": 5, "coverage": 0.75, "lookup_coverage": 0.75, "succeeded": 3,
            "within_10pct": 1.0, "within_20pct": 1.0, "mdape": 0.1,
            "lookup_within_10pct": 0.5, "lookup_within_10pct_abstain_as_miss": 1 / 3,
            "interval_coverage": 1.0, "top1_regret": 0.0,
            "savings_vs_requested": 0.5, "savings_vs_lookup": 0.1,
        },
    ]  # fmt: skip
    for row, want in zip(got, expected, strict=True):
        assert row == pytest.approx(want, abs=1e-6)


def test_by_hardware_and_family(fleet: Backtest) -> None:
    hw = fleet.by_hardware()
    assert list(hw["hardware"]) == ["H100-SXM", "TPU-v5p", "MI300X"]  # by n, then name
    assert list(hw["n"]) == [2, 2, 1]
    assert list(hw["model_n"]) == [2, 0, 1]
    assert hw["model_mdape"].tolist() == pytest.approx(
        [(5 / 105 + 10 / 150) / 2, math.nan, 0.1], abs=1e-6, nan_ok=True
    )
    assert hw["lookup_within_10pct"].tolist() == [1.0, 1.0, 0.0]
    assert hw["lookup_mdape"].tolist() == pytest.approx([5 / 105, 0.1, 0.3], abs=1e-6)
    # like for like: on H100-SXM only A1 was predicted by both (A2 by the model alone), on
    # TPU-v5p none (A5 by the lookup alone)
    assert list(hw["both_n"]) == [1, 0, 1]
    assert hw["both_model_mdape"].tolist() == pytest.approx(
        [5 / 105, math.nan, 0.1], abs=1e-6, nan_ok=True
    )
    assert hw["both_lookup_mdape"].tolist() == pytest.approx(
        [5 / 105, math.nan, 0.3], abs=1e-6, nan_ok=True
    )
    fam = fleet.by_family().set_index("family")
    assert fam.loc["cnn", "n"] == 1
    assert fam.loc["decoder-transformer", "n"] == 4
    assert fam.loc["cnn", "lookup_within_10pct"] == 0.0


def test_calibration(fleet: Backtest) -> None:
    cal = fleet.calibration()
    rows = [
        (r.day.date(), r.source, r.n, r.covered, r.coverage) for r in cal.itertuples(index=False)
    ]
    assert rows == [
        (DAY1, "all", 2, 1, 0.5),
        (DAY1, "lineage_prior", 1, 0, 0.0),
        (DAY1, "model", 1, 1, 1.0),
        (DAY2, "all", 1, 1, 1.0),
        (DAY2, "cold_start", 1, 1, 1.0),
    ]
    assert set(cal["nominal"]) == {0.9}


def test_summary_is_json_and_reproducible(fleet: Backtest) -> None:
    again = Backtest(interval_level=0.9)
    for o in FLEET:
        again.observe_submission(o.day, o.has_eligible, o.model_ranked, o.lookup_ranked)
        again.observe(o)
    again.observe_submission(DAY2, True, True, True)
    first = json.dumps(fleet.summary({"a": 1}, 10.0), allow_nan=False, sort_keys=True)
    assert first == json.dumps(again.summary({"a": 1}, 10.0), allow_nan=False, sort_keys=True)


def test_no_oracle_means_no_decisions_block() -> None:
    bt = Backtest()
    bt.observe(_attempt(actual=105.0))
    s = bt.summary({}, 0.0)
    assert "decisions" not in s
    assert (
        bt.daily()[["top1_regret", "savings_vs_requested", "savings_vs_lookup"]]
        .isna()
        .all(axis=None)
    )


def test_no_succeeded_attempts() -> None:
    bt = Backtest()
    bt.observe_submission(DAY1, True, True, False)
    bt.observe(_attempt(status="preempted", actual=None, model_lower=1.0, model_upper=2.0))
    s = bt.summary({}, 0.0)
    json.dumps(s, allow_nan=False)
    assert s["succeeded"] == 0
    assert s["accuracy"]["n"] == 0
    assert s["accuracy"]["within_10pct"] is None and s["accuracy"]["mdape"] is None
    assert s["accuracy"]["within_10pct_abstain_as_miss"] is None
    assert s["intervals"]["coverage"] is None
    assert s["baselines"]["lookup"]["comparison"]["advantage_abstain_as_miss_points"] is None
    day = bt.daily().iloc[0]
    assert day["succeeded"] == 0 and math.isnan(day["within_10pct"]) and math.isnan(day["mdape"])
    assert bt.calibration().empty


def test_empty_backtest() -> None:
    bt = Backtest()
    s = bt.summary({}, 0.0)
    json.dumps(s, allow_nan=False)
    assert (s["attempts"], s["coverage"], s["coverage_gpu_hours"]) == (0, None, None)
    assert bt.daily().empty and len(bt.daily().columns) == 14
    assert s["by_source"] == {} and "oracle_ceiling" not in s and "holdout" not in s
    assert bt.by_hardware().empty and bt.by_family().empty


def test_nan_prediction_counts_as_no_prediction() -> None:
    bt = Backtest()
    bt.observe(_attempt(model_predicted=math.nan, lookup_predicted=math.nan, actual=100.0))
    s = bt.summary({}, 0.0)
    assert s["accuracy"]["n"] == 0 and s["baselines"]["lookup"]["accuracy"]["n"] == 0
    assert s["accuracy"]["within_10pct_abstain_as_miss"] == 0.0


def test_succeeded_without_measurement_is_not_scored() -> None:
    bt = Backtest()
    bt.observe(_attempt(actual=None, model_predicted=100.0))
    s = bt.summary({}, 0.0)
    assert s["succeeded"] == 1 and s["accuracy"]["n"] == 0
    assert s["accuracy"]["within_10pct_abstain_as_miss"] is None  # nothing to be a miss of


def test_zero_cost_attempts_have_no_regret() -> None:
    bt = Backtest()
    bt.observe(_attempt(status="failed", actual=None, cost_model=0.0, cost_best=0.0))
    bt.observe(_attempt(cost_model=3.0, cost_best=2.0))
    assert bt.summary({}, 0.0)["decisions"]["top1_regret"] == 0.5


def test_rows_survive_chunk_boundaries_and_repeated_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_CHUNK_ROWS", 4)
    bt = Backtest()
    errors = np.linspace(-0.3, 0.3, 11)
    for i, e in enumerate(errors[:7]):
        bt.observe(_attempt(actual=100.0, model_predicted=100.0 * (1 + e), device_hours=i))
    assert bt.summary({}, 0.0)["accuracy"]["n"] == 7
    assert bt.summary({}, 0.0)["accuracy"]["n"] == 7  # reading twice changes nothing
    for e in errors[7:]:
        bt.observe(_attempt(actual=100.0, model_predicted=100.0 * (1 + e)))
    acc = bt.summary({}, 0.0)["accuracy"]
    assert acc["n"] == 11
    assert acc["within_10pct"] == pytest.approx(3 / 11, abs=1e-6)  # -0.06, 0, +0.06
    assert acc["mdape"] == pytest.approx(0.18, abs=1e-6)
    assert bt.by_hardware()["model_n"].tolist() == [11]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"status": "done"}, "status 'done' is not one of succeeded|failed|preempted"),
        ({"model_source": "oracle"}, "model_source 'oracle' is not one of"),
        ({"model_pick_source": "guess"}, "model_pick_source 'guess' is not one of"),
        ({"oracle_predicted": 0.0}, "oracle_predicted must be finite and > 0, got 0.0"),
        ({"oracle_predicted": math.inf}, "oracle_predicted must be finite and > 0, got inf"),
        ({"device_hours": -1.0}, "device_hours must be finite and >= 0, got -1.0"),
        ({"device_hours": math.nan}, "device_hours must be finite and >= 0, got nan"),
        ({"has_eligible": False}, "a ranking without an eligible candidate"),
        ({"status": "failed"}, "actual throughput 100.0 given for a failed attempt"),
        ({"actual": 0.0}, "actual throughput must be finite and > 0 samples/s, got 0.0"),
        ({"model_lower": 120.0, "model_upper": 80.0}, "the interval [120.0, 80.0] is not a"),
        ({"model_lower": 1.0, "model_upper": math.inf}, "the interval [1.0, inf] is not a"),
        ({"model_predicted": math.inf}, "model_predicted is inf"),
        ({"lookup_predicted": -math.inf}, "lookup_predicted is -inf"),
        ({"cost_best": -2.0}, "cost_best must be a finite cost >= 0 USD, got -2.0"),
        ({"cost_model": math.inf}, "cost_model must be a finite cost >= 0 USD, got inf"),
        ({"pairwise_correct": 3, "pairwise_total": 2}, "pairwise_correct 3 must lie in [0, "),
        ({"family": ""}, "family must be a non-empty string"),
    ],
)
def test_bad_outcome_is_named(change: dict[str, Any], message: str) -> None:
    bt = Backtest()
    bt.observe(_attempt())
    with pytest.raises(MetricsError) as caught:
        bt.observe(replace(_attempt(), **change))
    assert message in str(caught.value)
    assert str(caught.value).startswith("attempt #2 (2025-03-01, ")
    assert bt.attempts == 1  # the bad outcome left nothing behind


def test_bad_submission_and_level() -> None:
    bt = Backtest()
    with pytest.raises(MetricsError, match=r"submission #1 \(2025-03-01\): a ranking without"):
        bt.observe_submission(DAY1, has_eligible=False, model_ranked=True, lookup_ranked=False)
    for level in (0.0, 1.0, 1.5):
        with pytest.raises(MetricsError, match="interval_level must be strictly between 0 and 1"):
            Backtest(interval_level=level)
