"""Tests of leap_stream.core.adagrad: the compiled step equals river's learn_one to the bit."""

from __future__ import annotations

import numpy as np
from river import linear_model, optim

from leap_stream.core.adagrad import UNSEEN, adagrad_step


def _river(
    lr: float, eps: float, intercept_lr: float, clip: float
) -> linear_model.LinearRegression:
    return linear_model.LinearRegression(
        optimizer=optim.AdaGrad(lr, eps=eps), intercept_lr=intercept_lr, l2=0.0, clip_gradient=clip
    )


def test_random_sparse_rows_learn_as_river_does_bit_for_bit() -> None:
    rng = np.random.default_rng(11)
    lr, eps, intercept_lr, clip = 0.15, 16.0, 0.05, 50.0
    river = _river(lr, eps, intercept_lr, clip)
    hyper = np.array([lr, eps, intercept_lr, clip])
    n_features = 300
    weights, sums, intercept = np.zeros(n_features), np.full(n_features, UNSEEN), 0.0
    for _ in range(20_000):
        columns = rng.choice(n_features, int(rng.integers(1, 25)), replace=False)
        # values over many scales, some exactly zero (skipped, as river never sees them)
        values = rng.normal(size=len(columns)) * 10.0 ** rng.integers(-3, 3, len(columns))
        values[rng.random(len(columns)) < 0.15] = 0.0
        target = float(rng.normal(0.0, 5.0))  # now and then past the clip
        intercept = adagrad_step(weights, sums, columns, values, target, intercept, hyper)
        row = {f"x{c}": v for c, v in zip(columns.tolist(), values.tolist(), strict=True) if v}
        river.learn_one(row, target)
    assert intercept == river.intercept
    learned = np.flatnonzero(sums != UNSEEN)
    assert {f"x{c}": weights[c] for c in learned.tolist()} == river._weights.to_dict()
    assert {f"x{c}": sums[c] for c in learned.tolist()} == dict(river.optimizer.g2)


def test_a_zero_value_leaves_its_feature_unlearned() -> None:
    weights, sums = np.zeros(3), np.full(3, UNSEEN)
    hyper = np.array([0.1, 1.0, 0.01, 1e12])
    adagrad_step(weights, sums, np.array([0, 1]), np.array([0.0, 2.0]), 1.0, 0.0, hyper)
    assert sums[0] == UNSEEN and weights[0] == 0.0
    assert sums[1] > 0.0 and weights[1] > 0.0


def test_a_repeated_column_reads_before_the_step_and_writes_its_last_occurrence() -> None:
    weights, sums = np.array([0.5, 0.0]), np.array([4.0, UNSEEN])
    hyper = np.array([0.1, 1.0, 0.01, 1e12])
    columns, values = np.array([0, 0]), np.array([1.0, 3.0])
    expected_weights, expected_sums = weights.copy(), sums.copy()
    gradient = 2.0 * ((0.5 * 1.0 + 0.5 * 3.0) - 1.0)
    g = 3.0 * gradient  # the last occurrence's step, from the sum before the step
    expected_sums[0] = 4.0 + g**2
    expected_weights[0] = 0.5 - 0.1 / (expected_sums[0] + 1.0) ** 0.5 * g
    adagrad_step(weights, sums, columns, values, 1.0, 0.0, hyper)
    assert weights.tolist() == expected_weights.tolist()
    assert sums.tolist() == expected_sums.tolist()
