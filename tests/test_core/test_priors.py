"""Tests of leap_stream.core.priors:

exact-configuration entries, offsets, shrinkage, decay, JSON.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from core_fixtures import hours, submitted_event

from leap_stream.core.priors import (
    CONFIG_FIELDS,
    HALF_LIFE_DAYS,
    LATEST_KEY,
    LINEAGE_KEY,
    PAIR_COMPLETIONS_HALVING,
    SHRINK_SAME_HARDWARE,
    SHRINK_TRANSFER,
    SINGLE_TYPE_OFFSET_KEPT,
    SLOW_RERUN,
    LineageView,
    config_signature,
    latest,
    latest_hardware,
    lineage_offset,
    lineage_view,
    mark_out_of_memory,
    model_target_offset,
    update_prior,
)

DAY_MS = 86_400_000.0
INDEX = {"H100-SXM": 0, "MI300X": 1, "TPU-v5p": 2}
SIG = config_signature(submitted_event("j1", "l1", hours(0)))


def _view(state: dict[str, list[float]] | None, now_ms: float, signature: str = SIG) -> LineageView:
    return lineage_view(state, INDEX, len(INDEX), signature, now_ms)


def _on_known_hardware(residuals: float, weight: float, lineage: float) -> float:
    """A hardware type's offset: its own residuals, shrunk towards the lineage-wide offset."""
    return (residuals + SHRINK_SAME_HARDWARE * lineage) / (weight + SHRINK_SAME_HARDWARE)


def test_no_state_means_no_prior() -> None:
    for state in (None, {}):
        view = _view(state, 0.0)
        assert view.offsets.tolist() == [0.0, 0.0, 0.0]
        assert np.isnan(view.exact).all()
        assert view.same_hardware.tolist() == [False, False, False]
        assert lineage_offset(state, 0.0) == 0.0


def test_a_repeat_is_predicted_from_its_own_measurement() -> None:
    state = update_prior(None, "H100-SXM", SIG, log_throughput=math.log(20_000.0),
                         residual=0.3, time_ms=0.0)  # fmt: skip
    view = _view(state, 5 * DAY_MS)
    # exactly the measurement, however old (a lone entry's decay cancels out)
    assert view.exact[0] == pytest.approx(math.log(20_000.0), abs=1e-12)
    assert np.isnan(view.exact[1:]).all()
    assert view.same_hardware.tolist() == [True, False, False]


def _runs(*log_throughputs: float, hardware: str = "H100-SXM") -> dict[str, list[float]]:
    """A lineage's state after reruns of one configuration (same time: no decay), residual =
    log throughput - 5."""
    state = None
    for y in log_throughputs:
        state = update_prior(state, hardware, SIG, log_throughput=y, residual=y - 5.0, time_ms=0.0)
    assert state is not None
    return state


def test_a_slow_rerun_is_held_back_and_dropped_when_the_next_is_normal() -> None:
    slow = 5.0 - SLOW_RERUN - 0.05
    held = _view(_runs(5.0, slow), 0.0)
    assert held.exact[0] == pytest.approx(5.0)  # the straggler does not set the next prediction
    assert held.offsets[0] == pytest.approx(_on_known_hardware(0.0, 1.0, 0.0))
    assert lineage_offset(_runs(5.0, slow), 0.0) == pytest.approx(0.0)
    after = _runs(5.0, slow, 5.02)
    assert not any(key.startswith("?") for key in after)  # the suspect is gone
    assert _view(after, 0.0).exact[0] == pytest.approx(5.01)


def test_two_slow_reruns_in_a_row_are_both_taken() -> None:
    slow = 5.0 - SLOW_RERUN - 0.05
    view = _view(_runs(5.0, slow, slow + 0.01), 0.0)
    assert view.exact[0] == pytest.approx((5.0 + slow + slow + 0.01) / 3)


