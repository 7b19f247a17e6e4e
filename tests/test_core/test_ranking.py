"""Tests of leap_stream.core.ranking:

the order, abstention, risk, and the HardwareRanking record.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from leap_stream.core.ranking import Ranking, cost_per_1k_samples, rank_candidates
from leap_stream.data import codec

WHEN = datetime(2025, 6, 2, 12, tzinfo=UTC)
NAN = np.nan


def _rank(
    hardware: tuple[str, ...],
    eligible: list[bool],
    predicted: list[float],
    price: list[float],
    *,
    num_devices: int = 8,
    risk: list[float] | None = None,
) -> Ranking:
    n = len(hardware)
    p = np.array(predicted, dtype=float)

    def reasons(i: int) -> str | None:
        return None if eligible[i] else f"{hardware[i]} is out"

    return rank_candidates(
        job_id="j1",
        lineage_id="l1",
        event_time=WHEN,
        model_version="test@0",
        num_devices=num_devices,
        hardware=hardware,
        eligible=np.array(eligible, dtype=bool),
        reasons=reasons,
        predicted=p,
        lower=p * 0.9,
        upper=p * 1.1,
        price=np.array(price, dtype=float),
        source=np.array(["model"] * n),
        risk=None if risk is None else np.array(risk, dtype=float),
    )


def test_cost_per_1k_samples_is_devices_times_price_over_throughput() -> None:
    # 8 devices x 3.6 USD/h = 28.8 USD/h; 1,000 samples/s = 3.6M samples/h -> 0.008 USD / 1k
    got = cost_per_1k_samples(8, np.array([3.6]), np.array([1000.0]))
    assert got.tolist() == pytest.approx([0.008])


def test_eligible_with_prediction_first_by_cost_then_unpredicted_then_ineligible() -> None:
    hw = ("ineligible-cheap", "no-prediction", "expensive", "cheap", "ineligible-nan")
    r = _rank(
        hw,
        eligible=[False, True, True, True, False],
        predicted=[1e9, NAN, 100.0, 400.0, NAN],
        price=[0.01, 1.0, 1.0, 2.0, 1.0],
    )
    # cost per 1k: expensive 8*1/100, cheap 8*2/400 (half of it)
    assert r.ranked_hardware == (
        "cheap", "expensive", "no-prediction", "ineligible-cheap", "ineligible-nan"
    )  # fmt: skip
    assert r.ranked_count == 2
    assert r.top == "cheap"
    assert not r.abstained and r.abstain_reason is None
    expected = 8 * np.array([2.0, 1.0]) * 1000.0 / (np.array([400.0, 100.0]) * 3600.0)
    assert r.cost_per_1k[[3, 2]].tolist() == pytest.approx(expected.tolist())
    # NaN where ineligible or unpredicted
    assert np.isnan(r.cost_per_1k[[0, 1, 4]]).all()


def test_order_is_by_cost_not_by_throughput() -> None:
    # the fastest is not the cheapest per sample
    r = _rank(("fast", "slow"), [True, True], [1000.0, 300.0], [10.0, 1.0])
    assert r.ranked_hardware == ("slow", "fast")


def test_ties_keep_candidate_order() -> None:
    hw = ("c", "a", "b", "d", "e")
    r = _rank(
        hw,
        eligible=[True, True, True, False, False],
        predicted=[100.0, 200.0, 100.0, 5.0, 1.0],
        price=[1.0, 2.0, 1.0, 1.0, 1.0],
    )
    # c, a, b cost the same; d, e are ineligible, in the order given
    assert r.ranked_hardware == ("c", "a", "b", "d", "e")
    unpredicted = _rank(("x", "y", "z"), [True, True, True], [NAN, NAN, 10.0], [1.0] * 3)
    assert unpredicted.ranked_hardware == ("z", "x", "y")


def test_order_is_a_permutation_of_candidates() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(1, 12))
        eligible = (rng.random(n) < 0.6).tolist()
        predicted = np.where(rng.random(n) < 0.8, rng.uniform(1, 1000, n), NAN).tolist()
        r = _rank(tuple(f"h{i}" for i in range(n)), eligible, predicted, rng.uniform(0.5, 9, n))
        assert sorted(r.order.tolist()) == list(range(n))
        head = r.order[: r.ranked_count]
        assert all(eligible[i] and np.isfinite(predicted[i]) for i in head)
        assert r.ranked_count == sum(
            e and np.isfinite(p) for e, p in zip(eligible, predicted, strict=True)
        )


def test_abstains_with_the_reasons_when_nothing_is_eligible() -> None:
    r = _rank(("b", "a"), [False, False], [100.0, 200.0], [1.0, 1.0])
    assert r.abstained
    assert r.top is None
    assert r.ranked_count == 0
    # the distinct reasons, sorted
    assert r.abstain_reason == "no eligible candidate: a is out; b is out"
    assert r.ranked_hardware == ("b", "a")


def test_abstains_when_no_eligible_candidate_has_a_prediction() -> None:
    r = _rank(("a", "b", "c"), [True, True, False], [NAN, NAN, 100.0], [1.0] * 3)
    assert r.abstained
    assert r.abstain_reason == "no prediction for any eligible candidate"
    assert r.top is None
    assert r.ranked_hardware == ("a", "b", "c")


def test_one_rankable_candidate_is_enough_not_to_abstain() -> None:
    r = _rank(("a", "b"), [True, True], [NAN, 5.0], [1.0, 1.0])
    assert not r.abstained and r.top == "b"


def test_risk_reorders_by_cost_times_exp_risk_but_leaves_cost_unchanged() -> None:
    hw = ("known", "barely-known")
    plain = _rank(hw, [True, True], [100.0, 120.0], [1.0, 1.0])
    assert plain.ranked_hardware == ("barely-known", "known")
    # 120/100 = 1.2 cheaper; a risk of log(1.3) on the barely-known one outweighs it
    risky = _rank(hw, [True, True], [100.0, 120.0], [1.0, 1.0], risk=[0.0, np.log(1.3)])
    assert risky.ranked_hardware == ("known", "barely-known")
    np.testing.assert_array_equal(risky.cost_per_1k, plain.cost_per_1k)
    # a risk that does not outweigh the gap leaves the order alone
    mild = _rank(hw, [True, True], [100.0, 120.0], [1.0, 1.0], risk=[0.0, np.log(1.1)])
    assert mild.ranked_hardware == ("barely-known", "known")
    assert risky.record()["candidates"][1]["predicted_cost_per_1k_samples"] == pytest.approx(
        8 * 1.0 * 1000 / (120.0 * 3600)
    )


def test_risk_does_not_rank_the_unrankable() -> None:
    r = _rank(("a", "b", "c"), [True, False, True], [10.0, 10.0, NAN], [1.0] * 3, risk=[5, 0, 0])
    assert r.ranked_hardware == ("a", "c", "b")
    assert r.ranked_count == 1


def _sample_ranking() -> Ranking:
    return _rank(
        ("H100-SXM", "MI300X", "L4", "K80"),
        eligible=[True, True, True, False],
        predicted=[20_000.0, 30_000.0, NAN, 900.0],
        price=[6.16, 6.0, 0.805, 0.9],
    )


def test_record_ranks_one_to_k_then_none() -> None:
    record = _sample_ranking().record()
    candidates = record["candidates"]
    assert [c["hardware_type"] for c in candidates] == ["MI300X", "H100-SXM", "L4", "K80"]
    assert [c["rank"] for c in candidates] == [1, 2, None, None]
    assert [c["eligible"] for c in candidates] == [True, True, True, False]
    assert [c["ineligible_reason"] for c in candidates] == [None, None, None, "K80 is out"]
    # an eligible candidate without a prediction has no throughput and no cost
    l4 = candidates[2]
    assert l4["predicted_throughput"] is None and l4["predicted_cost_per_1k_samples"] is None
    assert l4["throughput_lower"] is None and l4["throughput_upper"] is None
    assert candidates[0]["predicted_throughput"] == 30_000.0
    assert candidates[0]["throughput_lower"] == pytest.approx(27_000.0)
    assert candidates[0]["price_per_device_hour"] == 6.0
    assert record["abstained"] is False and record["abstain_reason"] is None
    assert record["event_id"] == "j1/ranking"
    assert _sample_ranking().record("ev-7")["event_id"] == "ev-7"
    assert (record["job_id"], record["lineage_id"], record["model_version"]) == (
        "j1", "l1", "test@0"
    )  # fmt: skip


def _plain(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "event_time": record["event_time"].timestamp()}


@pytest.mark.parametrize(
    "ranking",
    [
        _sample_ranking(),
        _rank(("a", "b"), [False, False], [NAN, NAN], [1.0, 2.0]),  # abstained
    ],
    ids=["ranked", "abstained"],
)
def test_record_is_a_valid_hardware_ranking(ranking: Ranking) -> None:
    record = ranking.record()
    decoded = codec.decode(codec.encode("HardwareRanking", record))
    assert _plain(decoded) == _plain(record)
    assert decoded["event_time"] == WHEN
    assert decoded["abstained"] is ranking.abstained


def test_record_types_are_plain_python() -> None:
    # numpy scalars would make the record unencodable for some writers (and unequal in JSON)
    for c in _sample_ranking().record()["candidates"]:
        for key in ("predicted_throughput", "price_per_device_hour", "throughput_upper"):
            assert c[key] is None or type(c[key]) is float
        assert c["rank"] is None or type(c["rank"]) is int
        assert type(c["eligible"]) is bool and type(c["source"]) is str


def _numpy_cost_and_order(
    eligible: np.ndarray, price: np.ndarray, predicted: np.ndarray, devices: int, risk: Any
) -> tuple[np.ndarray, np.ndarray, int]:
    """The order as numpy computed it before it was compiled: the reference."""
    with np.errstate(divide="ignore"):
        cost = np.where(eligible, devices * price * (1000.0 / 3600.0) / predicted, np.nan)
    rankable = eligible & np.isfinite(cost)
    key = cost if risk is None else cost * np.exp(risk)
    order = np.where(rankable, key, np.where(eligible, np.inf, np.nan)).argsort(kind="stable")
    return cost, order, int(np.count_nonzero(rankable))


@pytest.mark.parametrize("with_risk", [False, True])
def test_the_compiled_order_equals_numpys_to_the_bit(with_risk: bool) -> None:
    rng = np.random.default_rng(5)
    for _ in range(3000):
        n = int(rng.integers(1, 30))
        eligible = rng.random(n) < 0.8
        price = rng.choice([1.0, 2.5, 0.7, 12.0], n)  # equal prices: ties to keep in order
        predicted = rng.choice([100.0, 250.0, 1e-300, 0.0, NAN], n)
        predicted = np.where(rng.random(n) < 0.5, rng.lognormal(5.0, 2.0, n), predicted)
        devices = int(rng.integers(1, 513))
        risk = rng.choice([0.0, 0.1, 0.25], n) if with_risk else None
        ranking = rank_candidates(
            job_id="j", lineage_id="l", event_time=WHEN, model_version="v",
            num_devices=devices, hardware=tuple(str(i) for i in range(n)),
            eligible=eligible, reasons=lambda i: None, predicted=predicted,
            lower=predicted, upper=predicted, price=price,
            source=np.full(n, "model"), risk=risk,
        )  # fmt: skip
        cost, order, ranked = _numpy_cost_and_order(eligible, price, predicted, devices, risk)
        np.testing.assert_array_equal(ranking.cost_per_1k, cost)
        np.testing.assert_array_equal(ranking.order, order)
        assert ranking.ranked_count == ranked
