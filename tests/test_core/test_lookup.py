"""Tests of leap_stream.core.lookup (the median table) and core.LookupRanker (its ranking)."""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

import numpy as np
import pytest
from core_fixtures import completed_event, hours, submitted_event

from leap_stream.core import LookupRanker
from leap_stream.core.catalog import Catalog
from leap_stream.core.lookup import LookupTable


def test_median_per_key() -> None:
    table = LookupTable()
    for x in (100.0, 130.0, 110.0, 90.0):
        table.learn_one("bert", "H100-SXM", 8, x)
    table.learn_one("bert", "H100-SXM", 16, 500.0)
    table.learn_one("gpt", "H100-SXM", 8, 7.0)
    assert table.predict_one("bert", "H100-SXM", 8) == 105.0  # median of an even count
    assert table.predict_one("bert", "H100-SXM", 16) == 500.0
    assert table.predict_one("gpt", "H100-SXM", 8) == 7.0
    assert len(table) == 3


def test_the_median_of_two_values_near_the_largest_float_is_finite() -> None:
    table = LookupTable()
    for x in (1.6e308, 1.7e308):
        table.learn_one("bert", "H100-SXM", 8, x)
    assert table.predict_one("bert", "H100-SXM", 8) == pytest.approx(1.65e308)


def test_only_the_most_recent_window_counts() -> None:
    table = LookupTable(window=3)
    for x in (1.0, 2.0, 1000.0, 1000.0, 5.0):
        table.learn_one("bert", "A100-SXM-80GB", 8, x)
    # the window holds 1000, 1000, 5
    assert table.predict_one("bert", "A100-SXM-80GB", 8) == 1000.0
    for x in (6.0, 7.0):
        table.learn_one("bert", "A100-SXM-80GB", 8, x)
    assert table.predict_one("bert", "A100-SXM-80GB", 8) == 6.0  # 5, 6, 7


def test_the_median_is_statistics_median_of_the_window() -> None:
    rng = np.random.default_rng(4)
    table, window = LookupTable(window=8), deque(maxlen=8)
    for _ in range(2000):  # repeats included: one of equal values leaves the window
        x = float(rng.choice([1.0, 2.5, 3.0])) if rng.random() < 0.3 else float(rng.lognormal())
        table.learn_one("bert", "H100-SXM", 8, x)
        window.append(x)
        assert table.predict_one("bert", "H100-SXM", 8) == statistics.median(window)


def test_abstains_where_it_has_no_entry() -> None:
    table = LookupTable()
    assert table.predict_one("bert", "H100-SXM", 8) is None
    table.learn_one("bert", "H100-SXM", 8, 100.0)
    assert table.predict_one("bert", "H100-SXM", 4) is None  # other device count
    assert table.predict_one("bert", "MI300X", 8) is None  # other hardware
    assert table.predict_one("gpt", "H100-SXM", 8) is None  # other model type
    assert np.isnan(table.predict_many("bert", ["H100-SXM"], 4)).all()


@pytest.mark.parametrize("with_index", [False, True])
def test_predict_many_in_candidate_order(with_index: bool) -> None:
    table = LookupTable()
    table.learn_one("bert", "H100-SXM", 8, 100.0)
    table.learn_one("bert", "MI300X", 8, 150.0)
    table.learn_one("bert", "TPU-v5p", 8, 90.0)  # not a candidate below
    candidates = ["MI300X", "L4", "H100-SXM"]
    index = {h: i for i, h in enumerate(candidates)} if with_index else None
    got = table.predict_many("bert", candidates, 8, index)
    assert got.shape == (3,)
    assert got[0] == 150.0 and got[2] == 100.0
    assert np.isnan(got[1])
    for i, h in enumerate(candidates):
        one = table.predict_one("bert", h, 8)
        assert (one is None and np.isnan(got[i])) or got[i] == one


def _submitted(job_id: str, candidates: list[str] | None, h: float = 0.0) -> dict[str, Any]:
    return submitted_event(job_id, "l1", hours(h), candidates=candidates)


def _completed(
    job_id: str, hardware: str, throughput: float | None, h: float, **kw: Any
) -> dict[str, Any]:
    return completed_event(job_id, "l1", hours(h), hardware, throughput=throughput, **kw)