def test_only_a_slower_rerun_of_the_same_configuration_and_hardware_is_held_back() -> None:
    faster = _view(_runs(5.0, 5.0 + SLOW_RERUN + 0.05), 0.0)
    assert faster.exact[0] == pytest.approx(5.0 + (SLOW_RERUN + 0.05) / 2)
    slightly_slower = _view(_runs(5.0, 5.0 - SLOW_RERUN + 0.05), 0.0)
    assert slightly_slower.exact[0] == pytest.approx(5.0 - (SLOW_RERUN - 0.05) / 2)
    elsewhere = update_prior(_runs(5.0), "MI300X", SIG, log_throughput=4.0, residual=-1.0,
                             time_ms=0.0)  # fmt: skip
    assert _view(elsewhere, 0.0).exact[1] == pytest.approx(4.0)  # first run there: taken


def test_a_changed_configuration_has_no_exact_entry_but_keeps_the_offset() -> None:
    state = update_prior(None, "H100-SXM", SIG, log_throughput=5.0, residual=0.2, time_ms=0.0)
    other = config_signature(submitted_event("j2", "l1", hours(1), global_batch_size=1024))
    assert other != SIG
    view = _view(state, 0.0, other)
    assert np.isnan(view.exact).all()
    assert view.same_hardware.tolist() == [True, False, False]
    assert view.offsets[0] == pytest.approx(
        _on_known_hardware(0.2, 1.0, 0.2 / (1 + SHRINK_TRANSFER))
    )


def test_offsets_same_hardware_vs_transferred_with_their_shrinkage() -> None:
    state = update_prior(None, "H100-SXM", SIG, log_throughput=5.0, residual=0.2, time_ms=0.0)
    view = _view(state, 0.0)
    transferred = 0.2 / (1.0 + SHRINK_TRANSFER)  # 0.173913
    same = _on_known_hardware(0.2, 1.0, transferred)  # 0.198758
    assert view.offsets.tolist() == pytest.approx([same, transferred, transferred])
    assert same > transferred  # less shrinkage where the lineage has measured
    assert lineage_offset(state, 0.0) == pytest.approx(transferred)


def test_the_lineage_wide_offset_pools_every_hardware() -> None:
    state = update_prior(None, "H100-SXM", SIG, log_throughput=5.0, residual=0.2, time_ms=0.0)
    update_prior(state, "MI300X", SIG, log_throughput=6.0, residual=-0.1, time_ms=0.0)
    view = _view(state, 0.0)
    pooled = (0.2 - 0.1) / (2.0 + SHRINK_TRANSFER)
    assert view.offsets.tolist() == pytest.approx(
        [_on_known_hardware(0.2, 1.0, pooled), _on_known_hardware(-0.1, 1.0, pooled), pooled]
    )
    assert view.exact[:2].tolist() == [5.0, 6.0]
    assert view.same_hardware.tolist() == [True, True, False]


def test_update_mutates_and_returns_the_given_state() -> None:
    state: dict[str, list[float]] = {}
    out = update_prior(state, "H100-SXM", SIG, log_throughput=5.0, residual=0.2, time_ms=7.0)
    assert out is state
    assert set(state) == {f"{SIG}@H100-SXM", "H100-SXM", LINEAGE_KEY}
    assert state["H100-SXM"] == [0.2, 1.0, 1, 7.0]


def test_offsets_decay_with_age() -> None:
    state = update_prior(None, "H100-SXM", SIG, log_throughput=5.0, residual=0.2, time_ms=0.0)
    half_life = HALF_LIFE_DAYS * DAY_MS
    view = _view(state, half_life)
    # the evidence halves: 0.2 x 0.5 / (1 x 0.5 + shrink)
    lineage = 0.1 / (0.5 + SHRINK_TRANSFER)
    assert view.offsets[0] == pytest.approx(_on_known_hardware(0.1, 0.5, lineage))
    assert view.offsets[1] == pytest.approx(lineage)
    assert lineage_offset(state, half_life) == pytest.approx(0.1 / (0.5 + SHRINK_TRANSFER))
    # old evidence shrinks towards zero (the lineage-wide offset too, with no fresh residual)
    assert abs(_view(state, 20 * half_life).offsets[0]) < 1e-4


def test_recent_measurements_weigh_more() -> None:
    half_life = HALF_LIFE_DAYS * DAY_MS
    state = update_prior(None, "H100-SXM", SIG, log_throughput=5.0, residual=0.0, time_ms=0.0)
    update_prior(state, "H100-SXM", SIG, log_throughput=6.0, residual=0.0, time_ms=half_life)
    # (5 x 0.5 + 6) / (0.5 + 1): the older measurement counts half
    assert _view(state, half_life).exact[0] == pytest.approx(8.5 / 1.5)
    entry = state[f"{SIG}@H100-SXM"]
    assert entry[2] == 2 and entry[3] == half_life


