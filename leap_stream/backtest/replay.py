"""The replay backtester: a history through the very same core, in-process, with no broker.

Prequential: each attempt is ranked at its submission by a model that has learned only from
attempts completed before it; when the attempt completes it is scored first (its submission-time
prediction against what it measured) and only then learned from. With an oracle (the true
throughput of every attempt on every hardware type) the ranking's decisions are scored too:
what following it would have cost against the user's request and the lookup table.

It streams the history and the oracle batch by batch, and forgets lineages idle for 60 days:
memory holds the attempts in flight, the recent lineages and the model, plus the backtest's own
per-attempt rows (about 50 bytes each, for the median errors).

By default a history row that breaks the contract (``docs/history-format.md``) is quarantined:
left out of the replay and written to ``rejects.csv``; ``strict=True`` stops at the first one.

``holdout_hardware`` scores cold hardware honestly: completions on those types teach neither the
model nor the lookup table until each type's first ``holdout_first`` scored attempts have been
predicted and scored (the summary's ``holdout`` block).
"""

from __future__ import annotations

import csv
import gc
import json
import math
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from leap_stream.backtest.metrics import AttemptOutcome, Backtest
from leap_stream.backtest.report import write_report
from leap_stream.core import LeapCore, LookupRanker
from leap_stream.core.catalog import Catalog
from leap_stream.core.eligibility import Eligibility
from leap_stream.core.leap import OUT_OF_MEMORY, SUCCEEDED
from leap_stream.core.priors import HALF_LIFE_DAYS
from leap_stream.core.ranking import Ranking
from leap_stream.data.history import Reject, iter_events, read_oracle_batches

if TYPE_CHECKING:
    from leap_stream.backtest.nightly import NightlyOptions, NightlyRun, NightlyTap

__all__ = [
    "HOLDOUT_FIRST",
    "UNRUNNABLE_PICK_HOURS",
    "OracleError",
    "OracleStream",
    "RankingSource",
    "ranking_from_record",
    "replay",
]

RankingSource = Callable[
    [Iterator[tuple[str, dict[str, Any]]]], Iterator[tuple[str, dict[str, Any], dict | None]]
]
"""Ranks a replay's events elsewhere (e.g. the service): takes the history's ``(kind, event)``
pairs and yields them back in the same order as ``(kind, event, record)``, ``record`` being the
submission's ``HardwareRanking`` record (None for a completion)."""

# Pairwise order accuracy looks at every pair of eligible candidates (~1,000 for 46 types):
# scoring one attempt in PAIRWISE_EVERY keeps it cheap and still counts millions of pairs.
PAIRWISE_EVERY = 10

REJECTS_FILE = "rejects.csv"

# A first choice that cannot run (the oracle has no throughput there: the job does not fit in
# truth) fails after start-up: container, data loader, model build, first step. It is charged
# this many hours on that type (devices x price), a quarter of an hour, unless the attempt itself
# ran and failed there (then its measured time to failure is charged), before the ranking's next
# choice runs. docs/metrics.md, "Decisions".
UNRUNNABLE_PICK_HOURS = 0.25
# replay --holdout-hardware: the scored attempts of each held-out type that are predicted (and
# scored) before the type's completions are learned from. 20 put a within-10% share within
# about +-11 points (one binomial standard error at 50%), and a busy type reaches 20 within its
# first day on a 500-jobs-a-day fleet (B300: ~30 attempts a day), so little else is held back.
HOLDOUT_FIRST = 20


class OracleError(ValueError):
    """The oracle does not line up with the history (order, job ids, hardware names)."""


