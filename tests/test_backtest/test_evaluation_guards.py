"""Tests that guard the evaluation itself (issue 8, item 5).

The other replay tests would all still pass if the evaluation were quietly wrong in ways that
flatter the model: every pick of the tiny history is also the oracle's cheapest type, and no
replay there scores a pair of candidates. These tests close those gaps:

- the replay prices the model's *own* first choice, not the oracle's cheapest type: a hand-made
  history where the model's ranking is known to pick a type that is not the cheapest must show
  that pick's cost, the exact regret and the (negative) savings that follow from it;
- pairwise order accuracy on one hand-made ranking whose pairs are counted by hand;
- on small generated fleets (slow), the model beats the lookup table and its 90% intervals
  cover between 85% and 95%.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from core_fixtures import completed_event, hours, submitted_event

from leap_stream.backtest import replay as replay_module
from leap_stream.backtest.replay import replay
from leap_stream.core import LeapCore, LookupRanker
from leap_stream.core.catalog import Catalog
from leap_stream.data.fleet.generator import FleetConfig, generate_fleet
from leap_stream.data.history import events_to_table, write_history, write_oracle

BATCH = 512  # submitted_event's global_batch_size
DEVICES = 8  # and num_devices
STEPS = 1000  # completed_event's steps

Event = tuple[str, dict[str, Any]]


def _cost(catalog: Catalog, hardware: str, true_throughput: float) -> float:
    """USD to process one attempt's samples on ``hardware`` at its true throughput."""
    price = catalog[hardware].price_per_device_hour
    return STEPS * BATCH * DEVICES * price / (3600.0 * true_throughput)


def _forced(
    job: str, lineage: str, h: float, hardware: str, throughput: float, **kw: Any
) -> list[Event]:
    """One attempt with a single candidate (every policy's pick is forced), run as requested."""
    return [
        ("submitted", submitted_event(job, lineage, hours(h), candidates=[hardware],
                                      requested=hardware, **kw)),
        ("completed", completed_event(job, lineage, hours(h + 1), hardware,
                                      throughput=throughput)),
    ]  # fmt: skip


def _write(
    tmp_path: Path, events: Sequence[Event], oracle: Sequence[tuple[str, str, float | None]]
) -> tuple[Path, Path]:
    history, truth = tmp_path / "history.parquet", tmp_path / "oracle.parquet"
    write_history([events_to_table(list(events))], history)
    frame = pd.DataFrame(list(oracle), columns=["job_id", "hardware_type", "throughput"])
    write_oracle([frame], truth)
    return history, truth


def _rank_last_submission(catalog: Catalog, events: Sequence[Event]) -> tuple[str, str]:
    """(model's top, lookup's top) for the last submission, after learning everything before."""
    core, lookup = LeapCore(catalog), LookupRanker(catalog)
    last = max(i for i, (kind, _) in enumerate(events) if kind == "submitted")
    for kind, event in events[:last]:
        if kind == "submitted":
            core.on_submitted(event)
            lookup.on_submitted(event)
        else:
            core.on_completed(event)
            lookup.on_completed(event)
    job = events[last][1]
    model_top, lookup_top = core.on_submitted(job).top, lookup.on_submitted(job).top
    assert model_top is not None and lookup_top is not None
    return model_top, lookup_top


# ----------------------------------------------------- the model's pick is what gets priced

