"""replay --follow-ranking: a fleet that runs each attempt where the ranking puts it, and learns."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from core_fixtures import completed_event, hours, submitted_event
from typer.testing import CliRunner

from leap_stream.backtest.replay import _Session, replay
from leap_stream.cli import app
from leap_stream.core.catalog import default_catalog
from leap_stream.core.leap import LeapCore
from leap_stream.core.priors import config_signature, exact_measurements, out_of_memory_on
from leap_stream.data.history import events_to_table, write_history, write_oracle

# the untrained core ranks Gaudi3 first, its predicted cost a third of the H100's
CANDIDATES = ["Gaudi3", "H100-SXM"]
JOBS = 60
SIGNATURE = config_signature(submitted_event("j", "l", hours(0)))


def _first_choice() -> tuple[str, str, dict[str, float], float]:
    """The untrained core's first choice of CANDIDATES, the other one, its predicted throughput
    on each, and the ratio of their predicted costs (other / first, > 1)."""
    ranking = LeapCore(default_catalog()).on_submitted(
        submitted_event("probe", "probe", hours(0), candidates=CANDIDATES)
    )
    first, other = (ranking.hardware[i] for i in ranking.order[:2])
    cost = dict(zip(ranking.hardware, ranking.cost_per_1k.tolist(), strict=True))
    speed = dict(zip(ranking.hardware, ranking.predicted.tolist(), strict=True))
    return first, other, speed, cost[other] / cost[first]


def _history_where_the_first_choice_flatters(tmp_path: Path) -> tuple[Path, Path]:
    """The core's first choice is truly twice as costly as the other type, where the users run
    every attempt. Every other job can run on the other type only (its own candidate list), so
    a fleet that follows the ranking still measures that type. A new lineage each time: only
    the model can learn it."""
    first, other, speed, cheaper_by = _first_choice()
    # the first choice runs 2 x cheaper_by slower than predicted: twice the other's cost
    truth = {first: speed[first] / (2.0 * cheaper_by), other: speed[other]}
    events: list[tuple[str, dict[str, Any]]] = []
    oracle = []
    for i in range(JOBS):
        job, lineage = f"j{i:02d}", f"l{i:02d}"
        candidates = CANDIDATES if i % 2 == 0 else [other]
        events.append(("submitted", submitted_event(job, lineage, hours(i), candidates=candidates)))
        events.append(
            (
                "completed",
                completed_event(job, lineage, hours(i + 0.5), other, throughput=truth[other]),
            )
        )
        oracle += [(job, name, value) for name, value in truth.items()]
    history, truth_file = tmp_path / "history.parquet", tmp_path / "oracle.parquet"
    write_history([events_to_table(events)], history)
    write_oracle(
        [pd.DataFrame(oracle, columns=["job_id", "hardware_type", "throughput"])], truth_file
    )
    return history, truth_file


def test_a_fleet_following_the_ranking_unlearns_a_flattering_prediction(tmp_path: Path) -> None:
    history, oracle = _history_where_the_first_choice_flatters(tmp_path)

    def run(follow: bool) -> dict[str, Any]:
        return replay(
            history,
            tmp_path / f"out-{follow}",
            default_catalog(),
            oracle=oracle,
            progress=False,
            report=False,
            follow_ranking=follow,
        )

    history_led, followed = run(False), run(True)
    # learning only where the users ran, the core never sees its pick run: it keeps picking it
    # whenever it may (half the jobs, at a regret of 100% each)
    assert history_led["decisions"]["top1_regret"] > 0.45
    assert "follow_ranking" not in history_led
    # running its picks, it measures them and turns to the cheaper type
    assert followed["decisions"]["top1_regret"] < history_led["decisions"]["top1_regret"] / 3
    moved = followed["follow_ranking"]["moved_attempts"]
    assert 0 < moved < JOBS // 2
    assert followed["follow_ranking"]["failed_tries"] == 0


def test_the_followed_attempt_runs_on_the_first_choice_with_its_own_noise(
    tmp_path: Path,
) -> None:
    first, other, _, _ = _first_choice()
    truth = {first: 100.0, other: 400.0}
    oracle = tmp_path / "oracle.parquet"
    rows = [("j0", name, value) for name, value in truth.items()]
    write_oracle([pd.DataFrame(rows, columns=["job_id", "hardware_type", "throughput"])], oracle)
    session = _Session(default_catalog(), oracle, follow_ranking=True)
    session.submitted(submitted_event("j0", "l0", hours(0), candidates=CANDIDATES))
    # the history ran it on the other type, 10% above the oracle there
    session.completed(completed_event("j0", "l0", hours(1), other, throughput=440.0))
    assert session.moved == 1
    # what the lineage measured, and where: the oracle's 100 samples/s there, 10% up
    measured = exact_measurements(session.core.priors["l0"], SIGNATURE, hours(1).timestamp() * 1e3)
    assert measured.keys() == {first}
    assert math.isclose(measured[first], math.log(110.0), rel_tol=1e-12)
    # the lookup table heard the same
    job = submitted_event("j0", "l0", hours(0))
    lookup = session.lookup.table
    assert lookup.predict_one(job["model_type"], first, job["num_devices"]) == pytest.approx(110.0)
    assert lookup.predict_one(job["model_type"], other, job["num_devices"]) is None


def test_a_choice_that_cannot_run_fails_out_of_memory_and_the_next_one_runs(
    tmp_path: Path,
) -> None:
    first, other, _, _ = _first_choice()
    oracle = tmp_path / "oracle.parquet"
    rows = [("j0", first, None), ("j0", other, 300.0)]
    write_oracle([pd.DataFrame(rows, columns=["job_id", "hardware_type", "throughput"])], oracle)
    session = _Session(default_catalog(), oracle, follow_ranking=True)
    session.submitted(submitted_event("j0", "l0", hours(0), candidates=CANDIDATES))
    session.completed(completed_event("j0", "l0", hours(1), other, throughput=300.0))
    assert session.failed_tries == 1 and session.moved == 0  # it ran where the history did
    # the lineage remembers the failure, as after its own out-of-memory completion
    assert out_of_memory_on(session.core.priors["l0"], SIGNATURE) == {first}


def test_following_needs_an_oracle_and_the_in_process_core(tmp_path: Path) -> None:
    history, oracle = _history_where_the_first_choice_flatters(tmp_path)
    catalog = default_catalog()
    with pytest.raises(ValueError, match="needs an oracle"):
        replay(history, tmp_path / "a", catalog, follow_ranking=True, progress=False)
    with pytest.raises(ValueError, match="its own failures"):
        replay(
            history,
            tmp_path / "b",
            catalog,
            oracle=oracle,
            follow_ranking=True,
            pick_feedback=False,
            progress=False,
        )
    runner = CliRunner()
    args = ["replay", str(history), "--out", str(tmp_path / "c"), "--no-report"]
    result = runner.invoke(app, [*args, "--follow-ranking"])
    assert result.exit_code == 2 and "--follow-ranking needs --oracle" in result.output
    result = runner.invoke(app, [*args, "--follow-ranking", "--oracle", str(oracle)])
    assert result.exit_code == 0, result.output
    assert "the fleet following the ranking" in result.output
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert summary["follow_ranking"]["moved_attempts"] > 0
