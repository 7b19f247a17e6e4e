"""The fleet generator: determinism and the properties of the documented 30-day fleet."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from leap_stream.core.catalog import default_catalog
from leap_stream.core.events import FRAMEWORKS, HISTORY_SCHEMA, ORACLE_SCHEMA, PRECISIONS
from leap_stream.core.memory import fits
from leap_stream.data.fleet import FleetConfig, generate_fleet
from leap_stream.data.fleet.generator import FleetStats
from leap_stream.data.fleet.physics import NOISE_SIGMA, STRAGGLER_PROBABILITY

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
    assert history.schema.equals(HISTORY_SCHEMA) and oracle.schema.equals(ORACLE_SCHEMA)


def test_stats_match_the_files(fleet: Fleet) -> None:
    assert fleet.stats.events == len(fleet.history)
    assert fleet.stats.attempts == len(fleet.submitted) == len(fleet.completed)
    assert fleet.stats.oracle_rows == len(fleet.oracle_table)
    assert fleet.stats.status_counts == fleet.completed.status.value_counts().to_dict()


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


def _runs_mask(fleet: Fleet, rows: pd.DataFrame, memory_gb: np.ndarray) -> np.ndarray:
    """memory.fits of each row's configuration on devices of ``memory_gb`` (broadcast)."""
    seq = rows.seq_len.to_numpy(dtype=float, na_value=np.nan)
    return fits(
        rows.param_count.to_numpy(dtype=float)[:, None],
        rows.precision.to_numpy()[:, None],
        rows.num_devices.to_numpy()[:, None],
        rows.tensor_parallel.to_numpy()[:, None],
        rows.pipeline_parallel.to_numpy()[:, None],
        rows.global_batch_size.to_numpy()[:, None],
        seq[:, None],
        rows.model_family.to_numpy()[:, None],
        memory_gb=memory_gb,
    )


def test_completed_attempts_ran_where_they_fit(fleet: Fleet) -> None:
    catalog = default_catalog()
    pairs = fleet.completed[["job_id", "hardware_type"]].merge(
        fleet.submitted.drop(columns=["hardware_type"]), on="job_id"
    )
    memory = np.array([catalog[h].memory_gb for h in pairs.hardware_type])
    assert np.all(_runs_mask(fleet, pairs, memory[:, None])[:, 0])
    # ... on a type that was launched, supports the job, and has an oracle value for it.
    row = pd.Index(fleet.submitted.job_id).get_indexer(pairs.job_id)
    column = pd.Index(fleet.hardware).get_indexer(pairs.hardware_type)
    assert np.all(np.isfinite(fleet.oracle[row, column]))


def test_oracle_is_null_exactly_where_the_job_cannot_run(fleet: Fleet) -> None:
    catalog = default_catalog()
    accelerators = [catalog[h] for h in fleet.hardware]
    sub = fleet.submitted
    memory = np.array([a.memory_gb for a in accelerators])
    fits_memory = _runs_mask(fleet, sub, memory[None, :])
    supports = np.array(
        [[[a.supports(f, p) for a in accelerators] for p in PRECISIONS] for f in FRAMEWORKS]
    )  # (F, P, H)
    framework = pd.Index(FRAMEWORKS).get_indexer(sub.framework)
    precision = pd.Index(PRECISIONS).get_indexer(sub.precision)
    supported = supports[framework, precision]
    launches = np.array([np.datetime64(a.launch_date, "ms") for a in accelerators])
    launched = _utc_naive(sub.event_time)[:, None] >= launches[None, :]
    expected_runs = fits_memory & supported & launched
    # Every rule matters somewhere in this fleet.
    for rule in (fits_memory, supported, launched):
        assert not rule.all()
    np.testing.assert_array_equal(np.isfinite(fleet.oracle), expected_runs)
    assert np.all(fleet.oracle[expected_runs] > 0)


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
    assert (fleet.completed.steps >= 1).all()