class OracleStream:
    """The oracle as one vector per job (catalog order, NaN = cannot run), in submission order."""

    def __init__(self, path: Path, catalog_index: dict[str, int], batch_rows: int = 1 << 18):
        self.path = path
        self.index = catalog_index
        self.n_hw = len(catalog_index)
        self._batches = read_oracle_batches(path, batch_rows)
        self._queue: deque[tuple[str, np.ndarray]] = deque()
        self._carry: pa.Table | None = None
        self._done = False
        self.skipped = 0  # jobs passed over by take(..., may_skip)

    def take(self, job_id: str, may_skip: int = 0) -> np.ndarray:
        """The truth for the next submitted job, which must be ``job_id``.

        Up to ``may_skip`` other jobs before it are passed over: the submissions of history
        rows the replay rejected, which the oracle still lists.
        """
        while True:
            while not self._queue:
                if self._done:
                    raise OracleError(f"{self.path}: ended before job {job_id!r}")
                self._fill()
            got, vector = self._queue.popleft()
            if got == job_id:
                return vector
            if may_skip <= 0:
                raise OracleError(
                    f"{self.path}: expected job {job_id!r} next (history submission order), "
                    f"found {got!r}"
                )
            may_skip -= 1
            self.skipped += 1

    def _fill(self) -> None:
        table = next(self._batches, None)
        if table is None:
            self._done = True
            table, self._carry = self._carry, None
            if table is None:
                return
        elif self._carry is not None:
            table = pa.concat_tables([self._carry, table])
        jobs = table.column("job_id").combine_chunks()
        n = len(jobs)
        if n == 0:
            return
        starts = np.flatnonzero(np.r_[True, pc.not_equal(jobs[1:], jobs[:-1]).to_numpy(False)])
        if not self._done:  # the last job may continue in the next batch
            last = starts[-1]
            self._carry = table.slice(last)
            if len(starts) == 1:
                return
            table, jobs, starts = table.slice(0, last), jobs.slice(0, last), starts[:-1]
        hardware = table.column("hardware_type").combine_chunks().dictionary_encode()
        names = hardware.dictionary.to_pylist()
        unknown = [name for name in names if name not in self.index]
        if unknown:
            raise OracleError(f"{self.path}: hardware types not in the catalog: {unknown[:5]}")
        lookup = np.array([self.index[name] for name in names], dtype=np.int64)
        columns = lookup[hardware.indices.to_numpy(zero_copy_only=False)]
        values = table.column("throughput").to_numpy().astype(float)  # nulls become NaN
        job_of_row = np.cumsum(np.r_[True, pc.not_equal(jobs[1:], jobs[:-1]).to_numpy(False)]) - 1
        matrix = np.full((len(starts), self.n_hw), np.nan)
        matrix[job_of_row, columns] = values
        for job_id, vector in zip(jobs.take(pa.array(starts)).to_pylist(), matrix, strict=True):
            self._queue.append((job_id, vector))


@dataclass(slots=True)
class _InFlight:
    """What the replay keeps of a submission until its attempt completes."""

    job: dict[str, Any]
    model: Ranking
    lookup: Ranking
    positions: np.ndarray  # catalog position of each candidate (-1: not in the catalog)
    has_eligible: bool
    truth: np.ndarray | None


def ranking_from_record(
    record: dict[str, Any], check: Eligibility, num_devices: int = 0
) -> Ranking:
    """A ``HardwareRanking`` record as a :class:`Ranking` over ``check``'s candidates.

    What the record leaves out (predictions for ineligible candidates, the order's risk
    adjustment) is not needed to score it: predictions of ineligible candidates stay NaN.
    """
    names = check.names
    n = len(names)
    slots: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        slots.setdefault(name, []).append(i)
    candidates = record["candidates"]
    order = np.array([slots[c["hardware_type"]].pop(0) for c in candidates], dtype=np.int64)
    if len(order) != n:
        raise ValueError(f"ranking of {record['job_id']}: {len(order)} candidates, expected {n}")

    def column(key: str) -> np.ndarray:
        values = np.full(n, np.nan)
        values[order] = [np.nan if c[key] is None else c[key] for c in candidates]
        return values

    eligible = np.zeros(n, dtype=bool)
    eligible[order] = [c["eligible"] for c in candidates]
    source = np.empty(n, dtype=object)
    source[order] = [c["source"] for c in candidates]
    return Ranking(
        job_id=record["job_id"],
        lineage_id=record["lineage_id"],
        event_time=record["event_time"],
        model_version=record["model_version"],
        num_devices=num_devices,
        hardware=names,
        eligible=eligible,
        reasons=check.reason,
        predicted=column("predicted_throughput"),
        lower=column("throughput_lower"),
        upper=column("throughput_upper"),
        price=column("price_per_device_hour"),
        cost_per_1k=column("predicted_cost_per_1k_samples"),
        source=source,
        order=order,
        ranked_count=sum(c["rank"] is not None for c in candidates),
        abstain_reason=record["abstain_reason"],
    )


def _value_for(
    ranking: Ranking, hardware: str
) -> tuple[float | None, float | None, float | None, str | None]:
    try:
        i = ranking.hardware.index(hardware)
    except ValueError:
        return None, None, None, None
    value, source = float(ranking.predicted[i]), str(ranking.source[i])
    if not math.isfinite(value):
        return None, None, None, source
    return value, float(ranking.lower[i]), float(ranking.upper[i]), source


