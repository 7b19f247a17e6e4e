"""A submission as its rankings read it: everything that does not depend on the model, once.

:meth:`LeapCore.submission <leap_stream.core.leap.LeapCore.submission>` builds it and
:meth:`LeapCore.rank <leap_stream.core.leap.LeapCore.rank>` ranks it. Ranking one submission
with several models (the nightly replay ranks each scored submission with the online model and
every night's batch model) then reads the lineage's priors, the pairwise transfer's measured
ratios and spreads and the memory risk once instead of once per model: they are the online
core's state, the same for every model. The models' predictions of the candidates are kept too,
so that an ensemble reads its members' rather than predicting again. Together: the extra
rankings of the nightly replay cost a third less (docs/nightly.md).

A submission is read right after it is built: it holds views of the core's state at that moment.

>>> from datetime import datetime, UTC
>>> from leap_stream.core.catalog import default_catalog
>>> from leap_stream.core.leap import LeapCore
>>> core, other = LeapCore(default_catalog()), LeapCore(default_catalog())
>>> job = {"event_id": "e1", "event_time": datetime(2025, 6, 1, tzinfo=UTC), "job_id": "j1",
...     "lineage_id": "l1", "model_type": "resnet", "model_family": "cnn",
...     "framework": "pytorch", "param_count": 25_000_000, "global_batch_size": 2048,
...     "seq_len": None, "precision": "bf16", "num_devices": 8, "tensor_parallel": 1,
...     "pipeline_parallel": 1, "requested_hardware": None,
...     "candidate_hardware": ["H100-SXM", "MI300X"]}
>>> shared = core.submission(job)
>>> online = core.rank(shared)  # remembered: its completion joins this ranking
>>> nightly = core.with_model(other.model, "nightly").rank(shared, remember=False)
>>> online.hardware == nightly.hardware, nightly.model_version, list(core.pending)
(True, 'nightly', ['j1'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from leap_stream.core.eligibility import Eligibility
from leap_stream.core.ensemble import Ensemble
from leap_stream.core.features import JobFeatures
from leap_stream.core.priors import LineageEntries

__all__ = ["Reference", "Submission"]


@dataclass(slots=True)
class Reference:
    """A hardware type the lineage measured, as its transfer to the candidates reads it."""

    position: int  # catalog position of the hardware type measured
    log_throughput: float  # what was measured there
    config: dict[str, Any] | None  # the configuration measured (None: the submission's own)
    measured: np.ndarray  # what related jobs measured from there to each candidate ...
    evidence: np.ndarray  # ... and how much of it there is (0: nothing)
    weight: np.ndarray  # 1 / how much those ratios vary across jobs


@dataclass(slots=True)
class Submission:
    """One JobSubmitted record and the model-free inputs of its ranking (arrays over its
    candidates, in ``check.names`` order)."""

    event: dict[str, Any]
    check: Eligibility
    job: JobFeatures  # encoded once: every model ranking it shares the core's features
    known: np.ndarray  # bool: a catalog type
    positions: np.ndarray  # catalog position of each candidate (0 where not a catalog type)
    predict_at: np.ndarray | None  # what predict_many is asked for (None: every catalog type)
    state: dict[str, Any] | None  # the lineage's priors
    entries: LineageEntries  # what they say of each candidate, before any model's residual
    references: tuple[Reference, ...]  # hardware to transfer from (empty: none usable)
    blend: float  # the pairwise transfer's weight of the measured ratios (where there are)
    memory_risk: np.ndarray  # what the chance of running out of memory adds to the ranking key
    unseen_type: bool  # no completion of this model type has been learned
    _predictions: dict[int, tuple[Any, np.ndarray]]  # id(model) -> (model, predictions)

    def predictions(self, model: Any) -> np.ndarray:
        """``model``'s log-throughput predictions of the candidates (kept: do not modify).

        An :class:`~leap_stream.core.ensemble.Ensemble` combines its members' kept ones.
        """
        kept = self._predictions.get(id(model))
        if kept is not None:
            return kept[1]
        if isinstance(model, Ensemble):
            predicted = model.combine([self.predictions(member) for member in model.members])
        else:
            predicted = model.predict_many(self.job, self.predict_at)
        self._predictions[id(model)] = (model, predicted)  # (the model pins its id)
        return predicted
