"""What top-1 regret a predictor with only a given error would have on a fleet: a ceiling to read
the model's regret against.

Usage (from the repository root)::

    .venv/bin/python benchmarks/regret_ceiling.py --fleet out/fleet-60d

Every attempt of the fleet's history is ranked over its eligible candidates
(``EligibilityRules``, as the replay does) that can run it in truth (the oracle has a throughput
there), by the oracle's true cost times ``exp(error)``, the error drawn per candidate (sigma per
type) plus per vendor (sigma per vendor: an effect shared by a vendor's types, as a team's
software stack is). Printed: the mean of (cost of the pick / cost of the cheapest) - 1 over
the attempts, as ``summary.json``'s ``top1_regret``, for each pair of sigmas, averaged over
``--draws`` draws. The model's regret comes from errors it cannot avoid (the generator's
unobservable effects, docs/data.md) and errors of what it has not learned yet; this separates
the two (docs/results.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from leap_stream.core.catalog import default_catalog
from leap_stream.core.eligibility import EligibilityRules
from leap_stream.data.history import iter_events

# (sigma per type, sigma per vendor)
ERRORS = ((0.02, 0.0), (0.05, 0.0), (0.05, 0.08), (0.09, 0.0), (0.1, 0.08), (0.15, 0.0), (0.2, 0.0))


def true_costs(fleet: Path) -> tuple[np.ndarray, np.ndarray]:
    """Per attempt (rows) and catalog type (columns), the true cost per sample of running it
    there (inf: not eligible, or it cannot run); and each type's vendor index."""
    rules = EligibilityRules(default_catalog())
    hw = rules.hw
    names = hw.names.tolist()
    index = {name: i for i, name in enumerate(names)}
    eligible: dict[str, np.ndarray] = {}
    for kind, event in iter_events(fleet / "history.parquet"):
        if kind != "submitted":
            continue
        check = rules.check(event)
        mask = np.zeros(len(names), dtype=bool)
        for name, ok in zip(check.names, check.eligible.tolist(), strict=True):
            if ok and name in index:
                mask[index[name]] = True
        eligible[event["job_id"]] = mask
    oracle = pq.read_table(fleet / "oracle.parquet").to_pandas()
    oracle = oracle[oracle["job_id"].isin(eligible.keys())]
    oracle["position"] = oracle["hardware_type"].map(index)
    oracle = oracle.dropna(subset=["position"])
    jobs = pd.unique(oracle["job_id"])
    row = pd.Series(np.arange(len(jobs)), index=jobs)
    truth = np.full((len(jobs), len(names)), np.nan)
    truth[row[oracle["job_id"]].to_numpy(), oracle["position"].astype(int).to_numpy()] = oracle[
        "throughput"
    ].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = hw.price_per_device_hour.astype(float)[None, :] / truth
    runs = np.stack([eligible[j] for j in jobs]) & np.isfinite(cost) & (truth > 0)
    cost = np.where(runs, cost, np.inf)
    return cost[np.isfinite(cost).any(axis=1)], np.asarray(hw.vendor_index)


def regret(cost: np.ndarray, vendor: np.ndarray, sigma: float, sigma_vendor: float,
           rng: np.random.Generator) -> float:  # fmt: skip
    """Mean top-1 regret of ranking by cost x exp(error)."""
    error = sigma * rng.standard_normal(cost.shape)
    error += sigma_vendor * rng.standard_normal((len(cost), vendor.max() + 1))[:, vendor]
    pick = np.argmin(cost * np.exp(error), axis=1)
    return float(np.mean(cost[np.arange(len(cost)), pick] / cost.min(axis=1) - 1.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleet", type=Path, required=True, help="holds history and oracle")
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    missing = [f for f in ("history.parquet", "oracle.parquet") if not (args.fleet / f).is_file()]
    if missing:
        parser.error(
            f"{args.fleet} lacks {' and '.join(missing)} (leap-stream generate writes both)"
        )
    cost, vendor = true_costs(args.fleet)
    rng = np.random.default_rng(args.seed)
    print(f"{len(cost):,} attempts, {np.isfinite(cost).sum(axis=1).mean():.1f} candidates each")
    print("sigma per type  sigma per vendor  top-1 regret")
    for sigma, sigma_vendor in ERRORS:
        mean = np.mean([regret(cost, vendor, sigma, sigma_vendor, rng) for _ in range(args.draws)])
        print(f"{sigma:>14.2f}  {sigma_vendor:>16.2f}  {mean:>11.2%}")


if __name__ == "__main__":
    main()
