"""ChangelogMap: a dict whose changes are written per input partition and read back."""

from __future__ import annotations

from datetime import UTC, datetime

from leap_stream.streaming.state import ChangelogMap


def test_changes_carry_the_partition_a_key_was_first_written_under() -> None:
    priors = ChangelogMap("prior")
    priors.partition = 2
    priors["lin-1"] = {"n": 1}
    priors.partition = 0
    priors["lin-1"] = {"n": 2}  # a lineage lives on one partition
    priors["lin-2"] = {"n": 1}
    changes = priors.drain()
    assert [(p, k) for p, k, _ in changes] == [(2, b"prior/lin-1"), (0, b"prior/lin-2")]
    assert priors.drain() == []


def test_draining_and_restoring_rebuilds_the_same_state() -> None:
    pending = ChangelogMap("pending")
    when = datetime(2025, 6, 1, tzinfo=UTC)
    for i in range(5):
        pending.partition = i % 2
        pending[f"job-{i}"] = {"job": {"event_time": when}, "base": [0.5, float(i)]}
    del pending["job-3"]
    assert pending.pop("job-4")["base"] == [0.5, 4.0]
    assert pending.pop("missing", None) is None
    log = pending.drain()

    restored = ChangelogMap("pending")
    other = ChangelogMap("prior")
    for partition, key, value in log:
        assert not other.restore(partition, key, value)  # another map's records
        assert restored.restore(partition, key, value)
    assert dict(restored) == dict(pending)
    assert restored.drain() == []  # restoring is not a change


def test_forgetting_partitions_drops_their_keys_only() -> None:
    state = ChangelogMap("prior")
    for partition in (0, 1, 2):
        state.partition = partition
        state[f"lin-{partition}"] = partition
    state.forget([0, 2])
    assert dict(state) == {"lin-1": 1}
