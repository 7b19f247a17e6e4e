"""The hidden efficiencies: affinity, new types' kernel maturity, team software stacks.

Their sizes are checked twice: on the static draws of one seed, and on a small fleet generated
with and without them (``FleetConfig.hidden_effects``), whose oracle ratio is exactly the hidden
multiplier while the history, placements and memory truth stay the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from leap_stream.core.catalog import VENDORS, default_catalog
from leap_stream.core.hardware import HardwareArrays
from leap_stream.data.fleet import FleetConfig, generate_fleet
from leap_stream.data.fleet.generator import N_TEAMS, FleetStats
from leap_stream.data.fleet.hidden import (
    AFFINITY_SIGMA,
    AFFINITY_VENDOR_SHARE,
    DEFICIT_DAYS,
    LAUNCH_DEFICIT,
    TEAM_STACK_SIGMA,
    HiddenWorld,
)
from leap_stream.data.fleet.zoo import build_zoo

SMALL = FleetConfig(days=20, jobs_per_day=600, seed=3)
# Log of an oracle ratio between two float32 values: exact to about 1e-7.
EXACT = 1e-5


def _world(seed: int, hw: HardwareArrays | None = None) -> HiddenWorld:
    hw = hw or HardwareArrays.from_catalog(default_catalog())
    return HiddenWorld.draw(seed, len(build_zoo(seed)), hw, N_TEAMS)


# ---------------------------------------------------------------------------- the draws


def test_the_hidden_world_is_fixed_per_seed() -> None:
    first, again, other = _world(1), _world(1), _world(2)
    np.testing.assert_array_equal(first.affinity, again.affinity)
    np.testing.assert_array_equal(first.team_stack, again.team_stack)
    np.testing.assert_array_equal(first.launch_deficit, again.launch_deficit)
    assert not np.array_equal(first.affinity, other.affinity)
    assert not np.array_equal(first.team_stack, other.team_stack)


def test_affinity_has_the_documented_spread_and_vendor_correlation() -> None:
    world = _world(1)
    log_affinity = np.log(world.affinity)  # (model types, H)
    assert abs(log_affinity.std() - AFFINITY_SIGMA) < 0.01
    assert abs(log_affinity.mean()) < 0.01
    correlation = np.corrcoef(log_affinity.T)  # between hardware types, over model types
    same = world.vendor_index[:, None] == world.vendor_index[None, :]
    off_diagonal = ~np.eye(len(same), dtype=bool)
    # Half the variance is the vendor's: partly learnable across a vendor's types.
    assert abs(correlation[same & off_diagonal].mean() - AFFINITY_VENDOR_SHARE) < 0.05
    assert abs(correlation[~same].mean()) < 0.05


def test_team_stacks_have_the_documented_spread() -> None:
    log_stack = np.log(_world(1).team_stack)
    assert log_stack.shape == (N_TEAMS, len(VENDORS))
    assert abs(log_stack.std() - TEAM_STACK_SIGMA) < 0.01


def test_kernel_maturity_starts_short_and_fades_at_each_types_rate() -> None:
    world = _world(1)
    assert np.all(
        (world.launch_deficit >= LAUNCH_DEFICIT[0]) & (world.launch_deficit <= LAUNCH_DEFICIT[1])
    )
    assert np.all((world.deficit_days >= DEFICIT_DAYS[0]) & (world.deficit_days <= DEFICIT_DAYS[1]))
    assert abs(world.launch_deficit.mean() - np.mean(LAUNCH_DEFICIT)) < 0.04
    # Relative to each type's launch: a deficit at day 0, 1/e of it after tau, and within a
    # year less than 2% left.
    newly = replace(world, launch_day=np.zeros_like(world.launch_day))
    days = np.array([0.0, 30.0, 90.0, 365.0])
    factor = newly.kernel_maturity(days)
    np.testing.assert_allclose(factor[0], 1 - world.launch_deficit)
    assert np.all(np.diff(factor, axis=0) > 0)
    assert np.all(factor[-1] > 0.98)
    at_tau = np.diag(newly.kernel_maturity(world.deficit_days))
    np.testing.assert_allclose(1 - at_tau, world.launch_deficit / np.e)


# ---------------------------------------------------------------------------- in a fleet


@dataclass
class Pair:
    """The same small fleet with and without the hidden efficiencies."""

    stats: FleetStats
    on: pd.DataFrame
    off: pd.DataFrame
    log_ratio: np.ndarray  # (attempts, H), NaN where the attempt cannot run
    submitted: pd.DataFrame
    model: np.ndarray  # zoo index of each attempt
    day: np.ndarray  # submission day of each attempt, from the trace start
    world: HiddenWorld
    hardware: list[str]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    out = tmp_path_factory.mktemp("hidden")
    stats = generate_fleet(SMALL, out / "on", progress=False)
    generate_fleet(replace(SMALL, hidden_effects=False), out / "off", progress=False)
    on = pq.read_table(out / "on" / "history.parquet").to_pandas()
    off = pq.read_table(out / "off" / "history.parquet").to_pandas()
    hardware = list(default_catalog().names)

    def oracle(side: str) -> np.ndarray:
        values = pq.read_table(out / side / "oracle.parquet").column("throughput")
        return values.to_numpy(zero_copy_only=False).astype(float).reshape(-1, len(hardware))

    submitted = on[on.event_type == "submitted"].reset_index(drop=True)
    zoo = build_zoo(SMALL.seed)
    model = pd.Index(zoo.name).get_indexer(submitted.model_type)
    day = (submitted.event_time - stats.start).dt.total_seconds().to_numpy() / 86_400.0
    hw = HardwareArrays.from_catalog(default_catalog(), stats.start)
    return Pair(
        stats=stats,
        on=on,
        off=off,
        log_ratio=np.log(oracle("on") / oracle("off")),
        submitted=submitted,
        model=model,
        day=day,
        world=_world(SMALL.seed, hw),
        hardware=hardware,
    )


def _column(pair: Pair, name: str) -> int:
    return pair.hardware.index(name)


def test_the_hidden_effects_change_throughput_only(pair: Pair) -> None:
    assert pair.stats.attempts > 5_000
    # The same attempts, placements and outcomes: only the speeds (and so the steps) differ.
    pd.testing.assert_frame_equal(
        pair.on.drop(columns=["throughput", "steps"]),
        pair.off.drop(columns=["throughput", "steps"]),
    )
    # Where an attempt can run does not depend on them either.
    runs = np.isfinite(pair.log_ratio)
    assert runs.mean() > 0.5
    assert np.abs(pair.log_ratio[runs]).max() > 0.3


def test_affinity_is_per_model_type_and_hardware_type(pair: Pair) -> None:
    # Two old NVIDIA types (launched years before the trace: no kernel deficit left), and the
    # team stack cancels within a vendor: their log ratio is the affinity difference, the same
    # for every attempt of a model type.
    h1, h2 = _column(pair, "H100-SXM"), _column(pair, "A100-SXM-80GB")
    diff = pair.log_ratio[:, h1] - pair.log_ratio[:, h2]
    both = np.isfinite(diff)
    expected = np.log(pair.world.affinity[pair.model, h1] / pair.world.affinity[pair.model, h2])
    np.testing.assert_allclose(diff[both], expected[both], atol=EXACT)
    per_type = pd.Series(diff[both]).groupby(pair.model[both])
    assert per_type.std().fillna(0).max() < EXACT
    # Over model types, the spread of a difference of two same-vendor affinities is
    # sigma x sqrt(2 (1 - vendor share)) = sigma.
    spread = per_type.first().std()
    target = AFFINITY_SIGMA * np.sqrt(2 * (1 - AFFINITY_VENDOR_SHARE))
    assert abs(spread - target) < 0.025, spread


def test_team_stacks_are_per_lineage_and_vendor(pair: Pair) -> None:
    # What is left once affinity and kernel maturity are taken out is the team's stack for the
    # vendor: the same for every type of the vendor in an attempt, and along the lineage.
    world = pair.world
    residual = (
        pair.log_ratio
        - np.log(world.affinity[pair.model])
        - np.log(world.kernel_maturity(pair.day))
    )
    lineage = pair.submitted.lineage_id.to_numpy()
    stacks = []
    for vendor in range(len(VENDORS)):
        block = residual[:, world.vendor_index == vendor]
        seen = np.isfinite(block).any(axis=1)
        block = block[seen]
        per_attempt = np.nanmax(block, axis=1)
        assert np.all(per_attempt - np.nanmin(block, axis=1) < EXACT)
        per_lineage = pd.Series(per_attempt).groupby(lineage[seen])
        assert per_lineage.std().fillna(0).max() < EXACT
        stacks.append(per_lineage.first().to_numpy())
    values = np.concatenate(stacks)
    assert len(values) > 5_000
    assert abs(values.std() - TEAM_STACK_SIGMA) < 0.015, values.std()


def test_a_type_launched_mid_trace_starts_with_a_kernel_deficit(pair: Pair) -> None:
    world = pair.world
    new, old = _column(pair, "Trainium3"), _column(pair, "Trainium1")  # same vendor, same stack
    assert 0 < world.launch_day[new] < SMALL.days
    assert world.kernel_maturity(pair.day[:1])[0, old] > 1 - 1e-4
    affinity = np.log(world.affinity[pair.model, new] / world.affinity[pair.model, old])
    maturity = np.exp(pair.log_ratio[:, new] - pair.log_ratio[:, old] - affinity)
    seen = np.isfinite(maturity)
    assert seen.sum() > 100
    since = pair.day[seen] - world.launch_day[new]
    deficit, tau = world.launch_deficit[new], world.deficit_days[new]
    np.testing.assert_allclose(maturity[seen], 1 - deficit * np.exp(-since / tau), atol=EXACT)
    # Early attempts see (almost) the whole deficit, on top of the documented launch ramp.
    first_day = since < 1.0
    assert first_day.any()
    assert np.all(1 - maturity[seen][first_day] > 0.95 * deficit)
    assert LAUNCH_DEFICIT[0] <= deficit <= LAUNCH_DEFICIT[1]