# Day 1: lineage L1 measures its configuration on H100-SXM (20,000 samples/s) and on MI300X
# (30,000), one candidate each time; lineage L2, the same model type with another batch size,
# measures MI300X twice at 10,000. Day 2: L1 resubmits with both types as candidates and asks
# for H100-SXM. The model ranks from L1's own measurements: MI300X at 8 x 6.00 / 30,000 per
# sample beats H100-SXM at 8 x 6.16 / 20,000, so it picks MI300X. The lookup table's MI300X
# median is 10,000 (L2's two runs outvote L1's one), so it picks H100-SXM. The truth for that
# attempt: MI300X runs at only 15,000, H100-SXM at 21,000, so H100-SXM is the cheapest:
# the requested type and the lookup's pick are right, the model's pick is not.
PICK_EVENTS: list[Event] = [
    *_forced("j1", "L1", 0, "H100-SXM", 20_000.0),
    *_forced("j2", "L1", 2, "MI300X", 30_000.0),
    *_forced("k1", "L2", 4, "MI300X", 10_000.0, global_batch_size=2 * BATCH),
    *_forced("k2", "L2", 6, "MI300X", 10_000.0, global_batch_size=2 * BATCH),
    ("submitted", submitted_event("j3", "L1", hours(24), candidates=["H100-SXM", "MI300X"],
                                  requested="H100-SXM")),
    ("completed", completed_event("j3", "L1", hours(26), "H100-SXM", throughput=21_000.0)),
]  # fmt: skip
J3_TRUTH = {"H100-SXM": 21_000.0, "MI300X": 15_000.0}
PICK_ORACLE = [
    ("j1", "H100-SXM", 20_000.0),
    ("j2", "MI300X", 30_000.0),
    ("k1", "MI300X", 10_000.0),
    ("k2", "MI300X", 10_000.0),
    *(("j3", hardware, value) for hardware, value in J3_TRUTH.items()),
]


def test_the_replay_prices_the_models_own_pick_not_the_cheapest(
    tmp_path: Path, hw_catalog: Catalog
) -> None:
    # the premise, checked on the core itself: the model's pick for j3 is not the cheapest type
    model_pick, lookup_pick = _rank_last_submission(hw_catalog, PICK_EVENTS)
    j3 = {hw: _cost(hw_catalog, hw, value) for hw, value in J3_TRUTH.items()}
    cheapest = min(j3, key=j3.__getitem__)
    assert (model_pick, lookup_pick, cheapest) == ("MI300X", "H100-SXM", "H100-SXM")

    history, oracle = _write(tmp_path, PICK_EVENTS, PICK_ORACLE)
    out = tmp_path / "out"
    summary = replay(history, out, hw_catalog, oracle=oracle, progress=False, report=False)
    decisions = summary["decisions"]

    # j1, j2, k1, k2 had one candidate: every policy paid what they cost; only j3 can differ
    forced = [
        _cost(hw_catalog, "H100-SXM", 20_000.0),
        _cost(hw_catalog, "MI300X", 30_000.0),
        # k1, k2 process twice the samples (twice the batch)
        2 * _cost(hw_catalog, "MI300X", 10_000.0),
        2 * _cost(hw_catalog, "MI300X", 10_000.0),
    ]
    regret = j3[model_pick] / j3[cheapest] - 1.0
    assert regret > 0.3  # (6.00 / 15,000) / (6.16 / 21,000) - 1: 36% more than the best
    assert decisions["n"] == 5
    assert decisions["top1_regret"] == pytest.approx(regret / 5, abs=2e-6)
    assert decisions["lookup_top1_regret"] == 0.0  # the lookup's pick was the cheapest
    assert decisions["requested_regret"] == 0.0
    model_spend = sum(forced) + j3[model_pick]
    other_spend = sum(forced) + j3[cheapest]  # the request and the lookup's pick alike
    savings = 1.0 - model_spend / other_spend
    assert savings < 0.0  # following the model cost more than the user's own choice
    assert decisions["savings_vs_requested"] == pytest.approx(savings, abs=2e-6)
    assert decisions["savings_vs_lookup"] == pytest.approx(savings, abs=2e-6)
    assert decisions["n_vs_requested"] == decisions["n_vs_lookup"] == 5

    # day 2 holds j3 alone: its figures give back the cost of the model's pick itself
    day2 = pd.read_csv(out / "daily.csv").set_index("day").loc["2025-06-03"]
    assert day2["top1_regret"] == pytest.approx(regret, rel=1e-5)
    pick_cost = j3["H100-SXM"] * (1.0 - day2["savings_vs_requested"])
    assert pick_cost == pytest.approx(j3["MI300X"], rel=1e-5)


# ------------------------------------------------------------------ pairwise order accuracy

