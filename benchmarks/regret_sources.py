"""Where a synthetic fleet's top-1 regret comes from: what the generator hides, or the rest.

Usage (from the repository root)::

    .venv/bin/python benchmarks/regret_sources.py --fleet out/fleet-60d --days 60 --seed 11

``--days`` and ``--seed`` must be the fleet's own ``generate`` arguments: the script draws the
same hidden world (:class:`~leap_stream.data.fleet.hidden.HiddenWorld`).

1. The online core runs through the history as the replay runs it (without the replay's
   feedback on its own picks, which moves no prediction), and every ranked candidate that is
   eligible and can run (the oracle has a throughput there) is recorded: the model's log
   prediction and the oracle's.
2. A ranking reads only the differences between a submission's candidates, so each error is
   taken relative to its submission's mean. Least squares splits it into the part the hidden
   model-type x hardware affinity and the new types' kernel maturity explain, and the rest
   (the model's misfit of the generator's physics, what the submission does not say: the
   lineage's micro-batch and recomputation, its own per-hardware offset, its team's stack;
   and what the model has not learned yet).
3. Printed: the top-1 regret (cost of the pick / cost of the cheapest - 1, averaged over the
   submissions) of ranking by the predictions; by the predictions with the hidden part of
   their error taken out; with the rest taken out (only the hidden part left); and of an ideal
   learner that knows the truth but the affinity, and learns the affinity as a Bayesian
   would: the part a model type shares over a vendor's types from its completions on that
   vendor so far, its own part on each type from its completions there, each completion
   carrying ``--noise`` (log scale) of what the learner cannot tell apart from it.

This is not ``summary.json``'s ``top1_regret``: there is no uncertainty charge and no pick that
cannot run. Read the rows against each other (docs/results.md).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from rich.progress import track

from leap_stream.backtest.replay import OracleStream
from leap_stream.core import LeapCore
from leap_stream.core.catalog import VENDORS, default_catalog
from leap_stream.core.hardware import HardwareArrays
from leap_stream.data.fleet.generator import N_TEAMS, default_start
from leap_stream.data.fleet.hidden import AFFINITY_SIGMA, AFFINITY_VENDOR_SHARE, HiddenWorld
from leap_stream.data.fleet.zoo import build_zoo
from leap_stream.data.history import iter_events

_DAY_S = 86_400.0


def candidates(fleet: Path) -> pd.DataFrame:
    """Every eligible candidate that can run, of every ranked submission, in history order."""
    core = LeapCore(default_catalog())
    truths = OracleStream(fleet / "oracle.parquet", core.hw.index)
    columns: dict[str, list[np.ndarray]] = {
        k: [] for k in ("submission", "position", "log_pred", "log_truth", "model_type", "time")
    }
    history = fleet / "history.parquet"
    total = pq.ParquetFile(history).metadata.num_rows
    for n, (kind, event) in enumerate(
        track(iter_events(history), total=total, description="replaying")
    ):
        if kind != "submitted":
            core.on_completed(event)
            continue
        check = core.rules.check(event)
        ranking = core.on_submitted(event, check)
        truth = truths.take(event["job_id"])
        ranked = check.eligible & (check.positions >= 0) & np.isfinite(ranking.predicted)
        positions = check.positions[ranked]
        runnable = np.isfinite(truth[positions])
        if runnable.sum() < 2:  # nothing to choose between
            continue
        positions = positions[runnable]
        size = len(positions)
        columns["submission"].append(np.full(size, n))
        columns["position"].append(positions)
        columns["log_pred"].append(np.log(ranking.predicted[ranked][runnable]))
        columns["log_truth"].append(np.log(truth[positions]))
        columns["model_type"].append(np.full(size, event["model_type"], dtype=object))
        columns["time"].append(np.full(size, event["event_time"].timestamp()))
    return pd.DataFrame({k: np.concatenate(v) for k, v in columns.items()})


def hidden_parts(rows: pd.DataFrame, days: int, seed: int) -> tuple[pd.DataFrame, HardwareArrays]:
    """``rows`` with the hidden log effects of each (model type, type, time): the affinity's
    vendor-shared and own parts, and the kernel maturity."""
    catalog = default_catalog()
    start = default_start(catalog, days)
    hw = HardwareArrays.from_catalog(catalog, start)
    zoo = build_zoo(seed)
    world = HiddenWorld.draw(seed, len(zoo), hw, N_TEAMS)
    # the draw's first two arrays again, apart (HiddenWorld keeps only their product)
    rng = np.random.default_rng([seed, 0x300])
    shared = rng.normal(0.0, 1.0, (len(zoo), len(VENDORS)))[:, hw.vendor_index]
    own = rng.normal(0.0, 1.0, (len(zoo), len(hw)))
    shared *= AFFINITY_SIGMA * np.sqrt(AFFINITY_VENDOR_SHARE)
    own *= AFFINITY_SIGMA * np.sqrt(1.0 - AFFINITY_VENDOR_SHARE)
    if not np.allclose(shared + own, np.log(world.affinity)):
        raise RuntimeError("HiddenWorld.draw changed: update this script's copy of its draw")
    model = rows["model_type"].map({name: i for i, name in enumerate(zoo.name)})
    if model.isna().any():
        raise SystemExit("model types this seed's zoo lacks: are --seed and --days the fleet's?")
    model = model.to_numpy(int)
    position = rows["position"].to_numpy()
    day = (rows["time"].to_numpy() - start.timestamp()) / _DAY_S
    maturity = np.empty(len(rows))
    for chunk in np.array_split(np.arange(len(rows)), max(len(rows) // 100_000, 1)):
        every_type = world.kernel_maturity(day[chunk])  # (rows of the chunk, types)
        maturity[chunk] = every_type[np.arange(len(chunk)), position[chunk]]
    return rows.assign(
        model=model,
        family=zoo.family[model],
        shared=shared[model, position],
        own=own[model, position],
        maturity=np.log(maturity),
    ), hw


def completions_before(
    history: Path, rows: pd.DataFrame, hw: HardwareArrays
) -> tuple[pd.DataFrame, Counter[tuple[str, str]]]:
    """``rows`` with how many succeeded completions of the row's (model type, type) and (model
    type, vendor) the history had before the row's submission; and the history's succeeded
    completions per (family, hardware type)."""
    zoo_index = dict(zip(rows["model_type"], rows["model"], strict=False))
    job: dict[str, tuple[str, str]] = {}
    cells, vendors, times = [], [], []
    per_family: Counter[tuple[str, str]] = Counter()
    n_hw, n_vendor = len(hw), len(VENDORS)
    for kind, event in iter_events(history):
        if kind == "submitted":
            job[event["job_id"]] = (event["model_type"], event["model_family"])
            continue
        model_type, family = job.pop(event["job_id"], (None, None))
        model = zoo_index.get(model_type)
        position = hw.index.get(event["hardware_type"])
        if event["status"] == "succeeded" and model is not None and position is not None:
            per_family[(family, event["hardware_type"])] += 1
            cells.append(model * n_hw + position)
            vendors.append(model * n_vendor + int(hw.vendor_index[position]))
            times.append(event["event_time"].timestamp())
    time = rows["time"].to_numpy()

    def before(keys: list[int], row_keys: np.ndarray) -> np.ndarray:
        # completions of a key before a time: one sorted key x 1e10 + seconds (exact enough)
        done = np.sort(np.array(keys) * 1e10 + np.array(times))
        return np.searchsorted(done, row_keys * 1e10 + time) - np.searchsorted(
            done, row_keys * 1e10
        )

    position = rows["position"].to_numpy()
    model = rows["model"].to_numpy()
    return rows.assign(
        n_cell=before(cells, model * n_hw + position),
        n_vendor=before(vendors, model * n_vendor + hw.vendor_index[position]),
    ), per_family


def regret(rows: pd.DataFrame, log_cost: np.ndarray, score: np.ndarray) -> float:
    """Mean over submissions of (true cost of the lowest-scored candidate / cheapest) - 1."""
    frame = pd.DataFrame(
        {"submission": rows["submission"].to_numpy(), "key": score, "cost": log_cost}
    )
    pick = frame.loc[frame.groupby("submission")["key"].idxmin()].set_index("submission")["cost"]
    best = frame.groupby("submission")["cost"].min()
    return float(np.mean(np.exp(pick - best) - 1.0))


def learned(
    part: np.ndarray, prior: float, n: np.ndarray, noise: float, rng: np.random.Generator
) -> np.ndarray:
    """A Bayesian's estimate of ``part`` (normal with sigma ``prior``) after ``n`` completions,
    each with ``noise`` of log error (the estimate drawn afresh per row)."""
    weight = n / noise**2 / (1.0 / prior**2 + n / noise**2)
    mean_error = noise / np.sqrt(np.maximum(n, 1)) * rng.standard_normal(len(part))
    return np.where(n > 0, weight * (part + mean_error), 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleet", type=Path, required=True, help="holds history and oracle")
    parser.add_argument("--days", type=int, required=True, help="the fleet's generate --days")
    parser.add_argument("--seed", type=int, required=True, help="the fleet's generate --seed")
    parser.add_argument("--noise", type=float, default=0.2, help="the ideal learner's noise")
    args = parser.parse_args()
    missing = [f for f in ("history.parquet", "oracle.parquet") if not (args.fleet / f).is_file()]
    if missing:
        parser.error(
            f"{args.fleet} lacks {' and '.join(missing)} (leap-stream generate writes both)"
        )
    rows, hw = hidden_parts(candidates(args.fleet), args.days, args.seed)
    rows, per_family = completions_before(args.fleet / "history.parquet", rows, hw)
    log_cost = np.log(hw.price_per_device_hour[rows["position"].to_numpy()]) - rows["log_truth"]
    log_cost = log_cost.to_numpy()

    submission = rows["submission"].to_numpy()

    def relative(values: np.ndarray) -> np.ndarray:
        """Less the submission's mean: what a ranking reads."""
        return values - pd.Series(values).groupby(submission).transform("mean").to_numpy()

    error = relative((rows["log_pred"] - rows["log_truth"]).to_numpy())
    affinity = relative((rows["shared"] + rows["own"]).to_numpy())
    hidden = np.stack([affinity, relative(rows["maturity"].to_numpy())], axis=1)
    beta, *_ = np.linalg.lstsq(hidden, error, rcond=None)
    explained = hidden @ beta
    rest = error - explained
    print(
        f"{rows['submission'].nunique():,} submissions, {len(rows):,} candidates that can run; "
        f"relative log error: sd {error.std():.3f}, of which the hidden effects explain "
        f"{1.0 - rest.var() / error.var():.1%} (coefficients: affinity {beta[0]:+.2f}, kernel "
        f"maturity {beta[1]:+.2f}; -1: not learned at all, 0: learned)"
    )
    pred = rows["log_pred"].to_numpy()
    rng = np.random.default_rng(0)
    noise = args.noise
    sigma_shared = AFFINITY_SIGMA * np.sqrt(AFFINITY_VENDOR_SHARE)
    sigma_own = AFFINITY_SIGMA * np.sqrt(1.0 - AFFINITY_VENDOR_SHARE)
    ideal = (
        rows["log_truth"].to_numpy()
        - rows["shared"].to_numpy()
        - rows["own"].to_numpy()
        + learned(rows["shared"].to_numpy(), sigma_shared, rows["n_vendor"].to_numpy(), noise, rng)
        + learned(rows["own"].to_numpy(), sigma_own, rows["n_cell"].to_numpy(), noise, rng)
    )
    table = {
        "the model's predictions": pred,
        "  the hidden part of their error taken out": pred - explained,
        "  the rest taken out (the hidden part left)": pred - rest,
        f"an ideal learner of the affinity (noise {args.noise})": ideal,
        "  one that never learns it": (rows["log_truth"] - rows["shared"] - rows["own"]).to_numpy(),
    }
    pairs = pd.DataFrame(
        {"family": rows["family"], "hardware": hw.names[rows["position"].to_numpy()], "rest": rest}
    ).groupby(["family", "hardware"])["rest"]
    worst = pairs.agg(["mean", "size"])
    worst["completions"] = [per_family[pair] for pair in worst.index]
    worst = worst.loc[(worst["mean"] ** 2 * worst["size"]).sort_values(ascending=False).index]
    share = 1.0 - (rest - pairs.transform("mean")).var() / rest.var()
    print(
        f"(family, hardware) pairs explain {share:.1%} "
        "of the rest; the pairs whose mean costs most (mean relative log error of the rest, "
        "candidates, the family's completions there in the whole history):"
    )
    print(worst.head(8).round(3).to_string())
    price = np.log(hw.price_per_device_hour[rows["position"].to_numpy()])
    print("ranking by                                               top-1 regret")
    for name, score in table.items():
        print(f"{name:<56} {regret(rows, log_cost, price - np.asarray(score)):>11.2%}")


if __name__ == "__main__":
    main()
