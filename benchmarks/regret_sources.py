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
   carrying ``--noise`` (log scale) of what the learner cannot tell apart from it. Then the
   (family, type) first choices of the ranking by the predictions that make most of its regret.

4. Whether the rest could be learned from what a history holds: a gradient-boosted model of the
   prediction's error on the job's configuration and the type's spec sheet (and the family,
   vendor and type themselves), fitted on the first two thirds of the days, corrects the
   predictions of the last third. Fitted once on where the attempts ran (all an open-loop
   history measures) and once on every candidate (what only a fleet that ran each job
   everywhere would measure): the gap between the two is what the history does not show.

This is not ``summary.json``'s ``top1_regret``: there is no uncertainty charge and no pick that
cannot run. Read the rows against each other (docs/results.md).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

import lightgbm
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from rich.progress import track

from leap_stream.backtest.replay import OracleStream
from leap_stream.core import LeapCore
from leap_stream.core.catalog import VENDORS, default_catalog
from leap_stream.core.events import PRECISIONS
from leap_stream.core.hardware import HardwareArrays
from leap_stream.data.fleet.generator import N_TEAMS, default_start
from leap_stream.data.fleet.hidden import AFFINITY_SIGMA, AFFINITY_VENDOR_SHARE, HiddenWorld
from leap_stream.data.fleet.zoo import build_zoo
from leap_stream.data.history import iter_events

_DAY_S = 86_400.0
# What a submission says of its job, kept per candidate for the learnability check (step 4).
CONFIGURATION = ("param_count", "global_batch_size", "seq_len", "num_devices", "tensor_parallel",
                 "pipeline_parallel", "precision", "framework")  # fmt: skip


def candidates(fleet: Path, sample: int = 1) -> pd.DataFrame:
    """Every eligible candidate that can run, of every ``sample``-th submission ranked, in
    history order."""
    core = LeapCore(default_catalog())
    truths = OracleStream(fleet / "oracle.parquet", core.hw.index)
    columns: dict[str, list[np.ndarray]] = {
        k: []
        for k in ("submission", "position", "log_pred", "log_truth", "model_type", "time", "job_id")
    }
    configuration: list[tuple[Any, ...]] = []
    history = fleet / "history.parquet"
    total = pq.ParquetFile(history).metadata.num_rows
    submitted = 0
    for n, (kind, event) in enumerate(
        track(iter_events(history), total=total, description="replaying")
    ):
        if kind != "submitted":
            core.on_completed(event)
            continue
        check = core.rules.check(event)
        ranking = core.on_submitted(event, check)
        truth = truths.take(event["job_id"])
        submitted += 1
        if submitted % sample:
            continue
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
        columns["job_id"].append(np.full(size, event["job_id"], dtype=object))
        configuration.extend([tuple(event.get(name) for name in CONFIGURATION)] * size)
    rows = pd.DataFrame({k: np.concatenate(v) for k, v in columns.items()})
    return pd.concat([rows, pd.DataFrame(configuration, columns=list(CONFIGURATION))], axis=1)


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
    type, vendor) the history had before the row's submission and whether the row is where its
    attempt ran and succeeded (``measured``); and the history's succeeded completions per
    (family, hardware type)."""
    zoo_index = dict(zip(rows["model_type"], rows["model"], strict=False))
    job: dict[str, tuple[str, str]] = {}
    cells, vendors, times = [], [], []
    ran_on: dict[str, int] = {}
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
            ran_on[event["job_id"]] = position
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
        measured=rows["job_id"].map(ran_on).to_numpy() == position,
    ), per_family


def first_choices(rows: pd.DataFrame, log_cost: np.ndarray, score: np.ndarray) -> pd.DataFrame:
    """Each submission's lowest-scored candidate (its row of ``rows``), with its ``regret``:
    its true cost / the cheapest's - 1."""
    frame = pd.DataFrame(
        {"submission": rows["submission"].to_numpy(), "key": score, "cost": log_cost}
    )
    picked = frame.groupby("submission")["key"].idxmin().to_numpy()
    best = frame.groupby("submission")["cost"].min().to_numpy()
    return rows.iloc[picked].assign(regret=np.exp(log_cost[picked] - best) - 1.0)


def regret(rows: pd.DataFrame, log_cost: np.ndarray, score: np.ndarray) -> float:
    """Mean over submissions of (true cost of the lowest-scored candidate / cheapest) - 1."""
    return float(first_choices(rows, log_cost, score)["regret"].mean())


def learned(
    part: np.ndarray, prior: float, n: np.ndarray, noise: float, rng: np.random.Generator
) -> np.ndarray:
    """A Bayesian's estimate of ``part`` (normal with sigma ``prior``) after ``n`` completions,
    each with ``noise`` of log error (the estimate drawn afresh per row)."""
    weight = n / noise**2 / (1.0 / prior**2 + n / noise**2)
    mean_error = noise / np.sqrt(np.maximum(n, 1)) * rng.standard_normal(len(part))
    return np.where(n > 0, weight * (part + mean_error), 0.0)