# Lineage L1 measures its configuration on five types, one candidate each time (measured
# throughput, so the model predicts exactly these from L1's own priors), then submits with six
# candidates. A type's cost per sample is proportional to price / throughput (prices in USD per
# device-hour, from the packaged catalog); the comments give that ratio.
PAIR_MEASURED = {
    "H100-SXM": 20_000.0,  # 6.16 / 20,000 = 3.08e-4: 3rd
    "H100-SXM-96GB": 22_000.0,  # 6.16 / 22,000 = 2.80e-4: 2nd
    "MI300X": 30_000.0,  # 6.00 / 30,000 = 2.00e-4: the model's cheapest
    "A100-SXM-80GB": 10_000.0,  # 3.93 / 10,000 = 3.93e-4: 4th
    "L40S": 5_000.0,
}
# The truth for the six-candidate attempt: the two H100s cost exactly the same (same price, same
# throughput: a tie, no order to get right), MI300X is slower than L1 measured, L40S cannot run
# it after all (null) and K80 has no bf16 (ineligible): neither of those two is in any pair.
PAIR_TRUTH: dict[str, float | None] = {
    "H100-SXM": 24_000.0,  # 6.16 / 24,000 = 2.57e-4: cheapest (tied)
    "H100-SXM-96GB": 24_000.0,  # the same: cheapest (tied)
    "MI300X": 20_000.0,  # 6.00 / 20,000 = 3.00e-4: 3rd
    "A100-SXM-80GB": 10_000.0,  # 3.93e-4: 4th
    "L40S": None,
    "K80": 1_000.0,
}
# The 6 pairs of the 4 types that can run it, by hand: (H100-SXM, H100-SXM-96GB) is tied in
# truth and left out; the model orders MI300X before both H100s, the truth after them (2 wrong);
# A100 is last in both orders against each of the other three (3 right). 3 of 5.
PAIRS_RIGHT, PAIRS_COUNTED = 3, 5


