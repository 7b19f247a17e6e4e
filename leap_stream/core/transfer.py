"""What related jobs measured on both: a job's speed on one hardware type from its speed on another.

A lineage that ran on hardware A and now goes to B is predicted from its measurement on A and an
estimate of the ratio B / A for it. The model gives one ratio: ``model(B) - model(A)`` on the log
scale. Lineages that ran on both give another, the ratio predictor's: what they measured.
:class:`PairwiseTransfer` keeps the measured ratios, and learns how much to trust each.

Ratios are kept as **efficiency** ratios, ``(log measured - log roofline)`` on B minus that on A,
so that they are stationary (the roofline of :mod:`leap_stream.core.features` is a fixed function
of the spec sheet and the configuration: jobs of other sizes still tell the same story) and never
go stale as the model learns. Each ordered pair (A, B) keeps an exponentially weighted mean over
its last ``window`` observations at three levels, the model type, its family and all jobs, each
shrunk towards the next one up by its number of observations.

The two estimates are blended by their inverse mean squared errors, both measured online on
every new observation before it is learned (prequentially): where the model already knows the
ratio (a big fleet, common types) it keeps the say; where it does not (a new fleet, few
measurements, effects no spec sheet explains), what related jobs measured takes over. A pair
nobody has measured keeps the model's ratio.

>>> import numpy as np
>>> pairs = PairwiseTransfer(["A", "B", "C"])
>>> for _ in range(30):  # the model says B is as efficient as A; jobs measure 35% more on B
...     pairs.learn_one("resnet", "cnn", reference=0, hardware=1, measured=0.3, model=0.0)
>>> model = np.zeros(3)  # the model's efficiency ratios from A, for a new job
>>> pairs.correction("resnet", "cnn", reference=0, model=model).round(2).tolist()
[0.0, 0.28, 0.0]
>>> pairs.correction("resnet", "cnn", reference=1, model=model).round(2).tolist()  # and back
[-0.28, 0.0, 0.0]
"""

from __future__ import annotations

import numpy as np

__all__ = ["PairwiseTransfer"]

# Pseudo-observations of the parent level's value at each level (model type, family; the
# all-jobs level stands alone): how many of a pair's own observations it takes before they
# count as much as the level above. One observation's noise (two runs, two lineage x hardware
# effects: ~0.1 on the log scale) against the spread of true effects between types (~0.1-0.2)
# puts it at a few.
PRIOR_WEIGHT = 4.0
# A pair's mean forgets at this many observations: enough to average the noise down, few enough
# to follow software releases.
WINDOW = 200.0
# Both squared errors start from this (log scale, ~ a 30% miss), and forget at the same pace.
INITIAL_SQUARED_ERROR = 0.09
ERROR_WINDOW = 500.0
# The spread of a pair's ratios before it has this many observations at a level, and a floor
# (run-to-run noise of two measurements): used to weigh a lineage's references.
DEFAULT_SPREAD = 0.04
MIN_SPREAD_WEIGHT = 3.0
MIN_SPREAD = 0.002
_ALL = "*"


class PairwiseTransfer:
    """Measured efficiency ratios between hardware types, blended with the model's (see the
    module docstring)."""

    def __init__(self, hardware: list[str], window: float = WINDOW) -> None:
        self.hardware = list(hardware)
        self.keep = 1.0 - 1.0 / window
        # (level key, reference position) -> [sums, weights, sums of squares], arrays over
        # hardware positions
        self._rows: dict[tuple[str, int], np.ndarray] = {}
        # running mean squared errors of the two estimates: [measured ratios, model]
        self.squared_error = np.full(2, INITIAL_SQUARED_ERROR)
        self.scored = 0
        self.learned = 0

    def _levels(self, model_type: str, family: str) -> tuple[str, str, str]:
        return (_ALL, f"family={family}", f"type={model_type}")

    def measured_ratio(
        self, model_type: str, family: str, reference: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """What related jobs measured from ``reference`` to each type, and how much of it
        there is (the all-jobs weight; 0 where no job measured the pair)."""
        n = len(self.hardware)
        value, evidence = np.zeros(n), np.zeros(n)
        for i, key in enumerate(self._levels(model_type, family)):
            row = self._rows.get((key, reference))
            if row is None:
                continue
            if i == 0:
                value = np.divide(row[0], row[1], out=np.zeros(n), where=row[1] > 0)
                evidence = row[1]
            else:
                value = (row[0] + PRIOR_WEIGHT * value) / (row[1] + PRIOR_WEIGHT)
        return value, evidence

    def spread(self, model_type: str, family: str, reference: int) -> np.ndarray:
        """How much jobs' ratios from ``reference`` to each type vary around their mean (a
        variance, log scale): at the most specific level with a few observations, else
        ``DEFAULT_SPREAD``. Ratios between types that treat jobs alike (two generations of
        one vendor) vary little; those to a type with its own quirks vary a lot."""
        spread = np.full(len(self.hardware), DEFAULT_SPREAD)
        for key in self._levels(model_type, family):
            row = self._rows.get((key, reference))
            if row is None:
                continue
            enough = row[1] >= MIN_SPREAD_WEIGHT
            mean = np.divide(row[0], row[1], out=np.zeros_like(spread), where=enough)
            square = np.divide(row[2], row[1], out=np.zeros_like(spread), where=enough)
            spread = np.where(enough, np.maximum(square - mean * mean, MIN_SPREAD), spread)
        return spread

    def correction(
        self,
        model_type: str,
        family: str,
        reference: int,
        model: np.ndarray,
        positions: np.ndarray | None = None,
    ) -> np.ndarray:
        """What to add to the model's efficiency ratios ``model`` from ``reference`` to the
        types at ``positions`` (None: every type) to get the blended ones."""
        measured, evidence = self.measured_ratio(model_type, family, reference)
        if positions is not None:
            measured, evidence = measured[positions], evidence[positions]
        weight = self.squared_error[1] / self.squared_error.sum()  # of the measured ratios
        return np.where(evidence > 0, weight * (measured - model), 0.0)

    def learn_one(
        self,
        model_type: str,
        family: str,
        *,
        reference: int,
        hardware: int,
        measured: float,
        model: float,
    ) -> None:
        """One lineage's efficiency ratio from ``reference`` to ``hardware``: ``measured``, and
        what the model predicted it to be before learning from it."""
        if reference == hardware or not np.isfinite(measured):
            return
        pooled, evidence = self.measured_ratio(model_type, family, reference)
        if evidence[hardware] > 0:  # both estimates existed: score them
            errors = np.array([pooled[hardware] - measured, model - measured]) ** 2
            self.scored += 1
            # a plain mean (the start value counting twice) until the window is reached
            decay = 1.0 / min(self.scored + 2.0, ERROR_WINDOW)
            self.squared_error = self.squared_error * (1.0 - decay) + errors * decay
        for key in self._levels(model_type, family):
            for a, b, value in ((reference, hardware, measured), (hardware, reference, -measured)):
                row = self._rows.get((key, a))
                if row is None:
                    row = self._rows[(key, a)] = np.zeros((3, len(self.hardware)))
                row[:, b] = row[:, b] * self.keep + (value, 1.0, value * value)
        self.learned += 1
