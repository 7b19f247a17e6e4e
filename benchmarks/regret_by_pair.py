"""Where the replay's top-1 regret is, by what the model had learned of the pairs it ranked.

Usage (from the repository root)::

    .venv/bin/python benchmarks/regret_by_pair.py --fleet out/fleet-60d

Replays the fleet with its oracle (as ``leap-stream replay --oracle`` does, without the report)
and, at each scored submission, reads how many completions the model had learned of the
(model type, hardware type) pair it put first, and of the pair that was cheapest at the
oracle's throughputs. Printed per bucket of those counts: the share of the decisions, the
regret a decision (cost of the first choice / cost of the cheapest - 1) and the points of the
total it makes. The total is ``summary.json``'s ``top1_regret`` (the same decisions).

An open-loop history runs each job where its user asked, so a pair no user runs is never
learned: the rows with no completion say what that costs (docs/results.md).
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from leap_stream.backtest import replay
from leap_stream.core.catalog import default_catalog

BUCKETS = ((0, 0, "none"), (1, 9, "1 to 9"), (10, 99, "10 to 99"), (100, math.inf, "100 or more"))


def pair_counts_at_decisions(fleet: Path, out_dir: Path) -> np.ndarray:
    """One row per scored decision: completions of the picked pair, of the cheapest pair, and
    the decision's regret."""
    at_submission: dict[str, tuple[int, int]] = {}
    rows: list[tuple[int, int, float]] = []
    submitted, outcome = replay._Session.submitted, replay._outcome

    def counting_submitted(session: Any, event: dict[str, Any], record: Any = None) -> None:
        submitted(session, event, record)
        flight = session.in_flight.get(event["job_id"])
        if flight is None or flight.truth is None or flight.model.abstained:
            return
        core, ranking = session.core, flight.model
        positions = flight.positions[(flight.positions >= 0) & ranking.eligible]
        truth = flight.truth[positions]
        runs = np.isfinite(truth)
        if not runs.any():
            return
        # the cheapest per sample: the devices and the samples are the same on every type
        cost = core.hw.price_per_device_hour[positions[runs]] / truth[runs]
        cheapest = str(core.hw.names[positions[runs][np.argmin(cost)]])
        model_type = event["model_type"]
        at_submission[event["job_id"]] = (
            core.pair_counts.get((model_type, ranking.top), 0),
            core.pair_counts.get((model_type, cheapest), 0),
        )

    def counting_outcome(flight: Any, completed: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        scored = outcome(flight, completed, *args, **kwargs)
        counts = at_submission.pop(flight.job["job_id"], None)
        if counts is not None and scored.cost_model is not None and scored.cost_best:
            rows.append((*counts, scored.cost_model / scored.cost_best - 1.0))
        return scored

    replay._Session.submitted, replay._outcome = counting_submitted, counting_outcome
    try:
        replay.replay(
            fleet / "history.parquet",
            out_dir,
            default_catalog(),
            oracle=fleet / "oracle.parquet",
            report=False,
        )
    finally:
        replay._Session.submitted, replay._outcome = submitted, outcome
    return np.array(rows, dtype=float).reshape(-1, 3)


def print_table(rows: np.ndarray) -> None:
    regret = rows[:, 2]
    print(f"{len(rows):,} scored decisions, top-1 regret {regret.mean():.2%}")
    for column, title in ((0, "the picked pair"), (1, "the cheapest pair")):
        print(f"completions of {title}: share of decisions, regret a decision, points of the total")
        for low, high, label in BUCKETS:
            inside = (rows[:, column] >= low) & (rows[:, column] <= high)
            share = inside.mean()
            each = regret[inside].mean() if inside.any() else float("nan")
            points = 100.0 * regret[inside].sum() / len(rows)
            print(f"  {label:12} {share:6.1%}  {each:6.1%}  {points:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", type=Path, required=True, help="holds history and oracle")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out_dir:
        print_table(pair_counts_at_decisions(args.fleet, Path(out_dir)))


if __name__ == "__main__":
    main()