def test_pairwise_order_accuracy_counts_pairs_by_hand(
    tmp_path: Path, hw_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # score every attempt's pairs, not one attempt in PAIRWISE_EVERY
    monkeypatch.setattr(replay_module, "PAIRWISE_EVERY", 1)
    events: list[Event] = []
    for i, (hardware, value) in enumerate(PAIR_MEASURED.items()):
        events += _forced(f"m{i}", "L1", 2 * i, hardware, value)
    candidates = list(PAIR_TRUTH)
    events += [
        ("submitted", submitted_event("p", "L1", hours(24), candidates=candidates)),
        ("completed", completed_event("p", "L1", hours(25), "H100-SXM", throughput=24_000.0)),
    ]
    oracle = [(f"m{i}", hw, value) for i, (hw, value) in enumerate(PAIR_MEASURED.items())]
    oracle += [("p", hw, value) for hw, value in PAIR_TRUTH.items()]
    history, truth = _write(tmp_path, events, oracle)

    # the hand count, recounted from the catalog's prices (guards it against a price change)
    runnable = ["H100-SXM", "H100-SXM-96GB", "MI300X", "A100-SXM-80GB"]
    price = {hw: hw_catalog[hw].price_per_device_hour for hw in runnable}
    predicted = {hw: price[hw] / PAIR_MEASURED[hw] for hw in runnable}
    true = {hw: price[hw] / value for hw in runnable if (value := PAIR_TRUTH[hw]) is not None}
    counted = [(a, b) for a, b in itertools.combinations(runnable, 2) if true[a] != true[b]]
    right = [(a, b) for a, b in counted if (predicted[a] < predicted[b]) == (true[a] < true[b])]
    assert (len(right), len(counted)) == (PAIRS_RIGHT, PAIRS_COUNTED)

    summary = replay(history, tmp_path / "out", hw_catalog, oracle=truth, progress=False,
                     report=False)  # fmt: skip
    decisions = summary["decisions"]
    # the five one-candidate attempts have no pair: only the last attempt's pairs count
    assert decisions["pairwise_total"] == PAIRS_COUNTED
    assert decisions["pairwise_order_accuracy"] == pytest.approx(PAIRS_RIGHT / PAIRS_COUNTED)


# ------------------------------------------------------------- statistical: generated fleets

# Two weeks at 500 jobs a day (about 6,000 attempts; 2-3 s each to generate and replay). On
# seeds 1-5 (and at 12 x 400, 14 x 1,000 and 28 x 1,000 days x jobs) the model's within-20%
# share, abstentions as misses, beat the lookup table's by 7 to 24 points, and interval coverage
# stayed within 0.90-0.93. Within 10% is not won on every fleet at this age: on seed 2 (a fleet
# dominated by two tiny, memory-bound CNNs, where the lookup's median is hard to beat) the lookup
# led by 3-4 points, on the other four the model by 1.5 to 18 (about 8 points on average over the
# five); so that figure is asserted over the five fleets together, not fleet by fleet.
FLEET_DAYS, FLEET_JOBS_PER_DAY = 14, 500
FLEET_SEEDS = (1, 2, 3, 4, 5)
MIN_ADVANTAGE_20PCT_POINTS = 3.0
MIN_MEAN_ADVANTAGE_10PCT_POINTS = 3.0


@pytest.fixture(scope="module")
def fleet_summaries(
    tmp_path_factory: pytest.TempPathFactory, hw_catalog: Catalog
) -> dict[int, dict[str, Any]]:
    """The replay summary of each generated fleet, by seed (generated once for the module)."""
    summaries = {}
    for seed in FLEET_SEEDS:
        out = tmp_path_factory.mktemp(f"fleet-{seed}")
        config = FleetConfig(days=FLEET_DAYS, jobs_per_day=FLEET_JOBS_PER_DAY, seed=seed)
        generate_fleet(config, out, hw_catalog, progress=False)
        summaries[seed] = replay(
            out / "history.parquet",
            out / "replay",
            hw_catalog,
            oracle=out / "oracle.parquet",
            progress=False,
            report=False,
        )
    return summaries


def _advantage_points(summary: dict[str, Any], band: str) -> float:
    """Model minus lookup share within ``band`` (10 or 20), abstentions as misses, in points."""
    key = f"within_{band}pct_abstain_as_miss"
    return 100.0 * (summary["accuracy"][key] - summary["baselines"]["lookup"][key])


@pytest.mark.slow
@pytest.mark.parametrize("seed", FLEET_SEEDS)
def test_on_a_generated_fleet_intervals_cover_near_nominal(
    fleet_summaries: dict[int, dict[str, Any]], seed: int
) -> None:
    intervals = fleet_summaries[seed]["intervals"]
    assert intervals["nominal"] == 0.9
    assert intervals["n"] > 4_000
    assert 0.85 <= intervals["coverage"] <= 0.95


@pytest.mark.slow
@pytest.mark.parametrize("seed", FLEET_SEEDS)
def test_on_a_generated_fleet_the_model_beats_the_lookup_within_20pct(
    fleet_summaries: dict[int, dict[str, Any]], seed: int
) -> None:
    summary = fleet_summaries[seed]
    assert summary["coverage"] > summary["baselines"]["lookup"]["coverage"]
    assert _advantage_points(summary, "20") >= MIN_ADVANTAGE_20PCT_POINTS


@pytest.mark.slow
def test_on_generated_fleets_the_model_beats_the_lookup_within_10pct(
    fleet_summaries: dict[int, dict[str, Any]],
) -> None:
    advantages = [_advantage_points(fleet_summaries[seed], "10") for seed in FLEET_SEEDS]
    # the summary's own figure says the same
    for seed, advantage in zip(FLEET_SEEDS, advantages, strict=True):
        comparison = fleet_summaries[seed]["baselines"]["lookup"]["comparison"]
        assert comparison["advantage_abstain_as_miss_points"] == pytest.approx(advantage, abs=1e-3)
    assert math.fsum(advantages) / len(advantages) >= MIN_MEAN_ADVANTAGE_10PCT_POINTS
