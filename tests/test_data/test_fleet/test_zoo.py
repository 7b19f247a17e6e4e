"""The model zoo: size, families, determinism, heavy-tailed popularity, types arriving late."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from leap_stream.data.fleet.zoo import FAMILIES, FAMILY_NAMES, SHARE_AT_START, ModelZoo, build_zoo


def test_zoo_has_hundreds_of_types_in_eight_families() -> None:
    zoo = build_zoo(seed=1)
    assert len(zoo) >= 300
    assert len(FAMILIES) == 8
    assert set(zoo.family) == set(FAMILY_NAMES)
    counts = {name: int(np.sum(zoo.family == name)) for name in FAMILY_NAMES}
    assert counts == {spec.name: spec.n_types for spec in FAMILIES}
    # model_type is an event identifier: one name per type.
    assert len(set(zoo.name)) == len(zoo)


def test_zoo_is_deterministic_per_seed() -> None:
    first, again, other = build_zoo(seed=3), build_zoo(seed=3), build_zoo(seed=4)
    for column in fields(ModelZoo):
        np.testing.assert_array_equal(getattr(first, column.name), getattr(again, column.name))
    assert not np.array_equal(first.param_count, other.param_count)
    assert not np.array_equal(first.popularity, other.popularity)


def test_popularity_is_a_heavy_tailed_distribution() -> None:
    zoo = build_zoo(seed=1)
    assert np.all(zoo.popularity > 0)
    assert np.isclose(zoo.popularity.sum(), 1.0)
    ranked = np.sort(zoo.popularity)[::-1]
    top_tenth = ranked[: len(ranked) // 10].sum()
    bottom_half = ranked[len(ranked) // 2 :].sum()
    # A uniform zoo would give 0.1 and 0.5: a few types carry most of the traffic.
    assert top_tenth > 0.5
    assert bottom_half < 0.1
    assert ranked[0] > 20 * np.median(ranked)


def test_figures_stay_in_their_family_ranges() -> None:
    zoo = build_zoo(seed=2)
    for index, spec in enumerate(FAMILIES):
        rows = zoo.family_index == index
        assert np.all(zoo.param_count[rows] >= spec.params[0] - 1)
        assert np.all(zoo.param_count[rows] <= spec.params[1])
        active_share = zoo.active_params[rows] / zoo.param_count[rows]
        assert np.all(active_share <= spec.active_fraction[1] + 1e-6)
        assert np.all(np.isnan(zoo.tokens[rows]) == bool(spec.seq_lens))


def test_a_share_of_types_appears_partway_through_the_trace() -> None:
    zoo = build_zoo(seed=1)
    late = zoo.introduced_at > 0
    assert abs(late.mean() - (1 - SHARE_AT_START)) < 0.1
    assert np.all((zoo.introduced_at[late] > 0) & (zoo.introduced_at[late] < 1))
