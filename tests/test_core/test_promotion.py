"""Tests of leap_stream.core.promotion: the champion/challenger rule on constructed records."""

from __future__ import annotations

import pytest

from leap_stream.core.promotion import PromotionRule, Score

Day = dict[str, Score]


def _day(online: int, river: int, boosted: int, n: int = 1000) -> Day:
    return {"online": (online, n), "river_batch": (river, n), "lightgbm": (boosted, n)}


def _play(rule: PromotionRule, days: list[Day], serving: str = "online") -> list[str]:
    """Who serves each day when the rule decides each night on the days before it."""
    served = []
    for k in range(len(days)):
        serving = rule.decide(serving, days[:k]).serving
        served.append(serving)
    return served


def test_promotion_follows_the_rule_on_a_constructed_sequence() -> None:
    rule = PromotionRule(margin=0.01, window_days=2, min_attempts=1500)
    days = [
        _day(600, 590, 605),
        _day(600, 590, 620),
        _day(600, 595, 600),
        _day(640, 600, 600),
        _day(600, 640, 600),
        _day(600, 640, 600),
        _day(600, 600, 600),
    ]
    assert _play(rule, days) == [
        "online",  # no record yet
        "online",  # one day: 1,000 attempts < 1,500, whatever the shares
        "lightgbm",  # days 0-1: 61.25% against online's 60.0%, a margin of 1.25 points
        "lightgbm",  # days 1-2: online 60.0%, river 59.25% do not beat its 61.0%
        "online",  # days 2-3: online 62.0% beats lightgbm's 60.0% by 2 points: back
        "online",  # days 3-4: river 62.0% only ties online
        "river_batch",  # days 4-5: river 64.0% against online's 60.0%
    ]


def test_the_margin_is_inclusive_and_the_window_forgets() -> None:
    rule = PromotionRule(margin=0.02, window_days=1, min_attempts=100)
    exactly = [{"online": (500, 1000), "lightgbm": (520, 1000)}]
    just_under = [{"online": (500, 1000), "lightgbm": (519, 1000)}]
    assert rule.decide("online", exactly).serving == "lightgbm"
    assert rule.decide("online", just_under).serving == "online"
    # an old win outside the window does not count
    old_win = [{"online": (500, 1000), "lightgbm": (900, 1000)}, *just_under]
    assert rule.decide("online", old_win).serving == "online"


def test_the_best_challenger_wins_and_ties_keep_the_champion() -> None:
    rule = PromotionRule(margin=0.01, window_days=3, min_attempts=10)
    decision = rule.decide("online", [_day(500, 560, 540)])
    assert decision.serving == "river_batch" and decision.promoted
    assert decision.shares == {"lightgbm": 0.54, "online": 0.5, "river_batch": 0.56}
    tie = rule.decide("lightgbm", [_day(700, 600, 700)])
    assert tie.serving == "lightgbm" and not tie.promoted


def test_too_few_attempts_or_no_record_keep_the_serving_model() -> None:
    rule = PromotionRule(margin=0.01, window_days=3, min_attempts=500)
    assert rule.decide("online", []).serving == "online"
    few = [_day(10, 90, 90, n=100)] * 3
    assert rule.decide("online", few).serving == "online"
    # a challenger scored on too few attempts (it missed days) cannot take over
    partial = [{"online": (300, 600), "lightgbm": (290, 290)}]
    assert rule.decide("online", partial).serving == "online"


@pytest.mark.parametrize(
    "kwargs", [{"window_days": 0}, {"margin": -0.1}, {"margin": 1.0}, {"min_attempts": 0}]
)
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PromotionRule(**kwargs)  # type: ignore[arg-type]