def spec_and_configuration(rows: pd.DataFrame, hw: HardwareArrays) -> pd.DataFrame:
    """Per candidate, what a learner of the rest may read: the job's configuration and the
    type's spec sheet (log scales), the family, vendor and type as categories."""
    position = rows["position"].to_numpy()
    precision = rows["precision"].map(PRECISIONS.index).to_numpy()
    devices = rows["num_devices"].to_numpy(float)
    log_peak = np.log(np.maximum(hw.peak_tflops[position, precision], 1e-3))
    return pd.DataFrame(
        {
            "log_params": np.log(rows["param_count"].to_numpy(float)),
            "log_batch_per_device": np.log(rows["global_batch_size"].to_numpy(float) / devices),
            "log_seq": np.log(rows["seq_len"].fillna(1).clip(lower=1).to_numpy(float)),
            "log_devices": np.log(devices),
            "tensor_parallel": rows["tensor_parallel"].to_numpy(float),
            "pipeline_parallel": rows["pipeline_parallel"].to_numpy(float),
            "log_peak": log_peak,
            "log_bandwidth_per_flop": np.log(hw.memory_bw_tbps[position]) - log_peak,
            "log_interconnect": np.log(hw.interconnect_gbps[position]),
            "log_scale_out": np.log(hw.scale_out_gbps[position]),
            "in_node": (devices <= hw.devices_per_node[position]).astype(float),
            **{
                name: pd.Categorical(values)
                for name, values in (
                    ("family", rows["family"]),
                    ("precision", rows["precision"]),
                    ("framework", rows["framework"]),
                    ("vendor", hw.vendor_names[position]),
                    ("hardware", hw.names[position]),
                )
            },
        }
    )


def learnability(
    rows: pd.DataFrame, hw: HardwareArrays, log_cost: np.ndarray, price: np.ndarray
) -> None:
    """Step 4: LightGBM fitted to the model's log error on the first two thirds of the days,
    from what :func:`spec_and_configuration` reads, and its correction's top-1 regret on the
    last third; fitted on where the attempts ran (what an open-loop history measures), and on
    every candidate (what only a fleet that ran every job everywhere would)."""
    features = spec_and_configuration(rows, hw)
    error = (rows["log_truth"] - rows["log_pred"]).to_numpy()
    day = (rows["time"] - rows["time"].min()).to_numpy() / _DAY_S
    cut = day.max() * 2 / 3
    train, test = day < cut, day >= cut
    submission = rows["submission"].to_numpy()
    # every candidate's error less its submission's mean: what a ranking reads
    relative = error - pd.Series(error).groupby(submission).transform("mean").to_numpy()
    fits = {
        "where the attempts ran": (train & rows["measured"].to_numpy(), error),
        "every candidate": (train, relative),
    }
    tested = rows[test]
    score = price[test] - rows["log_pred"].to_numpy()[test]
    print(f"\nthe last third of the days ({tested['submission'].nunique():,} submissions)")
    print(f"{'ranking by the predictions':<56} {regret(tested, log_cost[test], score):>11.2%}")
    params = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 63,
              "min_data_in_leaf": 50, "verbose": -1}  # fmt: skip
    for name, (fitted, target) in fits.items():
        data = lightgbm.Dataset(features[fitted], target[fitted])
        correction = lightgbm.train(params, data, num_boost_round=300).predict(features[test])
        print(
            f"{'  corrected, fitted on ' + name + f' ({fitted.sum():,})':<56} "
            f"{regret(tested, log_cost[test], score - correction):>11.2%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleet", type=Path, required=True, help="holds history and oracle")
    parser.add_argument("--days", type=int, required=True, help="the fleet's generate --days")
    parser.add_argument("--seed", type=int, required=True, help="the fleet's generate --seed")
    parser.add_argument("--noise", type=float, default=0.2, help="the ideal learner's noise")
    parser.add_argument(
        "--sample", type=int, default=1, help="record one submission in this many (large fleets)"
    )
    args = parser.parse_args()
    missing = [f for f in ("history.parquet", "oracle.parquet") if not (args.fleet / f).is_file()]
    if missing:
        parser.error(
            f"{args.fleet} lacks {' and '.join(missing)} (leap-stream generate writes both)"
        )
    rows, hw = hidden_parts(candidates(args.fleet, args.sample), args.days, args.seed)
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
    picks = first_choices(rows, log_cost, price - pred)
    costliest = (
        picks.assign(hardware=hw.names[picks["position"].to_numpy()])
        .groupby(["family", "hardware"])["regret"]
        .agg(picks="size", mean="mean", points="sum")
        .sort_values("points", ascending=False)
    )
    costliest["points"] *= 100.0 / len(picks)
    print("the first choices that cost most (ranking by the model's predictions: picks, mean")
    print("regret each, points of the top-1 regret):")
    print(costliest.head(10).round(3).to_string())
    learnability(rows, hw, log_cost, price)


if __name__ == "__main__":
    main()