@dataclass(slots=True)
class _AttemptCosts:
    """One attempt's cost on each catalog type at its true throughput, and what following a
    ranking of it would have cost (:meth:`pick`)."""

    cost: np.ndarray  # USD for the attempt's samples, per catalog type (NaN: cannot run there)
    positions: np.ndarray  # the candidates' catalog positions (-1: not a catalog type)
    true_cost: np.ndarray  # per candidate (NaN: not a catalog type, or cannot run there)
    runnable: np.ndarray  # bool per candidate: eligible, and it can run there
    price: np.ndarray  # per device-hour, per catalog type
    devices: int
    fallback: float | None  # what the user asked for (or ran on) costs
    ran_on: int  # catalog position it ran on (-1: none)
    failed_there: bool  # it failed there (a preemption is no failure to fit)
    hours: float  # how long it ran

    def pick(self, ranking: Ranking) -> tuple[float | None, bool]:
        """Cost of following the ranking, and whether its first choice cannot run."""
        cost, positions = self.cost, self.positions
        if ranking.abstained:
            return self._without_advice(0.0), False
        order = ranking.order
        p = int(positions[order[0]])
        if p >= 0 and np.isfinite(cost[p]):
            return float(cost[p]), False
        # The first choice cannot run: each choice tried in turn is charged its time to
        # failure, then the first runnable one runs the attempt (UNRUNNABLE_PICK_HOURS).
        wasted = 0.0
        for i in order[: ranking.ranked_count].tolist():
            p = int(positions[i])
            if p < 0:  # not a catalog type: no price, no oracle
                continue
            if np.isfinite(cost[p]):
                return wasted + float(cost[p]), True
            fail_h = self.hours if p == self.ran_on and self.failed_there else UNRUNNABLE_PICK_HOURS
            wasted += self.devices * float(self.price[p]) * fail_h
        return self._without_advice(wasted), True  # nothing it ranked can run

    def _without_advice(self, wasted: float) -> float | None:
        # what the user asked for (or ran on): the scheduler's behaviour without leap-stream
        return None if self.fallback is None else wasted + self.fallback


class _Decisions:
    """Scores rankings against the oracle: what following each policy would have cost."""

    def __init__(self, core: LeapCore) -> None:
        self.index = core.hw.index
        self.price = core.hw.price_per_device_hour
        self.counter = 0

    def attempt(
        self,
        job: dict[str, Any],
        truth: np.ndarray,
        positions: np.ndarray,
        eligible: np.ndarray,
        completed: dict[str, Any],
        hours: float,
    ) -> _AttemptCosts | None:
        """The attempt's costs (None: no step count to price, or no eligible candidate can
        run it)."""
        steps = completed["steps"]
        if steps is None:  # no step count, no samples to price: no decision figures
            return None
        samples = float(steps) * float(job["global_batch_size"])
        # USD to process the attempt's samples on each hardware type at its true throughput
        # (truth is positive or NaN: no division guard needed)
        cost = samples * job["num_devices"] * self.price / (3600.0 * truth)
        known = positions >= 0
        true_cost = np.where(known, cost[np.where(known, positions, 0)], np.nan)
        runnable = np.isfinite(true_cost) & eligible
        if not runnable.any():
            return None
        fallback = self.index.get(job.get("requested_hardware") or completed["hardware_type"], -1)
        fits = fallback >= 0 and np.isfinite(cost[fallback])
        return _AttemptCosts(
            cost=cost,
            positions=positions,
            true_cost=true_cost,
            runnable=runnable,
            price=self.price,
            devices=job["num_devices"],
            fallback=float(cost[fallback]) if fits else None,
            ran_on=self.index.get(completed["hardware_type"], -1),
            failed_there=completed["status"] == "failed",
            hours=hours,
        )

    def costs(self, flight: _InFlight, completed: dict[str, Any], hours: float) -> dict[str, Any]:
        """The ``cost_*`` fields of the attempt's outcome (``hours``: how long it ran)."""
        job = flight.job
        attempt = self.attempt(
            job, flight.truth, flight.positions, flight.model.eligible, completed, hours
        )
        if attempt is None:
            return {}
        cost, true_cost, runnable = attempt.cost, attempt.true_cost, attempt.runnable
        cost_model, model_unrunnable = attempt.pick(flight.model)
        cost_lookup, lookup_unrunnable = attempt.pick(flight.lookup)

        requested = job.get("requested_hardware")
        p_req = self.index.get(requested, -1) if requested else -1
        candidates = flight.positions[runnable]
        out: dict[str, Any] = {
            "cost_model": cost_model,
            "cost_lookup": cost_lookup,
            "model_pick_unrunnable": model_unrunnable,
            "lookup_pick_unrunnable": lookup_unrunnable,
            "cost_requested": float(cost[p_req])
            if p_req >= 0 and np.isfinite(cost[p_req])
            else None,
            "cost_best": float(cost[candidates].min()),
        }
        self.counter += 1
        if self.counter % PAIRWISE_EVERY == 0 and len(candidates) > 1:
            predicted = flight.model.cost_per_1k[runnable]
            true = true_cost[runnable]
            dp = np.sign(predicted[:, None] - predicted[None, :])
            dt = np.sign(true[:, None] - true[None, :])
            upper = np.triu(np.ones_like(dp, dtype=bool), 1) & (dt != 0)
            out["pairwise_correct"] = int(np.count_nonzero((dp == dt) & upper))
            out["pairwise_total"] = int(np.count_nonzero(upper))
        return out


