"""The service's champion/challenger scoreboard: who is scored on what, and when the rule runs."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from leap_stream.core.catalog import Catalog
from leap_stream.core.champion import ONLINE, ChampionChallenger
from leap_stream.core.ensemble import ENSEMBLE
from leap_stream.core.features import FeatureEncoder
from leap_stream.core.hardware import HardwareArrays
from leap_stream.core.model import ThroughputModel
from leap_stream.core.promotion import PromotionRule

START = datetime(2026, 3, 1, tzinfo=UTC)
JOB = {
    "model_type": "bert-large", "model_family": "transformer", "framework": "pytorch",
    "param_count": 340_000_000, "global_batch_size": 256, "seq_len": 512, "precision": "bf16",
    "num_devices": 8, "tensor_parallel": 1, "pipeline_parallel": 1,
}  # fmt: skip
HARDWARE = "H100-SXM"
THROUGHPUT = 3_000.0


@pytest.fixture
def encoder(hw_catalog: Catalog) -> FeatureEncoder:
    return FeatureEncoder(HardwareArrays.from_catalog(hw_catalog))


def _trained(encoder: FeatureEncoder, throughput: float, n: int = 300) -> ThroughputModel:
    """A model that has learned ``throughput`` for JOB on HARDWARE."""
    model = ThroughputModel(encoder)
    for _ in range(n):
        model.learn_one(encoder.job(JOB), encoder.hw.index[HARDWARE], math.log(throughput))
    return model


def _example(hours: float, **changes: Any) -> dict[str, Any]:
    return {
        "job": JOB,
        "hardware_type": HARDWARE,
        "target": math.log(THROUGHPUT),
        "event_time": START + timedelta(hours=hours),
        "out_of_memory": False,
        **changes,
    }


def _ms(hours: float) -> float:
    return (START + timedelta(hours=hours)).timestamp() * 1000.0


def test_a_challenger_that_predicts_better_serves_from_the_next_day(encoder) -> None:
    board = ChampionChallenger(PromotionRule(margin=0.05, window_days=2, min_attempts=10))
    online = _trained(encoder, THROUGHPUT * 1.5)  # 50% off
    board.add_challenger("lightgbm", _trained(encoder, THROUGHPUT), _ms(0), "lightgbm-v1")
    decisions = [board.learn_one(_example(h), online) for h in range(0, 24, 2)]
    assert decisions == [None] * 12  # no day has closed yet
    assert board.serving == ENSEMBLE  # the incumbent: the online model alone until a nightly
    # the ensemble predicts 1.5 ** 0.5 = 1.22 times the throughput: a miss too
    assert board.scores[-1][1] == {"online": (0, 12), "lightgbm": (12, 12), ENSEMBLE: (0, 12)}
    decision = board.learn_one(_example(24), online)
    assert decision is not None and decision.promoted
    assert (decision.serving, board.serving) == ("lightgbm", "lightgbm")
    assert decision.shares == {"lightgbm": 1.0, "online": 0.0, ENSEMBLE: 0.0}
    assert board.scores[-1][1] == {"online": (0, 1), "lightgbm": (1, 1), ENSEMBLE: (0, 1)}


def test_the_ensemble_is_scored_on_the_mean_prediction_and_can_serve(encoder) -> None:
    rule = PromotionRule(margin=0.05, window_days=1, min_attempts=10)
    board = ChampionChallenger(rule, serving=ONLINE)
    online = _trained(encoder, THROUGHPUT * 1.15)  # 15% over
    board.add_challenger("lightgbm", _trained(encoder, THROUGHPUT / 1.15), _ms(0))  # 13% under
    for h in range(12):
        board.learn_one(_example(h), online)
    # each misses by more than 10%; the mean of their log predictions is the throughput
    assert board.scores[-1][1] == {"online": (0, 12), "lightgbm": (0, 12), ENSEMBLE: (12, 12)}
    decision = board.learn_one(_example(24), online)
    assert decision is not None and (decision.serving, board.serving) == (ENSEMBLE, ENSEMBLE)


def test_no_change_on_fewer_attempts_than_the_rule_asks(encoder) -> None:
    board = ChampionChallenger(PromotionRule(margin=0.01, window_days=1, min_attempts=50))
    online = _trained(encoder, THROUGHPUT * 1.5)
    board.add_challenger("lightgbm", _trained(encoder, THROUGHPUT), _ms(0))
    for h in range(10):
        board.learn_one(_example(h), online)
    decision = board.learn_one(_example(30), online)
    assert decision is not None and not decision.promoted
    assert board.serving == ENSEMBLE and "10 attempts" in decision.reason


def test_a_challenger_is_never_scored_on_completions_before_its_cutoff(encoder) -> None:
    board = ChampionChallenger()
    online = _trained(encoder, THROUGHPUT)
    board.add_challenger("river_batch", _trained(encoder, THROUGHPUT), _ms(5))
    for h in range(8):
        board.learn_one(_example(h), online)
    # hours 5, 6, 7 (and the ensemble from then on too)
    assert board.scores[-1][1] == {"online": (8, 8), "river_batch": (3, 3), ENSEMBLE: (3, 3)}


def test_out_of_memory_and_unknown_hardware_are_not_scored(encoder) -> None:
    board = ChampionChallenger()
    online = _trained(encoder, THROUGHPUT)
    assert board.learn_one(_example(1, out_of_memory=True, target=0.0), online) is None
    board.learn_one(_example(2, hardware_type="not-in-the-catalog"), online)
    board.learn_one(_example(3), online)
    assert board.scores[-1][1] == {"online": (1, 1)}


def test_a_throughput_as_small_as_a_float_holds_is_scored_a_miss(encoder) -> None:
    board = ChampionChallenger()
    online = _trained(encoder, THROUGHPUT)
    board.learn_one(_example(1, target=math.log(1e-320)), online)  # positive, and subnormal
    assert board.scores[-1][1] == {"online": (0, 1)}


def test_a_newer_nightly_model_of_a_name_continues_its_record(encoder) -> None:
    board = ChampionChallenger()
    online = _trained(encoder, THROUGHPUT)
    board.add_challenger("lightgbm", _trained(encoder, THROUGHPUT * 2), _ms(0), "lightgbm-1")
    board.learn_one(_example(1), online)
    board.add_challenger("lightgbm", _trained(encoder, THROUGHPUT), _ms(1), "lightgbm-2")
    board.learn_one(_example(2), online)
    assert board.scores[-1][1]["lightgbm"] == (1, 2)
    assert board.challengers["lightgbm"].version == "lightgbm-2"


def test_only_the_window_and_the_open_day_are_kept(encoder) -> None:
    board = ChampionChallenger(PromotionRule(window_days=2))
    online = _trained(encoder, THROUGHPUT)
    for day in range(6):
        board.learn_one(_example(24 * day), online)
    assert [d for d, _ in board.scores] == [(START + timedelta(days=d)).date() for d in (3, 4, 5)]


def test_a_late_example_is_scored_on_its_own_day_while_the_window_holds_it(encoder) -> None:
    # a worker lagging behind the others writes day 1's completions after day 2 has opened
    board = ChampionChallenger(PromotionRule(margin=0.05, window_days=2, min_attempts=3))
    online = _trained(encoder, THROUGHPUT * 1.5)
    board.add_challenger("lightgbm", _trained(encoder, THROUGHPUT), _ms(0))
    for h in (1, 2, 3):
        board.learn_one(_example(h), online)
    assert board.learn_one(_example(25), online) is not None  # day 2 opens: the rule runs
    for h in (4, 5):  # late: day 1's
        assert board.learn_one(_example(h), online) is None
    day1, day2 = (START.date(), (START + timedelta(days=1)).date())
    assert [(d, s["lightgbm"]) for d, s in board.scores] == [(day1, (5, 5)), (day2, (1, 1))]
    assert board.late == 0
    # the next decision reads them: the window pools both days, 6 attempts
    decision = board.learn_one(_example(49), online)
    assert decision is not None and decision.attempts == 6


def test_an_example_of_a_day_no_decision_reads_again_is_counted_late(encoder) -> None:
    board = ChampionChallenger(PromotionRule(window_days=2))
    online = _trained(encoder, THROUGHPUT)
    for day in (0, 1, 2):
        board.learn_one(_example(24 * day + 1), online)
    board.learn_one(_example(24 * 1 + 2), online)  # day 1: the next decision pools days 1, 2
    board.learn_one(_example(2), online)  # day 0: no decision reads it again
    assert [s.get("online") for _, s in board.scores] == [(1, 1), (2, 2), (1, 1)]
    assert board.late == 1


def test_a_late_example_of_a_day_nobody_scored_gets_that_day(encoder) -> None:
    board = ChampionChallenger(PromotionRule(window_days=3))
    online = _trained(encoder, THROUGHPUT)
    board.learn_one(_example(1), online)
    board.learn_one(_example(48 + 1), online)
    board.learn_one(_example(24 + 1), online)
    assert [d for d, _ in board.scores] == [(START + timedelta(days=d)).date() for d in (0, 1, 2)]
    assert board.late == 0


def test_state_resumes_the_same_scoreboard(encoder) -> None:
    rule = PromotionRule(margin=0.05, window_days=1, min_attempts=3)
    board = ChampionChallenger(rule)
    online = _trained(encoder, THROUGHPUT * 1.5)
    better = _trained(encoder, THROUGHPUT)
    board.add_challenger("lightgbm", better, _ms(0))
    for h in range(4):
        board.learn_one(_example(h), online)
    resumed = ChampionChallenger(rule)
    resumed.load_state(board.state())
    resumed.add_challenger("lightgbm", better, _ms(0))
    for b in (board, resumed):
        b.learn_one(_example(25), online)
    assert board.state() == resumed.state()
    assert resumed.serving == "lightgbm"


def test_the_online_name_is_not_a_challenger(encoder) -> None:
    with pytest.raises(ValueError, match="online"):
        ChampionChallenger().add_challenger(ONLINE, _trained(encoder, THROUGHPUT), 0.0)
