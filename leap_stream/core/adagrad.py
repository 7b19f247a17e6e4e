"""One AdaGrad step of a linear regression on a sparse row, compiled, bit for bit river's.

River's ``LinearRegression(optimizer=AdaGrad(lr, eps), intercept_lr=...)`` learns an example in
Python floats: the dot product of the nonzero features in the row's order, the squared loss's
gradient ``2 (prediction - target)`` clipped, the intercept's step, then per nonzero feature
``g2 += g ** 2; w -= lr / (g2 + eps) ** 0.5 * g``. :func:`adagrad_step` does the same
operations in the same order on arrays of weights and sums of squared gradients, compiled by
numba: several times faster than the Python loop, and equal to it to the bit, because every
operation is one IEEE-754 double operation and the two powers are the very ``pow`` Python's
``**`` calls: the C library's, called through its address, since a compiler that knows the
name makes ``pow(g, 2.0)`` a product, which rounds differently in about one case in a thousand.
No fast-math: nothing is reordered or fused.

>>> import numpy as np
>>> from river import linear_model, optim
>>> weights, sums = np.zeros(4), np.full(4, UNSEEN)
>>> hyper = np.array([0.15, 16.0, 0.05, 1e12])  # lr, eps, intercept_lr, clip
>>> intercept = adagrad_step(weights, sums, np.array([2, 0]), np.array([1.0, 0.5]), 3.0, 0.0,
...                          hyper)
>>> round(intercept, 6), weights.round(6).tolist(), sums.tolist()
(0.3, [0.09, 0.0, 0.124808, 0.0], [9.0, -1.0, 36.0, -1.0])
>>> river = linear_model.LinearRegression(optimizer=optim.AdaGrad(0.15, eps=16.0),
...                                       intercept_lr=0.05)
>>> river.learn_one({"c": 1.0, "a": 0.5}, 3.0)
>>> river.intercept == intercept, river.weights == {"c": weights[2], "a": weights[0]}
(True, True)
"""

from __future__ import annotations

import ctypes

import numba
import numpy as np

__all__ = ["UNSEEN", "adagrad_step"]

# The sum of squared gradients of a feature never learned (river has no weight for it yet): a
# sum of squares is never negative.
UNSEEN = -1.0

# The process's own ``pow``, which CPython's float ``**`` calls. Numba caches no code that holds
# an address: the kernel is compiled in each process (under a second).
_pow = ctypes.CDLL(None).pow
_pow.restype = ctypes.c_double
_pow.argtypes = (ctypes.c_double, ctypes.c_double)


@numba.njit
def adagrad_step(
    weights: np.ndarray,
    sums: np.ndarray,
    columns: np.ndarray,
    values: np.ndarray,
    target: float,
    intercept: float,
    hyper: np.ndarray,
) -> float:
    """Learn ``target`` from the row ``values`` at ``columns`` (int64) of ``weights`` and
    ``sums`` (AdaGrad's, :data:`UNSEEN` for a feature never learned), both updated in place;
    ``hyper`` is (lr, eps, intercept_lr, clip). Returns the intercept after the step.

    A zero value is skipped, as river never sees it; a column repeated in the row reads the
    weights from before the step and its last occurrence is written, as numpy's gather and
    scatter would.
    """
    n = columns.shape[0]
    w = np.empty(n)
    s = np.empty(n)
    for i in range(n):
        w[i] = weights[columns[i]]
        s[i] = sums[columns[i]]
    dot = 0.0
    for i in range(n):
        if values[i] != 0.0:
            dot += w[i] * values[i]
    lr, eps, intercept_lr, clip = hyper[0], hyper[1], hyper[2], hyper[3]
    gradient = max(min(2.0 * ((dot + intercept) - target), clip), -clip)
    intercept -= intercept_lr * gradient
    for i in range(n):
        v = values[i]
        if v != 0.0:
            g = v * gradient
            g2 = (s[i] if s[i] != UNSEEN else 0.0) + _pow(g, 2.0)
            s[i] = g2
            w[i] -= lr / _pow(g2 + eps, 0.5) * g
    for i in range(n):
        sums[columns[i]] = s[i]
        weights[columns[i]] = w[i]
    return intercept