def _events_with_progress(
    history: Path,
    batch_rows: int,
    progress: bool,
    rejects: list[Reject] | None,
    bar: Progress | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The history's events, with a progress bar (on ``bar``, beside its own tasks, if given:
    one live display at a time)."""
    events = iter_events(history, batch_rows, rejects)
    if not progress:
        yield from events
        return
    total = pq.ParquetFile(history).metadata.num_rows if history.suffix == ".parquet" else None
    columns = [TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    with bar or Progress(*columns) as bar:
        task = bar.add_task("replaying", total=total)
        for count, item in enumerate(events, 1):
            yield item
            if count % 20_000 == 0:
                bar.update(task, completed=count)
        bar.update(task, completed=count if total is None else total)


class _Quarantine:
    """Rejected history rows, streamed to ``rejects.csv`` as they come (bounded memory).

    The file is written beside its target and renamed into place by :meth:`close`: a failed
    replay leaves none, a clean replay removes a previous run's.
    """

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / REJECTS_FILE
        self._partial = out_dir / f".{REJECTS_FILE}.partial"
        self._file: IO[str] | None = None
        self._writer: Any = None
        self.by_column: Counter[str] = Counter()
        self.rows = 0

    def drain(self, rejects: list[Reject]) -> None:
        """Write the rejects collected so far and empty the list."""
        if self._file is None:
            self._file = open(self._partial, "w", newline="")  # noqa: SIM115 (closed in close)
            self._writer = csv.writer(self._file)
            self._writer.writerow(Reject._fields)
        self._writer.writerows(rejects)
        self.by_column.update(reject.column for reject in rejects)
        self.rows += len(rejects)
        rejects.clear()

    def close(self, complete: bool) -> None:
        """Put rejects.csv in place (``complete``) or drop what was written."""
        if self._file is not None:
            self._file.close()
            if complete:
                os.replace(self._partial, self.path)
            self._partial.unlink(missing_ok=True)
        elif complete:
            self.path.unlink(missing_ok=True)  # a previous run's, about another history

    def summary(self) -> dict[str, Any]:
        """The summary's ``rejects`` block."""
        return {"rows": self.rows, "by_column": dict(sorted(self.by_column.items()))}