def test_signature_covers_what_changes_throughput() -> None:
    base = submitted_event("j1", "l1", hours(0))
    for field, value in (
        ("num_devices", 16), ("global_batch_size", 1024), ("precision", "fp16"),
        ("seq_len", 2048), ("tensor_parallel", 2), ("pipeline_parallel", 2),
        ("framework", "jax"), ("micro_batches", 8),
    ):  # fmt: skip
        assert config_signature({**base, field: value}) != SIG, field
    # ids and times are not part of the run's configuration
    same = {**base, "job_id": "j9", "event_id": "x", "event_time": hours(99)}
    assert config_signature(same) == SIG


def test_state_round_trips_through_json() -> None:
    state = update_prior(None, "H100-SXM", SIG, log_throughput=5.0, residual=0.2, time_ms=1e12)
    update_prior(state, "MI300X", SIG, log_throughput=6.0, residual=-0.1, time_ms=1e12 + 3e8)
    update_prior(state, "H100-SXM", SIG, log_throughput=5.1, residual=0.25, time_ms=1e12 + 9e8)
    copy = json.loads(json.dumps(state))
    assert copy == state
    now = 1e12 + 5 * DAY_MS
    a, b = _view(state, now), _view(copy, now)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    np.testing.assert_array_equal(a.exact, b.exact)
    np.testing.assert_array_equal(a.same_hardware, b.same_hardware)
    # and keeps accumulating after the round trip exactly as before it
    update_prior(copy, "TPU-v5p", SIG, log_throughput=4.0, residual=0.0, time_ms=now)
    update_prior(state, "TPU-v5p", SIG, log_throughput=4.0, residual=0.0, time_ms=now)
    assert json.loads(json.dumps(state)) == copy


def test_the_latest_attempt_keeps_its_configuration_for_a_fresh_residual() -> None:
    job = submitted_event("j1", "l1", hours(0))
    state = update_prior(
        None, "MI300X", SIG, log_throughput=5.0, residual=0.4, time_ms=0.0, config=job
    )
    hardware, log_throughput, config = latest(state)
    assert (hardware, log_throughput) == ("MI300X", 5.0)
    assert latest_hardware(state) == "MI300X"
    assert config == {key: job.get(key) for key in CONFIG_FIELDS}
    assert json.loads(json.dumps(state)) == state  # still a plain, JSON-able state


@pytest.mark.parametrize(
    ("written_before", "unknown"),
    [
        ("team", ("team",)),
        ("flops_per_sample", ("flops_per_sample", "team")),
        ("micro_batches", ("micro_batches", "flops_per_sample", "team")),
    ],
)
def test_a_state_from_before_a_field_reads_it_and_later_ones_as_unknown(
    written_before: str, unknown: tuple[str, ...]
) -> None:
    job = {
        **submitted_event("j1", "l1", hours(0)),
        **{"micro_batches": 4, "flops_per_sample": 1e12, "team": "speech"},
    }
    state = update_prior(
        None, "MI300X", SIG, log_throughput=5.0, residual=0.4, time_ms=0.0, config=job
    )
    # as an older version wrote it: the fields added since are not in its list
    state[LATEST_KEY]["config"] = state[LATEST_KEY]["config"][: CONFIG_FIELDS.index(written_before)]
    config = latest(state)[2]
    assert {key: config[key] for key in unknown} == dict.fromkeys(unknown)
    assert {k: v for k, v in config.items() if k not in unknown} == {
        key: job[key] for key in CONFIG_FIELDS if key not in unknown
    }


def test_an_unknown_micro_batch_count_keeps_the_signature_of_before_the_field() -> None:
    # lineage states written before micro_batches existed keep matching their configurations
    job = submitted_event("j1", "l1", hours(0))
    assert config_signature({**job, "micro_batches": None}) == SIG
    # saying the FLOPs a sample costs does not make it another run
    assert config_signature({**job, "flops_per_sample": 1e12}) == SIG
    assert SIG.count("/") == 6  # num_devices/batch/precision/seq_len/tp/pp/framework


