"""The synthetic fleet generator: lineages of attempts, written as a history and an oracle.

A day at a time (vectorised, no Python loop per event) it draws the lineages that start that day,
expands them into attempts (retries after failure or preemption, configuration changes, moves
between hardware types), prices every attempt on every hardware type with the ground truth
(:mod:`leap_stream.data.fleet.physics`) and emits the events whose time has come, in event-time
order.
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
from leap_stream.core.events import FRAMEWORKS, HISTORY_SCHEMA, ORACLE_SCHEMA, PRECISIONS, STATUSES
from leap_stream.core.memory import SEQUENCE_FAMILIES, USABLE_FRACTION, required_memory_gb
from leap_stream.data.fleet.physics import (
    VENDORS,
    HardwareArrays,
    expected_throughput,
    measured_throughput,
)
from leap_stream.data.fleet.zoo import FAMILIES, ModelZoo, build_zoo

__all__ = ["FleetConfig", "FleetStats", "default_start", "generate_fleet"]

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


def default_start(catalog: Catalog, days: int) -> datetime:
    """Place the trace so that the newest catalog type launches halfway through it (cold start)."""
    newest = max(a.launch_date for a in catalog)
    day = newest - timedelta(days=days // 2)
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _gumbel_choice(rng: np.random.Generator, log_weights: np.ndarray) -> np.ndarray:
    """One categorical draw per row of ``log_weights`` (-inf: impossible); -1 for an empty row."""
    noisy = log_weights + rng.gumbel(size=log_weights.shape)
    choice = np.argmax(noisy, axis=1)
    return np.where(np.isfinite(log_weights).any(axis=1), choice, -1)


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
    family = zoo.family[model]
    is_seq = np.isin(family, SEQUENCE_FAMILIES)
    tp = np.where(is_seq, 2.0 ** np.clip(np.ceil(np.log2(np.maximum(params / 2e10, 1))), 0, 3), 1)
    pp = np.where(
        is_seq, 2.0 ** np.clip(np.ceil(np.log2(np.maximum(params / (tp * 1e10), 1))), 0, 4), 1
    )
    # The smallest power-of-two device count whose configuration fits an 80 GB device, then
    # a habit of asking for more to go faster.
    grid = np.maximum(DEVICE_CHOICES[None, :], (tp * pp)[:, None]).astype(float)
    need = required_memory_gb(
        np.repeat(params[:, None], grid.shape[1], 1),
        np.asarray(PRECISIONS)[precision][:, None],
        grid,
        tp[:, None],
        pp[:, None],
        np.maximum(batch_base[:, None], grid),
        seq_len[:, None],
        family[:, None],
    )
    fits80 = need <= 80.0 * USABLE_FRACTION
    smallest = np.where(fits80.any(axis=1), np.argmax(fits80, axis=1), grid.shape[1] - 1)
    scale_up = rng.choice(5, n_lin, p=[0.25, 0.25, 0.25, 0.15, 0.10])
    devices_base = grid[np.arange(n_lin), np.minimum(smallest + scale_up, grid.shape[1] - 1)]
    lineage_eff = np.exp(rng.normal(0, LINEAGE_SIGMA, n_lin))[:, None] * np.exp(
        rng.normal(0, LINEAGE_HARDWARE_SIGMA, (n_lin, len(hw)))
    )
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
    end_ms = sub_ms + ((queue_h + run_h) * HOUR_MS).astype(np.int64)
    sub_day = sub_ms / DAY_MS

    model_a = model[lin]
    expected = expected_throughput(
        hw,
        family_index=fam[lin],
        param_count=zoo.param_count[model_a],
        active_params=zoo.active_params[model_a],
        tokens=np.where(np.isnan(zoo.tokens[model_a]), seq_len[lin], zoo.tokens[model_a]),
        traffic=zoo.traffic[model_a],
        base_mfu=np.array([f.base_mfu for f in FAMILIES])[fam[lin]],
        type_efficiency=zoo.efficiency[model_a],
        precision_index=precision[lin],
        framework_index=framework[lin],
        num_devices=devices,
        tensor_parallel=tp[lin],
        pipeline_parallel=pp[lin],
        global_batch_size=batch,
        seq_len=seq_len[lin],
        lineage_efficiency=lineage_eff[lin],
        day=sub_day,
        days=cfg.days,
    )

    # --- where each attempt runs: habit, kept until a move --------------------------------------
    runnable = np.isfinite(expected) & candidates[lin]
    log_w = np.where(runnable, fleet.habit_log_weights(team[lin], sub_day), -np.inf)
    pick = _gumbel_choice(rng, log_w)
    move_p = np.select(
        [first, prev_status == 0, prev_status == 1],
        [1.0, MOVE_AFTER["succeeded"], MOVE_AFTER["failed"]],
        MOVE_AFTER["preempted"],
    )
    moves = rng.random(n) < move_p
    kept = pick[np.maximum.accumulate(np.where(moves, np.arange(n), 0))]
    kept_ok = (kept >= 0) & runnable[np.arange(n), np.maximum(kept, 0)]
    hardware = np.where(kept_ok, kept, pick)
    keep = (hardware >= 0) & (sub_ms < cfg.days * DAY_MS)
    if not keep.any():
        return None

    rows = np.arange(n)
    chosen = expected[rows, np.maximum(hardware, 0)]
    measured = measured_throughput(chosen, rng)
    run_s = run_h * 3600.0
    succeeded = status == STATUSES.index("succeeded")
    rate = np.nan_to_num(np.where(succeeded, measured, chosen))
    steps = np.maximum(np.floor(run_s * rate / batch), 1)

    lineage_number = next_lineage + lin
    cols = {
        "lineage": lineage_number,
        "model": model_a,
        "framework": framework[lin],
        "precision": precision[lin],
        "seq_len": seq_len[lin],
        "num_devices": devices.astype(np.int64),
        "tensor_parallel": tp[lin].astype(np.int64),
        "pipeline_parallel": pp[lin].astype(np.int64),
        "global_batch_size": batch.astype(np.int64),
        "requested": np.where(requests[lin], hardware, -1),
        "restricts": restricts[lin],
        "candidates": candidates[lin],
        "hardware": hardware,
        "status": status,
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
        self.history = pq.ParquetWriter(out / "history.parquet", HISTORY_SCHEMA, compression="zstd")
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
            },
            schema=HISTORY_SCHEMA,
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
    pool: list[_Attempts] = []
    try:
        for day in _days(progress, config.days):
            drawn = _draw_day(fleet, day, stats.lineages, stats.attempts)
            if drawn is not None:
                pool.append(drawn)
                stats.lineages = int(drawn.cols["lineage"].max()) + 1
                stats.attempts += len(drawn.oracle)
                status_counts += np.bincount(drawn.cols["status"], minlength=len(STATUSES))
            writer.emit(pool, (day + 1) * DAY_MS, stats)
            pool = [b for b in pool if not (b.sub_done.all() and b.end_done.all())]
        writer.emit(pool, float("inf"), stats)
    finally:
        writer.close()
    stats.status_counts = dict(zip(STATUSES, status_counts.tolist(), strict=True))
    return stats