@contextmanager
def _quiet_collector() -> Iterator[None]:
    """The replay holds millions of long-lived objects (lineage priors, attempts in flight) and
    makes no reference cycles: the cyclic collector's passes over them cost and free nothing."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(200_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


class _Session:
    """One replay's state: the model, the baseline, the scorer and the attempts in flight."""

    def __init__(
        self,
        catalog: Catalog,
        oracle: Path | None,
        holdout_hardware: Collection[str] = (),
        holdout_first: int = HOLDOUT_FIRST,
        lineage_half_life_days: float = HALF_LIFE_DAYS,
        pick_feedback: bool = True,
        without: Collection[str] = (),
        follow_ranking: bool = False,
    ) -> None:
        self.pick_feedback = pick_feedback
        self.follow_ranking = follow_ranking
        # follow_ranking: attempts run elsewhere than in the history, and choices tried that
        # did not fit before one did
        self.moved = 0
        self.failed_tries = 0
        self.core = LeapCore(
            catalog, lineage_half_life_days=lineage_half_life_days, without=without
        )
        self.lookup = LookupRanker(catalog)
        self.backtest = Backtest(interval_level=self.core.intervals.level)
        self.truths = OracleStream(oracle, self.core.hw.index) if oracle else None
        self.decisions = _Decisions(self.core)
        self.in_flight: dict[str, _InFlight] = {}
        self.counts: Counter[str] = Counter()
        # completions on a hardware type the catalog does not name: nothing can score them
        self.off_catalog: Counter[str] = Counter()
        self.rejected = 0  # history rows quarantined so far
        self.forgotten = 0
        self.stale_pending = 0  # submissions pending too long, forgotten by the core
        self._day: date | None = None
        # held-out type -> scored attempts still to predict before its completions are learned
        self.holdout_left = dict.fromkeys(holdout_hardware, holdout_first)
        self.withheld = 0  # completions not learned from because of the holdout
        # replay --nightly: ranks the scored days again with each night's batch models
        self.tap: NightlyTap | None = None
        # submissions before this time (ms) are learned from, not ranked or scored
        self.learn_until = -math.inf
        self.fast_forwarded = 0

    def submitted(self, event: dict[str, Any], record: dict[str, Any] | None = None) -> None:
        """Rank a submission with both predictors; keep it until its attempt completes.

        ``record``: the model's ranking as a ``HardwareRanking`` record ranked elsewhere (the
        service), scored instead of the in-process core's; the core still sees the
        submission, for its state (lineages, pending attempts).
        """
        core = self.core
        when = event["event_time"]
        now = when.timestamp() * 1000.0
        if when.date() != self._day:  # once a day: forget idle lineages
            self._day = when.date()
            self.forgotten += core.evict_idle_lineages(now)
            self.stale_pending += core.forget_stale_pending(now)
        if now < self.learn_until:
            self._learn_only(event)
            return
        check = core.rules.check(event)
        submission = core.submission(event, check)
        model_ranking = core.rank(submission)
        # (a ranked candidate is eligible: the flags are scanned only when none was)
        has_eligible = model_ranking.ranked_count > 0 or bool(check.eligible.any())
        if record is not None:
            model_ranking = ranking_from_record(record, check, event["num_devices"])
        lookup_ranking = self.lookup.on_submitted(event, check)
        self.backtest.observe_submission(
            when.date(), has_eligible, not model_ranking.abstained, not lookup_ranking.abstained
        )
        truth = None
        if self.truths is not None:
            # a rejected submission still has its oracle rows: pass over at most one per reject
            truth = self.truths.take(event["job_id"], self.rejected - self.truths.skipped)
        self.in_flight[event["job_id"]] = _InFlight(
            event, model_ranking, lookup_ranking, check.positions, has_eligible, truth
        )
        if self.tap is not None:
            self.tap.submitted(core, submission, truth)

    def _learn_only(self, event: dict[str, Any]) -> None:
        """Remember a submission for its completion to teach both predictors, unranked and
        unscored (a fast-forward: :class:`~leap_stream.backtest.nightly.NightlyOptions`)."""
        self.core.remember(event)
        self.lookup.remember(event)
        if self.truths is not None:  # its oracle rows are passed over, in step
            self.truths.take(event["job_id"], self.rejected - self.truths.skipped)
        self.fast_forwarded += 1

    def _pick_fit(self, flight: _InFlight) -> None:
        """Tell the core whether its first choice would have fit in memory (the oracle's say).

        What a deployment that follows the ranking sees: its picks run, and the ones that do not
        fit fail out of memory. Only that bit is revealed, never a throughput.
        """
        ranking = flight.model
        if flight.truth is None or ranking.abstained:
            return
        position = int(flight.positions[ranking.order[0]])
        if position >= 0:
            fits = bool(np.isfinite(flight.truth[position]))
            hardware = self.core.hw.names[position]
            self.core.learn_placement(flight.job, str(hardware), out_of_memory=not fits)

    def _followed(self, flight: _InFlight, event: dict[str, Any]) -> dict[str, Any]:
        """The completion had the fleet run the attempt where the ranking put it first
        (``follow_ranking``).

        The choices are tried in order: one that cannot run (the oracle's say) fails out of
        memory, which the core learns (:meth:`~leap_stream.core.LeapCore.learn_placement`), and
        the first that can runs the attempt. Its throughput there is the oracle's, times the
        attempt's own deviation from the oracle where the history ran it (its run-to-run noise,
        a straggler). An abstention, a history's out-of-memory failure (no throughput to carry,
        and the attempt failed) and an attempt on no catalog type stay as they were; another
        failure or a preemption moves with the attempt.
        """
        ranking, truth = flight.model, flight.truth
        ran_on = self.core.hw.index.get(event["hardware_type"])
        if truth is None or ranking.abstained or ran_on is None:
            return event
        if event.get("failure_reason") == OUT_OF_MEMORY:
            return event
        names = self.core.hw.names
        for candidate in ranking.order[: ranking.ranked_count].tolist():
            position = int(flight.positions[candidate])
            if position < 0:  # not a catalog type: no oracle to run it on
                continue
            if not np.isfinite(truth[position]):
                self.failed_tries += 1
                self.core.learn_placement(flight.job, str(names[position]), out_of_memory=True)
                continue
            if position == ran_on:
                return event
            self.moved += 1
            followed = {**event, "hardware_type": str(names[position])}
            throughput = event.get("throughput")
            if event["status"] == SUCCEEDED and throughput:
                there = truth[ran_on]
                noise = throughput / float(there) if np.isfinite(there) else 1.0
                followed["throughput"] = float(truth[position]) * noise
            return followed
        return event

    def completed(self, event: dict[str, Any]) -> None:
        """Score the attempt first (prequential), then let both predictors learn from it.

        A completion on a held-out type that has not yet had its first scored attempts is
        scored but not learned from: its pending submissions are dropped instead, so that
        neither the model, nor the lineage's prior, nor the lookup table hears of it.
        """
        job_id = event["job_id"]
        flight = self.in_flight.pop(job_id, None)
        priced = event  # decisions are priced on the history's attempt, followed or not
        if flight is not None and self.follow_ranking:
            event = self._followed(flight, event)
        hardware = event["hardware_type"]
        known = hardware in self.core.hw.index
        if not known:
            self.off_catalog[hardware] += 1
        held = flight is not None and self.holdout_left.get(hardware, 0) > 0
        if flight is not None:
            outcome = _outcome(flight, event, self.decisions, held, priced, known)
            self.backtest.observe(outcome)
            if outcome.holdout:
                self.holdout_left[hardware] -= 1
            if self.pick_feedback and not self.follow_ranking:
                self._pick_fit(flight)
        if self.tap is not None:  # before the core learns from it, as the online model was
            self.tap.completed(self.core, event, outcome if flight is not None else None)
        if held:
            self.core.pending.pop(job_id, None)
            self.lookup.pending.pop(job_id, None)
            self.withheld += 1
            return
        self.core.on_completed(event)
        self.lookup.on_completed(event)


