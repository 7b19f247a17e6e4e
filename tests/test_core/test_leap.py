"""Tests of leap_stream.core: the contract over every predictor, and LeapCore's own rules.

LeapCore's rules: prequential order (a ranking never sees its own outcome), no double learning,
nothing learned from failed or preempted attempts, all per-job and per-lineage state in the
injected mappings, and no crash on hardware the catalog lacks.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from core_contract import CHECKS, PredictorFactory
from core_fixtures import completed_event, hours, submitted_event

from leap_stream.core import LeapCore, LookupRanker
from leap_stream.core.catalog import Catalog
from leap_stream.core.ensemble import Ensemble
from leap_stream.core.inputs import INPUT_GROUPS
from leap_stream.core.intervals import ConformalIntervals
from leap_stream.core.leap import (
    _COLD_START,
    _LINEAGE_PRIOR,
    _MODEL,
    _TRANSFER,
    COLD_START_MIN_OBSERVATIONS,
    RISK_AVERSION,
    _add_reference,
    _at_positions,
    _predictions,
    _ranked_values,
)
from leap_stream.core.priors import (
    PAIR_COMPLETIONS_HALVING,
    SHRINK_SAME_HARDWARE,
    SINGLE_TYPE_OFFSET_KEPT,
    config_signature,
    lineage_offset,
)
from leap_stream.core.ranking import SOURCES, Ranking
from leap_stream.core.transfer import PairwiseTransfer
from leap_stream.data.fleet import FleetConfig

PREDICTORS: dict[str, PredictorFactory] = {
    "online": LeapCore,
    "lookup": LookupRanker,
    # an ablation's cores keep the contract too: only what they know changes
    **{f"online_without_{g}": functools.partial(LeapCore, without={g}) for g in INPUT_GROUPS},
}
TWO = ["H100-SXM", "MI300X"]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
@pytest.mark.parametrize("name", sorted(PREDICTORS))
def test_contract(
    name: str, check: Callable[[PredictorFactory, Catalog], None], hw_catalog: Catalog
) -> None:
    check(PREDICTORS[name], hw_catalog)


# -- LeapCore --------------------------------------------------------------------------------


def _sub(
    job_id: str, lineage: str, h: float, candidates: list[str] | None = TWO, **overrides: Any
) -> dict[str, Any]:
    return submitted_event(job_id, lineage, hours(h), candidates=candidates, **overrides)


def _done(
    job_id: str, lineage: str, h: float, hardware: str, throughput: float | None, **overrides: Any
) -> dict[str, Any]:
    return completed_event(job_id, lineage, hours(h), hardware, throughput=throughput, **overrides)


def _at(ranking: Ranking, hardware: str) -> tuple[float, str]:
    i = ranking.hardware.index(hardware)
    return float(ranking.predicted[i]), str(ranking.source[i])


def test_never_abstains_while_a_candidate_is_eligible(hw_catalog: Catalog) -> None:
    core = LeapCore(hw_catalog)
    ranking = core.on_submitted(_sub("j1", "L1", 0, ["nope", "K80", "MI300X"]))
    assert not ranking.abstained and ranking.top == "MI300X"
    assert ranking.model_version == "online-0"


def test_a_pipeline_of_one_micro_batch_is_predicted_a_quarter_as_fast(hw_catalog: Catalog) -> None:
    # four stages, one micro-batch: each stage computes one slot in four (fill and drain)
    pipelined = {"num_devices": 32, "global_batch_size": 2048, "pipeline_parallel": 4}
    unknown = LeapCore(hw_catalog).on_submitted(_sub("j1", "L1", 0, **pipelined))
    one = LeapCore(hw_catalog).on_submitted(_sub("j1", "L1", 0, **pipelined, micro_batches=1))
    np.testing.assert_allclose(one.predicted, unknown.predicted / 4, rtol=1e-12)
    assert one.hardware == unknown.hardware


def test_a_job_of_a_tenth_of_the_default_flops_is_predicted_ten_times_as_fast(
    hw_catalog: Catalog,
) -> None:
    job = _sub("j1", "L1", 0)
    flops = 6.0 * job["param_count"] * (job["seq_len"] or 1) / 10
    default = LeapCore(hw_catalog).on_submitted(job)
    said = LeapCore(hw_catalog).on_submitted({**job, "flops_per_sample": flops})
    np.testing.assert_allclose(said.predicted, default.predicted * 10, rtol=1e-12)
    assert said.hardware == default.hardware


def test_prequential_a_ranking_never_sees_its_own_outcome(hw_catalog: Catalog) -> None:
    core = LeapCore(hw_catalog)
    first = core.on_submitted(_sub("j1", "L1", 0))
    predicted_before = first.predicted.copy()
    h100_before, source_before = _at(first, "H100-SXM")
    assert source_before != "lineage_prior"  # nothing known of L1 yet
    assert h100_before != pytest.approx(20_000.0, rel=0.01)
    pending_before = json.dumps(core.pending["j1"]["log_pred"])

    assert core.on_completed(_done("j1", "L1", 1, "H100-SXM", 20_000.0)) is True
    # the first ranking, and what its completion was scored against, are unchanged
    np.testing.assert_array_equal(first.predicted, predicted_before)
    assert "j1" not in core.pending
    assert json.loads(pending_before) == pytest.approx(
        [math.log(v) for v in predicted_before.tolist()]
    )

    second = core.on_submitted(_sub("j2", "L1", 2))
    value, source = _at(second, "H100-SXM")
    assert source == "lineage_prior"
    assert value == pytest.approx(20_000.0, rel=1e-12)  # the first's measurement, exactly
    assert _at(second, "MI300X")[1] != "lineage_prior"  # never measured there
    assert second.model_version == "online-1"
    # the second's own outcome does not reach back into it either
    second_before = second.predicted.copy()
    core.on_completed(_done("j2", "L1", 3, "H100-SXM", 40_000.0))
    np.testing.assert_array_equal(second.predicted, second_before)
    third = core.on_submitted(_sub("j3", "L1", 4))
    assert _at(third, "H100-SXM")[0] > 20_000.0  # it did learn, for the next one


def test_a_completion_without_a_pending_submission_is_ignored_and_counted(
    hw_catalog: Catalog,
) -> None:
    core = LeapCore(hw_catalog)
    assert core.on_completed(_done("ghost", "G", 0, "H100-SXM", throughput=1_000.0)) is False
    assert core.unmatched_completions == 1
    assert core.model.learned == 0 and core.priors == {}

    core.on_submitted(_sub("j1", "L1", 1))
    done = _done("j1", "L1", 2, "H100-SXM", 20_000.0)
    assert core.on_completed(done) is True
    assert core.on_completed(done) is False  # a redelivered completion
    assert core.model.learned == 1
    assert core.unmatched_completions == 2
    entry = core.priors["L1"][f"{config_signature(_sub('j1', 'L1', 1))}@H100-SXM"]
    assert entry[2] == 1  # counted once in the lineage's prior too
    assert core.type_counts == {"resnet-50": 1}


@pytest.mark.parametrize("status", ["failed", "preempted"])
@pytest.mark.parametrize("throughput", [None, 15_000.0])  # set only by a rule-breaking producer
def test_unsuccessful_attempts_teach_nothing(
    hw_catalog: Catalog, status: str, throughput: float | None
) -> None:
    core = LeapCore(hw_catalog)
    core.intervals = ConformalIntervals(min_samples=1, default_halfwidth=0.5)
    core.on_submitted(_sub("j1", "L1", 0))
    done = _done("j1", "L1", 1, "H100-SXM", throughput, status=status)
    assert core.on_completed(done) is True
    assert "j1" not in core.pending  # it was matched, not left dangling
    assert core.model.learned == 0
    assert core.priors == {} and core.type_counts == {}
    assert core.intervals.halfwidth("cold_start") == 0.5  # no residual either
    assert core.unmatched_completions == 0
    again = core.on_submitted(_sub("j2", "L1", 2))
    assert "lineage_prior" not in again.source.tolist()


def test_a_succeeded_attempt_without_a_throughput_teaches_nothing(hw_catalog: Catalog) -> None:
    core = LeapCore(hw_catalog)
    core.on_submitted(_sub("j1", "L1", 0))
    assert core.on_completed(_done("j1", "L1", 1, "H100-SXM", None)) is True
    assert core.model.learned == 0 and core.priors == {}


class _SerialisingStore(MutableMapping[str, Any]):
    """A store that keeps serialised values, like a changelog-backed table: what is read is
    a copy, so state only persists through ``store[key] = value``."""

    def __init__(self, dumps: Callable[[Any], Any], loads: Callable[[Any], Any]) -> None:
        self.data: dict[str, Any] = {}
        self.dumps, self.loads = dumps, loads

    def __getitem__(self, key: str) -> Any:
        return self.loads(self.data[key])

    def __setitem__(self, key: str, value: Any) -> None:
        self.data[key] = self.dumps(value)

    def __delitem__(self, key: str) -> None:
        del self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def test_state_lives_in_the_injected_mappings(hw_catalog: Catalog) -> None:
    pending: dict[str, dict[str, Any]] = {}
    priors: dict[str, dict[str, list[float]]] = {}
    core = LeapCore(hw_catalog, pending=pending, priors=priors)
    assert core.pending is pending and core.priors is priors
    core.on_submitted(_sub("j1", "L1", 0))
    assert set(pending) == {"j1"}
    core.on_completed(_done("j1", "L1", 1, "H100-SXM", 20_000.0))
    assert pending == {} and set(priors) == {"L1"}

    # a fresh core given the same priors sees the lineage's measurement
    fresh = LeapCore(hw_catalog, priors=priors)
    value, source = _at(fresh.on_submitted(_sub("j2", "L1", 2)), "H100-SXM")
    assert source == "lineage_prior" and value == pytest.approx(20_000.0, rel=1e-12)


def test_a_restarted_core_completes_what_its_predecessor_ranked(hw_catalog: Catalog) -> None:
    pending = _SerialisingStore(pickle.dumps, pickle.loads)
    priors = _SerialisingStore(json.dumps, json.loads)  # lineage state is JSON
    before = LeapCore(hw_catalog, pending=pending, priors=priors)
    before.on_submitted(_sub("j1", "L1", 0))
    after = LeapCore(hw_catalog, pending=pending, priors=priors)  # the process restarted
    assert after.on_completed(_done("j1", "L1", 1, "H100-SXM", 20_000.0)) is True
    assert after.model.learned == 1 and len(pending) == 0
    again = LeapCore(hw_catalog, pending=pending, priors=priors)
    value, source = _at(again.on_submitted(_sub("j2", "L1", 2)), "H100-SXM")
    assert source == "lineage_prior" and value == pytest.approx(20_000.0, rel=1e-12)
    # a second attempt updates the stored state (written back, not mutated in a copy)
    again.on_completed(_done("j2", "L1", 3, "H100-SXM", 22_000.0))
    signature = config_signature(_sub("j2", "L1", 2))
    assert priors["L1"][f"{signature}@H100-SXM"][2] == 2


def test_hardware_missing_from_the_catalog_does_not_crash(hw_catalog: Catalog) -> None:
    core = LeapCore(hw_catalog)
    ranking = core.on_submitted(_sub("j1", "L1", 0, ["H100-SXM", "Z9000"]))
    i = ranking.hardware.index("Z9000")
    assert not ranking.eligible[i] and np.isnan(ranking.predicted[i])
    assert ranking.reasons(i) == "'Z9000' is not in the hardware catalog"
    assert ranking.top == "H100-SXM"
    # it ran on the unknown type anyway: matched, nothing to learn from
    assert core.on_completed(_done("j1", "L1", 1, "Z9000", 5_000.0)) is True
    assert core.model.learned == 0 and core.priors == {}


def test_a_run_on_a_catalog_type_that_was_not_a_candidate_is_learned(
    hw_catalog: Catalog,
) -> None:
    core = LeapCore(hw_catalog)
    core.on_submitted(_sub("j1", "L1", 0, ["H100-SXM"]))
    assert core.on_completed(_done("j1", "L1", 1, "MI300X", 30_000.0)) is True
    assert core.model.learned == 1
    value, source = _at(core.on_submitted(_sub("j2", "L1", 2)), "MI300X")
    assert source == "lineage_prior" and value == pytest.approx(30_000.0, rel=1e-12)


def test_every_catalog_type_when_no_candidates_are_named(hw_catalog: Catalog) -> None:
    core = LeapCore(hw_catalog)
    core.on_submitted(_sub("j1", "L1", 0, None))
    core.on_completed(_done("j1", "L1", 1, "MI300X", 30_000.0))
    ranking = core.on_submitted(_sub("j2", "L1", 2, None))
    assert ranking.hardware == hw_catalog.names
    assert _at(ranking, "MI300X") == (pytest.approx(30_000.0, rel=1e-12), "lineage_prior")


def _residual_after_repeat(hw_catalog: Catalog, candidates: list[str], hardware: str) -> float:
    """Half-width of 'lineage_prior' after one repeat on ``hardware`` (1,000 then 1,100)."""
    core = LeapCore(hw_catalog)
    core.intervals = ConformalIntervals(min_samples=1)
    core.on_submitted(_sub("j1", "L1", 0, [hardware]))
    core.on_completed(_done("j1", "L1", 1, hardware, 1_000.0))
    repeat = core.on_submitted(_sub("j2", "L1", 2, candidates))
    assert _at(repeat, hardware) == (pytest.approx(1_000.0), "lineage_prior")
    core.on_completed(_done("j2", "L1", 3, hardware, 1_100.0))
    return core.intervals.halfwidth("lineage_prior")


def test_the_model_learns_part_of_a_lineages_offset_until_it_or_the_model_knows_better(
    hw_catalog: Catalog,
) -> None:
    core = LeapCore(hw_catalog)
    shares = []
    for i, hardware in enumerate(("H100-SXM", "H100-SXM", "MI300X", "MI300X")):
        core.on_submitted(_sub(f"j{i}", "L1", 10 * i))
        before = copy.deepcopy(core.priors.get("L1"))
        completed = _done(f"j{i}", "L1", 10 * i + 1, hardware, 1_000.0)
        _, example = core.join(completed)
        assert example is not None
        now_ms = completed["event_time"].timestamp() * 1000.0
        offset = lineage_offset(before, now_ms, core.half_life)
        assert (offset != 0.0) == (i > 0)  # the first attempt has no offset to leave out
        if i > 0:
            shares.append((math.log(1_000.0) - example["target"]) / offset)
        core.learn(example)
    # on H100-SXM alone: part of it, less once the model learned the type on H100-SXM (j0); a
    # first completion on MI300X, which the model has not learned: the half; then all of it
    unknown_after_one = PAIR_COMPLETIONS_HALVING / (PAIR_COMPLETIONS_HALVING + 1)
    assert shares == pytest.approx(
        [1.0 - SINGLE_TYPE_OFFSET_KEPT * unknown_after_one, 1.0 - SINGLE_TYPE_OFFSET_KEPT, 1.0]
    )
    assert shares[1] < shares[0] < 1.0
    assert core.pair_counts == {("resnet-50", "H100-SXM"): 2, ("resnet-50", "MI300X"): 2}


def test_a_teams_lineage_is_predicted_against_the_model_with_its_team(
    hw_catalog: Catalog,
) -> None:
    core = LeapCore(hw_catalog)
    # the team's jobs run three times as fast on the H100 as another team's: a team term
    for i in range(200):
        team, throughput = ("fast", 3_000.0) if i % 2 else ("plain", 1_000.0)
        core.on_submitted(_sub(f"t{i}", f"T{i}", i, team=team))
        core.on_completed(_done(f"t{i}", f"T{i}", i + 0.5, "H100-SXM", throughput))
    # a lineage of the team runs one configuration, then submits a changed one
    first = _sub("a", "L1", 250, team="fast")
    core.on_submitted(first)
    core.on_completed(_done("a", "L1", 250.5, "H100-SXM", 2_800.0))
    changed = _sub("b", "L1", 251, team="fast", global_batch_size=1024)
    predicted, source = _at(core.on_submitted(changed), "H100-SXM")

    def model(event: dict[str, Any]) -> float:
        job = core.model.encoder.job(event)
        return float(core.model.predict_many(job, np.array([core.hw.index["H100-SXM"]]))[0])

    team_term = model(changed) - model({**changed, "team": None})
    assert team_term > 0.05  # learned, so that counting it twice would show
    # the lineage's latest residual is its measurement against the same model, its team's
    # term included: the team is counted once
    residual = math.log(2_800.0) - model(first)
    assert source == "lineage_prior"
    assert math.log(predicted) == pytest.approx(
        model(changed) + residual / (1.0 + SHRINK_SAME_HARDWARE)
    )


def test_a_completion_is_scored_against_its_own_candidates_prediction(
    hw_catalog: Catalog,
) -> None:
    got = _residual_after_repeat(hw_catalog, ["nope", "MI300X"], "MI300X")
    assert got == pytest.approx(math.log(1.1))


def test_an_unknown_candidate_does_not_steal_the_first_catalog_types_slot(
    hw_catalog: Catalog,
) -> None:
    first = hw_catalog.names[0]
    got = _residual_after_repeat(hw_catalog, ["nope", first], first)
    assert got == pytest.approx(math.log(1.1))


def test_idle_lineages_are_forgotten_and_recent_ones_kept(hw_catalog: Catalog) -> None:
    core = LeapCore(hw_catalog)
    for lineage, h in (("old", 0.0), ("recent", 24.0 * 50)):
        core.on_submitted(_sub(f"{lineage}-1", lineage, h))
        core.on_completed(_done(f"{lineage}-1", lineage, h + 1, TWO[0], 1000.0))
    now_ms = hours(24.0 * 70).timestamp() * 1000.0

    assert core.evict_idle_lineages(now_ms, max_idle_days=60, keep=0) == 1
    assert set(core.priors) == {"recent"}
    assert core.evict_idle_lineages(now_ms, max_idle_days=60, keep=0) == 0  # idempotent


def test_a_small_state_forgets_no_lineage_however_long_idle(hw_catalog: Catalog) -> None:
    core = LeapCore(hw_catalog)
    core.on_submitted(_sub("a1", "lin", 0))
    core.on_completed(_done("a1", "lin", 1, TWO[0], 1000.0))
    a_year_later = 24.0 * 365

    assert core.evict_idle_lineages(hours(a_year_later).timestamp() * 1000.0) == 0
    ranking = core.on_submitted(_sub("a2", "lin", a_year_later))
    assert _at(ranking, TWO[0])[1] == "lineage_prior"


def test_over_the_floor_the_longest_idle_go_first_and_only_down_to_it(
    hw_catalog: Catalog,
) -> None:
    core = LeapCore(hw_catalog)
    for day, lineage in ((0, "oldest"), (5, "older"), (10, "old"), (30, "recent")):
        core.on_submitted(_sub(f"{lineage}-1", lineage, 24.0 * day))
        core.on_completed(_done(f"{lineage}-1", lineage, 24.0 * day + 1, TWO[0], 1000.0))
    now_ms = hours(24.0 * 80).timestamp() * 1000.0  # all but "recent" idle over 60 days

    assert core.evict_idle_lineages(now_ms, max_idle_days=60, keep=2) == 2
    assert set(core.priors) == {"old", "recent"}
    assert core.evict_idle_lineages(now_ms, max_idle_days=60, keep=0) == 1  # never "recent"
    assert set(core.priors) == {"recent"}


def test_a_forgotten_lineage_starts_over_without_its_prior(hw_catalog: Catalog) -> None:
    core = LeapCore(hw_catalog)
    core.on_submitted(_sub("a1", "lin", 0))
    core.on_completed(_done("a1", "lin", 1, TWO[0], 1000.0))
    core.evict_idle_lineages(hours(24.0 * 90).timestamp() * 1000.0, keep=0)

    ranking = core.on_submitted(_sub("a2", "lin", 24.0 * 90))
    assert _at(ranking, TWO[0])[1] != "lineage_prior"


def test_a_lineage_measured_decades_ago_still_ranks_on_its_measurement(
    hw_catalog: Catalog,
) -> None:
    core = LeapCore(hw_catalog)
    decades = -24.0 * 365 * 55  # the decay of its sums underflows to zero
    core.on_submitted(_sub("old", "L", decades))
    core.on_completed(_done("old", "L", decades + 1, TWO[0], 1000.0))

    ranking = core.on_submitted(_sub("now", "L", 0))

    predicted, source = _at(ranking, TWO[0])
    assert source == "lineage_prior" and predicted == pytest.approx(1000.0)


def test_a_throughput_billions_of_times_off_is_scored_but_never_learned(
    hw_catalog: Catalog,
) -> None:
    def trained(bad: float | None) -> LeapCore:
        core = LeapCore(hw_catalog)
        for i in range(20):
            core.on_submitted(_sub(f"j{i}", f"L{i}", i))
            core.on_completed(_done(f"j{i}", f"L{i}", i + 0.5, TWO[i % 2], 1000.0 + i))
        if bad is not None:  # a broken measurement (or unit) on a lineage of its own
            core.on_submitted(_sub("bad", "B", 30))
            assert core.on_completed(_done("bad", "B", 31, TWO[0], bad))  # joined
        return core

    clean = trained(None)
    for bad in (1e-300, 1e300):
        core = trained(bad)
        assert core.implausible_completions == 1
        assert core.model.learned == clean.model.learned == 20
        assert "B" not in core.priors  # nor the lineage's prior, nor its ratios
        probe = _sub("probe", "P", 40)
        assert np.array_equal(
            core.on_submitted(probe).predicted, clean.on_submitted(probe).predicted
        )
    assert clean.implausible_completions == 0


def test_a_candidate_listed_twice_is_ranked_once(hw_catalog: Catalog) -> None:
    core = LeapCore(hw_catalog)
    ranking = core.on_submitted(_sub("j1", "L", 0, [TWO[0], TWO[1], TWO[0]]))
    assert ranking.hardware == (TWO[0], TWO[1])
    assert sorted(ranking.ranked_hardware) == sorted(TWO)


def test_a_submission_pending_too_long_is_forgotten_and_its_completion_not_learned(
    hw_catalog: Catalog,
) -> None:
    core = LeapCore(hw_catalog)
    core.on_submitted(_sub("cancelled", "a", 0))  # never completes
    core.on_submitted(_sub("long-run", "b", 24.0 * 10))
    now_ms = hours(24.0 * 61).timestamp() * 1000.0

    assert core.forget_stale_pending(now_ms) == 1
    assert set(core.pending) == {"long-run"}
    assert core.forget_stale_pending(now_ms) == 0  # idempotent
    assert not core.on_completed(_done("cancelled", "a", 24.0 * 62, TWO[0], 1000.0))
    assert core.model.learned == 0
    assert core.on_completed(_done("long-run", "b", 24.0 * 62, TWO[0], 1000.0))


# -- input groups left out (an ablation) -------------------------------------------------------


def test_without_prior_throughput_a_lineage_never_meets_its_earlier_attempts(
    hw_catalog: Catalog,
) -> None:
    cores = {
        "full": LeapCore(hw_catalog),
        "ablated": LeapCore(hw_catalog, without={"prior_throughput"}),
    }
    for core in cores.values():
        core.on_submitted(_sub("a1", "lin", 0))
        core.on_completed(_done("a1", "lin", 1, TWO[0], 1000.0))
    full, ablated = (core.on_submitted(_sub("a2", "lin", 2)) for core in cores.values())
    assert _at(full, TWO[0])[1] == "lineage_prior"
    assert _at(full, TWO[0])[0] == pytest.approx(1000.0, rel=0.05)
    assert _at(ablated, TWO[0])[1] != "lineage_prior"
    assert {_at(ablated, h)[1] for h in TWO}.isdisjoint({"lineage_prior", "transfer"})


def test_without_the_learned_model_predictions_do_not_move(hw_catalog: Catalog) -> None:
    before = {}
    for name, without in (("full", ()), ("ablated", ("learned_model",))):
        core = LeapCore(hw_catalog, without=without)
        before[name] = core.on_submitted(_sub("a0", "other", 0)).predicted.copy()
        for i in range(30):  # other lineages: no prior reaches the new one
            core.on_submitted(_sub(f"a{i + 1}", f"lin{i}", i))
            core.on_completed(_done(f"a{i + 1}", f"lin{i}", i + 0.5, TWO[i % 2], 50.0))
        after = core.on_submitted(_sub("new", "new", 40)).predicted
        moved = not np.allclose(after, before[name])
        assert moved == (name == "full"), name


def _learn_with_passes_by_hand(
    catalog: Catalog, core: LeapCore, again: dict[int, list[int]], completions: int
) -> LeapCore:
    """Feed ``core`` and a core without a second pass the same completions; the latter learns
    again, after completion i, the examples ``again[i]`` lists. Returns it, for comparison."""
    reference = LeapCore(catalog, second_pass_delay=0)
    examples = []
    for i in range(completions):
        for c in (core, reference):
            c.on_submitted(_sub(f"a{i}", f"lin{i % 2}", i))
        done = _done(f"a{i}", f"lin{i % 2}", i + 0.5, TWO[i % 2], 100.0 * (i + 1))
        assert core.on_completed(done)
        _, example = reference.join(done)
        assert example is not None
        reference.learn(example)
        examples.append(example)
        for j in again.get(i, []):
            job = reference.model.encoder.job(examples[j]["job"])
            position = reference.hw.index[examples[j]["hardware_type"]]
            reference.model.learn_one(job, position, examples[j]["target"], count=False)
    return reference


def test_each_completion_is_learned_again_second_pass_delay_completions_later(
    hw_catalog: Catalog,
) -> None:
    core = LeapCore(hw_catalog, second_pass_delay=2, young_model_completions=0)
    reference = _learn_with_passes_by_hand(hw_catalog, core, {2: [0], 3: [1], 4: [2]}, 5)
    assert core.model.regressor._weights.to_dict() == reference.model.regressor._weights.to_dict()
    assert core.model.learned == 5 and len(core.second_pass) == 2
    probe = _sub("probe", "new", 9)
    np.testing.assert_array_equal(
        core.on_submitted(probe).predicted, reference.on_submitted(probe).predicted
    )


def test_a_young_model_learns_a_completion_a_third_time(hw_catalog: Catalog) -> None:
    core = LeapCore(
        hw_catalog, second_pass_delay=2, second_pass_min_delay=2, young_model_completions=4
    )
    # the second passes two back, and example 0's third (it had its second while fewer than 4
    # were learned; example 1 had it at 4)
    reference = _learn_with_passes_by_hand(hw_catalog, core, {2: [0], 3: [1, 0], 4: [2], 5: [3]}, 6)
    assert core.model.regressor._weights.to_dict() == reference.model.regressor._weights.to_dict()
    assert not core.third_pass and core.model.learned == 6


def test_a_later_pass_learns_the_same_from_the_pair_it_kept_as_from_the_job_encoded_again(
    hw_catalog: Catalog,
) -> None:
    # the core keeps each queued example's pair as its first pass prepared it; a copy loaded
    # from its pickled state mid-way has none for what was queued before, and encodes those
    # again: both must step on the same features
    passes = {"second_pass_delay": 3, "second_pass_min_delay": 3, "young_model_completions": 8}
    core = LeapCore(hw_catalog, **passes)

    def feed(c: LeapCore, i: int) -> None:
        lineage = f"lin{i % 3}"
        c.on_submitted(_sub(f"a{i}", lineage, i, None, global_batch_size=256 * (1 + i % 4)))
        assert c.on_completed(_done(f"a{i}", lineage, i + 0.5, TWO[i % 2], 100.0 * (i + 1)))

    for i in range(6):
        feed(core, i)
    loaded = LeapCore(hw_catalog, **passes)
    loaded.load_model_state(pickle.loads(pickle.dumps(core.model_state())))
    loaded.priors, loaded.pending = copy.deepcopy(core.priors), copy.deepcopy(core.pending)
    assert core._prepared.new and not loaded._prepared.new
    for i in range(6, 14):
        for c in (core, loaded):
            feed(c, i)
    assert core.model.regressor._weights.to_dict() == loaded.model.regressor._weights.to_dict()
    probe = _sub("probe", "new", 20, None)
    np.testing.assert_array_equal(
        core.on_submitted(probe).predicted, loaded.on_submitted(probe).predicted
    )


def test_a_young_model_takes_its_second_pass_sooner(hw_catalog: Catalog) -> None:
    core = LeapCore(hw_catalog, second_pass_delay=3, second_pass_min_delay=1)
    waiting = []
    for i in range(16):
        core.on_submitted(_sub(f"a{i}", f"lin{i % 2}", i))
        done = _done(f"a{i}", f"lin{i % 2}", i + 0.5, TWO[i % 2], 100.0 * (i + 1))
        assert core.on_completed(done)
        waiting.append(len(core.second_pass))
    # the delay is a quarter of the completions learned, at least 1 and at most 3
    assert waiting == [1] * 7 + [2] * 4 + [3] * 5
    assert core.model.learned == 16


def test_a_remembered_submission_teaches_what_a_ranked_one_does_but_the_intervals(
    hw_catalog: Catalog,
) -> None:
    ranked, remembered = LeapCore(hw_catalog), LeapCore(hw_catalog)
    for i in range(6):
        submission = _sub(f"a{i}", f"lin{i % 2}", i)
        ranked.on_submitted(submission)
        remembered.remember(submission)
        done = _done(f"a{i}", f"lin{i % 2}", i + 0.5, TWO[i % 2], 100.0 * (i + 1))
        assert ranked.on_completed(done) and remembered.on_completed(done)
    assert ranked.model.regressor._weights.to_dict() == (
        remembered.model.regressor._weights.to_dict()
    )
    assert pickle.dumps(ranked.priors) == pickle.dumps(remembered.priors)
    probe = _sub("probe", "lin0", 9)
    np.testing.assert_array_equal(
        ranked.on_submitted(probe).predicted, remembered.on_submitted(probe).predicted
    )
    # the calibration scores the ranking's own predictions: there were none to score
    assert ranked.intervals._learned == 6 and remembered.intervals._learned == 0


def test_an_unknown_input_group_is_refused(hw_catalog: Catalog) -> None:
    with pytest.raises(ValueError, match="unknown input group"):
        LeapCore(hw_catalog, without={"priors"})


def test_a_core_with_a_nightly_model_ranks_with_it_and_shares_the_rest(
    hw_catalog: Catalog,
) -> None:
    core = LeapCore(hw_catalog)
    nightly = LeapCore(hw_catalog)  # a model of its own, taught other throughputs
    for i in range(40):
        core.on_submitted(submitted_event(f"j{i}", f"l{i}", hours(i)))
        core.on_completed(
            completed_event(f"j{i}", f"l{i}", hours(i + 1), "H100-SXM", throughput=1_000.0)
        )
        nightly.on_submitted(submitted_event(f"j{i}", f"l{i}", hours(i)))
        nightly.on_completed(
            completed_event(f"j{i}", f"l{i}", hours(i + 1), "H100-SXM", throughput=4_000.0)
        )
    ranker = core.with_model(nightly.model, "river_batch-20260301T0000Z")
    event = submitted_event("new", "fresh", hours(50))
    ranking = ranker.on_submitted(event).record()
    assert ranking["model_version"] == "river_batch-20260301T0000Z"
    assert core.model_version == "online-40"  # the core itself is untouched
    predicted = {c["hardware_type"]: c["predicted_throughput"] for c in ranking["candidates"]}
    online = {c["hardware_type"]: c["predicted_throughput"] for c in core.on_submitted(
        submitted_event("twin", "fresh-twin", hours(50))).record()["candidates"]}  # fmt: skip
    assert predicted["H100-SXM"] > 2.0 * online["H100-SXM"]  # the nightly model's figure
    assert "new" in core.pending  # the ranker's submission joins the core's completion
    learned = core.model.learned
    core.on_completed(completed_event("new", "fresh", hours(51), "H100-SXM", throughput=1_000.0))
    assert core.model.learned == learned + 1 and nightly.model.learned == 40
    assert "fresh" in ranker.priors  # the priors are the same mapping


def test_a_nightly_model_over_another_catalog_is_refused(hw_catalog: Catalog) -> None:
    fewer = LeapCore(Catalog(list(hw_catalog)[:-1]))
    with pytest.raises(ValueError, match="another hardware catalog"):
        LeapCore(hw_catalog).with_model(fewer.model, "other")


def _lineage_on_two_types(core: LeapCore, lineage: str, throughput: float) -> None:
    """``lineage`` measured on H100-SXM and MI300X: priors, references and pairwise ratios."""
    for i, hardware in enumerate(("H100-SXM", "MI300X", "H100-SXM", "MI300X")):
        job = f"{lineage}-{i}"
        core.on_submitted(submitted_event(job, lineage, hours(10 * i)))
        measured = throughput * (1.0 + 0.3 * (hardware == "MI300X"))
        core.on_completed(
            completed_event(job, lineage, hours(10 * i + 1), hardware, throughput=measured)
        )


def test_one_submission_ranked_by_several_models_gives_each_its_own_ranking(
    hw_catalog: Catalog,
) -> None:
    """What a Submission shares (priors, transfer ratios, memory risk, kept predictions) is
    the same whichever model reads it first: each ranking equals that model's ranking of a
    submission of its own."""
    core, other = LeapCore(hw_catalog), LeapCore(hw_catalog)
    for lineage in ("a", "b", "c"):
        _lineage_on_two_types(core, lineage, 1_000.0)
        _lineage_on_two_types(other, lineage, 3_000.0)
    models = {
        "online": core.model,
        "other": other.model,
        "ensemble": Ensemble([core.model, other.model]),
    }
    # a repeat, a changed configuration of a known lineage (a transfer), a fresh lineage
    events = [
        submitted_event("r", "a", hours(50)),
        submitted_event("t", "b", hours(50), global_batch_size=2048),
        submitted_event("f", "fresh", hours(50), candidates=["MI300X", "H100-SXM", "X-1"]),
    ]
    pending = dict(core.pending)
    for event in events:
        shared = core.submission(event)
        for name in ("ensemble", "other", "online"):  # the ensemble first: members predict
            ranker = core.with_model(models[name], name)
            ranking = ranker.rank(shared, remember=False)
            alone = ranker.rank(core.submission(event), remember=False)
            for field in ("predicted", "lower", "upper", "cost_per_1k", "order"):
                np.testing.assert_array_equal(getattr(ranking, field), getattr(alone, field))
            assert ranking.source.tolist() == alone.source.tolist()
        assert core.pending == pending  # remember=False: no submission joins a completion
    # the models differ, and the shared submission kept each one's predictions apart
    online = core.rank(core.submission(events[1]), remember=False).predicted
    ensemble = core.with_model(models["ensemble"], "e").rank(core.submission(events[1]))
    assert not np.allclose(online, ensemble.predicted)
    assert "t" in core.pending


def test_a_nightly_model_on_other_input_groups_is_refused(hw_catalog: Catalog) -> None:
    without = LeapCore(hw_catalog, without={"hardware_specs"})
    with pytest.raises(ValueError, match="other input groups"):
        LeapCore(hw_catalog).with_model(without.model, "other")


# In a process of its own: this one has compiled whatever the tests before asked for.
_WARM_UP_THEN_REPLAY = """
import json, sys
from pathlib import Path
from leap_stream.backtest.replay import replay
from leap_stream.core import adagrad, eligibility, leap, memory_risk, model, ranking, transfer
from leap_stream.core.catalog import default_catalog
kernels = (adagrad.adagrad_step, leap._predictions, ranking._cost_and_order,
           model._add_pair_terms, memory_risk._pooled_rates,
           leap._out_of_memory_charges, eligibility._verdicts, leap._ranked_values,
           leap._at_positions, leap._add_reference, transfer._pooled_rows,
           transfer._spread_rows, transfer._scaled_distances, transfer._weighted_means)
