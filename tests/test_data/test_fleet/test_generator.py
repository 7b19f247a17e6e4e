"""The fleet generator: determinism and the properties of the documented 30-day fleet.

The hidden efficiencies are tested in test_hidden.py, the memory truth in test_memory_truth.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from leap_stream.core.catalog import default_catalog
from leap_stream.core.events import FRAMEWORKS, ORACLE_SCHEMA, PRECISIONS
from leap_stream.data.fleet import FleetConfig, generate_fleet
from leap_stream.data.fleet.generator import OOM_RUN_MINUTES, QUEUE_MEAN_H, FleetStats
from leap_stream.data.fleet.physics import NOISE_SIGMA, STRAGGLER_PROBABILITY
from leap_stream.data.history import HISTORY_FILE_SCHEMA

DOC_FLEET = FleetConfig(days=30, jobs_per_day=3_000, seed=1)  # the fleet docs/data.md describes
# Below this a measured/oracle ratio is a straggler: the slowest is 0.75, and 0.8 is more
# than five noise sigmas below 1.
STRAGGLER_CUT = 0.8


@dataclass
class Fleet:
    stats: FleetStats
    history: pd.DataFrame
    oracle: np.ndarray  # (submitted attempts, H), rows in submission order
    oracle_table: pd.DataFrame
    submitted: pd.DataFrame
    completed: pd.DataFrame
    hardware: list[str]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    out = tmp_path_factory.mktemp("fleet")
    stats = generate_fleet(DOC_FLEET, out, progress=False)
    history = pq.read_table(out / "history.parquet").to_pandas()
    oracle_table = pq.read_table(out / "oracle.parquet").to_pandas()
    hardware = list(default_catalog().names)
    oracle = oracle_table.throughput.to_numpy(dtype=float).reshape(-1, len(hardware))
    return Fleet(
        stats=stats,
        history=history,
        oracle=oracle,
        oracle_table=oracle_table,
        submitted=history[history.event_type == "submitted"].reset_index(),
        completed=history[history.event_type == "completed"].reset_index(),
        hardware=hardware,
    )


def _generate(out: Path, seed: int) -> tuple:
    generate_fleet(FleetConfig(days=3, jobs_per_day=300, seed=seed), out, progress=False)
    return pq.read_table(out / "history.parquet"), pq.read_table(out / "oracle.parquet")


def test_same_seed_same_tables_other_seed_other_tables(tmp_path: Path) -> None:
    history, oracle = _generate(tmp_path / "a", seed=5)
    history_again, oracle_again = _generate(tmp_path / "b", seed=5)
    history_other, oracle_other = _generate(tmp_path / "c", seed=6)
    assert history.num_rows > 1_000
    assert history.equals(history_again) and oracle.equals(oracle_again)
    assert not history.equals(history_other)
    assert not oracle.equals(oracle_other)
    assert history.schema.equals(HISTORY_FILE_SCHEMA) and oracle.schema.equals(ORACLE_SCHEMA)
    assert history.column("failure_reason").null_count < history.num_rows


def test_stats_match_the_files(fleet: Fleet) -> None:
    assert fleet.stats.events == len(fleet.history)
    assert fleet.stats.attempts == len(fleet.submitted) == len(fleet.completed)
    assert fleet.stats.oracle_rows == len(fleet.oracle_table)
    assert fleet.stats.status_counts == fleet.completed.status.value_counts().to_dict()
    assert fleet.stats.failure_reasons == fleet.completed.failure_reason.value_counts().to_dict()


def test_oracle_is_grouped_per_job_in_submission_order(fleet: Fleet) -> None:
    jobs = fleet.oracle_table.job_id.to_numpy().reshape(-1, len(fleet.hardware))
    assert np.all(jobs == jobs[:, :1])
    np.testing.assert_array_equal(jobs[:, 0], fleet.submitted.job_id.to_numpy())
    types = fleet.oracle_table.hardware_type.to_numpy().reshape(-1, len(fleet.hardware))
    assert np.all(types == np.array(fleet.hardware))


def test_oracle_covers_the_catalog_and_the_zoo(fleet: Fleet) -> None:
    types_with_values = np.isfinite(fleet.oracle).any(axis=0).sum()
    assert types_with_values >= 24
    assert fleet.submitted.model_type.nunique() >= 200
    assert fleet.submitted.model_family.nunique() == 8


def test_history_is_in_event_time_order(fleet: Fleet) -> None:
    times = fleet.history.event_time.to_numpy()
    assert np.all(times[1:] >= times[:-1])
    assert fleet.history.event_id.is_unique


def test_every_attempt_is_submitted_once_before_it_completes(fleet: Fleet) -> None:
    assert fleet.submitted.job_id.is_unique and fleet.completed.job_id.is_unique
    pairs = fleet.submitted.merge(fleet.completed, on="job_id", suffixes=("_s", "_c"))
    assert len(pairs) == len(fleet.completed)
    assert np.all(pairs.index_s < pairs.index_c)  # row order: submission first
    assert np.all(pairs.event_time_s < pairs.event_time_c)
    assert np.all(pairs.lineage_id_s == pairs.lineage_id_c)
    assert np.all(pairs.num_devices_s == pairs.num_devices_c)


def test_lineages_retry_fail_get_preempted_and_move(fleet: Fleet) -> None:
    status = fleet.completed.status.value_counts(normalize=True)
    assert set(status.index) == {"succeeded", "failed", "preempted"}
    assert status["failed"] > 0.02 and status["preempted"] > 0.02
    per_lineage = fleet.submitted.groupby("lineage_id").size()
    assert (per_lineage > 1).mean() > 0.3
    types_per_lineage = fleet.completed.groupby("lineage_id").hardware_type.nunique()
    assert (types_per_lineage > 1).sum() > 100
    # Configurations change within a lineage too.
    batches = fleet.submitted.groupby("lineage_id").global_batch_size.nunique()
    assert (batches > 1).sum() > 100


def test_a_submission_says_its_lineages_team(fleet: Fleet) -> None:
    # as a scheduler knows whose job it is; what the team's stack is worth stays hidden
    assert fleet.submitted.team.str.fullmatch(r"team-\d{3}").all()
    assert fleet.completed.team.isna().all()
    assert (fleet.submitted.groupby("lineage_id").team.nunique() == 1).all()
    assert fleet.submitted.team.nunique() > 100


def test_a_hardware_type_first_appears_mid_trace(fleet: Fleet) -> None:
    start = fleet.stats.start
    catalog = default_catalog()
    submitted_at = _utc_naive(fleet.submitted.event_time)
    late = [a for a in catalog if start.date() < a.launch_date]
    assert late, "the trace should see a launch"
    for accelerator in late:
        column = fleet.oracle[:, fleet.hardware.index(accelerator.name)]
        before = submitted_at < np.datetime64(accelerator.launch_date, "ms")
        assert before.any() and np.all(np.isnan(column[before]))
        assert np.isfinite(column[~before]).any()
        used = fleet.completed[fleet.completed.hardware_type == accelerator.name]
        assert len(used) > 0
        assert used.event_time.min() > pd.Timestamp(accelerator.launch_date, tz=UTC)


def _utc_naive(times: pd.Series) -> np.ndarray:
    """UTC timestamps as datetime64[ms], comparable with launch dates (midnight UTC)."""
    return times.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy().astype("datetime64[ms]")


def _oracle_at(fleet: Fleet, rows: pd.DataFrame) -> np.ndarray:
    """The oracle value of each completed row's attempt on the type it ran on."""
    row = pd.Index(fleet.submitted.job_id).get_indexer(rows.job_id)
    column = pd.Index(fleet.hardware).get_indexer(rows.hardware_type)
    return fleet.oracle[row, column]


