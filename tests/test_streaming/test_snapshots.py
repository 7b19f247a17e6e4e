"""Model snapshots: a restored model ranks exactly as the one it was taken from."""

from __future__ import annotations

import pytest
from core_fixtures import completed_event, hours, submitted_event

from leap_stream.core import LeapCore
from leap_stream.core.catalog import default_catalog
from leap_stream.data.codec import decode, encode
from leap_stream.streaming.snapshots import SnapshotError, read_snapshot, snapshot_record


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