def test_lookup_ranker_abstains_on_first_sight(hw_catalog: Catalog) -> None:
    ranker = LookupRanker(hw_catalog)
    ranking = ranker.on_submitted(_submitted("j1", ["H100-SXM", "MI300X"]))
    assert ranking.abstained
    assert ranking.abstain_reason == "no prediction for any eligible candidate"
    assert np.isnan(ranking.predicted).all()
    assert set(ranking.source.tolist()) == {"lookup"}


def test_lookup_ranker_ranks_by_its_medians(hw_catalog: Catalog) -> None:
    ranker = LookupRanker(hw_catalog)
    ranker.on_submitted(_submitted("j1", ["H100-SXM"]))
    assert ranker.on_completed(_completed("j1", "H100-SXM", 20_000.0, 1))
    ranker.on_submitted(_submitted("j2", ["MI300X"], 2))
    assert ranker.on_completed(_completed("j2", "MI300X", 30_000.0, 3))
    ranking = ranker.on_submitted(_submitted("j3", ["H100-SXM", "L4", "MI300X"], 4))
    assert not ranking.abstained
    # cost per 1k: H100 8 x 6.16 / 20000 > MI300X 8 x 6.0 / 30000; L4 has no entry
    assert ranking.ranked_hardware == ("MI300X", "H100-SXM", "L4")
    assert ranking.ranked_count == 2
    assert ranking.predicted.tolist()[0] == 20_000.0 and ranking.predicted.tolist()[2] == 30_000.0
    assert ranking.model_version == "lookup-2"
    # no candidate list: every catalog type, the same medians at the catalog positions
    every = ranker.on_submitted(_submitted("j4", None, 5))
    assert every.hardware == hw_catalog.names
    known = dict(zip(every.hardware, every.predicted.tolist(), strict=True))
    assert known["H100-SXM"] == 20_000.0 and known["MI300X"] == 30_000.0
    assert np.isnan(known["L4"])
    assert every.top == "MI300X"


def test_lookup_ranker_learns_only_succeeded_attempts_of_pending_jobs(
    hw_catalog: Catalog,
) -> None:
    ranker = LookupRanker(hw_catalog)
    assert not ranker.on_completed(_completed("orphan", "H100-SXM", 5.0, 0))
    ranker.on_submitted(_submitted("j1", ["H100-SXM"], 1))
    assert ranker.on_completed(_completed("j1", "H100-SXM", None, 2, status="failed", steps=3))
    assert len(ranker.table) == 0
    ranker.on_submitted(_submitted("j1b", ["H100-SXM"], 2))
    # a preempted attempt's partial throughput (the schema says null; a producer may not)
    assert ranker.on_completed(_completed("j1b", "H100-SXM", 10.0, 2, status="preempted"))
    assert len(ranker.table) == 0
    assert not ranker.on_completed(_completed("j1", "H100-SXM", 99.0, 3))  # a duplicate
    assert len(ranker.table) == 0
    assert ranker.on_submitted(_submitted("j2", ["H100-SXM"], 4)).abstained


def test_lookup_ranker_reads_the_tables_medians_for_any_candidates(hw_catalog: Catalog) -> None:
    # completions in random order, bert's also on a type the catalog lacks: the ranker's rows in
    # catalog order (resnet's) and the table itself (bert's) give what the table says, for a
    # candidate list and for every catalog type
    rng = np.random.default_rng(5)
    ranker = LookupRanker(hw_catalog)
    hardware = ["H100-SXM", "MI300X", "L4", "NPU-X1"]
    for i in range(60):
        model_type = ["bert", "resnet"][i % 2]
        ran_on = hardware[rng.integers(4 if model_type == "bert" else 3)]
        when = hours(i)
        ranker.on_submitted(
            submitted_event(f"j{i}", "l1", when, candidates=hardware, model_type=model_type)
        )
        throughput = float(rng.uniform(1, 9))
        ranker.on_completed(completed_event(f"j{i}", "l1", when, ran_on, throughput=throughput))
        for probed in ("bert", "resnet"):
            for candidates in (hardware, None):
                probe = submitted_event("p", "l2", when, candidates=candidates, model_type=probed)
                names = hw_catalog.names if candidates is None else candidates
                expected = ranker.table.predict_many(probed, names, 8)
                np.testing.assert_array_equal(ranker.on_submitted(probe).predicted, expected)
                ranker.pending.pop("p")
    assert ranker._off_catalog == {("bert", 8)}
    assert set(ranker._rows) == {("bert", 8), ("resnet", 8)}
