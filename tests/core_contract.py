"""The contract every predictor we ship must keep, as check functions over a small event stream.

Like river's ``checks/common.py``: ``test_core.py`` runs every check in :data:`CHECKS` over
every predictor in its ``PREDICTORS``, so a new predictor cannot skip the rules. A predictor is
anything with ``on_submitted(event, eligibility=None) -> Ranking`` and
``on_completed(event) -> bool`` built from a catalog (:class:`~leap_stream.core.LeapCore`,
:class:`~leap_stream.core.LookupRanker`).

Examples
--------
>>> from leap_stream.core.catalog import default_catalog
>>> from leap_stream.core import LookupRanker
>>> for check in CHECKS:
...     check(LookupRanker, default_catalog())
>>> len(CONTRACT_STREAM) > 10
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from core_fixtures import completed_event, hours, submitted_event

from leap_stream.core.catalog import Catalog
from leap_stream.core.eligibility import Eligibility, EligibilityRules
from leap_stream.core.ranking import Ranking
from leap_stream.data import codec

__all__ = ["CHECKS", "CONTRACT_STREAM", "Predictor", "PredictorFactory"]


class Predictor(Protocol):
    """What the replay and the stream processors call."""

    def on_submitted(
        self, event: dict[str, Any], eligibility: Eligibility | None = None
    ) -> Ranking: ...

    def on_completed(self, event: dict[str, Any]) -> bool: ...


PredictorFactory = Callable[[Catalog], Predictor]

_TWO = ["H100-SXM", "MI300X"]

# Submissions of every shape (every catalog type, a candidate list with an unknown name,
# nothing eligible, an unknown framework, a repeat of a lineage), with completions between
# them so learning predictors have learned something by the later ones.
CONTRACT_STREAM: list[tuple[str, dict[str, Any]]] = [
    ("submitted", submitted_event("c1", "A", hours(0), candidates=_TWO)),
    ("completed", completed_event("c1", "A", hours(1), "H100-SXM", throughput=20_000.0)),
    ("submitted", submitted_event("c2", "A", hours(2), candidates=None)),
    ("submitted", submitted_event("c3", "B", hours(3), candidates=["nope", "MI300X", "K80"])),
    ("completed", completed_event("c2", "A", hours(4), "MI300X", throughput=31_000.0)),
    ("completed", completed_event("c3", "B", hours(5), "MI300X", throughput=None,
                                  status="preempted", steps=40)),
    ("submitted", submitted_event("c4", "C", hours(6), candidates=["K80", "nope"])),
    ("submitted", submitted_event("c5", "D", hours(7), candidates=_TWO, framework="mxnet")),
    ("submitted", submitted_event("c6", "A", hours(8), candidates=["MI300X", "H100-SXM", "L4"])),
    ("completed", completed_event("c6", "A", hours(9), "L4", throughput=4_000.0)),
    ("submitted", submitted_event("c7", "E", hours(10), candidates=None, model_type="vgg-16")),
    ("completed", completed_event("c4", "C", hours(11), "K80", throughput=None,
                                  status="failed", steps=0)),
    ("submitted", submitted_event("c8", "A", hours(12), candidates=["L4", "H100-SXM"])),
]  # fmt: skip


def _rankings(
    factory: PredictorFactory, catalog: Catalog
) -> list[tuple[dict[str, Any], Eligibility, Ranking]]:
    """Run the stream; each submission with an independent eligibility check and its ranking."""
    predictor = factory(catalog)
    rules = EligibilityRules(catalog)
    out = []
    for kind, event in CONTRACT_STREAM:
        if kind == "submitted":
            out.append((event, rules.check(event), predictor.on_submitted(event)))
        else:
            predictor.on_completed(event)
    return out


def check_ranking_covers_the_candidates(factory: PredictorFactory, catalog: Catalog) -> None:
    """A ranking lists the submission's candidates (every catalog type when None) once each."""
    for event, _, ranking in _rankings(factory, catalog):
        listed = event["candidate_hardware"]
        expected = catalog.names if listed is None else tuple(listed)
        assert isinstance(ranking, Ranking), event["job_id"]
        assert ranking.hardware == expected, event["job_id"]
        n = len(expected)
        assert sorted(ranking.order.tolist()) == list(range(n)), event["job_id"]
        for array in (ranking.eligible, ranking.predicted, ranking.price, ranking.cost_per_1k):
            assert len(array) == n, event["job_id"]
        assert ranking.job_id == event["job_id"] and ranking.lineage_id == event["lineage_id"]


def check_eligibility_is_the_rules(factory: PredictorFactory, catalog: Catalog) -> None:
    """The ranking's eligible flags and reasons are the eligibility rules' own."""
    for event, check, ranking in _rankings(factory, catalog):
        np.testing.assert_array_equal(ranking.eligible, check.eligible, err_msg=event["job_id"])
        reasons = tuple(ranking.reasons(i) for i in range(len(check.names)))
        assert reasons == check.reasons, event["job_id"]


