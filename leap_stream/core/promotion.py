"""Champion/challenger: which model ranks from the next day on.

Every night each candidate model (the online model, tonight's retrains) has a track record: for
each past day, on the completed attempts of that day, how many of its predictions for the
hardware each attempt ran on were within 10% of the measured throughput. The serving model (the
champion) keeps serving unless a challenger beat it, over the trailing ``window_days`` days
pooled, by at least ``margin`` of within-10% share on at least ``min_attempts`` attempts; then
the best such challenger serves from the next day on (docs/nightly.md).

The rule is a pure function of the scores, so the replay and (later) the service apply the same
one. Scores must be over the same attempts for every model (as the nightly replay gives them);
a batch model's record is that of its successive nightly snapshots, each scored on the day after
its cutoff: a snapshot is never scored on the attempts it was trained on.

>>> rule = PromotionRule(margin=0.02, window_days=2, min_attempts=150)
>>> days = [{"online": (50, 100), "lightgbm": (51, 100)},
...         {"online": (50, 100), "lightgbm": (55, 100)}]
>>> rule.decide("online", days).serving  # 53% against 50% on 200 attempts: promoted
'lightgbm'
>>> rule.decide("online", days[:1]).serving  # 100 attempts are too few for any change
'online'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Decision", "PromotionRule", "Score"]

Score = tuple[int, int]
"""(predictions within 10% of the measured throughput, attempts scored)."""

# Float shares compared against a margin: a difference equal to the margin promotes.
_EPSILON = 1e-12


@dataclass(frozen=True, slots=True)
class Decision:
    """The rule's verdict: who serves next, whether that is a change, and why."""

    serving: str
    promoted: bool
    reason: str
    shares: dict[str, float]  # within-10% share of each model over the window
    attempts: int  # attempts in the window (the serving model's)


@dataclass(frozen=True, slots=True)
class PromotionRule:
    """Promote a challenger that beats the serving model by ``margin`` over the trailing days.

    Parameters
    ----------
    margin
        Within-10% share (0.01 = one point) by which a challenger must beat the serving model,
        pooled over the window. Day-to-day noise in a share of a few thousand paired attempts
        is about half a point; a margin above it keeps the serving model from flapping.
    window_days
        Trailing days pooled (the most recent entries of the sequence given to :meth:`decide`).
    min_attempts
        Fewest attempts in the window for any change: fewer, and the serving model stays.
    """

    margin: float = 0.01
    window_days: int = 3
    min_attempts: int = 500

    def __post_init__(self) -> None:
        if self.window_days < 1:
            raise ValueError(f"window_days must be >= 1, got {self.window_days}")
        if not 0.0 <= self.margin < 1.0:
            raise ValueError(f"margin must lie in [0, 1), got {self.margin}")
        if self.min_attempts < 1:
            raise ValueError(f"min_attempts must be >= 1, got {self.min_attempts}")

    def decide(self, serving: str, days: Sequence[Mapping[str, Score]]) -> Decision:
        """Who serves next, given each past day's scores (oldest first; a model absent on a day
        has no score there).

        Examples
        --------
        >>> rule = PromotionRule(margin=0.01, window_days=1, min_attempts=10)
        >>> d = rule.decide("lightgbm", [{"online": (70, 100), "lightgbm": (60, 100)}])
        >>> d.serving, d.promoted, d.shares
        ('online', True, {'lightgbm': 0.6, 'online': 0.7})
        """
        pooled: dict[str, list[int]] = {}
        for day in days[-self.window_days :]:
            for model, (hits, attempts) in day.items():
                total = pooled.setdefault(model, [0, 0])
                total[0] += hits
                total[1] += attempts
        shares = {m: hits / n for m, (hits, n) in sorted(pooled.items()) if n > 0}
        attempts = pooled.get(serving, [0, 0])[1]
        if serving not in shares or attempts < self.min_attempts:
            reason = f"{attempts} attempts in the window (< {self.min_attempts}): {serving} stays"
            return Decision(serving, False, reason, shares, attempts)
        best, best_share = serving, shares[serving]
        for model, share in shares.items():
            eligible = model != serving and pooled[model][1] >= self.min_attempts
            # strictly better than the best so far; ties keep the earlier (and the champion)
            if (
                eligible
                and share - shares[serving] >= self.margin - _EPSILON
                and share > best_share
            ):
                best, best_share = model, share
        if best == serving:
            reason = f"no challenger beat {serving} ({shares[serving]:.1%}) by {self.margin:.1%}"
            return Decision(serving, False, reason, shares, attempts)
        reason = (
            f"{best} {best_share:.1%} beat {serving} {shares[serving]:.1%} by >= {self.margin:.1%}"
        )
        return Decision(best, True, reason, shares, attempts)
