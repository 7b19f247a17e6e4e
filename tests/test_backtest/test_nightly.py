"""Tests of ``replay --nightly`` (leap_stream.backtest.nightly) on a small generated fleet.

One replay with two nights runs in this process (``workers=0``) and is shared by most tests;
the command line runs the same through the process pool and must give the same table.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from leap_stream import cli
from leap_stream.backtest import nightly as nightly_module
from leap_stream.backtest.nightly import (
    CANDIDATES,
    MODELS,
    NIGHTLY_FILE,
    NightlyOptions,
    NightlyRun,
    NightTask,
    machine_cores,
    night_pool,
    nightly_figures,
    plan_cutoffs,
    pool_workers,
    serve,
    train_night,
)
from leap_stream.backtest.replay import replay
from leap_stream.backtest.retrain import replay_snapshots
from leap_stream.core.batch import TrainingSet
from leap_stream.core.catalog import Catalog
from leap_stream.core.ensemble import ENSEMBLE
from leap_stream.core.promotion import PromotionRule
from leap_stream.data.fleet import FleetConfig

NIGHTS = 2
WARMUP = 1  # one night before the counted ones, for the rule to read
FLEET = FleetConfig(days=5, jobs_per_day=300, seed=13)


@pytest.fixture(scope="module")
def fleet(generated_fleet: Callable[[FleetConfig], Path]) -> Path:
    return generated_fleet(FLEET)


@pytest.fixture(scope="module")
def nightly(fleet: Path, hw_catalog: Catalog) -> tuple[dict[str, Any], Path]:
    """The fleet replayed with two nightly retrains, in this process."""
    out = fleet / "nightly-inline"
    summary = replay(
        fleet / "history.parquet",
        out,
        hw_catalog,
        oracle=fleet / "oracle.parquet",
        progress=False,
        report=True,
        nightly=NightlyOptions(nights=NIGHTS, workers=0, warmup=WARMUP),
    )
    return summary, out


def _succeeded_before(history: Path, cutoff_ms: float, after_ms: float = -np.inf) -> int:
    """Succeeded completions with a throughput in [after, cutoff): counted from the file."""
    table = pq.read_table(history, columns=["event_type", "event_time", "status", "throughput"])
    times = pc.cast(table.column("event_time"), "int64").to_numpy()
    mine = (
        (table.column("event_type").to_numpy(zero_copy_only=False) == "completed")
        & (table.column("status").to_numpy(zero_copy_only=False) == "succeeded")
        & (table.column("throughput").to_numpy(zero_copy_only=False) > 0)
        & (times < cutoff_ms)
        & (times >= after_ms)
    )
    return int(mine.sum())


def test_each_snapshot_holds_exactly_the_completions_before_its_cutoff(
    fleet: Path, hw_catalog: Catalog, nightly: tuple[dict[str, Any], Path]
) -> None:
    history = fleet / "history.parquet"
    cutoffs = plan_cutoffs(history, NIGHTS)
    assert [c.date() for c in cutoffs] == [
        cutoffs[-1].date() - timedelta(days=NIGHTS - 1 - i) for i in range(NIGHTS)
    ]
    chunks = []
    for snapshot in replay_snapshots(history, hw_catalog, cutoffs):
        chunks.append(snapshot.examples)
        training = TrainingSet.concat(chunks)
        cutoff_ms = snapshot.cutoff.timestamp() * 1000.0
        assert training.time_ms.max() < cutoff_ms  # never a completion of the next day
        assert len(training) == _succeeded_before(history, cutoff_ms)
        next_day = _succeeded_before(history, cutoff_ms + 86_400_000.0, after_ms=cutoff_ms)
        assert next_day > 0  # there was something to leak
        online = pickle.loads(snapshot.online)
        assert online.learned == len(training)
    # the replay's own nights trained on those very snapshots
    table = pd.read_csv(nightly[1] / NIGHTLY_FILE)
    for cutoff in cutoffs:
        sizes = table[(table["cutoff"] == cutoff.isoformat()) & (table["model"] == "lightgbm")]
        expected = _succeeded_before(history, cutoff.timestamp() * 1000.0)
        assert sizes["snapshot_examples"].tolist() == [expected]


def test_a_night_refuses_a_snapshot_holding_a_later_completion(
    tmp_path: Path, hw_catalog: Catalog, fleet: Path
) -> None:
    cutoff = plan_cutoffs(fleet / "history.parquet", 1)[0]
    (snapshot,) = replay_snapshots(fleet / "history.parquet", hw_catalog, [cutoff])
    late = snapshot.examples
    late.time_ms[-1] = cutoff.timestamp() * 1000.0  # a completion at the cutoff itself
    (tmp_path / "chunk.pkl").write_bytes(pickle.dumps(late))
    (tmp_path / "online.pkl").write_bytes(snapshot.online)
    task = NightTask(0, cutoff.timestamp() * 1000.0, [str(tmp_path / "chunk.pkl")],
                     str(tmp_path / "online.pkl"), [], 1, {}, 10)  # fmt: skip
    with pytest.raises(RuntimeError, match="after its cutoff"):
        train_night(task)


def test_a_night_with_train_days_trains_on_its_last_days_only(
    tmp_path: Path, hw_catalog: Catalog, fleet: Path
) -> None:
    history = fleet / "history.parquet"
    cutoff = plan_cutoffs(history, 1)[0]
    cutoff_ms = cutoff.timestamp() * 1000.0
    (snapshot,) = replay_snapshots(history, hw_catalog, [cutoff])
    (tmp_path / "chunk.pkl").write_bytes(pickle.dumps(snapshot.examples))
    (tmp_path / "online.pkl").write_bytes(snapshot.online)
    results = {
        days: train_night(
            NightTask(0, cutoff_ms, [str(tmp_path / "chunk.pkl")], str(tmp_path / "online.pkl"),
                      [], 1, {}, 10, train_days=days)
        )
        for days in (None, 2.0)
    }  # fmt: skip
    assert results[None].examples == _succeeded_before(history, cutoff_ms)
    assert results[2.0].examples == _succeeded_before(
        history, cutoff_ms, after_ms=cutoff_ms - 2 * 86_400_000.0
    )
    assert 0 < results[2.0].examples < results[None].examples
    assert results[2.0].first_ms >= cutoff_ms - 2 * 86_400_000.0
    with pytest.raises(ValueError, match="train_days must be > 0"):
        NightlyOptions(train_days=0)


def test_every_model_is_scored_on_the_same_attempts_each_night(
    nightly: tuple[dict[str, Any], Path],
) -> None:
    _, out = nightly
    table = pd.read_csv(out / NIGHTLY_FILE)
    assert len(table) == (WARMUP + NIGHTS) * len(MODELS)
    assert table["warmup"].tolist() == [True] * WARMUP * len(MODELS) + [False] * (
        NIGHTS * len(MODELS)
    )
    assert set(table["model"]) == set(MODELS)
    daily = pd.read_csv(out / "daily.csv")
    for day, rows in table.groupby("day"):
        assert rows["n"].nunique() == 1 and rows["n"].iloc[0] > 100
        online = rows[rows["model"] == "online"].iloc[0]
        for model in ("online", "river_batch", "lightgbm", ENSEMBLE):
            assert rows[rows["model"] == model]["predicted"].iloc[0] == online["n"]
        assert rows[rows["model"] == "lookup"]["predicted"].iloc[0] < online["n"]
        # the online model's row is the replay's own figure for that day
        assert online["within_10pct"] == pytest.approx(
            daily[daily["day"] == day]["within_10pct"].iloc[0], abs=1e-6
        )
        # by source: the same attempts for every model, filed under the online model's source
        for source in ("lineage_prior", "transfer", "model", "cold_start"):
            assert rows[f"{source}_n"].nunique() == 1
        assert (
            rows[[f"{s}_n" for s in ("lineage_prior", "transfer", "model", "cold_start")]]
            .iloc[0]
            .sum()
            == online["n"]
        )
    # models scored on the same attempts but not the same model: the ensemble is none of its
    # members
    mape = {m: table[table["model"] == m]["mape"].to_numpy() for m in CANDIDATES}
    assert not np.allclose(mape["lightgbm"], mape["online"])
    assert all(not np.allclose(mape[ENSEMBLE], mape[m]) for m in CANDIDATES if m != ENSEMBLE)


def test_the_summary_block_is_the_nights_means_and_what_served(
    nightly: tuple[dict[str, Any], Path],
) -> None:
    summary, out = nightly
    block = summary["nightly"]
    assert json.loads((out / "summary.json").read_text())["nightly"] == block
    assert block["nights"] == NIGHTS and block["warmup_nights"] == WARMUP
    assert block["retrains"] == NIGHTS + WARMUP
    seconds = block["seconds"]  # the nights' wall and CPU, each summed, within the run's wall
    assert 0 < seconds["training_cpu"] <= seconds["total"] * machine_cores()
    assert 0 < seconds["training"] <= seconds["total"]
    table = pd.read_csv(out / NIGHTLY_FILE)
    assert block["first_day"] == table[~table["warmup"]]["day"].min()
    warmup = table[table["warmup"]]
    table = table[~table["warmup"]]  # the figures are the counted nights'
    for model in MODELS:
        mine = table[table["model"] == model]
        assert block["models"][model]["within_10pct"] == pytest.approx(
            mine["within_10pct"].mean(), abs=1e-6
        )
        assert block["models"][model]["mape"] == pytest.approx(mine["mape"].mean(), abs=1e-6)
    served = block["served"]
    assert sum(served["nights"].values()) == NIGHTS
    assert table.groupby("day")["served"].sum().tolist() == [1] * NIGHTS
    assert served["within_10pct"] == pytest.approx(
        table[table["served"]]["within_10pct"].mean(), abs=1e-6
    )
    assert served["top1_regret"] is not None  # the replay had an oracle
    assert [d["serving"] for d in served["decisions"]] == table[table["served"]]["model"].tolist()
    # the warm-up night was scored like the others, and the rule read it: the first counted
    # decision had a record to go on
    assert len(warmup) == WARMUP * len(MODELS) and warmup["n"].min() > 100
    assert not served["decisions"][0]["reason"].startswith("0 attempts")


def test_the_report_plots_accuracy_per_night(nightly: tuple[dict[str, Any], Path]) -> None:
    page = (nightly[1] / "report.html").read_text()
    assert "<h2>Nightly retrains</h2>" in page
    assert 'alt="Accuracy per night per model"' in page
    assert "LightGBM, batch retrain" in page


def _rows(
    nights: list[int], done: list[float], online: list[float], boosted: list[float]
) -> dict[str, np.ndarray]:
    """Scored attempts as the tap gives them: river errs as online does, lookup abstains."""
    n = len(nights)
    rows = {
        "night": np.array(nights),
        "done_ms": np.array(done),
        "measured": np.ones(n, dtype=bool),
        "source": np.zeros(n, dtype=np.int64),
        "cost_best": np.full(n, np.nan),
    }
    for model in MODELS:
        rows[f"err_{model}"] = np.full(n, np.nan, dtype=np.float32)
        rows[f"cost_{model}"] = np.full(n, np.nan)
    rows["err_online"] = np.array(online, dtype=np.float32)
    rows["err_river_batch"] = np.array(online, dtype=np.float32)
    rows["err_lightgbm"] = np.array(boosted, dtype=np.float32)
    return rows


def test_the_rule_reads_only_what_had_completed_by_midnight() -> None:
    day = 86_400_000.0
    cutoffs = [0.0, day, 2 * day]
    # night 0's attempts: lightgbm is right on all, online on none; half of them complete
    # after the next midnight, so the decision at night 1's cutoff sees only the other half
    nights = [0] * 4 + [1] * 2
    done = [0.5 * day, 0.6 * day, 1.5 * day, 1.6 * day, 1.2 * day, 1.3 * day]
    online = [0.5, 0.5, 0.5, 0.5, 0.0, 0.0]
    boosted = [0.0, 0.0, 0.0, 0.0, 0.5, 0.5]
    rows = _rows(nights, done, online, boosted)
    rule = PromotionRule(margin=0.01, window_days=1, min_attempts=3)
    served = [d.serving for d in serve(rows, cutoffs, rule, "online")]
    # at night 1: 2 attempts completed (< 3): online stays; at night 2 the window is day 1
    # (2 attempts, online better): online stays
    assert served == ["online", "online", "online"]
    rule = PromotionRule(margin=0.01, window_days=2, min_attempts=3)
    served = [d.serving for d in serve(rows, cutoffs, rule, "online")]
    # at night 2 with two days: 4 + 2 attempts known, lightgbm right on 4, online on 2
    assert served == ["online", "online", "lightgbm"]
    dates = [datetime.fromtimestamp(c / 1000.0, UTC) for c in cutoffs]
    frame, block = nightly_figures(rows, dates, rule, initial="online")
    assert frame[frame["served"]]["model"].tolist() == served
    assert block["served"]["nights"] == {"online": 2, "river_batch": 0, "lightgbm": 1, ENSEMBLE: 0}


def test_the_ensemble_serves_first_and_is_measured_against_the_single_models() -> None:
    day = 86_400_000.0
    cutoffs = [0.0, day]
    nights, done = [0] * 4 + [1] * 4, [0.5 * day] * 4 + [1.5 * day] * 4
    rows = _rows(nights, done, online=[0.5, 0.0, 0.5, 0.5] * 2, boosted=[0.0, 0.5, 0.5, 0.5] * 2)
    rows[f"err_{ENSEMBLE}"] = np.array([0.0, 0.0, 0.5, 0.0] * 2, dtype=np.float32)
    dates = [datetime.fromtimestamp(c / 1000.0, UTC) for c in cutoffs]
    frame, block = nightly_figures(rows, dates, PromotionRule(min_attempts=3))
    assert frame[frame["served"]]["model"].tolist() == [ENSEMBLE, ENSEMBLE]
    served = block["served"]
    # three of four within 10% against one of four for each single model
    assert served["within_10pct"] == pytest.approx(0.75)
    assert served["best_single_model"] != ENSEMBLE
    assert served["best_single_within_10pct"] == pytest.approx(0.25)
    assert served["points_vs_best_single"] == pytest.approx(50.0)
    assert block["rule"]["initial"] == ENSEMBLE


def test_the_process_pool_gives_the_same_nights(
    fleet: Path, nightly: tuple[dict[str, Any], Path]
) -> None:
    out = fleet / "nightly-pool"
    result = CliRunner().invoke(
        cli.app,
        [
            "replay", str(fleet / "history.parquet"), "--oracle", str(fleet / "oracle.parquet"),
            "--out", str(out), "--no-report", "--nightly", "--nights", str(NIGHTS),
            "--warmup-nights", str(WARMUP), "--workers", "2",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "what served" in result.output and "nightly.csv" in result.output
    pooled = json.loads((out / "summary.json").read_text())["nightly"]
    assert pooled["workers"] == 2
    pd.testing.assert_frame_equal(
        pd.read_csv(out / NIGHTLY_FILE), pd.read_csv(nightly[1] / NIGHTLY_FILE)
    )


def test_a_fast_forward_scores_the_nights_days_only_with_the_same_predictions(
    fleet: Path, hw_catalog: Catalog, nightly: tuple[dict[str, Any], Path]
) -> None:
    out = fleet / "nightly-fast-forward"
    options = NightlyOptions(nights=NIGHTS, workers=0, warmup=WARMUP, fast_forward=True)
    summary = replay(
        fleet / "history.parquet", out, hw_catalog, oracle=fleet / "oracle.parquet",
        progress=False, report=False, nightly=options,
    )  # fmt: skip
    first_night = plan_cutoffs(fleet / "history.parquet", NIGHTS + WARMUP)[0]
    table = pq.read_table(fleet / "history.parquet", columns=["event_type", "event_time"])
    submitted = table.filter(pc.equal(table.column("event_type"), "submitted"))
    before = pc.sum(pc.less(submitted.column("event_time"), first_night)).as_py()
    assert 0 < before < submitted.num_rows
    assert summary["fast_forward"] == {"until": first_night.isoformat(), "submissions": before}
    assert summary["events"]["submitted"] == submitted.num_rows  # every event was read
    daily = pd.read_csv(out / "daily.csv")
    assert daily["day"].min() == first_night.date().isoformat()
    assert daily["submissions"].sum() == submitted.num_rows - before
    # the same online model at each night (the replay checks it against pass 1) and so the
    # same predictions; the order may differ where what the core learns from its own
    # rankings (interval widths, its picks' fit) reads
    fast = pd.read_csv(out / NIGHTLY_FILE).drop(columns="top1_regret")
    full = pd.read_csv(nightly[1] / NIGHTLY_FILE).drop(columns="top1_regret")
    pd.testing.assert_frame_equal(fast, full)


@pytest.mark.parametrize(("cores", "expected"), [(1, 1), (2, 1), (8, 7)])
def test_the_pool_leaves_the_replay_a_core_of_its_own(
    monkeypatch: pytest.MonkeyPatch, cores: int, expected: int
) -> None:
    monkeypatch.setattr(nightly_module, "machine_cores", lambda: cores)
    assert pool_workers() == expected


def _niceness_once_both_started(started: Any) -> int:
    started.wait(timeout=120)  # each of the two tasks holds a worker of its own
    return os.nice(0)


@pytest.mark.skipif(not hasattr(os, "nice"), reason="no process priorities here")
def test_spare_workers_train_at_the_lowest_priority() -> None:
    spawn = multiprocessing.get_context("spawn")
    with spawn.Manager() as manager, night_pool(1, 1) as pool:
        started = manager.Barrier(2)
        tasks = [pool.submit(_niceness_once_both_started, started) for _ in range(2)]
        niceness = sorted(task.result(timeout=180) for task in tasks)
    mine = os.nice(0)
    assert niceness == [mine, min(mine + 19, 19)]


def test_a_negative_count_of_spare_workers_is_refused() -> None:
    with pytest.raises(ValueError, match="spare_workers must be >= 0"):
        NightlyOptions(spare_workers=-1)


NEED_NIGHTLY = (
    "--nights, --warmup-nights, --train-days, --workers, --spare-workers and --fast-forward "
    "need --nightly"
)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--nights", "3"], NEED_NIGHTLY),
        (["--warmup-nights", "0"], NEED_NIGHTLY),
        (["--train-days", "7"], NEED_NIGHTLY),
        (["--fast-forward"], NEED_NIGHTLY),
        (["--workers", "1"], NEED_NIGHTLY),
        (["--spare-workers", "0"], NEED_NIGHTLY),
        (["--nightly", "--holdout-hardware", "H100-SXM"], "--nightly needs the in-process core"),
    ],
)
def test_nightly_options_that_do_not_go_together(
    fleet: Path, tmp_path: Path, extra: list[str], message: str
) -> None:
    result = CliRunner().invoke(
        cli.app, ["replay", str(fleet / "history.parquet"), "--out", str(tmp_path), *extra]
    )
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize(("nights", "warmup", "expected"), [(2, 1, 1), (3, 3, 1), (4, 3, 0)])
def test_a_short_history_gives_up_warmup_nights_before_counted_ones(
    fleet: Path, hw_catalog: Catalog, nights: int, warmup: int, expected: int
) -> None:
    # five days: four midnights after the first day's
    run = NightlyRun(
        fleet / "history.parquet", hw_catalog, NightlyOptions(nights, warmup=warmup, workers=0)
    )
    try:
        assert (len(run.cutoffs), run.warmup) == (min(nights + warmup, 4), expected)
    finally:
        run.close()


def test_a_pass_that_stops_is_reported_where_the_replay_waits(
    fleet: Path, hw_catalog: Catalog
) -> None:
    run = NightlyRun(fleet / "history.parquet", hw_catalog, NightlyOptions(NIGHTS, workers=1))
    try:
        run.prepare()  # pass 1 starts in a process of its own
        run._pass.kill()  # as the kernel's out-of-memory killer would
        with pytest.raises(RuntimeError, match="pass 1 stopped"):
            run.result(0)
    finally:
        run.close()


def test_a_pass_that_fails_hands_its_error_to_the_replay(fleet: Path, hw_catalog: Catalog) -> None:
    run = NightlyRun(fleet / "history.parquet", hw_catalog, NightlyOptions(NIGHTS, workers=0))
    try:
        run._hear(("error", "Traceback: the history went away"))
        with pytest.raises(RuntimeError, match="pass 1 failed:\nTraceback: the history went away"):
            run.result(0)
    finally:
        run.close()
