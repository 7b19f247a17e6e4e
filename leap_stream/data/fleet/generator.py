"""The synthetic fleet generator: lineages of attempts, written as a history and an oracle.

A day at a time (vectorised, no Python loop per event) it draws the lineages that start that day,
with their owners' hidden memory choices (:mod:`leap_stream.data.fleet.memory_truth`), expands
them into attempts (retries after failure or preemption, configuration changes, moves between
hardware types), prices every attempt on every hardware type with the ground truth
(:mod:`leap_stream.data.fleet.physics`, times the hidden efficiencies of
:mod:`leap_stream.data.fleet.hidden`), places it where its owner's habits say, which is
sometimes a type where it does not fit (it then fails out of memory, ``failure_reason`` oom),
and emits the events whose time has come, in event-time order.
Events of long lineages wait in a small pending pool until their day: memory stays bounded by a
few days of attempts whatever the trace length.

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> stats = generate_fleet(FleetConfig(days=2, jobs_per_day=200, seed=1), out, progress=False)
>>> stats.events == 2 * stats.attempts  # every attempt is submitted, and completes
True
>>> sorted(p.name for p in out.iterdir())
['history.parquet', 'oracle.parquet']
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.progress import Progress

from leap_stream.core.catalog import Catalog, default_catalog
from leap_stream.core.events import FRAMEWORKS, ORACLE_SCHEMA, PRECISIONS, STATUSES
from leap_stream.data.fleet import memory_truth
from leap_stream.data.fleet.hidden import HiddenWorld
from leap_stream.data.fleet.physics import (
    VENDORS,
    HardwareArrays,
    can_run,
    measured_throughput,
    step_throughput,
)
from leap_stream.data.fleet.zoo import FAMILIES, ModelZoo, build_zoo
from leap_stream.data.history import HISTORY_FILE_SCHEMA

__all__ = ["FAILURE_REASONS", "FleetConfig", "FleetStats", "default_start", "generate_fleet"]

DAY_MS = 86_400_000
HOUR_MS = 3_600_000

# --- how people use the fleet (documented in docs/data.md) -----------------------------------
# Attempts per lineage: 1 + geometric, plus a heavy tail of long-lived lineages (sweeps, long
# pre-training runs restarted many times).
ATTEMPT_CONTINUE = 0.55
LONG_LINEAGE_SHARE = 0.05
LONG_LINEAGE_CONTINUE = 0.92
MAX_ATTEMPTS = 60
MEAN_ATTEMPTS = (
    1
    + ATTEMPT_CONTINUE / (1 - ATTEMPT_CONTINUE)
    + LONG_LINEAGE_SHARE * LONG_LINEAGE_CONTINUE / (1 - LONG_LINEAGE_CONTINUE)
)
STATUS_PROBABILITIES = (0.87, 0.07, 0.06)  # succeeded, failed, preempted (STATUSES order)
# failure_reason of an attempt that did not succeed: out of memory on the type it was placed on,
# any other failure, or a preemption.
FAILURE_REASONS = ("oom", "error", "preempted")
# Owners know their jobs: for most attempts they see exactly which types the job fits. For a
# share MISJUDGE_P of attempts they take types where it is close (it needs at most 20% more than
# the type has) for fitting, to choose or to keep. 10% makes about 4% of the placements on types
# where the fit is close (headroom within 20% either way) fail out of memory, inside the 3-5%
# issue 8 asks for; 20% is about the error of a memory estimate made before the first step.
CLOSE_MISS_HEADROOM = 1 / 1.2
MISJUDGE_P = 0.10
# An out-of-memory attempt dies while building its first steps: minutes, not hours.
OOM_RUN_MINUTES = (2.0, 20.0)
# Rounds of "after an OOM, move to a type that fits" (each round settles a longer chain of OOMs
# within a lineage; two or three suffice in practice).
MAX_PLACEMENT_ROUNDS = 50
# Probability that an attempt moves to another hardware type, by the previous attempt's status.
MOVE_AFTER = {"succeeded": 0.12, "failed": 0.05, "preempted": 0.30}
CONFIG_CHANGE_AFTER_SUCCESS = {"batch": 0.20, "devices": 0.12}
# Vendor share of what people ask for, and how strongly a team sticks to its habits.
VENDOR_SHARE = {
    "NVIDIA": 0.55,
    "Google": 0.15,
    "AMD": 0.12,
    "AWS": 0.10,
    "Intel": 0.06,
    "Graphcore": 0.02,
}
N_TEAMS = 300
TEAM_VENDOR_HABIT = 6.0
TEAM_TYPE_HABIT = 4.0
ADOPTION_RAMP_DAYS = 60.0
REQUESTS_HARDWARE = 0.80  # share of lineages whose submissions name the hardware they want
RESTRICTS_CANDIDATES = 0.35  # share of lineages that send a candidate list
# Hidden lineage efficiency (log-normal sigma): shared across hardware, and per hardware type.
LINEAGE_SIGMA = 0.20
LINEAGE_HARDWARE_SIGMA = 0.05
# Timing: queue wait, run length, gap before the next attempt (hours).
QUEUE_MEAN_H = 0.3
RUN_MEDIAN_H = 3.0
RUN_SIGMA = 1.0
GAP_AFTER_SUCCESS_H = 6.0
GAP_AFTER_FAILURE_H = 0.5
DEVICE_CHOICES = 2 ** np.arange(0, 12)  # 1 .. 2048


@dataclass(frozen=True)
class FleetConfig:
    """What to generate. ``start`` defaults to :func:`default_start` of the catalog."""

    days: int = 180
    jobs_per_day: int = 30_000
    seed: int = 7
    start: datetime | None = None
    # False neutralises the hidden efficiencies (affinity, kernel maturity, team stacks) and
    # changes nothing else: the same attempts, placements and memory truth (for tests).
    hidden_effects: bool = True


@dataclass
class FleetStats:
    """What a generation wrote."""

    start: datetime
    days: int
    lineages: int = 0
    attempts: int = 0
    events: int = 0
    oracle_rows: int = 0
    status_counts: dict[str, int] = field(default_factory=dict)
    failure_reasons: dict[str, int] = field(default_factory=dict)


def default_start(catalog: Catalog, days: int) -> datetime:
    """Place the trace so that the newest catalog type launches halfway through it (cold start)."""
    newest = max(a.launch_date for a in catalog)
    day = newest - timedelta(days=days // 2)
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _argmax_or_none(noisy: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Per row, the allowed column of largest ``noisy`` (Gumbel-perturbed log-weights: a
    categorical draw); -1 for a row with nothing allowed."""
    choice = np.argmax(np.where(allowed, noisy, -np.inf), axis=1)
    return np.where(allowed.any(axis=1), choice, -1)


