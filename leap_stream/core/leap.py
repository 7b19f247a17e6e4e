"""The functional core: a submission in, a ranking out; a completion in, the model learns.

Every piece of state lives in injected mutable mappings (plain dicts in the replay,
changelog-backed tables in the streaming service), so the very same code runs on Kafka:

- ``pending``: job_id -> what the submission left for its completion to join (the JobSubmitted
  record and the predictions made for it);
- ``priors``: lineage_id -> that lineage's prior-throughput state (:mod:`leap_stream.core.priors`).

The learned model itself (:class:`leap_stream.core.model.ThroughputModel`) and the interval
calibration are the predictor's own state, snapshotted as a whole.

>>> from datetime import datetime, UTC
>>> from leap_stream.core.catalog import default_catalog
>>> core = LeapCore(default_catalog())
>>> job = {"event_id": "e1", "event_time": datetime(2025, 6, 1, tzinfo=UTC), "job_id": "j1",
...     "lineage_id": "l1", "model_type": "resnet", "model_family": "cnn",
...     "framework": "pytorch", "param_count": 25_000_000, "global_batch_size": 2048,
...     "seq_len": None, "precision": "bf16", "num_devices": 8, "tensor_parallel": 1,
...     "pipeline_parallel": 1, "requested_hardware": "H100-SXM",
...     "candidate_hardware": ["H100-SXM", "MI300X", "TPU-v5e"]}
>>> ranking = core.on_submitted(job)
>>> sorted(ranking.hardware), ranking.abstained
(['H100-SXM', 'MI300X', 'TPU-v5e'], False)
>>> core.on_completed({"event_id": "e2", "event_time": datetime(2025, 6, 1, 3, tzinfo=UTC),
...     "job_id": "j1", "lineage_id": "l1", "hardware_type": "H100-SXM", "num_devices": 8,
...     "status": "succeeded", "throughput": 20_000.0, "steps": 1000})
True
>>> again = core.on_submitted({**job, "event_id": "e3", "job_id": "j2"})
>>> str(again.source[again.hardware.index("H100-SXM")])
'lineage_prior'
"""

from __future__ import annotations

import copy
import heapq
import math
from collections import deque
from collections.abc import Collection, Mapping, MutableMapping
from datetime import UTC, datetime
from itertools import zip_longest
from typing import Any, TypedDict

import numba
import numpy as np

from leap_stream.core.catalog import Catalog
from leap_stream.core.eligibility import Eligibility, EligibilityRules
from leap_stream.core.events import JOB_CONFIG_FIELDS, job_config
from leap_stream.core.features import FeatureEncoder, JobFeatures, RecentCache
from leap_stream.core.inputs import check_groups
from leap_stream.core.intervals import ConformalIntervals
from leap_stream.core.lookup import LookupTable
from leap_stream.core.memory_risk import MemoryRisk, bin_probabilities
from leap_stream.core.model import PreparedPair, ThroughputModel
from leap_stream.core.priors import (
    HALF_LIFE_DAYS,
    LINEAGE_KEY,
    SHRINK_TRANSFER,
    config_signature,
    exact_measurements,
    last_seen_ms,
    latest,
    latest_hardware,
    lineage_entries,
    mark_out_of_memory,
    model_target_offset,
    out_of_memory_on,
    update_prior,
)
from leap_stream.core.ranking import SOURCES, Ranking, rank_candidates
from leap_stream.core.submission import Reference, Submission
from leap_stream.core.transfer import PairwiseTransfer, blended, config_coordinates

__all__ = [
    "COLD_START_MIN_OBSERVATIONS",
    "JOB_CONFIG_FIELDS",
    "MIN_LINEAGES_KEPT",
    "LeapCore",
    "LearnExample",
    "LookupRanker",
    "Submission",
    "warm_up",
]

