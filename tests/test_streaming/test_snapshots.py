"""Model snapshots: a restored model ranks exactly as the one it was taken from."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest
from core_fixtures import completed_event, hours, submitted_event

from leap_stream.core import LeapCore, features
from leap_stream.core.batch import probe_predictions
from leap_stream.core.catalog import default_catalog
from leap_stream.core.promotion import PromotionRule
from leap_stream.data.codec import decode, encode
from leap_stream.streaming.snapshots import (
    SnapshotError,
    decision_record,
    nightly_record,
    read_nightly,
    read_snapshot,
    snapshot_record,
)


def _trained_core() -> LeapCore:
    core = LeapCore(default_catalog())
    for i in range(60):
        core.on_submitted(submitted_event(f"j{i}", f"l{i % 7}", hours(i)))
        core.on_completed(
            completed_event(
                f"j{i}", f"l{i % 7}", hours(i + 1), "H100-SXM", throughput=1000.0 + 37 * i
            )
        )
    return core


def _learn_some(core: LeapCore, start: int, count: int) -> None:
    for i in range(start, start + count):
        core.on_submitted(submitted_event(f"k{i}", f"m{i % 3}", hours(200 + i)))
        core.on_completed(
            completed_event(f"k{i}", f"m{i % 3}", hours(200.5 + i), "H100-SXM", throughput=80.0 + i)
        )


@pytest.mark.parametrize("old_snapshot", [False, True], ids=["second_pass", "older_snapshot"])
def test_a_restored_snapshot_carries_the_examples_awaiting_their_second_pass(
    old_snapshot: bool,
) -> None:
    core = LeapCore(default_catalog(), second_pass_delay=4)
    _learn_some(core, 0, 6)  # two learned twice, four awaiting their second pass
    record = decode(encode("ModelSnapshot", snapshot_record(core, learn_topic="t", learn_offset=6)))
    state, _ = read_snapshot(record, learn_topic="t")
    if old_snapshot:  # written before the second pass existed: those four are never relearned
        del state["second_pass"]
    # the lineages' priors live in the worker's tables, not in the snapshot
    restored = LeapCore(default_catalog(), second_pass_delay=4, priors=copy.deepcopy(core.priors))
    restored.load_model_state(state)
    for c in (core, restored):
        _learn_some(c, 6, 5)
    same = restored.model.regressor._weights.to_dict() == core.model.regressor._weights.to_dict()
    assert same != old_snapshot
    assert restored.model.learned == core.model.learned == 11


def test_a_restored_snapshot_ranks_and_learns_like_the_original() -> None:
    core = _trained_core()
    record = decode(encode("ModelSnapshot", snapshot_record(core, learn_topic="t", learn_offset=9)))
    state, offset = read_snapshot(record, learn_topic="t")
    restored = LeapCore(default_catalog())
    restored.load_model_state(state)
    assert offset == 9 and record["model_version"] == restored.model_version == core.model_version
    probe = submitted_event("probe", "new", hours(100))
    assert restored.on_submitted(probe).record() == core.on_submitted(probe).record()
    done = completed_event("probe", "new", hours(101), "H100-SXM", throughput=900.0)
    core.on_completed(done)
    restored.on_completed(done)
    assert dict(restored.model.regressor._weights) == dict(core.model.regressor._weights)


def test_a_snapshot_of_other_library_versions_is_refused() -> None:
    record = snapshot_record(_trained_core(), learn_topic="t", learn_offset=0)
    record["library_versions"]["river"] = "0.0.1"
    with pytest.raises(SnapshotError, match="other library versions"):
        read_snapshot(record, learn_topic="t")
    fresh = snapshot_record(LeapCore(default_catalog()), learn_topic="t", learn_offset=0)
    with pytest.raises(SnapshotError, match="no offset"):
        read_snapshot(fresh, learn_topic="other")


def test_a_model_learned_on_other_features_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    core = _trained_core()
    online = snapshot_record(core, learn_topic="t", learn_offset=0)
    cutoff = datetime(2026, 3, 2, tzinfo=UTC)
    nightly = nightly_record("river_batch", core.model, trained_until=cutoff)
    read_snapshot(online, learn_topic="t")  # this version's own features: loads
    # a version whose one-hots carry other values reads the same weights differently
    monkeypatch.setattr(features, "ONEHOT_VALUES", (1.0,) * len(features.ONEHOT_VALUES))
    with pytest.raises(SnapshotError, match="other features"):
        read_snapshot(online, learn_topic="t")
    with pytest.raises(SnapshotError, match="other features"):
        read_nightly(nightly)


def test_a_payload_whose_classes_do_not_load_here_is_refused() -> None:
    # what another version that renamed the model's class leaves (protocol 0, by hand)
    renamed = b"cleap_stream.core.model\nThroughputModelRenamed\n."
    online = snapshot_record(LeapCore(default_catalog()), learn_topic="t", learn_offset=0)
    with pytest.raises(SnapshotError, match="payload does not load here: AttributeError"):
        read_snapshot({**online, "payload": renamed}, learn_topic="t")
    cutoff = datetime(2026, 3, 2, tzinfo=UTC)
    nightly = nightly_record("river_batch", _trained_core().model, trained_until=cutoff)
    with pytest.raises(SnapshotError, match="payload does not load here: ModuleNotFoundError"):
        read_nightly({**nightly, "payload": b"cleap_stream.gone\nModel\n."})


def test_a_nightly_model_travels_with_its_cutoff_and_predicts_the_same() -> None:
    model = _trained_core().model
    cutoff = datetime(2026, 3, 2, tzinfo=UTC)
    record = decode(
        encode("ModelSnapshot", nightly_record("river_batch", model, trained_until=cutoff))
    )
    assert record["model_version"] == "river_batch-20260302T0000Z"
    assert (record["model_kind"], record["trained_on_events"]) == ("nightly", model.learned)
    loaded, cutoff_ms = read_nightly(record)
    assert cutoff_ms == cutoff.timestamp() * 1000.0
    assert probe_predictions(loaded) == probe_predictions(model)


def test_a_nightly_model_of_other_libraries_or_without_a_cutoff_is_refused() -> None:
    model = _trained_core().model
    record = nightly_record("lightgbm", model, trained_until=datetime(2026, 3, 2, tzinfo=UTC))
    stale = {**record, "library_versions": {**record["library_versions"], "lightgbm": "0.1"}}
    with pytest.raises(SnapshotError, match="other library versions"):
        read_nightly(stale)
    online = snapshot_record(_trained_core(), learn_topic="t", learn_offset=0)
    with pytest.raises(SnapshotError, match="not a nightly model"):
        read_nightly(online)


def test_a_serving_decision_record_says_who_serves_and_why() -> None:
    decision = PromotionRule(margin=0.01, window_days=1, min_attempts=10).decide(
        "online", [{"online": (60, 100), "lightgbm": (70, 100)}]
    )
    day = datetime(2026, 3, 3, tzinfo=UTC).date()
    record = decode(encode("ServingDecision", decision_record(decision, day=day, version="v7")))
    assert (record["serving"], record["serving_version"], record["promoted"]) == (
        "lightgbm", "v7", True,
    )  # fmt: skip
    assert record["day"] == day and record["window_attempts"] == 100
    assert record["window_shares"] == {"lightgbm": 0.7, "online": 0.6}