leap.warm_up(default_catalog())
warm = [len(k.signatures) for k in kernels]
fleet = Path(sys.argv[1])
replay(fleet / "history.parquet", fleet / "warm-replay", default_catalog(),
       oracle=fleet / "oracle.parquet", report=False, progress=False)
print(json.dumps([warm, [len(k.signatures) for k in kernels]]))
"""


def test_the_warm_up_compiles_every_kernel_variant_a_replay_uses(
    generated_fleet: Callable[[FleetConfig], Path],
) -> None:
    fleet = generated_fleet(FleetConfig(days=2, jobs_per_day=300, seed=3))
    run = subprocess.run(
        [sys.executable, "-c", _WARM_UP_THEN_REPLAY, str(fleet)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    warm, after_replay = json.loads(run.stdout.splitlines()[-1])
    assert all(n > 0 for n in warm)
    assert after_replay == warm  # nothing left to compile while events wait


def test_the_compiled_predictions_equal_numpys_to_the_bit() -> None:
    rng = np.random.default_rng(9)
    n_types = 30
    for _ in range(2000):
        n = int(rng.integers(1, n_types))
        positions = rng.choice(n_types, n, replace=False).astype(np.int64)
        base, offsets, transfer = rng.normal(8.0, 2.0, n), rng.normal(0, 0.3, n), None
        if rng.random() < 0.7:
            transfer = rng.normal(0, 0.3, n)
        same = rng.random(n) < 0.3
        exact = np.where(rng.random(n) < 0.2, rng.normal(8.0, 2.0, n), np.nan)
        seen = rng.integers(0, 2 * COLD_START_MIN_OBSERVATIONS, n_types)
        family_seen = rng.integers(0, 1000, n_types)
        unseen_type, transfers = bool(rng.random() < 0.1), bool(rng.random() < 0.5)
        memory_risk = np.where(rng.random(n) < 0.2, rng.exponential(0.5, n), 0.0)
        # what LeapCore.rank computed with numpy before the loop was compiled
        offset = offsets if transfer is None else np.where(same, offsets, transfer)
        log_pred = np.where(np.isfinite(exact), exact, base + offset)
        cold = (seen[positions] < COLD_START_MIN_OBSERVATIONS) | unseen_type
        code = np.where(
            same, _LINEAGE_PRIOR, np.where(cold, _COLD_START, _TRANSFER if transfers else _MODEL)
        )
        risk = np.where(same, 0.0, RISK_AVERSION / np.sqrt(1.0 + family_seen[positions]))
        risk += memory_risk
        got = _predictions(base, offsets, same, exact, transfer, seen, family_seen, positions,
                           unseen_type, transfers, memory_risk)  # fmt: skip
        for actual, expected in zip(got, (log_pred, code, risk), strict=True):
            np.testing.assert_array_equal(actual, expected)


def test_the_compiled_ranked_values_equal_numpys_to_the_bit() -> None:
    rng = np.random.default_rng(12)
    for _ in range(2000):
        n = int(rng.integers(1, 40))
        known = rng.random(n) < 0.9
        log_pred = rng.normal(8.0, 3.0, n)
        code = rng.integers(0, len(SOURCES), n)
        halfwidths = rng.exponential(0.3, len(SOURCES))
        halfwidths[rng.random(len(SOURCES)) < 0.1] = np.inf  # a source not calibrated yet
        # what LeapCore.rank computed with numpy before the loop was compiled
        width = halfwidths[code]
        predicted = np.where(known, np.exp(log_pred), np.nan)
        expected = (
            predicted,
            predicted * np.exp(-width),
            predicted * np.exp(width),
        )
        got = _ranked_values(np.exp(log_pred), known, code, np.exp(-halfwidths), np.exp(halfwidths))
        for actual, wanted in zip(got, expected, strict=True):
            np.testing.assert_array_equal(actual, wanted)


def test_the_compiled_gather_equals_numpys() -> None:
    rng = np.random.default_rng(13)
    values = np.where(rng.random(40) < 0.3, np.nan, rng.uniform(1.0, 1e4, 40))
    for _ in range(500):
        positions = rng.integers(-1, 40, int(rng.integers(1, 60)))
        known = positions >= 0
        # what both rankings' prices and the lookup's medians were with numpy before
        expected = np.where(known, values[np.where(known, positions, 0)], np.nan)
        np.testing.assert_array_equal(_at_positions(positions, values), expected)


def test_the_compiled_transfer_offsets_equal_numpys_to_the_bit() -> None:
    rng = np.random.default_rng(14)
    for _ in range(2000):
        n = int(rng.integers(1, 40))
        base, baseline = rng.normal(8.0, 2.0, n), rng.normal(8.0, 2.0, n)
        blend = float(rng.choice([0.0, 1.0, rng.random()]))
        total, weights = np.zeros(n), np.zeros(n)
        expected_total, expected_weights = np.zeros(n), np.zeros(n)
        for _ in range(int(rng.integers(1, 4))):  # a lineage's references
            weight = 1.0 / rng.exponential(0.05, n)
            measured, reference_efficiency = rng.normal(0.0, 0.3, n), float(rng.normal(0.0, 0.5))
            evidence = np.where(rng.random(n) < 0.3, 0.0, rng.exponential(5.0, n))
            residual = float(rng.normal(0.0, 0.2))
            # what LeapCore._transfer_offsets computed with numpy before the loop was compiled
            efficiency = base - baseline
            correction = np.where(
                evidence > 0, blend * (measured - (efficiency - reference_efficiency)), 0.0
            )
            expected_total += weight * (residual + correction)
            expected_weights += weight
            _add_reference(total, weights, weight, residual, measured, evidence, base, baseline,
                           reference_efficiency, blend)  # fmt: skip
            model = efficiency - reference_efficiency
            np.testing.assert_array_equal(
                PairwiseTransfer.blend(measured, evidence, model, blend), correction
            )
        np.testing.assert_array_equal(total, expected_total)
        np.testing.assert_array_equal(weights, expected_weights)
