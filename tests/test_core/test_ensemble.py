"""The ensemble of throughput models: what it predicts, whose counts it reads, how it ranks."""

from __future__ import annotations

import numpy as np
import pytest
from core_fixtures import completed_event, hours, submitted_event

from leap_stream.core import LeapCore
from leap_stream.core.catalog import Catalog
from leap_stream.core.ensemble import Ensemble


def _taught(hw_catalog: Catalog, throughput: float, n: int = 40) -> LeapCore:
    """A core whose model learned ``throughput`` for the default job on H100-SXM."""
    core = LeapCore(hw_catalog)
    for i in range(n):
        core.on_submitted(submitted_event(f"j{i}", f"l{i}", hours(i)))
        core.on_completed(
            completed_event(f"j{i}", f"l{i}", hours(i + 1), "H100-SXM", throughput=throughput)
        )
    return core


def test_it_predicts_the_mean_log_throughput_of_its_members(hw_catalog: Catalog) -> None:
    low, high = _taught(hw_catalog, 1_000.0).model, _taught(hw_catalog, 4_000.0).model
    job = low.encoder.job(submitted_event("x", "y", hours(0)))
    both = Ensemble([low, high])
    assert np.allclose(both.predict_many(job), (low.predict_many(job) + high.predict_many(job)) / 2)
    at = np.array([low.encoder.hw.index["H100-SXM"], 0])
    assert np.allclose(both.predict_many(job, at), both.predict_many(job)[at])
    # on the type both learned: the geometric mean of what each predicts, about 2,000
    assert np.exp(both.predict_many(job, at[:1])[0]) == pytest.approx(2_000.0, rel=0.15)


def test_the_first_member_leads_and_is_followed_as_it_learns(hw_catalog: Catalog) -> None:
    online = LeapCore(hw_catalog)
    nightly = _taught(hw_catalog, 4_000.0).model
    both = Ensemble([online.model, nightly])
    assert both.encoder is online.model.encoder and both.seen is online.model.seen
    assert both.learned == 0 and both.family_seen("cnn").sum() == 0
    job = nightly.encoder.job(submitted_event("x", "y", hours(0)))
    before = both.predict_many(job).copy()
    online.on_submitted(submitted_event("a", "b", hours(0)))
    online.on_completed(completed_event("a", "b", hours(1), "H100-SXM", throughput=4_000.0))
    assert both.learned == 1 and both.family_seen("cnn").sum() == 1
    assert not np.allclose(both.predict_many(job), before)  # it read the online model anew
    with pytest.raises(TypeError, match="does not learn"):
        both.learn_one(job, 0, 1.0)


def test_members_over_different_catalogs_are_refused(hw_catalog: Catalog) -> None:
    fewer = LeapCore(Catalog(list(hw_catalog)[:-1]))
    with pytest.raises(ValueError, match="different hardware catalogs"):
        Ensemble([LeapCore(hw_catalog).model, fewer.model])
    with pytest.raises(ValueError, match="at least one"):
        Ensemble([])


def test_a_core_ranking_with_an_ensemble_of_its_own_model_ranks_as_it_does(
    hw_catalog: Catalog,
) -> None:
    core = _taught(hw_catalog, 1_000.0)
    alone = core.on_submitted(submitted_event("a", "l0", hours(50))).record()
    ensemble = core.with_model(Ensemble([core.model]), "ensemble:online-40")
    ranked = ensemble.on_submitted(submitted_event("b", "l0", hours(50))).record()
    assert ranked["model_version"] == "ensemble:online-40"

    def by_type(record: dict) -> dict[str, float | None]:
        return {c["hardware_type"]: c["predicted_throughput"] for c in record["candidates"]}

    assert by_type(ranked) == pytest.approx(by_type(alone))
    assert [c["hardware_type"] for c in ranked["candidates"]] == [
        c["hardware_type"] for c in alone["candidates"]
    ]