# Below this many observations of a hardware type the model's view of it is mostly its spec
# sheet: predictions for it are marked cold_start (and get that source's wider intervals).
COLD_START_MIN_OBSERVATIONS = 50
# How much an uncertain prediction is charged when ranking (log scale, divided by the square
# root of 1 + the observations the model has of this family on that hardware). 0.25 measured
# best of 0, 0.1, 0.25 and 0.5 on both 60-day fleets (top-1 regret 7.16%, 6.96%, 6.80%, 6.86%
# and 7.85%, 7.62%, 7.65%, 8.10%), the same on the six-month one (2.71% and 2.70%), and better
# on the 60-day fleets followed by their ranking (4.27% and 4.45% against 4.78% and 4.63%,
# where a smaller charge explores more; docs/results.md).
RISK_AVERSION = 0.25
SUCCEEDED = "succeeded"
OUT_OF_MEMORY = "oom"  # JobCompleted.failure_reason
# A transferred residual is shrunk towards zero (priors.SHRINK_TRANSFER) up to this size (log
# scale): lineage noise is a few tenths at most; beyond, it is the model that is off.
SHRINK_UP_TO = 0.5
# A candidate that may run out of memory (probability p) is charged p / (1 - p) failed tries
# (the expected number before one fits), each worth this share of the attempt's cost: a failure
# comes within minutes of a multi-hour attempt, then the next choice runs at a small premium.
# 0.1 measured best of 0.1 and 0.3 on a 60-day fleet (top-1 regret 10.3% and 10.6%; a cost
# of (1 - p)^-2 gave 12.5%: it avoids half the unrunnable picks by paying more for the rest).
# p is capped so that even a certain failure stays ranked (last), rather than hidden.
OUT_OF_MEMORY_COST = 0.1
MAX_OOM_RISK = 0.99
# A completion teaches the pairwise transfer a ratio from the lineage's latest measurement and
# from this very configuration's other measurements no older than this: hours apart the two
# ran the same software; days apart, what changed between them (a kernel release, a new type
# maturing) blurs the ratio. On the 60-day fleets 6 hours changed nothing, a day cost 0.1 point
# of top-1 regret, no limit 0.4; on NeuSight's rows (a sweep of types within hours) the extra
# ratios cut the leave-one-out MAPE from 12.6% to 8.1% (docs/results.md).
EXACT_REFERENCE_MAX_AGE_MS = 6 * 3_600_000.0
# Every completion is learned a second time some completions after the first: a second pass
# over the data, as a batch trainer's second epoch, without revisiting early examples more
# often than later ones (a random replay buffer does, and over-fits the first days). The delay
# is a quarter of the completions learned so far, within [SECOND_PASS_MIN_DELAY,
# SECOND_PASS_DELAY]: a young model takes its second pass within hours, when it learns most
# from it, and a grown one 10,000 completions later (measured best of 0, 2,000, 10,000 and
# 30,000 on a 60-day fleet). Growing from 1,000 cut the 60-day fleets' top-1 regret by 0.05 and
# 0.19 points; from 200 by 0.13 and 0.28, but it cost MLPerf's rounds 4 to 6 points, where a few
# hundred results learned twice over-fit (docs/results.md).
SECOND_PASS_DELAY = 10_000
SECOND_PASS_MIN_DELAY = 1_000
SECOND_PASS_DELAY_SHARE = 4
# While the model has learned fewer completions than this, an example is learned a third time,
# the same delay after its second: two months of a small fleet (3,000 jobs a day) and six days
# of a large one (30,000), the days when the model knows least, are learned three times.
# Against none, 60-day fleets: top-1 regret -0.16 and -0.17 points, transfers +0.83 and +0.64
# (40,000: two thirds of that regret, a third to three fifths of the transfers).
YOUNG_MODEL_COMPLETIONS = 160_000
# A lineage idle this many half-lives may be forgotten (its per-hardware residuals weigh
# 2^-(60/14) ~ 5% of their first value by then), once more than MIN_LINEAGES_KEPT are held.
IDLE_HALF_LIVES = 60.0 / HALF_LIFE_DAYS
# Forgetting bounds the state; it is no judgement of what an idle lineage is worth (its exact
# measurements and latest residual never go stale). Below this many lineages none is forgotten:
# a job that recurs months apart (a quarterly retrain, an MLPerf benchmark) keeps its priors.
# About 160 MB (1.6 KB a lineage); a fleet of 3,000 attempts a day starts ~1,000 lineages a day.
MIN_LINEAGES_KEPT = 100_000
# A throughput this far from the model's prediction (on the log scale: e^20, 5e8 times) is a
# broken measurement or unit, not a job: learned, one such completion moves every later
# prediction (AdaGrad's intercept step is not damped) and its lineage's ratios to other types.
# The model's cold starts are off by e^7.6 at the most on real data (MLPerf's first rounds).
IMPLAUSIBLE_LOG_RESIDUAL = 20.0
# A submission pending this long is forgotten: an attempt cancelled before it ran never
# completes, and the service would otherwise keep it (2 to 3 KB) for good. A longer run's
# completion then finds nothing to join (the service dead-letters it).
PENDING_MAX_DAYS = 60.0
_SOURCES = SOURCES[:4]  # the model's own: lineage_prior, transfer, model, cold_start
_LINEAGE_PRIOR, _TRANSFER, _MODEL, _COLD_START = range(4)
_SOURCE_NAMES = np.array(_SOURCES)
_NO_FAILURES = np.zeros(0, dtype=np.int64)  # (no type this configuration ran out of memory on)
_LOOKUP_SOURCE = np.array(["lookup"])


class LearnExample(TypedDict):
    """One joined completion, all the model needs to learn from it (schemas/LearnExample.avsc)."""

    job_id: str
    lineage_id: str
    event_time: Any  # datetime of the completion
    job: dict[str, Any]  # the submission's JOB_CONFIG_FIELDS
    hardware_type: str
    target: float  # log throughput net of the lineage's own offset
    source: str | None  # the prediction source it was scored under (None: not a candidate)
    # the lineage's latest earlier measurement on other hardware (hardware_type, log_throughput,
    # job), or None: what the pairwise transfer corrections learn from
    reference: dict[str, Any] | None
    # this very configuration's other recent measurements (hardware_type, log_throughput), on
    # types other than this one and the reference's: more ratios for the pairwise transfer
    exact_references: list[dict[str, Any]]
    # memory need estimate / usable memory of the hardware it ran on; it ran out of memory there
    memory_ratio: float | None
    out_of_memory: bool
    abs_log_residual: float | None  # |log(measured / predicted)| at submission time
    predicted: float | None  # the submission-time prediction for that hardware
    throughput: float  # measured


def _time_ms(event: dict[str, Any]) -> float:
    return event["event_time"].timestamp() * 1000.0