def _able(fleet: Fleet) -> np.ndarray:
    """(attempts, H): the type supports the attempt's framework and precision, and has launched."""
    catalog = default_catalog()
    accelerators = [catalog[h] for h in fleet.hardware]
    sub = fleet.submitted
    supports = np.array(
        [[[a.supports(f, p) for a in accelerators] for p in PRECISIONS] for f in FRAMEWORKS]
    )  # (F, P, H)
    framework = pd.Index(FRAMEWORKS).get_indexer(sub.framework)
    precision = pd.Index(PRECISIONS).get_indexer(sub.precision)
    launches = np.array([np.datetime64(a.launch_date, "ms") for a in accelerators])
    launched = _utc_naive(sub.event_time)[:, None] >= launches[None, :]
    return supports[framework, precision] & launched


def test_attempts_run_where_they_fit_except_out_of_memory_failures(fleet: Fleet) -> None:
    done = fleet.completed
    truth = _oracle_at(fleet, done)
    oom = (done.failure_reason == "oom").to_numpy()
    assert oom.sum() > 0
    # An attempt that did not run out of memory ran where the truth says it fits ...
    assert np.all(np.isfinite(truth[~oom]))
    # ... and one that did, only where it does not: on a type that supports it and has launched.
    assert np.all(np.isnan(truth[oom]))
    row = pd.Index(fleet.submitted.job_id).get_indexer(done.job_id[oom])
    column = pd.Index(fleet.hardware).get_indexer(done.hardware_type[oom])
    assert np.all(_able(fleet)[row, column])