def replay(
    history: Path,
    out_dir: Path,
    catalog: Catalog,
    *,
    oracle: Path | None = None,
    batch_rows: int = 65_536,
    progress: bool = True,
    report: bool = True,
    strict: bool = False,
    rankings: RankingSource | None = None,
    holdout_hardware: Collection[str] = (),
    holdout_first: int = HOLDOUT_FIRST,
    lineage_half_life_days: float = HALF_LIFE_DAYS,
    pick_feedback: bool = True,
    nightly: NightlyOptions | None = None,
    without: Collection[str] = (),
    follow_ranking: bool = False,
) -> dict[str, Any]:
    """Replay ``history`` through the core; write summary.json, daily.csv and report.html.

    Parameters
    ----------
    history, out_dir, catalog
        The history file, the directory to write into (created if need be), the catalog.
    oracle
        The history's oracle file: adds the decision figures.
    batch_rows
        History rows read at a time.
    progress, report
        Show a progress bar; write report.html.
    strict
        False (default): a history row that breaks the contract is left out of the replay and
        written to ``rejects.csv`` (row, column, reason; only when there are any), and counted
        in the summary's ``rejects`` block. True: the first such row raises ``HistoryError``.
    rankings
        Where the model's rankings come from (:data:`RankingSource`, e.g.
        :func:`leap_stream.streaming.via_kafka.kafka_rankings`); default: the in-process core.
    holdout_hardware, holdout_first
        Hardware types held out: their completions are not learned from (by the model, the
        lineages' priors or the lookup table) until each type's first ``holdout_first`` scored
        attempts (succeeded, with a throughput) have been predicted and scored; those attempts
        are scored in the summary's ``holdout`` block. Not with ``rankings``: the service
        learns from every completion.
    lineage_half_life_days
        :class:`~leap_stream.core.LeapCore`'s: how fast a lineage's priors fade.
    pick_feedback
        With an oracle: after scoring an attempt, tell the core whether its first choice would
        have fit in memory, as a deployment following the ranking would learn from its own
        out-of-memory failures (:meth:`~leap_stream.core.LeapCore.learn_placement`). Not with
        ``rankings``: the service that ranks learns from completions only.
    nightly
        Also retrain batch models at each of the last nights and score each on the next day's
        attempts (:mod:`leap_stream.backtest.nightly`): adds ``nightly.csv``, the summary's
        ``nightly`` block and its plot. Not with ``rankings`` or ``holdout_hardware``.
    without
        Input groups the online core leaves out (:mod:`leap_stream.core.inputs`; an ablation,
        see :mod:`leap_stream.backtest.ablation`). Not with ``rankings`` or ``nightly``.
    follow_ranking
        A fleet that follows the ranking (needs ``oracle``): each attempt runs on the ranking's
        first choice that can run, at the oracle's throughput there times the attempt's own
        noise, and the core and the lookup table learn that (``_Session._followed``), the
        choices tried before it failing out of memory. Without it the replay is open-loop:
        the core learns where the history ran each attempt, never from its own choices. The
        decision figures are priced the same way in both; the accuracy figures are those of
        where each attempt ran. Not with ``rankings``, ``holdout_hardware``, ``nightly`` or
        without ``pick_feedback`` (the followed fleet's failures are what it learns from).

    Returns
    -------
    dict
        The summary written to summary.json (``docs/metrics.md``).
    """
    holdout = sorted(set(holdout_hardware))
    unknown = [name for name in holdout if name not in catalog.names]
    if unknown:
        raise ValueError(f"holdout hardware not in the catalog: {', '.join(unknown)}")
    if holdout and rankings is not None:
        raise ValueError("a holdout needs the in-process core (the service learns from all)")
    if holdout_first < 1:
        raise ValueError(f"holdout_first must be >= 1, got {holdout_first}")
    if nightly is not None and (holdout or rankings is not None):
        raise ValueError("a nightly replay needs the in-process core learning every completion")
    if without and (nightly is not None or rankings is not None):
        raise ValueError("input groups are left out of the in-process online core only")
    if follow_ranking and (
        oracle is None or rankings is not None or holdout or nightly is not None
    ):
        raise ValueError(
            "following the ranking needs an oracle and the in-process core, without a holdout "
            "or nightly retrains"
        )
    if follow_ranking and not pick_feedback:
        raise ValueError("a fleet that follows the ranking learns from its own failures")
    out_dir.mkdir(parents=True, exist_ok=True)
    pick_feedback = pick_feedback and rankings is None  # the service hears no counterfactuals
    session = _Session(
        catalog,
        oracle,
        holdout,
        holdout_first,
        lineage_half_life_days,
        pick_feedback,
        without,
        follow_ranking,
    )
    counts = session.counts
    rejects: list[Reject] | None = None if strict else []
    quarantine = _Quarantine(out_dir)
    run = _nightly_run(
        history, catalog, nightly, lineage_half_life_days, batch_rows, strict, progress
    )
    began = time.perf_counter()
    complete = False
    try:
        with _quiet_collector():
            if run is not None:  # pass 1: the nights' snapshots, handed to the pool
                run.prepare()
                session.tap = run.make_tap(session.core)
                if nightly is not None and nightly.fast_forward:
                    session.learn_until = run.cutoff_ms[0]
                began = time.perf_counter()  # the replay's own speed, as without
            bar = None if run is None else run.progress  # pass 1 may still be running
            events = _events_with_progress(history, batch_rows, progress, rejects, bar)
            for kind, event, record in _with_rankings(events, rankings):
                if rejects:  # a batch was just read with broken rows
                    quarantine.drain(rejects)
                    session.rejected = quarantine.rows
                counts[kind] += 1
                if kind == "submitted":
                    session.submitted(event, record)
                else:
                    session.completed(event)
        if rejects:  # the last batches may have been all broken rows
            quarantine.drain(rejects)
        complete = True
    finally:
        quarantine.close(complete)
        if run is not None and not complete:
            run.close()
    elapsed = time.perf_counter() - began

    counts["unmatched_completions"] = session.core.unmatched_completions
    counts["implausible_completions"] = session.core.implausible_completions
    counts["never_completed"] = len(session.in_flight)
    backtest = session.backtest
    summary = backtest.summary(dict(counts), events_per_second=_rate(counts, elapsed))
    summary["state"] = {
        "lineages_kept": len(session.core.priors),
        "lineages_forgotten": session.forgotten,
        "pending_forgotten": session.stale_pending,
    }
    summary["rejects"] = quarantine.summary()
    summary["off_catalog"] = {
        "completions": session.off_catalog.total(),
        "by_hardware": dict(session.off_catalog.most_common()),
    }
    if run is not None and session.fast_forwarded:
        summary["fast_forward"] = {
            "until": run.cutoffs[0].isoformat(),
            "submissions": session.fast_forwarded,
        }
    if holdout:
        summary["holdout"] = {
            "hardware": holdout,
            "first": holdout_first,
            "withheld_completions": session.withheld,
            **(summary.get("holdout") or backtest.holdout_figures()),
        }
    if "decisions" in summary:
        summary["decisions"]["unrunnable_pick_hours"] = UNRUNNABLE_PICK_HOURS
    if follow_ranking:
        summary["follow_ranking"] = {
            "moved_attempts": session.moved,
            "failed_tries": session.failed_tries,
        }
    nightly_frame = None
    if run is not None:
        try:
            summary["nightly"], nightly_frame = run.finish(out_dir, has_oracle=oracle is not None)
        finally:
            run.close()
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    backtest.daily().to_csv(out_dir / "daily.csv", index=False)
    if report:
        write_report(
            out_dir / "report.html",
            summary,
            backtest.daily(),
            backtest.by_hardware(),
            backtest.by_family(),
            backtest.calibration(),
            title=f"leap-stream backtest: {history.name}"
            + (" (the fleet following the ranking)" if follow_ranking else ""),
            nightly=nightly_frame,
        )
    else:  # not an earlier replay's report beside this one's figures
        (out_dir / "report.html").unlink(missing_ok=True)
    return summary


