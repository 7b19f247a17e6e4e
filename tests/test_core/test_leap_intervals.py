"""Per-source prediction intervals wired through LeapCore (issue 8, item 5).

``test_intervals.py`` tests :class:`ConformalIntervals` on its own; this tests that what the
core learns from completions reaches its rankings per source: each candidate's interval is its
prediction x exp(+-q), with q the calibration quantile of the residuals learned *for that
candidate's source*, and the pooled quantile for a source that learned none.

Residuals are set exactly: each attempt measures its submission-time prediction times
exp(+-r), so |log(measured / predicted)| = r whatever the model predicted.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from core_fixtures import completed_event, hours, submitted_event

from leap_stream.core import LeapCore
from leap_stream.core.catalog import Catalog
from leap_stream.core.intervals import REFRESH_EVERY
from leap_stream.core.ranking import SOURCES, Ranking

PRIOR_HW = "H100-SXM"  # where lineage L1 runs again and again: lineage_prior
COLD_RUNS_HW = "A100-SXM-80GB"  # where first attempts of never-seen model types run: cold_start
NEVER_RUN_HW = "MI300X"  # nothing ever runs here: cold_start for everyone


def _measure(
    core: LeapCore, job: str, lineage: str, h: float, hardware: str, residual: float, **kw: object
) -> str:
    """Submit, then complete ``residual`` (signed, log scale) off the ranking's prediction.

    Returns the source the attempt was predicted (and its residual learned) under.
    """
    ranking = core.on_submitted(
        submitted_event(job, lineage, hours(h), candidates=[hardware], **kw)
    )
    i = ranking.hardware.index(hardware)
    measured = float(ranking.predicted[i]) * math.exp(residual)
    core.on_completed(completed_event(job, lineage, hours(h + 0.5), hardware, throughput=measured))
    return str(ranking.source[i])


def _halfwidths(ranking: Ranking, hardware: str) -> tuple[float, float]:
    """(log(predicted / lower), log(upper / predicted)) of one candidate."""
    i = ranking.hardware.index(hardware)
    predicted, lower, upper = ranking.predicted[i], ranking.lower[i], ranking.upper[i]
    return math.log(predicted / lower), math.log(upper / predicted)


def test_each_candidates_interval_is_its_sources_learned_halfwidth(hw_catalog: Catalog) -> None:
    assert {"lineage_prior", "cold_start"} <= set(SOURCES)
    core = LeapCore(hw_catalog)
    level = core.intervals.level
    # enough residuals per source to use its own window, and a total that is a multiple of
    # REFRESH_EVERY, so the half-widths the rankings read are up to date
    per_source = REFRESH_EVERY * math.ceil(core.intervals.min_samples / REFRESH_EVERY)
    assert per_source <= core.intervals.window

    learned: dict[str, list[float]] = {"lineage_prior": [], "cold_start": []}
    # cold starts are far off (0.3 to 0.9 on the log scale), repeats of a lineage close (0.01 to
    # 0.06), alternately over and under
    cold = np.linspace(0.3, 0.9, per_source)
    close = np.linspace(0.01, 0.06, per_source)
    signs = np.resize([1.0, -1.0], per_source)

    # L1's first attempt: nothing known of its hardware or its model type yet, a cold start
    source = _measure(core, "l1-0", "L1", 0.0, PRIOR_HW, float(cold[0]))
    assert source == "cold_start"
    learned[source].append(float(cold[0]))
    # first attempts of model types never seen before, each its own lineage
    for i in range(1, per_source):
        r = float(cold[i] * signs[i])
        source = _measure(core, f"c{i}", f"C{i}", float(i), COLD_RUNS_HW, r, model_type=f"new-{i}")
        assert source == "cold_start"
        learned[source].append(abs(r))
    # L1 again and again on the same hardware: predicted from its own measurements
    for j in range(per_source):
        r = float(close[j] * signs[j])
        source = _measure(core, f"l1-{j + 1}", "L1", 100.0 + j, PRIOR_HW, r)
        assert source == "lineage_prior"
        learned[source].append(abs(r))
    assert (len(learned["lineage_prior"]) + len(learned["cold_start"])) % REFRESH_EVERY == 0

    ranking = core.on_submitted(
        submitted_event("l1-x", "L1", hours(300), candidates=[PRIOR_HW, NEVER_RUN_HW, COLD_RUNS_HW])
    )
    source_of = {hw: str(ranking.source[ranking.hardware.index(hw)]) for hw in ranking.hardware}
    assert source_of[PRIOR_HW] == "lineage_prior"
    assert source_of[NEVER_RUN_HW] == "cold_start"  # a type the model has never seen run
    # L1's type is known by now and so is COLD_RUNS_HW: a source that has learned no residual
    other = source_of[COLD_RUNS_HW]
    assert other in SOURCES and other not in learned

    q_prior = float(np.quantile(learned["lineage_prior"], level))
    q_cold = float(np.quantile(learned["cold_start"], level))
    q_pooled = float(np.quantile(learned["lineage_prior"] + learned["cold_start"], level))
    assert q_prior < 0.07 < 0.3 < q_cold  # the calibration tells the sources apart
    assert _halfwidths(ranking, PRIOR_HW) == pytest.approx((q_prior, q_prior), rel=1e-9)
    assert _halfwidths(ranking, NEVER_RUN_HW) == pytest.approx((q_cold, q_cold), rel=1e-9)
    assert _halfwidths(ranking, COLD_RUNS_HW) == pytest.approx((q_pooled, q_pooled), rel=1e-9)
    # the cold start's interval is wider than the lineage prior's by the learned half-widths
    prior_width, cold_width = (sum(_halfwidths(ranking, hw)) for hw in (PRIOR_HW, NEVER_RUN_HW))
    assert cold_width - prior_width == pytest.approx(2.0 * (q_cold - q_prior), rel=1e-9)


def test_a_source_below_min_samples_takes_the_pooled_halfwidth(hw_catalog: Catalog) -> None:
    core = LeapCore(hw_catalog)
    level, min_samples = core.intervals.level, core.intervals.min_samples
    repeats = 3  # lineage-prior residuals: far fewer than min_samples
    assert repeats < min_samples
    total = REFRESH_EVERY * math.ceil((min_samples + repeats) / REFRESH_EVERY)
    cold = list(np.linspace(0.05, 0.5, total - repeats))
    # lineage P: a cold first attempt, then a few repeats that are very far off
    assert _measure(core, "p0", "P", 0.0, PRIOR_HW, cold[0]) == "cold_start"
    for j in range(repeats):
        assert _measure(core, f"p{j + 1}", "P", 1.0 + j, PRIOR_HW, 3.0) == "lineage_prior"
    for i in range(1, len(cold)):  # first attempts of never-seen model types
        source = _measure(core, f"c{i}", f"C{i}", 10.0 + i, COLD_RUNS_HW, float(cold[i]),
                          model_type=f"new-{i}")  # fmt: skip
        assert source == "cold_start"
    ranking = core.on_submitted(
        submitted_event("p-x", "P", hours(500), candidates=[PRIOR_HW, NEVER_RUN_HW])
    )
    assert [str(s) for s in ranking.source] == ["lineage_prior", "cold_start"]
    # lineage_prior has too few residuals of its own: the pooled quantile, not its own 3.0
    q_pooled = float(np.quantile([*cold, *[3.0] * repeats], level))
    q_cold = float(np.quantile(cold, level))
    assert q_pooled < 3.0
    assert _halfwidths(ranking, PRIOR_HW) == pytest.approx((q_pooled, q_pooled), rel=1e-9)
    assert _halfwidths(ranking, NEVER_RUN_HW) == pytest.approx((q_cold, q_cold), rel=1e-9)