class LeapCore:
    """The online predictor and ranker (see the module docstring for its state)."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        pending: MutableMapping[str, dict[str, Any]] | None = None,
        priors: MutableMapping[str, dict[str, Any]] | None = None,
        interval_level: float = 0.9,
        lineage_half_life_days: float = HALF_LIFE_DAYS,
        without: Collection[str] = (),
        second_pass_delay: int = SECOND_PASS_DELAY,
        second_pass_min_delay: int = SECOND_PASS_MIN_DELAY,
        young_model_completions: int = YOUNG_MODEL_COMPLETIONS,
    ) -> None:
        if not lineage_half_life_days > 0:
            raise ValueError(f"lineage_half_life_days must be > 0, not {lineage_half_life_days}")
        self.half_life = lineage_half_life_days
        # input groups left out (leap_stream.core.inputs): an ablation, never the default
        self.without = check_groups(without)
        # without prior throughput every attempt is a lineage of its own: no earlier attempt
        # of the same job is ever looked up
        self._lineage_field = "job_id" if "prior_throughput" in self.without else "lineage_id"
        self.rules = EligibilityRules(catalog)
        self.hw = self.rules.hw
        self._every_type_known = np.ones(len(self.hw), dtype=bool)
        self._every_type_known.flags.writeable = False
        encoder = FeatureEncoder(self.hw, self.without)
        if "learned_model" in self.without:  # the weights and the intercept never move
            self.model = ThroughputModel(encoder, learning_rate=0.0, intercept_lr=0.0)
        else:
            self.model = ThroughputModel(encoder)
        self.intervals = ConformalIntervals(level=interval_level)
        self.intervals.halfwidths(_SOURCES)  # cached from the start: a function of what it learned
        self.pairs = PairwiseTransfer(self.hw.names.tolist())
        self.memory_risk = MemoryRisk()
        self.pending = {} if pending is None else pending
        self.priors = {} if priors is None else priors
        self.type_counts: dict[str, int] = {}
        # completions learned per (model type, hardware type): how well the model knows a pair
        self.pair_counts: dict[tuple[str, str], int] = {}
        # learned once, awaiting their second pass: (JOB_CONFIG_FIELDS values, position, target)
        self.second_pass_delay = second_pass_delay  # the longest delay (0: no second pass)
        self.second_pass_min_delay = second_pass_min_delay
        self.young_model_completions = young_model_completions
        self.second_pass: deque[tuple[tuple[Any, ...], int, float]] = deque()
        # learned twice while the model was young, awaiting their third pass (the same entries)
        self.third_pass: deque[tuple[tuple[Any, ...], int, float]] = deque()
        # (values, position) of a queued example -> (the model, its pair as prepared): a later
        # pass steps on it again instead of encoding the job anew (two fifths of the learning)
        self._prepared = RecentCache(2 * max(second_pass_delay, 1))
        self.unmatched_completions = 0
        self.implausible_completions = 0  # (IMPLAUSIBLE_LOG_RESIDUAL)
        self._model_version: str | None = None  # set on the rankers of with_model

    @property
    def model_version(self) -> str:
        """Names the model state a ranking came from: how many completions it has learned, or
        the nightly model it ranks with (:meth:`with_model`)."""
        return self._model_version or f"online-{self.model.learned}"

    def with_model(self, model: Any, version: str) -> LeapCore:
        """A core that ranks with ``model`` (a nightly model: ``predict_many``, ``seen``,
        ``family_seen``, ``encoder``) and shares every other piece of this one's state: its
        lineage priors, pending submissions, intervals, pairwise transfer and memory risk.

        Rankings name ``version``. Take a new one after this core loads a model state: the
        copy holds the state objects it was made with. A :meth:`submission` is encoded once,
        by the core that builds it: ``model`` must read the same features.
        """
        if model.encoder.names != self.model.encoder.names:
            raise ValueError(f"{version} was trained over another hardware catalog")
        if model.encoder.without != self.model.encoder.without:
            raise ValueError(f"{version} was trained on other input groups")
        ranker = copy.copy(self)
        ranker.model = model
        ranker._model_version = version
        return ranker

    def evict_idle_lineages(
        self,
        now_ms: float,
        max_idle_days: float | None = None,
        keep: int = MIN_LINEAGES_KEPT,
    ) -> int:
        """Forget lineages with no completion for ``max_idle_days``, the longest idle first,
        while more than ``keep`` are held; return how many.

        Default: ``IDLE_HALF_LIVES`` half-lives (60 days at the default 14). A fleet starts
        hundreds of thousands of lineages a month: without this the state would grow without
        bound. A small one (``keep``, ``MIN_LINEAGES_KEPT``) forgets nothing.
        """
        excess = len(self.priors) - keep
        if excess <= 0:
            return 0
        if max_idle_days is None:
            max_idle_days = IDLE_HALF_LIVES * self.half_life
        horizon = now_ms - max_idle_days * 86_400_000.0
        idle = [
            (seen, key)
            for key, state in self.priors.items()
            if (seen := last_seen_ms(state)) < horizon
        ]
        if len(idle) > excess:
            idle = heapq.nsmallest(excess, idle)
        for _, key in idle:
            del self.priors[key]
        return len(idle)

    def forget_stale_pending(self, now_ms: float, max_days: float = PENDING_MAX_DAYS) -> int:
        """Forget submissions pending for more than ``max_days``; return how many.

        >>> from datetime import UTC, datetime
        >>> from leap_stream.core.catalog import default_catalog
        >>> core = LeapCore(default_catalog())
        >>> core.pending["j1"] = {"job": {"event_time": datetime(2026, 1, 1, tzinfo=UTC)}}
        >>> core.forget_stale_pending(datetime(2026, 3, 1, tzinfo=UTC).timestamp() * 1000.0)
        0
        >>> core.forget_stale_pending(datetime(2026, 3, 3, tzinfo=UTC).timestamp() * 1000.0)
        1
        """
        horizon = now_ms - max_days * 86_400_000.0
        stale = [key for key, entry in self.pending.items() if _time_ms(entry["job"]) < horizon]
        for key in stale:
            del self.pending[key]
        return len(stale)

    def on_submitted(
        self, event: dict[str, Any], eligibility: Eligibility | None = None
    ) -> Ranking:
        """Rank the candidates of a JobSubmitted record; remember it for its completion."""
        return self.rank(self.submission(event, eligibility))

    def submission(
        self, event: dict[str, Any], eligibility: Eligibility | None = None
    ) -> Submission:
        """What ranking ``event`` reads that no model changes (:class:`Submission`): rank it
        with :meth:`rank`, with this core or with :meth:`with_model`'s, before anything else
        is learned."""
        check = eligibility or self.rules.check(event)
        every_type = event.get("candidate_hardware") is None
        if every_type:  # every catalog type, in order: no gather needed
            known = self._every_type_known
            positions = check.positions
        else:
            known = check.positions >= 0
            positions = np.where(known, check.positions, 0)
        index = self.hw.index if every_type else check.index
        state = self.priors.get(event[self._lineage_field])
        signature = config_signature(event)
        now_ms = _time_ms(event)
        references = self._references(state, event, signature, positions, now_ms)
        return Submission(
            event=event,
            check=check,
            job=self.model.encoder.job(event),
            known=known,
            positions=positions,
            predict_at=None if every_type else positions,
            state=state,
            entries=lineage_entries(
                state, index, len(check.names), signature, now_ms, self.half_life
            ),
            references=references,
            blend=self.pairs.measured_weight() if references else 0.0,
            memory_risk=self._memory_risk(event, state, signature, check, positions, index),
            unseen_type=self.type_counts.get(event["model_type"], 0) == 0,
            _predictions={},
        )

    def rank(self, submission: Submission, *, remember: bool = True) -> Ranking:
        """Rank a :meth:`submission` with this core's model, and remember it for its
        completion unless told not to (another model's ranking of a submission this core's
        ranking remembered)."""
        event, check, job = submission.event, submission.check, submission.job
        positions, known, state = submission.positions, submission.known, submission.state
        base = submission.predictions(self.model)
        view = submission.entries.view(self._latest_residual(state))
        # hardware the lineage has not run on: its residuals elsewhere, corrected
        transfer = self._transfer_offsets(submission, base) if state else None
        log_pred, code, risk = _predictions(
            base,
            view.offsets,
            view.same_hardware,
            view.exact,
            transfer,
            self.model.seen,
            self.model.family_seen(job.family),
            positions,
            submission.unseen_type,
            bool(state) and LINEAGE_KEY in state,
            submission.memory_risk,
        )
        # numpy's exp (numba's is the C library's, which differs in the last bit), of each
        # source's half-width rather than of each candidate's: the same value either way
        width = self.intervals.halfwidths(_SOURCES)
        predicted, lower, upper = _ranked_values(
            np.exp(log_pred), known, code, np.exp(-width), np.exp(width)
        )
        if remember:
            self._remember(event, check, base, log_pred.tolist(), code.tolist())
        return rank_candidates(
            job_id=event["job_id"],
            lineage_id=event["lineage_id"],
            event_time=event["event_time"],
            model_version=self.model_version,
            num_devices=event["num_devices"],
            hardware=check.names,
            eligible=check.eligible,
            reasons=check.reason,
            predicted=predicted,
            lower=lower,
            upper=upper,
            price=_at_positions(check.positions, self.hw.price_per_device_hour),
            source=_SOURCE_NAMES[code],
            risk=risk,
        )

    def remember(self, event: dict[str, Any]) -> None:
        """Remember a JobSubmitted record for its completion without ranking it.

        The model, the lineage priors, the pairwise transfer and the memory risk then learn
        from its completion exactly as after :meth:`on_submitted`, which they read only the
        model's submission-time predictions from, at a fraction of the cost: for a pass that
        needs the model a history teaches, not the rankings (the nightly retrains' snapshots).
        Only the interval calibration, which scores the ranking's own predictions, learns
        nothing from these attempts.
        """
        check = self.rules.check(event)
        job = self.model.encoder.job(event)
        if event.get("candidate_hardware") is None:  # every catalog type: no gather needed
            base = self.model.predict_many(job)
        else:
            base = self.model.predict_many(job, np.maximum(check.positions, 0))
        self._remember(event, check, base, None, None)

    def _remember(
        self,
        event: dict[str, Any],
        check: Eligibility,
        base: np.ndarray,
        log_pred: list[float] | None,
        source: list[int] | None,
    ) -> None:
        """The pending entry :meth:`join` reads (``log_pred`` and ``source``: None if the
        submission was not ranked)."""
        self.pending[event["job_id"]] = {
            "job": event,
            "positions": check.positions.tolist(),  # -1: not in the catalog
            "memory_needed_gb": check.memory_needed_gb,
            "base": base.tolist(),
            "log_pred": log_pred,
            "source": source,
        }

    def _memory_risk(
        self,
        event: dict[str, Any],
        state: dict[str, Any] | None,
        signature: str,
        check: Eligibility,
        positions: np.ndarray,
        index: Mapping[str, int],
    ) -> np.ndarray:
        """What the chance of running out of memory adds to each candidate's ranking key.

        A candidate that fails costs a failed try and then the next choice
        (``OUT_OF_MEMORY_COST``). A type this very configuration of the lineage already ran out
        of memory on is as good as certain to, and so is any type where the catalog's estimate
        gives it a larger share of memory than there.
        """
        failed = [index[h] for h in out_of_memory_on(state, signature) if h in index]
        return _out_of_memory_charges(
            check.memory_needed_gb,
            self.rules.usable_memory,
            positions,
            self.memory_risk.rates(event["model_family"]),
            np.array(failed, dtype=np.int64) if failed else _NO_FAILURES,
        )

    def _references(
        self,
        state: dict[str, Any] | None,
        event: dict[str, Any],
        signature: str,
        positions: np.ndarray,
        now_ms: float,
    ) -> tuple[Reference, ...]:
        """The hardware a lineage's measurements transfer from (``signature``: the
        submission's ``config_signature``), with what related jobs measured between each of
        them and the candidates (:class:`PairwiseTransfer`).

        Each hardware type the lineage measured this very configuration on is a reference
        (else its latest measurement, whatever the configuration).
        """
        if not state:
            return ()
        index = self.hw.index
        measured = exact_measurements(state, signature, now_ms, self.half_life)
        found = [(index[h], y, None) for h, y in measured.items() if h in index]
        if not found:
            last = latest(state)
            if last is None or last[0] not in index:
                return ()
            found = [(index[last[0]], last[1], last[2])]
        coordinates = config_coordinates(event)
        model_type, family = event["model_type"], event["model_family"]
        references = []
        for position, log_throughput, config in found:
            ratio, evidence = self.pairs.measured_ratio(model_type, family, position, coordinates)
            spread = self.pairs.spread(model_type, family, position)
            references.append(
                Reference(
                    position=position,
                    log_throughput=log_throughput,
                    config=config,
                    measured=ratio[positions],
                    evidence=evidence[positions],
                    weight=1.0 / spread[positions],
                )
            )
        return tuple(references)

    def _transfer_offsets(self, submission: Submission, base: np.ndarray) -> np.ndarray:
        """The lineage's offset on each candidate from its residuals on the hardware it ran
        (``base``: the model's prediction for each candidate).

        Each reference's residual against the model as it is now, plus the model's efficiency
        ratio from there to each candidate corrected by what related jobs measured, averaged
        over the references, each weighed by how little its ratio to that candidate varies
        across jobs (``PairwiseTransfer.spread``).
        """
        positions = submission.positions
        if not submission.references:
            return np.full(len(positions), submission.entries.lineage_mean)
        job = submission.job
        baseline = self.model.encoder.baseline(job, positions)
        total = np.zeros(len(positions))
        weights = np.zeros(len(positions))
        for reference in submission.references:
            at = np.array([reference.position])
            config = reference.config
            reference_job = job if config is None else self.model.encoder.job(config)
            modelled = self.model.predict_many(reference_job, at)[0]
            reference_efficiency = modelled - self.model.encoder.baseline(reference_job, at)[0]
            residual = reference.log_throughput - modelled
            # shrink what may be the lineage's noise, not the model's gross error of a new type
            shrink = SHRINK_TRANSFER / (1.0 + SHRINK_TRANSFER)
            residual -= shrink * min(max(residual, -SHRINK_UP_TO), SHRINK_UP_TO)
            _add_reference(
                total,
                weights,
                reference.weight,
                residual,
                reference.measured,
                reference.evidence,
                base,
                baseline,
                reference_efficiency,
                submission.blend,
            )
        return total / weights

    def _latest_residual(self, state: dict[str, Any] | None) -> float | None:
        """The lineage's latest measurement against the model as it is now."""
        last = latest(state)
        if last is None:
            return None
        hardware, log_throughput, config = last
        position = self.hw.index.get(hardware)
        if position is None:
            return None
        base = self.model.predict_many(self.model.encoder.job(config), np.array([position]))[0]
        return float(log_throughput - base)

    def on_completed(self, event: dict[str, Any]) -> bool:
        """Join a JobCompleted record to its submission and learn from it.

        Returns False when there is no pending submission (a duplicate or an orphan): nothing
        is learned twice. The same as :meth:`join` then :meth:`learn`.
        """
        matched, example = self.join(event)
        if example is not None:
            self.learn(example)
        return matched

    def join(self, event: dict[str, Any]) -> tuple[bool, LearnExample | None]:
        """Join a completion to its pending submission and update the lineage's prior.

        Returns whether a pending submission was found, and what the model should learn from
        it (None unless the attempt succeeded with a throughput, on a catalog type). The
        partition-local half of :meth:`on_completed`: a stream worker joins on the partition
        that holds the lineage, while the model may learn elsewhere (:meth:`learn`).
        """
        entry = self.pending.pop(event["job_id"], None)
        if entry is None:
            self.unmatched_completions += 1
            return False, None
        throughput = event.get("throughput")
        hardware = event["hardware_type"]
        position = self.hw.index.get(hardware)
        if position is None:
            return True, None
        submitted = entry["job"]
        # older pending entries (a restored worker) carry no estimate
        need = entry.get("memory_needed_gb")
        ratio = None if need is None else need / float(self.rules.usable_memory[position])
        if event.get("failure_reason") == OUT_OF_MEMORY:
            lineage = submitted[self._lineage_field]
            self.priors[lineage] = mark_out_of_memory(
                self.priors.get(lineage), hardware, config_signature(submitted), _time_ms(event)
            )
            return True, None if ratio is None else self._memory_example(event, submitted, ratio)
        if event["status"] != SUCCEEDED or not throughput or throughput <= 0:
            return True, None
        log_y = math.log(throughput)
        source = abs_residual = predicted = None
        try:
            i = entry["positions"].index(position)
        except ValueError:  # ran on hardware that was not among its candidates
            i = None
            job = self.model.encoder.job(submitted)
            base = float(self.model.predict_many(job, np.array([position]))[0])
        else:  # the residual against the submission-time model
            base = entry["base"][i]
        if not abs(log_y - base) <= IMPLAUSIBLE_LOG_RESIDUAL:
            self.implausible_completions += 1
            return True, None
        if i is not None and entry["log_pred"] is not None:  # (None: not ranked)
            source = _SOURCES[entry["source"][i]]  # and how far off the ranking was
            abs_residual = abs(log_y - entry["log_pred"][i])
            predicted = math.exp(entry["log_pred"][i])

        lineage = submitted[self._lineage_field]
        now_ms = _time_ms(event)
        state = self.priors.get(lineage)
        known = self.pair_counts.get((submitted["model_type"], hardware), 0)
        target = log_y - model_target_offset(state, now_ms, self.half_life, pair_completions=known)
        # the latest attempt's configuration is read only when it ran elsewhere (1 in 20)
        last_hardware = latest_hardware(state)
        moved = last_hardware != hardware and last_hardware in self.hw.index
        last = latest(state) if moved else None
        reference = None
        if last is not None:
            reference = {"hardware_type": last[0], "log_throughput": last[1], "job": last[2]}
        signature = config_signature(submitted)
        recent = exact_measurements(
            state, signature, now_ms, self.half_life, since_ms=now_ms - EXACT_REFERENCE_MAX_AGE_MS
        )
        exact_references = [
            {"hardware_type": h, "log_throughput": y}
            for h, y in recent.items()
            if h in self.hw.index and h != hardware and h != last_hardware
        ]
        self.priors[lineage] = update_prior(
            state,
            hardware,
            signature,
            log_throughput=log_y,
            residual=log_y - base,
            time_ms=now_ms,
            config=submitted,
            half_life_days=self.half_life,
        )
        example: LearnExample = {
            "job_id": event["job_id"],
            "lineage_id": submitted["lineage_id"],
            "event_time": event["event_time"],
            "job": job_config(submitted),
            "hardware_type": hardware,
            "target": target,
            "source": source,
            "reference": reference,
            "exact_references": exact_references,
            "memory_ratio": ratio,
            "out_of_memory": False,
            "abs_log_residual": abs_residual,
            "predicted": predicted,
            "throughput": float(throughput),
        }
        return True, example

    def learn_placement(self, job: dict[str, Any], hardware: str, *, out_of_memory: bool) -> None:
        """Learn whether ``job`` fit in memory on ``hardware`` when placed there.

        Completions teach this already (:meth:`join`); a backtest that plays the ranking's
        own picks against a ground truth tells it here what a deployment following the ranking
        would have seen. The history's users mostly place jobs where they know they fit, so
        their failures alone under-state the risk of the types a ranking prefers. A failure also
        marks the lineage's configuration on that type, as the failed attempt's completion would.
        """
        position = self.hw.index.get(hardware)
        if position is None:
            return
        need = self.rules.memory_needed_gb(job)
        ratio = need / float(self.rules.usable_memory[position])
        self.memory_risk.learn_one(job["model_family"], ratio, out_of_memory=out_of_memory)
        if out_of_memory:  # as the failed attempt's completion would (join)
            lineage = job[self._lineage_field]
            self.priors[lineage] = mark_out_of_memory(
                self.priors.get(lineage), hardware, config_signature(job), _time_ms(job)
            )

    def _memory_example(
        self, event: dict[str, Any], submitted: dict[str, Any], ratio: float
    ) -> LearnExample:
        """What an out-of-memory failure teaches: only the memory risk (no throughput)."""
        return {
            "job_id": event["job_id"],
            "lineage_id": submitted["lineage_id"],
            "event_time": event["event_time"],
            "job": job_config(submitted),
            "hardware_type": event["hardware_type"],
            "target": 0.0,
            "source": None,
            "reference": None,
            "exact_references": [],
            "memory_ratio": ratio,
            "out_of_memory": True,
            "abs_log_residual": None,
            "predicted": None,
            "throughput": 0.0,
        }

    def learn(self, example: LearnExample) -> None:
        """Learn one joined completion: the model, the interval calibration, the type counts.

        The global half of :meth:`on_completed`: a pure function of the examples in order, so
        a model folded from the same log of examples is the same model, weight for weight.
        """
        ratio = example.get("memory_ratio")
        out_of_memory = bool(example.get("out_of_memory"))
        if ratio is not None:
            family = example["job"]["model_family"]
            self.memory_risk.learn_one(family, ratio, out_of_memory=out_of_memory)
        if out_of_memory:
            return
        if example["source"] is not None and example["abs_log_residual"] is not None:
            self.intervals.learn_one(example["source"], example["abs_log_residual"])
        job = self.model.encoder.job(example["job"])
        position = self.hw.index[example["hardware_type"]]
        reference = example.get("reference")
        if reference is not None:  # against the model before it learns from this attempt
            self._learn_ratio(example, job, position, reference)
        for measurement in example.get("exact_references") or ():  # (older examples lack it)
            self._learn_ratio(example, job, position, {**measurement, "job": example["job"]})
        prepared = self.model.step(job, position, example["target"])
        model_type = example["job"]["model_type"]
        self.type_counts[model_type] = self.type_counts.get(model_type, 0) + 1
        pair = (model_type, example["hardware_type"])
        self.pair_counts[pair] = self.pair_counts.get(pair, 0) + 1
        self._learn_again(example["job"], position, example["target"], prepared)

    def _learn_again(
        self,
        config: Mapping[str, Any],
        position: int,
        target: float,
        prepared: PreparedPair | None,
    ) -> None:
        """Queue an example for its second pass; learn the one :meth:`second_pass_due` back
        (``prepared``: the example's pair as its first pass stepped on it)."""
        if self.second_pass_delay <= 0:
            return
        queue = self.second_pass
        values = tuple(config.get(name) for name in JOB_CONFIG_FIELDS)
        queue.append((values, position, target))
        if prepared is not None:
            self._prepared.put((values, position), (self.model, prepared))
        due = self.second_pass_due()
        young = self.model.learned < self.young_model_completions
        if len(queue) > due:
            entry = queue.popleft()
            self._learn_queued(entry)
            if young:
                self.third_pass.append(entry)
        # once the model has grown, what still awaits its third pass drains one a completion
        if self.third_pass and (len(self.third_pass) > due or not young):
            self._learn_queued(self.third_pass.popleft())

    def _learn_queued(self, entry: tuple[tuple[Any, ...], int, float]) -> None:
        """Learn a queued example again (counted once already)."""
        values, position, target = entry
        if not math.isfinite(target):  # (never learned the first time either)
            return
        model, prepared = self._prepared.get((values, position)) or (None, None)
        if model is not self.model:  # (a queue loaded with a snapshot, or one too old)
            # (a snapshot from before micro_batches queued one value fewer: read as unknown)
            job = self.model.encoder.job(dict(zip_longest(JOB_CONFIG_FIELDS, values)))
            prepared = self.model.prepare(job, position)
        self.model.learn_prepared(prepared, target)

    def second_pass_due(self) -> int:
        """How many completions after its first pass an example is learned again: a share of
        what the model has learned, within ``second_pass_min_delay`` and ``second_pass_delay``
        (a function of the examples learned, so a fold of the same log takes the same passes).
        """
        grown = max(self.second_pass_min_delay, self.model.learned // SECOND_PASS_DELAY_SHARE)
        return min(self.second_pass_delay, grown)

    def _learn_ratio(
        self, example: LearnExample, job: JobFeatures, position: int, reference: dict[str, Any]
    ) -> None:
        """Teach the pairwise transfer the efficiency ratio this lineage measured."""
        encoder = self.model.encoder
        at = np.array([self.hw.index[reference["hardware_type"]]])
        reference_job = encoder.job(reference["job"])
        reference_baseline = encoder.baseline(reference_job, at)[0]
        reference_model = self.model.predict_many(reference_job, at)[0] - reference_baseline
        here = np.array([position])
        baseline = encoder.baseline(job, here)[0]
        model = self.model.predict_many(job, here)[0] - baseline
        self.pairs.learn_one(
            example["job"]["model_type"],
            job.family,
            reference=int(at[0]),
            hardware=position,
            measured=(math.log(example["throughput"]) - baseline)
            - (reference["log_throughput"] - reference_baseline),
            model=float(model - reference_model),
            coordinates=config_coordinates(example["job"]),
        )

    def model_state(self) -> dict[str, Any]:
        """What :meth:`learn` changes, as one picklable object (a model snapshot's payload)."""
        return {
            "model": self.model,
            "intervals": self.intervals,
            "type_counts": self.type_counts,
            "pair_counts": self.pair_counts,
            "pairs": self.pairs,
            "memory_risk": self.memory_risk,
            "second_pass": self.second_pass,
            "third_pass": self.third_pass,
        }

    def load_model_state(self, state: dict[str, Any]) -> None:
        """Rank and learn from now on with a :meth:`model_state` taken earlier (or elsewhere)."""
        if state["model"].encoder.names != self.model.encoder.names:
            raise ValueError("the model state was learned over another hardware catalog")
        self.model = state["model"]
        self.intervals = state["intervals"]
        self.type_counts = state["type_counts"]
        # snapshots taken before the pair counts existed: the pairs count from naught
        self.pair_counts = state.get("pair_counts") or {}
        # snapshots taken before the pairwise corrections existed start them afresh
        self.pairs = state.get("pairs") or PairwiseTransfer(self.hw.names.tolist())
        self.memory_risk = state.get("memory_risk") or MemoryRisk()
        # snapshots taken before the second pass existed: their examples are not learned again
        self.second_pass = state.get("second_pass") or deque()
        self.third_pass = state.get("third_pass") or deque()  # (older snapshots: none waits)
        self._prepared = RecentCache(self._prepared.size)  # (pairs of the model left behind)


class LookupRanker:
    """Ranks candidates by the lookup table's medians; abstains where it has no entry."""

    def __init__(
        self, catalog: Catalog, *, pending: MutableMapping[str, dict[str, Any]] | None = None
    ) -> None:
        self.rules = EligibilityRules(catalog)
        self.hw = self.rules.hw
        self.table = LookupTable()
        self.pending = {} if pending is None else pending
        # (model type, devices) -> the table's medians in catalog order (NaN: no entry), for
        # the rows whose every entry is a catalog type; the others are read from the table
        self._rows: dict[tuple[str, int], np.ndarray] = {}
        self._off_catalog: set[tuple[str, int]] = set()
        self._source_arrays: dict[int, np.ndarray] = {}

    def on_submitted(
        self, event: dict[str, Any], eligibility: Eligibility | None = None
    ) -> Ranking:
        """Rank by the table's medians for this model type and device count."""
        check = eligibility or self.rules.check(event)
        row_key = (event["model_type"], event["num_devices"])
        row = self._rows.get(row_key)
        if row is not None and row_key not in self._off_catalog:
            predicted = _at_positions(check.positions, row)
        else:
            index = self.hw.index if event.get("candidate_hardware") is None else None
            predicted = self.table.predict_many(
                event["model_type"], check.names, event["num_devices"], index
            )
        self.remember(event)
        return rank_candidates(
            job_id=event["job_id"],
            lineage_id=event["lineage_id"],
            event_time=event["event_time"],
            model_version=f"lookup-{len(self.table)}",
            num_devices=event["num_devices"],
            hardware=check.names,
            eligible=check.eligible,
            reasons=check.reason,
            predicted=predicted,
            lower=predicted,
            upper=predicted,
            price=_at_positions(check.positions, self.hw.price_per_device_hour),
            source=self._sources(len(check.names)),
        )

    def _sources(self, n: int) -> np.ndarray:
        """``n`` candidates' sources, all the lookup's (one read-only array per length)."""
        sources = self._source_arrays.get(n)
        if sources is None:
            sources = self._source_arrays[n] = _LOOKUP_SOURCE[np.zeros(n, dtype=np.int64)]
            sources.flags.writeable = False
        return sources

    def remember(self, event: dict[str, Any]) -> None:
        """Remember a submission for its completion without ranking it."""
        self.pending[event["job_id"]] = {"model_type": event["model_type"]}

    def on_completed(self, event: dict[str, Any]) -> bool:
        """Add a succeeded attempt's measured throughput to the table."""
        entry = self.pending.pop(event["job_id"], None)
        if entry is None:
            return False
        throughput = event.get("throughput")
        if event["status"] == SUCCEEDED and throughput and throughput > 0:
            hardware, devices = event["hardware_type"], event["num_devices"]
            self.table.learn_one(entry["model_type"], hardware, devices, throughput)
            self._update_row(entry["model_type"], hardware, devices)
        return True

    def _update_row(self, model_type: str, hardware: str, devices: int) -> None:
        """Copy the table's new median for this key into its catalog-ordered row."""
        position = self.hw.index.get(hardware)
        if position is None:
            self._off_catalog.add((model_type, devices))
            return
        row = self._rows.get((model_type, devices))
        if row is None:
            row = self._rows[(model_type, devices)] = np.full(len(self.hw), np.nan)
        row[position] = self.table.predict_one(model_type, hardware, devices)


def warm_up(catalog: Catalog) -> None:
    """Compile the core's numba kernels now, on a throwaway core and made-up jobs: otherwise the
    first submissions a process ranks and learns wait for them (about a second with numba's
    on-disk cache, several without). A stream worker calls it before it joins its group.
    """
    core, lookup = LeapCore(catalog), LookupRanker(catalog)
    hardware = list(catalog.names[:3])
    start = datetime(2025, 6, 1, tzinfo=UTC)
    job = {"event_time": start, "model_type": "warm-up", "framework": "pytorch",
           "param_count": 25_000_000, "global_batch_size": 256, "seq_len": None,
           "precision": "bf16", "num_devices": 8, "tensor_parallel": 1, "pipeline_parallel": 1,
           "requested_hardware": hardware[0]}  # fmt: skip
    # (lineage, family, candidates: None for every type, hardware it ran on): the kernels'
    # variants, by which of their inputs are there (a lineage's measurements) and which arrays
    # are read-only (the predictions of every type)
    attempts = [
        ("a", "cnn", None, hardware[0]),
        ("a", "cnn", hardware, hardware[1]),  # a list; the lineage ran on the first
        ("a", "cnn", None, hardware[1]),  # and on the second: an exact prior
        ("b", "moe", hardware, hardware[2]),  # a list for a new lineage
    ]
    for k, (lineage, family, candidates, ran_on) in enumerate(attempts):
        submitted = {**job, "event_id": f"warm-up-{k}", "job_id": f"warm-up-{k}",
                     "lineage_id": lineage, "model_family": family,
                     "candidate_hardware": candidates}  # fmt: skip
        core.on_submitted(submitted)
        lookup.on_submitted(submitted)
        completed = {"event_id": f"warm-up-{k}/done", "event_time": start,
                     "job_id": f"warm-up-{k}", "lineage_id": lineage, "hardware_type": ran_on,
                     "num_devices": 8, "status": "succeeded", "throughput": 1000.0 * (k + 1),
                     "steps": 10}  # fmt: skip
        core.on_completed(completed)
        lookup.on_completed(completed)


@numba.njit(cache=True)
def _ranked_values(
    throughput: np.ndarray,
    known: np.ndarray,
    code: np.ndarray,
    below: np.ndarray,
    above: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each candidate's predicted throughput and interval bounds (NaN where not a catalog
    type); ``below`` and ``above``: each source's factors to its bounds."""
    n = throughput.shape[0]
    predicted, lower, upper = np.empty(n), np.empty(n), np.empty(n)
    for i in range(n):
        value = throughput[i] if known[i] else np.nan
        predicted[i] = value
        lower[i] = value * below[code[i]]
        upper[i] = value * above[code[i]]
    return predicted, lower, upper


@numba.njit(cache=True)
def _add_reference(
    total: np.ndarray,
    weights: np.ndarray,
    weight: np.ndarray,
    residual: float,
    measured: np.ndarray,
    evidence: np.ndarray,
    base: np.ndarray,
    baseline: np.ndarray,
    reference_efficiency: float,
    blend: float,
) -> None:
    """Add one reference's say on each candidate to ``total`` and its ``weight`` to
    ``weights``, in place: its residual plus the model's efficiency ratio from it (``base`` less
    ``baseline``, less ``reference_efficiency``) corrected by what related jobs measured
    (:meth:`PairwiseTransfer.blend`). A reference whose ratio to a candidate varies little
    across jobs weighs more there."""
    for j in range(total.shape[0]):
        model = (base[j] - baseline[j]) - reference_efficiency
        correction = blended(measured[j], evidence[j], model, blend)
        total[j] += weight[j] * (residual + correction)
        weights[j] += weight[j]


@numba.njit(cache=True)
def _at_positions(positions: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` (over the catalog) at each candidate's catalog position (NaN where -1)."""
    gathered = np.empty(positions.shape[0])
    for i in range(positions.shape[0]):
        gathered[i] = values[positions[i]] if positions[i] >= 0 else np.nan
    return gathered


# error_model="numpy": a type of no usable memory gives an infinite ratio, as numpy's division
@numba.njit(error_model="numpy", cache=True)
def _out_of_memory_charges(
    need: float, usable: np.ndarray, positions: np.ndarray, rates: np.ndarray, failed: np.ndarray
) -> np.ndarray:
    """What each candidate's chance of running out of memory adds to its ranking key: at its
    memory ratio ``need / usable`` (at its catalog position), the ratio's bin's rate
    (:meth:`MemoryRisk.rates`), or certain where the configuration ``failed`` (candidate
    indices) and at any ratio as large as the smallest there."""
    n = positions.shape[0]
    ratio = np.empty(n)
    for i in range(n):
        ratio[i] = need / usable[positions[i]]
    p = bin_probabilities(ratio, rates)
    if failed.shape[0]:  # what did not fit at a share of memory will not fit at a larger one
        lowest = np.inf
        for f in failed:
            p[f] = 1.0
            if ratio[f] != ratio[f] or lowest != lowest:  # (numpy's min: NaN wins)
                lowest = np.nan
            elif ratio[f] < lowest:
                lowest = ratio[f]
        for i in range(n):
            if ratio[i] >= lowest:
                p[i] = 1.0
    charges = np.empty(n)
    for i in range(n):
        capped = min(p[i], MAX_OOM_RISK)
        charges[i] = OUT_OF_MEMORY_COST * capped / (1.0 - capped)
    return charges


# Compiled: a dozen small numpy calls a submission, for arrays of a few dozen candidates. The
# same operations in the same order, so the same bits (no exp or log here: numpy's and the C
# library's differ in the last bit).
@numba.njit(cache=True)
def _predictions(
    base: np.ndarray,
    offsets: np.ndarray,
    same_hardware: np.ndarray,
    exact: np.ndarray,
    transfer: np.ndarray | None,
    seen: np.ndarray,
    family_seen: np.ndarray,
    positions: np.ndarray,
    unseen_type: bool,
    transfers: bool,
    memory_risk: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each candidate's log prediction, its source and its ranking charge (:meth:`LeapCore.rank`).

    The lineage's exact measurement where it has one, else the model's prediction ``base`` plus
    the lineage's offset (its own on hardware it ran, else ``transfer``). The charge: the
    uncertainty of a prediction the lineage has not measured, which shrinks with what the model
    has seen of this family on that hardware, plus the ``memory_risk``.
    """
    n = base.shape[0]
    log_pred = np.empty(n)
    code = np.empty(n, dtype=np.int64)
    risk = np.empty(n)
    for i in range(n):
        same = same_hardware[i]
        offset = offsets[i] if same or transfer is None else transfer[i]
        log_pred[i] = exact[i] if np.isfinite(exact[i]) else base[i] + offset
        if same:
            code[i] = _LINEAGE_PRIOR
            risk[i] = 0.0 + memory_risk[i]
        else:
            cold = seen[positions[i]] < COLD_START_MIN_OBSERVATIONS or unseen_type
            code[i] = _COLD_START if cold else (_TRANSFER if transfers else _MODEL)
            risk[i] = RISK_AVERSION / np.sqrt(1.0 + family_seen[positions[i]]) + memory_risk[i]
    return log_pred, code, risk