def _nightly_run(
    history: Path,
    catalog: Catalog,
    options: NightlyOptions | None,
    lineage_half_life_days: float,
    batch_rows: int,
    strict: bool,
    progress: bool,
) -> NightlyRun | None:
    if options is None:
        return None
    from leap_stream.backtest.nightly import NightlyRun  # it builds on this module

    return NightlyRun(
        history,
        catalog,
        options,
        lineage_half_life_days=lineage_half_life_days,
        batch_rows=batch_rows,
        strict=strict,
        progress=progress,
    )


def _with_rankings(
    events: Iterator[tuple[str, dict[str, Any]]], rankings: RankingSource | None
) -> Iterator[tuple[str, dict[str, Any], dict | None]]:
    if rankings is not None:
        yield from rankings(events)
        return
    for kind, event in events:
        yield kind, event, None


def _rate(counts: Counter[str], elapsed: float) -> float:
    events = counts["submitted"] + counts["completed"]
    return events / elapsed if elapsed > 0 else 0.0


def _outcome(
    flight: _InFlight,
    completed: dict[str, Any],
    decisions: _Decisions,
    held: bool = False,
    priced: dict[str, Any] | None = None,
    known: bool = True,
) -> AttemptOutcome:
    """Score an attempt: its accuracy where it ran (``completed``; ``known``: on a catalog
    type), and the decision costs of the history's attempt (``priced``, default
    ``completed``)."""
    job = flight.job
    hardware = completed["hardware_type"]
    predicted, lower, upper, source = _value_for(flight.model, hardware)
    lookup_predicted = _value_for(flight.lookup, hardware)[0]
    hours = max((completed["event_time"] - job["event_time"]).total_seconds() / 3600.0, 0.0)
    # an attempt on a type the catalog does not name is not scored (neither policy could
    # predict it), so it is no abstention either
    actual = completed.get("throughput") if completed["status"] == "succeeded" and known else None
    extra: dict[str, Any] = {}
    truth = flight.truth
    if truth is not None:
        extra = decisions.costs(flight, priced or completed, hours)
        position = decisions.index.get(hardware)
        if actual is not None and position is not None and np.isfinite(truth[position]):
            extra["oracle_predicted"] = float(truth[position])
    model = flight.model
    pick_source = None if model.abstained else str(model.source[model.order[0]])
    return AttemptOutcome(
        day=job["event_time"].date(),
        family=job["model_family"],
        hardware=hardware,
        status=completed["status"],
        actual=actual,
        model_predicted=predicted,
        model_lower=lower,
        model_upper=upper,
        model_source=source,
        lookup_predicted=lookup_predicted,
        has_eligible=flight.has_eligible,
        model_ranked=not flight.model.abstained,
        lookup_ranked=not flight.lookup.abstained,
        device_hours=hours * completed["num_devices"],
        model_pick_source=pick_source,
        holdout=held and actual is not None,
        **extra,
    )