def _place(
    pick_user: np.ndarray,
    pick_safe: np.ndarray,
    moves: np.ndarray,
    first: np.ndarray,
    plausible: np.ndarray,
    fits: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Hardware of each attempt (-1: none) and whether it runs out of memory there.

    An attempt keeps its lineage's type until a move (a new habit draw, ``pick_user``), as long
    as that type still looks fine for its configuration; after an out-of-memory failure the
    next attempt moves to a type where it really fits (``pick_safe``).
    """
    n = len(pick_user)
    rows = np.arange(n)
    forced = np.zeros(n, dtype=bool)
    for _ in range(MAX_PLACEMENT_ROUNDS):
        pick = np.where(forced, pick_safe, pick_user)
        kept = pick[np.maximum.accumulate(np.where(moves | forced, rows, 0))]
        kept_ok = (kept >= 0) & plausible[rows, np.maximum(kept, 0)]
        hardware = np.where(kept_ok, kept, pick)
        oom = (hardware >= 0) & ~fits[rows, np.maximum(hardware, 0)]
        after_oom = np.r_[False, oom[:-1]] & ~first
        if not (after_oom & ~forced).any():
            break
        forced |= after_oom
    return hardware, oom


def _within_lineage_cumsum(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Cumulative sum restarting at every lineage's first attempt (attempts are contiguous)."""
    total = np.cumsum(values)
    lineage_start = np.maximum.accumulate(np.where(first, np.arange(len(values)), 0))
    return total - (total - values)[lineage_start]


def _ids(prefix: str, numbers: np.ndarray, width: int, suffix: str = "") -> pa.Array:
    digits = pc.utf8_lpad(pc.cast(pa.array(numbers, pa.int64()), pa.string()), width, "0")
    return pc.binary_join_element_wise(prefix, digits, suffix, "")


class _Fleet:
    """The static world of one generation: zoo, hardware, teams and popularity."""

    def __init__(self, config: FleetConfig, catalog: Catalog, start: datetime) -> None:
        self.config = config
        self.start = start
        self.zoo: ModelZoo = build_zoo(config.seed)
        self.hw = HardwareArrays.from_catalog(catalog, start)
        self.hidden = HiddenWorld.draw(config.seed, len(self.zoo), self.hw, N_TEAMS)
        rng = np.random.default_rng([config.seed, 0x100])
        n_hw = len(self.hw)
        share = np.array([VENDOR_SHARE[v] for v in VENDORS])
        # Within a vendor people favour big parts of the current generation (one to three years
        # old: the installed base); older ones are being retired, newer ones are still scarce.
        age_years = -self.hw.launch_day / 365.0
        recency = np.exp(-(((age_years - 1.5) / 2.0) ** 2))
        size = (self.hw.peak_tflops[:, PRECISIONS.index("bf16")] * self.hw.memory_gb) ** 0.25
        within = size * recency * np.exp(rng.normal(0.0, 0.4, n_hw))
        per_vendor = np.bincount(self.hw.vendor_index, weights=within, minlength=len(VENDORS))
        self.popularity = share[self.hw.vendor_index] * within / per_vendor[self.hw.vendor_index]
        self.team_vendor = rng.choice(len(VENDORS), N_TEAMS, p=share / share.sum())
        self.team_type = rng.integers(0, n_hw, N_TEAMS)

    def habit_log_weights(self, team: np.ndarray, day: np.ndarray) -> np.ndarray:
        """Log-weight of each hardware type for a team on ``day``, before feasibility."""
        weights = np.broadcast_to(self.popularity, (len(team), len(self.hw))).copy()
        weights *= np.where(
            self.hw.vendor_index[None, :] == self.team_vendor[team][:, None], TEAM_VENDOR_HABIT, 1.0
        )
        weights[np.arange(len(team)), self.team_type[team]] *= TEAM_TYPE_HABIT
        since = day[:, None] - self.hw.launch_day[None, :]
        weights *= np.clip(since / ADOPTION_RAMP_DAYS, 0.02, 1.0)
        return np.log(weights)


@dataclass
class _Attempts:
    """One day's attempts, as columns; the pending pool keeps these until emitted."""

    cols: dict[str, np.ndarray]
    oracle: np.ndarray  # (N, H) float32, NaN where it cannot run
    sub_done: np.ndarray
    end_done: np.ndarray


def _draw_day(fleet: _Fleet, day: int, next_lineage: int, next_job: int) -> _Attempts | None:
    cfg, zoo, hw = fleet.config, fleet.zoo, fleet.hw
    rng = np.random.default_rng([cfg.seed, day])
    n_lin = rng.poisson(cfg.jobs_per_day / MEAN_ATTEMPTS)
    if n_lin == 0:
        return None

    # --- lineages: which model, whose team, what configuration ---------------------------------
    available = zoo.introduced_at * cfg.days <= day
    p = np.where(available, zoo.popularity, 0.0)
    model = rng.choice(len(zoo), n_lin, p=p / p.sum())
    fam = zoo.family_index[model]
    team = rng.integers(0, N_TEAMS, n_lin)
    framework = np.empty(n_lin, dtype=int)
    precision = np.empty(n_lin, dtype=int)
    seq_len = np.full(n_lin, np.nan)
    batch_base = np.empty(n_lin)
    for index, spec in enumerate(FAMILIES):
        rows = np.flatnonzero(fam == index)
        framework[rows] = rng.choice(len(FRAMEWORKS), len(rows), p=spec.frameworks)
        precision[rows] = rng.choice(len(PRECISIONS), len(rows), p=spec.precisions)
        if spec.seq_lens:
            seq_len[rows] = rng.choice(spec.seq_lens, len(rows))
        lo, hi = np.log2(spec.batch[0]), np.log2(spec.batch[1])
        batch_base[rows] = 2.0 ** np.round(rng.uniform(lo, hi, len(rows)))
    params = zoo.param_count[model].astype(float)
    active = zoo.active_params[model]
    traffic = zoo.traffic[model]
    tokens = np.where(np.isnan(zoo.tokens[model]), seq_len, zoo.tokens[model])
    is_seq = ~np.isnan(seq_len)
    tp = np.where(is_seq, 2.0 ** np.clip(np.ceil(np.log2(np.maximum(params / 2e10, 1))), 0, 3), 1)
    pp = np.where(
        is_seq, 2.0 ** np.clip(np.ceil(np.log2(np.maximum(params / (tp * 1e10), 1))), 0, 4), 1
    )
    # The owner's recomputation and micro-batch (hidden), then the smallest power-of-two device
    # count whose configuration fits the 80 GB device they plan for, by the truth (they know
    # their jobs), then a habit of asking for more to go faster.
    recompute, micro_cap = memory_truth.settle(
        rng, fam, params, active, tokens, traffic, precision, tp
    )
    grid = np.maximum(DEVICE_CHOICES[None, :], (tp * pp)[:, None]).astype(float)
    need = memory_truth.need_gb(
        fam[:, None],
        params[:, None],
        active[:, None],
        tokens[:, None],
        traffic[:, None],
        precision[:, None],
        grid,
        tp[:, None],
        pp[:, None],
        np.maximum(batch_base[:, None], grid),
        recompute=recompute[:, None],
        micro_cap=micro_cap[:, None],
    )
    fits80 = memory_truth.fits_reference(need)
    smallest = np.where(fits80.any(axis=1), np.argmax(fits80, axis=1), grid.shape[1] - 1)
    scale_up = rng.choice(5, n_lin, p=[0.25, 0.25, 0.25, 0.15, 0.10])
    devices_base = grid[np.arange(n_lin), np.minimum(smallest + scale_up, grid.shape[1] - 1)]
    lineage_eff = np.exp(rng.normal(0, LINEAGE_SIGMA, n_lin))[:, None] * np.exp(
        rng.normal(0, LINEAGE_HARDWARE_SIGMA, (n_lin, len(hw)))
    )
    lineage_eff *= memory_truth.compute_factor(fam, recompute)[:, None]
    requests = rng.random(n_lin) < REQUESTS_HARDWARE
    restricts = rng.random(n_lin) < RESTRICTS_CANDIDATES
    same_vendor = hw.vendor_index[None, :] == fleet.team_vendor[team][:, None]
    candidates = same_vendor | (rng.random((n_lin, len(hw))) < 0.3)
    candidates = np.where(restricts[:, None], candidates, True)

    long_lived = rng.random(n_lin) < LONG_LINEAGE_SHARE
    extra = np.where(long_lived, rng.geometric(1 - LONG_LINEAGE_CONTINUE, n_lin) - 1, 0)
    n_att = np.minimum(rng.geometric(1 - ATTEMPT_CONTINUE, n_lin) + extra, MAX_ATTEMPTS)

    # --- attempts -------------------------------------------------------------------------------
    lin = np.repeat(np.arange(n_lin), n_att)
    n = len(lin)
    first = np.r_[True, lin[1:] != lin[:-1]]
    status = rng.choice(len(STATUSES), n, p=STATUS_PROBABILITIES)
    prev_status = np.where(first, -1, np.r_[-1, status[:-1]])
    after_success = prev_status == STATUSES.index("succeeded")

    def step(prob: float) -> np.ndarray:
        u = rng.random(n)
        return np.where(after_success & (u < prob), np.where(u < prob / 2, -1.0, 1.0), 0.0)

    batch_exp = _within_lineage_cumsum(step(CONFIG_CHANGE_AFTER_SUCCESS["batch"]), first)
    dev_exp = _within_lineage_cumsum(step(CONFIG_CHANGE_AFTER_SUCCESS["devices"]), first)
    shards = (tp * pp)[lin]
    devices = np.clip(devices_base[lin] * 2.0**dev_exp, shards, 4096)
    batch = np.maximum(batch_base[lin] * 2.0**batch_exp, devices / shards)

    queue_h = rng.exponential(QUEUE_MEAN_H, n)
    run_h = np.clip(np.exp(rng.normal(np.log(RUN_MEDIAN_H), RUN_SIGMA, n)), 0.1, 96.0)
    ended_early = status != STATUSES.index("succeeded")
    run_h = np.where(ended_early, run_h * rng.uniform(0.02, 0.9, n), run_h)
    gap_h = np.where(
        ended_early,
        rng.exponential(GAP_AFTER_FAILURE_H, n),
        rng.exponential(GAP_AFTER_SUCCESS_H, n),
    )
    cycle_h = queue_h + run_h + gap_h
    start_h = rng.uniform(0, 24, n_lin)[lin] + _within_lineage_cumsum(cycle_h, first) - cycle_h
    sub_ms = ((day * 24 + start_h) * HOUR_MS).astype(np.int64)
    sub_day = sub_ms / DAY_MS

    # --- the truth: where each attempt fits, and how fast it runs everywhere --------------------
    model_a, fam_a, tp_a, pp_a = model[lin], fam[lin], tp[lin], pp[lin]
    fragmentation = rng.uniform(*memory_truth.FRAGMENTATION, n)
    need_a = memory_truth.need_gb(
        fam_a,
        params[lin],
        active[lin],
        tokens[lin],
        traffic[lin],
        precision[lin],
        devices,
        tp_a,
        pp_a,
        batch,
        recompute=recompute[lin],
        micro_cap=micro_cap[lin],
    )
    headroom = memory_truth.headroom(hw, need_a, fragmentation)
    fits = headroom >= 1.0
    hidden = fleet.hidden.efficiency(model_a, team[lin], sub_day) if cfg.hidden_effects else None
    throughput = step_throughput(
        hw,
        family_index=fam_a,
        param_count=zoo.param_count[model_a],
        active_params=active[lin],
        tokens=tokens[lin],
        traffic=traffic[lin],
        base_mfu=np.array([f.base_mfu for f in FAMILIES])[fam_a],
        type_efficiency=zoo.efficiency[model_a],
        precision_index=precision[lin],
        framework_index=framework[lin],
        num_devices=devices,
        tensor_parallel=tp_a,
        pipeline_parallel=pp_a,
        global_batch_size=batch,
        micro_batch=memory_truth.micro_batch(batch, devices, tp_a, pp_a, micro_cap[lin]),
        efficiency=lineage_eff[lin],
        day=sub_day,
        days=cfg.days,
        hidden_efficiency=hidden,
    )
    able = can_run(hw, framework[lin], precision[lin], sub_day)
    expected = np.where(able & fits, throughput, np.nan)  # the oracle: NaN where it cannot run
    possible = able & candidates[lin]
    runnable = possible & fits

    # --- where each attempt runs: habit, kept until a move; sometimes a type it does not fit ----
    misjudged = rng.random(n) < MISJUDGE_P
    misjudged &= runnable.any(axis=1)  # nobody tries a job that fits nowhere
    close_miss = possible & ~fits & (headroom >= CLOSE_MISS_HEADROOM) & misjudged[:, None]
    noisy = fleet.habit_log_weights(team[lin], sub_day) + rng.gumbel(size=(n, len(hw)))
    pick_safe = _argmax_or_none(noisy, runnable)
    pick_user = _argmax_or_none(noisy, runnable | close_miss)
    move_p = np.select(
        [first, prev_status == 0, prev_status == 1],
        [1.0, MOVE_AFTER["succeeded"], MOVE_AFTER["failed"]],
        MOVE_AFTER["preempted"],
    )
    moves = rng.random(n) < move_p
    hardware, oom = _place(pick_user, pick_safe, moves, first, runnable | close_miss, fits)
    keep = (hardware >= 0) & (sub_ms < cfg.days * DAY_MS)
    if not keep.any():
        return None

    rows = np.arange(n)
    chosen = expected[rows, np.maximum(hardware, 0)]
    measured = measured_throughput(chosen, rng)
    # An out-of-memory attempt fails within minutes; its owner spends the rest of the cycle they
    # had planned reconfiguring, so the lineage's later submissions keep their times.
    status = np.where(oom, STATUSES.index("failed"), status)
    run_h = np.where(oom, rng.uniform(*OOM_RUN_MINUTES, n) / 60.0, run_h)
    end_ms = sub_ms + ((queue_h + run_h) * HOUR_MS).astype(np.int64)
    run_s = run_h * 3600.0
    succeeded = status == STATUSES.index("succeeded")
    rate = np.nan_to_num(np.where(succeeded, measured, chosen))
    steps = np.where(oom, 0, np.maximum(np.floor(run_s * rate / batch), 1))
    reason = np.select(
        [oom, status == STATUSES.index("failed"), status == STATUSES.index("preempted")],
        [FAILURE_REASONS.index(r) for r in FAILURE_REASONS],
        -1,
    )

    lineage_number = next_lineage + lin
    cols = {
        "lineage": lineage_number,
        "model": model_a,
        "team": team[lin],
        "framework": framework[lin],
        "precision": precision[lin],
        "seq_len": seq_len[lin],
        "num_devices": devices.astype(np.int64),
        "tensor_parallel": tp_a.astype(np.int64),
        "pipeline_parallel": pp_a.astype(np.int64),
        "global_batch_size": batch.astype(np.int64),
        "requested": np.where(requests[lin], hardware, -1),
        "restricts": restricts[lin],
        "candidates": candidates[lin],
        "hardware": hardware,
        "status": status,
        "reason": reason,
        "throughput": np.where(succeeded, measured, np.nan),
        "steps": steps.astype(np.int64),
        "sub_ms": sub_ms,
        "end_ms": end_ms,
    }
    cols = {k: v[keep] for k, v in cols.items()}
    cols["job"] = next_job + np.arange(int(keep.sum()))
    oracle = expected[keep].astype(np.float32)
    return _Attempts(cols, oracle, np.zeros(len(oracle), bool), np.zeros(len(oracle), bool))


class _Writer:
    """Turns due attempts into history and oracle rows, in event-time order."""

    def __init__(self, fleet: _Fleet, out: Path) -> None:
        self.fleet = fleet
        self.start_ms = int(fleet.start.timestamp() * 1000)
        self.hw_names = pa.array(fleet.hw.names, pa.string())
        self.model_names = pa.array(fleet.zoo.name, pa.string())
        self.family_names = pa.array(fleet.zoo.family, pa.string())
        self.history = pq.ParquetWriter(
            out / "history.parquet", HISTORY_FILE_SCHEMA, compression="zstd"
        )
        self.oracle = pq.ParquetWriter(out / "oracle.parquet", ORACLE_SCHEMA, compression="zstd")

    def close(self) -> None:
        self.history.close()
        self.oracle.close()

    def emit(self, pool: list[_Attempts], cutoff_ms: float, stats: FleetStats) -> None:
        subs, ends = [], []
        for batch in pool:
            due_sub = ~batch.sub_done & (batch.cols["sub_ms"] < cutoff_ms)
            due_end = ~batch.end_done & (batch.cols["end_ms"] < cutoff_ms)
            subs.append((batch, np.flatnonzero(due_sub)))
            ends.append((batch, np.flatnonzero(due_end)))
            batch.sub_done |= due_sub
            batch.end_done |= due_end
        sub = _gather(subs)
        end = _gather(ends)
        if sub is None and end is None:
            return
        table, oracle = self._tables(sub, end)
        self.history.write_table(table)
        stats.events += table.num_rows
        if oracle is not None:
            self.oracle.write_table(oracle)
            stats.oracle_rows += oracle.num_rows

    def _tables(self, sub: dict | None, end: dict | None) -> tuple[pa.Table, pa.Table | None]:
        n_sub = 0 if sub is None else len(sub["job"])
        n_end = 0 if end is None else len(end["job"])
        both = _concat(sub, end)
        kind = np.r_[np.zeros(n_sub, np.int8), np.ones(n_end, np.int8)]
        time_ms = np.r_[both["sub_ms"][:n_sub], both["end_ms"][n_sub:]]
        order = np.lexsort((kind, both["job"], time_ms))
        both = {k: v[order] for k, v in both.items()}
        kind, time_ms = kind[order], time_ms[order]
        is_sub = kind == 0
        n = len(order)

        def on(mask: np.ndarray, values: pa.Array) -> pa.Array:
            return pc.if_else(pa.array(mask), values, pa.nulls(n, values.type))

        job_ids = _ids("job-", both["job"], 9)
        hw_idx = both["hardware"]
        requested = both["requested"]
        cand_mask = both["candidates"] & both["restricts"][:, None]
        counts = np.where(both["restricts"], cand_mask.sum(axis=1), 0)
        offsets = np.r_[0, np.cumsum(counts)].astype(np.int32)
        values = self.hw_names.take(pa.array(np.nonzero(cand_mask)[1]))
        candidate_lists = pa.ListArray.from_arrays(
            pa.array(offsets), values, mask=pa.array(~(is_sub & both["restricts"]))
        )
        seq = both["seq_len"]
        table = pa.table(
            {
                "event_type": pa.array(np.where(is_sub, "submitted", "completed")),
                "event_id": pc.binary_join_element_wise(
                    job_ids, pa.array(np.where(is_sub, "submitted", "completed")), "/"
                ),
                "event_time": pa.array(self.start_ms + time_ms, pa.timestamp("ms", tz="UTC")),
                "job_id": job_ids,
                "lineage_id": _ids("lin-", both["lineage"], 8),
                "model_type": on(is_sub, self.model_names.take(pa.array(both["model"]))),
                "model_family": on(is_sub, self.family_names.take(pa.array(both["model"]))),
                "framework": on(is_sub, pa.array(np.asarray(FRAMEWORKS)[both["framework"]])),
                "param_count": on(is_sub, pa.array(self.fleet.zoo.param_count[both["model"]])),
                "global_batch_size": on(is_sub, pa.array(both["global_batch_size"], pa.int32())),
                "seq_len": pa.array(
                    np.where(is_sub & np.isfinite(seq), seq, 0).astype(np.int32),
                    mask=~(is_sub & np.isfinite(seq)),
                ),
                "precision": on(is_sub, pa.array(np.asarray(PRECISIONS)[both["precision"]])),
                "num_devices": pa.array(both["num_devices"], pa.int32()),
                "tensor_parallel": on(is_sub, pa.array(both["tensor_parallel"], pa.int32())),
                "pipeline_parallel": on(is_sub, pa.array(both["pipeline_parallel"], pa.int32())),
                "requested_hardware": on(
                    is_sub & (requested >= 0),
                    self.hw_names.take(pa.array(np.maximum(requested, 0))),
                ),
                "candidate_hardware": candidate_lists,
                "hardware_type": on(~is_sub, self.hw_names.take(pa.array(hw_idx))),
                "status": on(~is_sub, pa.array(np.asarray(STATUSES)[both["status"]])),
                "throughput": pa.array(
                    both["throughput"], mask=is_sub | np.isnan(both["throughput"])
                ),
                "steps": on(~is_sub, pa.array(both["steps"])),
                "failure_reason": on(
                    ~is_sub & (both["reason"] >= 0),
                    pa.array(np.asarray(FAILURE_REASONS)[np.maximum(both["reason"], 0)]),
                ),
                # not said: the owners' micro-batches (memory_truth) stay hidden
                "micro_batches": pa.nulls(len(is_sub), pa.int32()),
                # not said: the ground truth's FLOPs are the default rule's, 6 x P x seq
                "flops_per_sample": pa.nulls(len(is_sub), pa.float64()),
                # said, as a scheduler knows whose job it is; the team's stack stays hidden
                "team": on(is_sub, _ids("team-", both["team"], 3)),
            },
            schema=HISTORY_FILE_SCHEMA,
        )
        if n_sub == 0:
            return table, None
        sub_rows = np.flatnonzero(is_sub)
        oracle_values = both["oracle"][sub_rows]  # (S, H), in history order
        n_hw = oracle_values.shape[1]
        oracle = pa.table(
            {
                "job_id": job_ids.take(pa.array(np.repeat(sub_rows, n_hw))),
                "hardware_type": self.hw_names.take(
                    pa.array(np.tile(np.arange(n_hw), len(sub_rows)))
                ),
                "throughput": pa.array(
                    oracle_values.ravel(), pa.float32(), mask=np.isnan(oracle_values.ravel())
                ),
            },
            schema=ORACLE_SCHEMA,
        )
        return table, oracle


def _gather(parts: list[tuple[_Attempts, np.ndarray]]) -> dict | None:
    chosen = [(b, idx) for b, idx in parts if len(idx)]
    if not chosen:
        return None
    cols = {k: np.concatenate([b.cols[k][idx] for b, idx in chosen]) for k in chosen[0][0].cols}
    cols["oracle"] = np.concatenate([b.oracle[idx] for b, idx in chosen])
    return cols


def _concat(a: dict | None, b: dict | None) -> dict:
    if a is None:
        return b  # type: ignore[return-value]
    if b is None:
        return a
    return {k: np.concatenate([a[k], b[k]]) for k in a}


def _days(progress: bool, days: int) -> Iterator[int]:
    if not progress:
        yield from range(days)
        return
    with Progress(transient=False) as bar:
        task = bar.add_task("generating fleet history (days)", total=days)
        for day in range(days):
            yield day
            bar.advance(task)


def generate_fleet(
    config: FleetConfig,
    out_dir: Path,
    catalog: Catalog | None = None,
    *,
    progress: bool = True,
) -> FleetStats:
    """Write ``out_dir/history.parquet`` and ``out_dir/oracle.parquet``; return what was written."""
    catalog = catalog or default_catalog()
    start = config.start or default_start(catalog, config.days)
    out_dir.mkdir(parents=True, exist_ok=True)
    fleet = _Fleet(config, catalog, start)
    writer = _Writer(fleet, out_dir)
    stats = FleetStats(start=start, days=config.days)
    status_counts = np.zeros(len(STATUSES), np.int64)
    reason_counts = np.zeros(len(FAILURE_REASONS), np.int64)
    pool: list[_Attempts] = []
    try:
        for day in _days(progress, config.days):
            drawn = _draw_day(fleet, day, stats.lineages, stats.attempts)
            if drawn is not None:
                pool.append(drawn)
                stats.lineages = int(drawn.cols["lineage"].max()) + 1
                stats.attempts += len(drawn.oracle)
                status_counts += np.bincount(drawn.cols["status"], minlength=len(STATUSES))
                reasons = drawn.cols["reason"]
                reason_counts += np.bincount(reasons[reasons >= 0], minlength=len(FAILURE_REASONS))
            writer.emit(pool, (day + 1) * DAY_MS, stats)
            pool = [b for b in pool if not (b.sub_done.all() and b.end_done.all())]
        writer.emit(pool, float("inf"), stats)
    finally:
        writer.close()
    stats.status_counts = dict(zip(STATUSES, status_counts.tolist(), strict=True))
    stats.failure_reasons = dict(zip(FAILURE_REASONS, reason_counts.tolist(), strict=True))
    return stats