def check_never_ranks_an_ineligible_candidate(factory: PredictorFactory, catalog: Catalog) -> None:
    """Ranked candidates (the first ``ranked_count`` of ``order``) are eligible and predicted."""
    for event, _, ranking in _rankings(factory, catalog):
        ranked = ranking.order[: ranking.ranked_count]
        assert ranking.eligible[ranked].all(), event["job_id"]
        assert np.isfinite(ranking.predicted[ranked]).all(), event["job_id"]
        assert np.isfinite(ranking.cost_per_1k[ranked]).all(), event["job_id"]
        unranked = ranking.order[ranking.ranked_count :]
        assert not (ranking.eligible[unranked] & np.isfinite(ranking.predicted[unranked])).any()
        if not ranking.abstained:
            assert ranking.top == ranking.hardware[ranked[0]]


def check_abstains_only_when_nothing_is_rankable(
    factory: PredictorFactory, catalog: Catalog
) -> None:
    """Abstain exactly when no candidate is eligible or no eligible one has a prediction."""
    saw_abstention = False
    for event, check, ranking in _rankings(factory, catalog):
        rankable = check.eligible & np.isfinite(ranking.predicted)
        assert ranking.abstained == (not rankable.any()), event["job_id"]
        assert (ranking.top is None) == ranking.abstained
        if not check.eligible.any():
            saw_abstention = True
            assert ranking.abstain_reason is not None
            assert ranking.abstain_reason.startswith("no eligible candidate: "), event["job_id"]
    assert saw_abstention  # the stream does exercise it


def check_record_is_a_valid_hardware_ranking(factory: PredictorFactory, catalog: Catalog) -> None:
    """Every ranking's record encodes as leap.v1.HardwareRanking and decodes back."""
    for event, _, ranking in _rankings(factory, catalog):
        record = ranking.record()
        decoded = codec.decode(codec.encode("HardwareRanking", record))
        assert decoded["job_id"] == event["job_id"]
        assert [c["hardware_type"] for c in decoded["candidates"]] == list(ranking.ranked_hardware)
        ranks = [c["rank"] for c in decoded["candidates"]]
        k = ranking.ranked_count
        assert ranks == [*range(1, k + 1), *[None] * (len(ranks) - k)]


def check_unknown_and_repeated_completions_return_false(
    factory: PredictorFactory, catalog: Catalog
) -> None:
    """on_completed is False for a job never submitted, and for a second completion of one."""
    predictor = factory(catalog)
    orphan = completed_event("ghost", "G", hours(0), "H100-SXM", throughput=1_000.0)
    assert predictor.on_completed(orphan) is False
    predictor.on_submitted(submitted_event("j1", "G", hours(1), candidates=_TWO))
    done = completed_event("j1", "G", hours(2), "H100-SXM", throughput=1_000.0)
    assert predictor.on_completed(done) is True
    assert predictor.on_completed(done) is False


def check_a_ranking_is_not_changed_by_later_events(
    factory: PredictorFactory, catalog: Catalog
) -> None:
    """A returned ranking is a snapshot: learning from later completions does not touch it."""
    predictor = factory(catalog)
    first = predictor.on_submitted(submitted_event("j1", "S", hours(0), candidates=_TWO))
    before = (first.predicted.copy(), first.order.copy(), first.cost_per_1k.copy())
    predictor.on_completed(completed_event("j1", "S", hours(1), "H100-SXM", throughput=9e3))
    predictor.on_submitted(submitted_event("j2", "S", hours(2), candidates=_TWO))
    np.testing.assert_array_equal(first.predicted, before[0])
    np.testing.assert_array_equal(first.order, before[1])
    np.testing.assert_array_equal(first.cost_per_1k, before[2])


def check_a_given_eligibility_is_used(factory: PredictorFactory, catalog: Catalog) -> None:
    """Passing the submission's eligibility (as the replay does) gives the same ranking."""
    rules = EligibilityRules(catalog)
    event = submitted_event("j1", "S", hours(0), candidates=["nope", *_TWO])
    a = factory(catalog).on_submitted(event)
    b = factory(catalog).on_submitted(event, rules.check(event))
    assert a.ranked_hardware == b.ranked_hardware
    np.testing.assert_array_equal(a.predicted, b.predicted)


CHECKS: list[Callable[[PredictorFactory, Catalog], None]] = [
    check_ranking_covers_the_candidates,
    check_eligibility_is_the_rules,
    check_never_ranks_an_ineligible_candidate,
    check_abstains_only_when_nothing_is_rankable,
    check_record_is_a_valid_hardware_ranking,
    check_unknown_and_repeated_completions_return_false,
    check_a_ranking_is_not_changed_by_later_events,
    check_a_given_eligibility_is_used,
]