def test_a_fresh_residual_replaces_the_stale_ones() -> None:
    job = submitted_event("j1", "l1", hours(0))
    state = update_prior(
        None, "MI300X", SIG, log_throughput=5.0, residual=0.4, time_ms=0.0, config=job
    )
    stale = lineage_view(state, INDEX, len(INDEX), "other-config", 0.0)
    fresh = lineage_view(state, INDEX, len(INDEX), "other-config", 0.0, latest_residual=0.1)
    # stale: the residual of its day, shrunk; fresh: the residual against today's model
    assert stale.offsets[INDEX["MI300X"]] == pytest.approx(
        _on_known_hardware(0.4, 1.0, 0.4 / (1 + SHRINK_TRANSFER))
    )
    assert fresh.offsets[INDEX["MI300X"]] == pytest.approx(0.1 / (1 + SHRINK_SAME_HARDWARE))
    assert fresh.offsets[INDEX["H100-SXM"]] == pytest.approx(0.1 / (1 + SHRINK_TRANSFER))
    assert fresh.same_hardware.tolist() == [False, True, False]


def test_a_stale_residual_on_known_hardware_gives_way_to_the_lineages_fresh_one() -> None:
    job = submitted_event("j1", "l1", hours(0))
    state = update_prior(None, "H100-SXM", SIG, log_throughput=5.0, residual=0.4, time_ms=0.0)
    update_prior(state, "MI300X", SIG, log_throughput=5.0, residual=0.4, time_ms=0.0, config=job)
    months_later = 20 * HALF_LIFE_DAYS * DAY_MS
    view = lineage_view(state, INDEX, len(INDEX), "other-config", months_later, latest_residual=0.3)
    # H100's residual of months ago has faded: what the lineage misses today stands in, not 0
    fresh = 0.3 / (1 + SHRINK_TRANSFER)
    assert view.offsets[INDEX["H100-SXM"]] == pytest.approx(fresh, rel=1e-3)
    assert view.same_hardware[INDEX["H100-SXM"]]


def test_no_latest_attempt_without_state() -> None:
    assert latest(None) is None
    assert latest({}) is None
    assert latest_hardware(None) is None
    assert latest_hardware({}) is None


def test_the_model_is_left_part_of_the_offset_of_a_lineage_measured_on_one_type() -> None:
    assert model_target_offset(None, 0.0) == 0.0
    state = update_prior(None, "H100-SXM", SIG, log_throughput=5.0, residual=0.3, time_ms=0.0)
    # a configuration's entries, a suspect rerun and an out-of-memory mark are not other types
    state = update_prior(state, "H100-SXM", "other", log_throughput=5.0, residual=0.2, time_ms=0.0)
    state = update_prior(state, "H100-SXM", SIG, log_throughput=4.0, residual=-0.7, time_ms=0.0)
    state = mark_out_of_memory(state, "MI300X", SIG, 0.0)
    assert any(key.startswith("?") for key in state)  # the slow rerun, held back
    offset = lineage_offset(state, 0.0)
    assert offset == pytest.approx(0.5 / (2 + SHRINK_TRANSFER))
    assert model_target_offset(state, 0.0) == pytest.approx((1 - SINGLE_TYPE_OFFSET_KEPT) * offset)
    assert 0.0 < model_target_offset(state, 0.0) < offset
    # the better the model knows the pair from other lineages, the less of the offset it keeps
    taken = [
        model_target_offset(state, 0.0, pair_completions=n)
        for n in (0, PAIR_COMPLETIONS_HALVING, 100 * PAIR_COMPLETIONS_HALVING)
    ]
    kept = [(offset - value) / offset for value in taken]
    assert kept[1] == pytest.approx(SINGLE_TYPE_OFFSET_KEPT / 2)
    assert kept[0] > kept[1] > kept[2] > 0.0
    assert kept[2] < 0.01
    # measured on a second type, the lineage-wide offset is its own: all of it
    state = update_prior(state, "MI300X", SIG, log_throughput=5.0, residual=0.1, time_ms=0.0)
    assert model_target_offset(state, 0.0) == lineage_offset(state, 0.0) != 0.0
