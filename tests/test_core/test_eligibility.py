"""Tests of leap_stream.core.eligibility:

each rule, its reason code and wording, and their order.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from core_fixtures import hours, submitted_event

from leap_stream.core.catalog import Catalog
from leap_stream.core.eligibility import (
    ELIGIBLE,
    NOT_LAUNCHED,
    TOO_LITTLE_MEMORY,
    UNKNOWN,
    UNSUPPORTED,
    EligibilityRules,
    _verdicts,
)
from leap_stream.core.hardware import EPOCH
from leap_stream.core.memory import USABLE_FRACTION, required_memory_gb

# 70B parameters at bf16 on 8 devices without tensor parallelism: fits no catalog type.
HUGE = {
    "model_type": "llm-70b",
    "model_family": "dense_llm",
    "param_count": 70_000_000_000,
    "seq_len": 4096,
    "global_batch_size": 256,
}


@pytest.fixture(scope="module")
def rules(hw_catalog: Catalog) -> EligibilityRules:
    return EligibilityRules(hw_catalog)


def _job(candidates: list[str] | None, **overrides: Any) -> dict[str, Any]:
    return submitted_event("j1", "l1", hours(0), candidates=candidates, **overrides)


def _need(job: dict[str, Any]) -> float:
    return float(
        required_memory_gb(
            job["param_count"], job["precision"], job["num_devices"], job["tensor_parallel"],
            job["pipeline_parallel"], job["global_batch_size"], job["seq_len"],
            job["model_family"],
        )
    )  # fmt: skip


def test_small_job_is_eligible_on_launched_types_that_support_it(
    rules: EligibilityRules,
) -> None:
    check = rules.check(_job(["H100-SXM", "MI300X", "TPU-v5e"]))
    assert check.eligible.tolist() == [True, True, True]
    assert check.codes.tolist() == [ELIGIBLE] * 3
    assert check.reasons == (None, None, None)


def test_unknown_name(rules: EligibilityRules) -> None:
    check = rules.check(_job(["H100-SXM", "H100"]))
    assert check.eligible.tolist() == [True, False]
    assert check.positions.tolist()[1] == -1
    assert int(check.codes[1]) == UNKNOWN
    assert check.reason(1) == "'H100' is not in the hardware catalog"


def test_not_launched_until_its_launch_day(rules: EligibilityRules, hw_catalog: Catalog) -> None:
    launch = hw_catalog["B300"].launch_date  # 2025-09-01
    midnight = EPOCH + timedelta(days=(launch - EPOCH.date()).days)
    before = rules.check(_job(["B300"], event_time=midnight - timedelta(seconds=1)))
    assert int(before.codes[0]) == NOT_LAUNCHED
    assert before.reason(0) == f"not launched until {launch.isoformat()}"
    assert before.reason(0) == "not launched until 2025-09-01"
    on_the_day = rules.check(_job(["B300"], event_time=midnight))
    assert on_the_day.eligible.tolist() == [True]


def test_framework_unsupported(rules: EligibilityRules) -> None:
    # Gaudi2 runs pytorch only
    check = rules.check(_job(["Gaudi2", "H100-SXM"], framework="jax"))
    assert check.eligible.tolist() == [False, True]
    assert int(check.codes[0]) == UNSUPPORTED
    assert check.reason(0) == "does not support jax at bf16"


def test_precision_unsupported(rules: EligibilityRules) -> None:
    # A100 has no fp8; H100 has
    check = rules.check(_job(["A100-SXM-80GB", "H100-SXM"], precision="fp8"))
    assert check.eligible.tolist() == [False, True]
    assert check.reason(0) == "does not support pytorch at fp8"


def test_unknown_framework_or_precision_is_unsupported_everywhere(
    rules: EligibilityRules,
) -> None:
    for overrides, words in (
        ({"framework": "mxnet"}, "does not support mxnet at bf16"),
        ({"precision": "int4"}, "does not support pytorch at int4"),
    ):
        check = rules.check(_job(None, event_time=hours(24 * 3650), **overrides))
        assert not check.eligible.any()
        assert set(check.codes.tolist()) == {UNSUPPORTED}
        assert check.reason(0) == words


def test_memory_does_not_fit(rules: EligibilityRules, hw_catalog: Catalog) -> None:
    job = _job(["L4", "H100-SXM"], **HUGE)
    check = rules.check(job)
    need = _need(job)
    assert need > 80 * USABLE_FRACTION  # the premise: fits neither
    assert check.memory_needed_gb == pytest.approx(need)
    assert check.codes.tolist() == [TOO_LITTLE_MEMORY, TOO_LITTLE_MEMORY]
    usable = hw_catalog["L4"].memory_gb * USABLE_FRACTION
    assert check.reason(0) == f"needs {need:.0f} GB per device, {usable:.0f} GB usable"
    assert check.reason(0).endswith(", 22 GB usable")


def test_the_memory_need_alone_is_what_the_check_compares(rules: EligibilityRules) -> None:
    for job in (_job(["L4"]), _job(None, **HUGE)):
        assert rules.memory_needed_gb(job) == pytest.approx(_need(job))
        assert rules.memory_needed_gb(job) == rules.check(job).memory_needed_gb
    # an unknown precision is sized as fp32, as the check sizes it
    odd = _job(["H100-SXM"], precision="int3")
    assert rules.memory_needed_gb(odd) == pytest.approx(_need({**odd, "precision": "fp32"}))


def test_memory_fits_with_enough_sharding(rules: EligibilityRules) -> None:
    sharded = _job(["H100-SXM"], **{**HUGE, "num_devices": 64, "tensor_parallel": 8})
    assert rules.check(sharded).eligible.tolist() == [True]


@pytest.mark.parametrize(
    ("candidate", "overrides", "code"),
    [
        # not launched (2025-11-06) beats unsupported (no tensorflow) and memory (too big)
        ("TPU-v7", {"framework": "tensorflow", **HUGE}, NOT_LAUNCHED),
        # unsupported (no bf16 on a K80) beats memory (12 GB)
        ("K80", HUGE, UNSUPPORTED),
        # launched, supported: memory is the reason
        ("H100-SXM", HUGE, TOO_LITTLE_MEMORY),
    ],
)
def test_the_first_failing_rule_is_the_reason(
    rules: EligibilityRules, candidate: str, overrides: dict[str, Any], code: int
) -> None:
    check = rules.check(_job([candidate], event_time=hours(0), **overrides))
    assert int(check.codes[0]) == code


def test_unknown_beats_every_other_rule(rules: EligibilityRules) -> None:
    check = rules.check(_job(["nope"], framework="mxnet", precision="int4", **HUGE))
    assert int(check.codes[0]) == UNKNOWN


def test_no_candidate_list_means_every_catalog_type_in_catalog_order(
    rules: EligibilityRules, hw_catalog: Catalog
) -> None:
    check = rules.check(_job(None))
    assert check.names == hw_catalog.names
    assert check.positions.tolist() == list(range(len(hw_catalog)))
    launched = {a.name for a in hw_catalog.launched_by(hours(0))}
    for name, ok, code in zip(check.names, check.eligible, check.codes, strict=True):
        if name not in launched:
            assert not ok and code == NOT_LAUNCHED, name
    assert check.eligible[check.index["H100-SXM"]]


def test_candidate_list_restricts_and_keeps_its_order(
    rules: EligibilityRules, hw_catalog: Catalog
) -> None:
    names = ["MI300X", "nope", "H100-SXM", "K80"]
    check = rules.check(_job(names))
    assert check.names == tuple(names)
    catalog_positions = {n: i for i, n in enumerate(hw_catalog.names)}
    assert check.positions.tolist() == [
        catalog_positions["MI300X"],
        -1,
        catalog_positions["H100-SXM"],
        catalog_positions["K80"],
    ]
    assert check.eligible.tolist() == [True, False, True, False]
    assert len(check.codes) == len(check.eligible) == 4


def test_index_and_reasons_properties(rules: EligibilityRules) -> None:
    check = rules.check(_job(["H100-SXM", "L4", "X"], **HUGE))
    assert check.index == {"H100-SXM": 0, "L4": 1, "X": 2}
    reasons = check.reasons
    assert isinstance(reasons, tuple) and len(reasons) == 3
    assert reasons == tuple(check.reason(i) for i in range(3))
    assert reasons[2] == "'X' is not in the hardware catalog"
    assert reasons[0] is not None and reasons[0].startswith("needs ")


def test_eligible_matches_codes(rules: EligibilityRules) -> None:
    check = rules.check(_job(None, **HUGE, num_devices=64, tensor_parallel=8))
    np.testing.assert_array_equal(check.eligible, check.codes == ELIGIBLE)
    assert [r is None for r in check.reasons] == check.eligible.tolist()


def test_the_compiled_verdicts_equal_numpys_to_the_bit() -> None:
    rng = np.random.default_rng(3)
    n_types = 40
    for _ in range(3000):
        usable = np.where(rng.random(n_types) < 0.05, np.nan, rng.uniform(10.0, 150.0, n_types))
        launch_day = rng.integers(-400, 400, n_types).astype(float)
        n = int(rng.integers(1, 60))
        positions = rng.integers(0, n_types, n)
        known = rng.random(n) < 0.9 if rng.random() < 0.5 else None
        pos = positions if known is None else np.where(known, positions, 0)
        supported = rng.random(n) < 0.8
        need = float(rng.choice([rng.uniform(5.0, 160.0), usable[pos[0]], np.nan]))
        day = float(rng.choice([rng.uniform(-400.0, 400.0), launch_day[pos[0]]]))
        # what EligibilityRules.check computed with numpy before the loop was compiled
        codes = np.where(need > usable[pos], TOO_LITTLE_MEMORY, ELIGIBLE)
        codes[~supported] = UNSUPPORTED
        codes[launch_day[pos] > day] = NOT_LAUNCHED
        if known is not None:
            codes[~known] = UNKNOWN
        flags = np.zeros(0, dtype=bool) if known is None else known
        got_codes, got_eligible = _verdicts(pos, flags, supported, usable, launch_day, need, day)
        assert got_codes.dtype == codes.dtype
        np.testing.assert_array_equal(got_codes, codes)
        np.testing.assert_array_equal(got_eligible, codes == ELIGIBLE)
