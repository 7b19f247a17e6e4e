"""Out-of-memory risk: learned from outcomes, wired into LeapCore's ranking order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from leap_stream.core.catalog import default_catalog
from leap_stream.core.leap import MAX_OOM_RISK, OUT_OF_MEMORY_COST, LeapCore, _out_of_memory_charges
from leap_stream.core.memory_risk import EDGES, PRIOR_RATE, PRIOR_WEIGHT, MemoryRisk
from leap_stream.core.ranking import Ranking

T0 = datetime(2025, 6, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def test_before_any_outcome_the_estimate_is_trusted_less_near_the_limit() -> None:
    p = MemoryRisk().predict_many("dense_llm", [0.2, 0.6, 0.97, np.nan])
    assert p[0] < p[1] < p[2]
    assert p[3] == 0.0


def test_the_compiled_risk_and_charges_equal_numpys_to_the_bit() -> None:
    rng = np.random.default_rng(5)
    families = ("dense_llm", "cnn", "gnn")
    risk = MemoryRisk()
    for step in range(3000):
        family = families[int(rng.integers(len(families)))]
        if step % 10 == 0:  # (every family's outcomes so far: none, then more and more)
            ratios = rng.uniform(0.0, 1.6, 40)
            ratios[rng.random(40) < 0.1] = rng.choice([np.nan, np.inf, -np.inf, 0.0, 0.85])
            # what MemoryRisk and LeapCore._memory_risk computed with numpy before compiling
            rate = PRIOR_RATE
            for key in ("*", family):
                counts = risk._counts.get(key)
                if counts is not None:
                    rate = (counts[0] + PRIOR_WEIGHT * rate) / (counts[1] + PRIOR_WEIGHT)
            p = rate[EDGES.searchsorted(ratios, side="right")]
            p = np.where(np.isfinite(ratios), p, 0.0)
            np.testing.assert_array_equal(risk.rates(family), rate)
            np.testing.assert_array_equal(risk.predict_many(family, ratios), p)
            _check_charges(rng, rate)
        ratio = float(rng.uniform(0.3, 1.4))
        risk.learn_one(family, ratio, out_of_memory=bool(rng.random() < ratio / 3))


def _check_charges(rng: np.random.Generator, rate: np.ndarray) -> None:
    """The compiled charges against what LeapCore._memory_risk computed with numpy before."""
    usable = rng.uniform(10.0, 200.0, 30)
    usable[rng.random(30) < 0.05] = 0.0  # (no usable memory: an infinite ratio)
    n = int(rng.integers(1, 40))
    positions = rng.integers(0, 30, n)
    need = float(rng.choice([rng.uniform(1.0, 250.0), np.nan, 0.0]))
    failed = rng.choice(n, int(rng.integers(0, min(n, 3) + 1)), replace=False).tolist()
    with np.errstate(divide="ignore", invalid="ignore"):  # (0 / 0 and x / 0: NaN and inf)
        ratio = need / usable[positions]
    p = rate[EDGES.searchsorted(ratio, side="right")]
    p = np.where(np.isfinite(ratio), p, 0.0)
    if failed:
        p[failed] = 1.0
        p[ratio >= ratio[failed].min()] = 1.0
    capped = np.minimum(p, MAX_OOM_RISK)
    charges = OUT_OF_MEMORY_COST * capped / (1.0 - capped)
    got = _out_of_memory_charges(need, usable, positions, rate, np.array(failed, dtype=np.int64))
    np.testing.assert_array_equal(got, charges)


def test_failures_at_a_ratio_raise_its_risk_for_that_family_more_than_for_others() -> None:
    risk = MemoryRisk()
    for _ in range(30):
        risk.learn_one("dense_llm", 0.75, out_of_memory=True)
    llm, cnn = risk.predict_many("dense_llm", [0.75])[0], risk.predict_many("cnn", [0.75])[0]
    assert llm > 0.6
    assert PRIOR_RATE.max() > cnn > MemoryRisk().predict_many("cnn", [0.75])[0]  # pooled a bit
    # a different ratio bin keeps its prior
    assert risk.predict_many("dense_llm", [0.3])[0] == MemoryRisk().predict_many("cnn", [0.3])[0]


def test_attempts_that_fit_lower_the_risk_below_the_prior() -> None:
    risk = MemoryRisk()
    for _ in range(100):
        risk.learn_one("dense_llm", 0.97, out_of_memory=False)
    assert risk.predict_many("dense_llm", [0.97])[0] < MemoryRisk().predict_many("x", [0.97])[0]


def _job(job_id: str, **overrides: Any) -> dict[str, Any]:
    # 13B parameters in bf16 with 8-way tensor parallelism on 8 devices: close to the limit
    # of a 48 GB card, far from it on an 80 GB one
    return {
        "event_id": f"{job_id}/s",
        "event_time": T0,
        "job_id": job_id,
        "lineage_id": "l1",
        "model_type": "llm-13b",
        "model_family": "dense_llm",
        "framework": "pytorch",
        "param_count": 13_000_000_000,
        "global_batch_size": 64,
        "seq_len": 4096,
        "precision": "bf16",
        "num_devices": 8,
        "tensor_parallel": 8,
        "pipeline_parallel": 1,
        "requested_hardware": None,
        "candidate_hardware": ["H100-SXM", "L40S"],
    } | overrides


def _completed(job: dict[str, Any], hardware: str, **fields: Any) -> dict[str, Any]:
    return {
        "event_id": f"{job['job_id']}/c",
        "event_time": job["event_time"] + timedelta(minutes=10),
        "job_id": job["job_id"],
        "lineage_id": job["lineage_id"],
        "hardware_type": hardware,
        "num_devices": job["num_devices"],
        "status": "failed",
        "throughput": None,
        "steps": 0,
        "failure_reason": "oom",
    } | fields


def _risk_of(core: LeapCore, job: dict[str, Any], hardware: str) -> float:
    check = core.rules.check(job)
    i = check.names.index(hardware)
    ratio = check.memory_needed_gb / core.rules.usable_memory[check.positions[i]]
    return float(core.memory_risk.predict_many(job["model_family"], [ratio])[0])


def test_an_out_of_memory_failure_teaches_the_risk_and_is_not_learned_as_a_throughput() -> None:
    core = LeapCore(default_catalog())
    job = _job("j1")
    assert core.rules.check(job).eligible.all()  # the catalog's estimate says both fit
    before = _risk_of(core, job, "L40S")
    core.on_submitted(job)
    matched, example = core.join(_completed(job, "L40S"))
    assert matched and example is not None and example["out_of_memory"]
    core.learn(example)
    assert _risk_of(core, job, "L40S") > before
    assert core.model.learned == 0  # no throughput was learned
    assert core.memory_risk.failures == 1


def test_a_lineage_is_not_sent_back_where_its_configuration_ran_out_of_memory() -> None:
    core = LeapCore(default_catalog())
    job = _job("j1", candidate_hardware=["L40S", "H100-SXM"])
    first = core.on_submitted(job)
    core.on_completed(_completed(job, first.hardware[first.order[0]]))
    again = core.on_submitted(_job("j2", event_time=T0 + timedelta(hours=1)))
    failed_on = first.hardware[first.order[0]]
    assert again.hardware[again.order[0]] != failed_on
    assert failed_on in again.hardware  # still ranked, last: hidden from no one


def test_a_failure_rules_out_every_type_where_the_configuration_needs_a_larger_share() -> None:
    # the estimated need is the same on each card: the smaller the card, the larger its share
    # (48, 80, 24, 40 and 80 GB)
    candidates = ["L40S", "H100-SXM", "L4", "A100-SXM-40GB", "A100-SXM-80GB"]

    def order(ranking: Ranking) -> list[str]:
        return [ranking.hardware[i] for i in ranking.order]

    def job(job_id: str, hour: int) -> dict[str, Any]:
        return _job(
            job_id,
            param_count=3_000_000_000,
            candidate_hardware=candidates,
            event_time=T0 + hour * HOUR,
        )

    core = LeapCore(default_catalog())
    first = core.on_submitted(job("j1", 0))
    assert core.rules.check(job("j1", 0)).eligible.all()
    assert order(first)[:3] == ["L40S", "H100-SXM", "L4"]  # the smaller cards rank early
    core.on_completed(_completed(job("j1", 0), "L40S"))
    again = order(core.on_submitted(job("j2", 1)))
    assert again[:2] == ["H100-SXM", "A100-SXM-80GB"]  # the cards larger than the L40S
    assert set(again[2:]) == {"L40S", "L4", "A100-SXM-40GB"}  # still ranked, last


def test_learn_placement_teaches_what_a_pick_would_have_met() -> None:
    core = LeapCore(default_catalog())
    job = _job("j1")
    before = _risk_of(core, job, "L40S")
    for _ in range(20):
        core.learn_placement(job, "L40S", out_of_memory=True)
    assert _risk_of(core, job, "L40S") > before + 0.3
    assert core.model.learned == 0


def test_learn_placement_rules_the_type_out_for_the_lineage_as_a_failed_attempt_would() -> None:
    core = LeapCore(default_catalog())
    job = _job("j1", param_count=3_000_000_000)
    first = core.on_submitted(job)
    assert first.hardware[first.order[0]] == "L40S"
    core.learn_placement(job, "L40S", out_of_memory=True)
    again = core.on_submitted(_job("j2", param_count=3_000_000_000, event_time=T0 + HOUR))
    assert again.hardware[again.order[0]] == "H100-SXM"
    other = core.on_submitted(_job("j3", param_count=3_000_000_000, lineage_id="l2"))
    assert other.hardware[other.order[0]] == "L40S"  # another lineage's failure is its own


def test_the_memory_risk_travels_with_the_model_state() -> None:
    core = LeapCore(default_catalog())
    core.learn_placement(_job("j1"), "L40S", out_of_memory=True)
    other = LeapCore(default_catalog())
    other.load_model_state(core.model_state())
    assert other.memory_risk.failures == 1
    state = core.model_state()
    state.pop("memory_risk")  # a state from before the memory risk existed still loads
    other.load_model_state(state)
    assert other.memory_risk.failures == 0