def _hours_to_completion(fleet: Fleet, completed: pd.DataFrame) -> pd.Series:
    """Hours from each completed attempt's submission to its completion."""
    submitted = fleet.submitted.set_index("job_id").event_time.reindex(completed.job_id)
    return (
        completed.event_time.reset_index(drop=True) - submitted.reset_index(drop=True)
    ).dt.total_seconds() / 3600.0


def test_out_of_memory_failures_are_rare_short_and_followed_by_a_move(fleet: Fleet) -> None:
    done = fleet.completed
    oom = done[done.failure_reason == "oom"]
    assert (oom.status == "failed").all() and oom.throughput.isna().all()
    assert (oom.steps == 0).all()
    # Users know their jobs: well under 1% of attempts run out of memory.
    assert 0.0002 < len(oom) / len(done) < 0.01
    # Minutes, not hours: the run is at most OOM_RUN_MINUTES on top of the queue wait, far
    # shorter than the runs other failures cut short.
    hours = _hours_to_completion(fleet, oom)
    assert hours.median() < QUEUE_MEAN_H + OOM_RUN_MINUTES[1] / 60.0
    errors = done[done.failure_reason == "error"]
    assert hours.median() < _hours_to_completion(fleet, errors).median() / 2
    # The owner's next attempt runs somewhere it fits.
    order = fleet.submitted[["job_id", "lineage_id"]].reset_index(drop=True)
    order["next_job"] = order.groupby("lineage_id").job_id.shift(-1)
    following = order.set_index("job_id").next_job.reindex(oom.job_id).dropna()
    assert len(following) > 0
    after = done.set_index("job_id").loc[following.to_numpy()].reset_index()
    assert (after.failure_reason != "oom").all()
    assert np.all(np.isfinite(_oracle_at(fleet, after)))


def test_failure_reasons_follow_the_status(fleet: Fleet) -> None:
    done = fleet.completed
    reason = done.failure_reason
    assert reason[done.status == "succeeded"].isna().all()
    assert set(reason[done.status == "failed"]) == {"oom", "error"}
    assert set(reason[done.status == "preempted"]) == {"preempted"}
    assert fleet.submitted.failure_reason.isna().all()


def test_oracle_is_null_exactly_where_the_job_cannot_run(fleet: Fleet) -> None:
    able = _able(fleet)
    runs = np.isfinite(fleet.oracle)
    assert not np.any(runs & ~able)  # unsupported or not yet launched: never runs
    # Memory is the other rule: some attempts do not fit some types they could otherwise use.
    assert 0.05 < (able & ~runs).sum() / able.sum() < 0.5
    assert np.all(fleet.oracle[runs] > 0)
    for rule in (able, runs):
        assert not rule.all()


def test_measured_throughput_is_the_oracle_with_documented_noise(fleet: Fleet) -> None:
    done = fleet.completed[fleet.completed.status == "succeeded"]
    row = pd.Index(fleet.submitted.job_id).get_indexer(done.job_id)
    column = pd.Index(fleet.hardware).get_indexer(done.hardware_type)
    ratio = done.throughput.to_numpy() / fleet.oracle[row, column]
    assert np.all(np.isfinite(ratio)) and np.all(ratio > 0)
    stragglers = ratio < STRAGGLER_CUT
    share = stragglers.mean()
    assert abs(share - STRAGGLER_PROBABILITY) < 0.25 * STRAGGLER_PROBABILITY, share
    log_ratio = np.log(ratio[~stragglers])
    assert abs(np.median(log_ratio)) < 0.005  # the oracle is the noise-free expectation
    assert abs(log_ratio.std() / NOISE_SIGMA - 1) < 0.1, log_ratio.std()


def test_throughput_is_null_unless_succeeded(fleet: Fleet) -> None:
    assert fleet.submitted.throughput.isna().all()
    succeeded = fleet.completed.status == "succeeded"
    assert fleet.completed.throughput[succeeded].notna().all()
    assert (fleet.completed.throughput[succeeded] > 0).all()
    assert fleet.completed.throughput[~succeeded].isna().all()
    oom = fleet.completed.failure_reason == "oom"
    assert (fleet.completed.steps[~oom] >= 1).all()
