"""The event-time merge: deterministic order across partitions, bounded waits."""

from __future__ import annotations

from leap_stream.streaming.order import FIRST, EventTimeMerge


def _drain(merge: EventTimeMerge, caught_up=lambda s: True, now: float = 0.0) -> list:
    out = []
    while (item := merge.pop(caught_up, now)) is not None:
        out.append(item)
    return out


def test_releases_the_smallest_head_whatever_order_the_partitions_were_fetched_in() -> None:
    events = {"a": [(1, "a1"), (4, "a4"), (6, "a6")], "b": [(2, "b2"), (3, "b3"), (5, "b5")]}
    orders = []
    for first in ("a", "b"):
        merge = EventTimeMerge(max_wait_ms=100)
        merge.assign(["a", "b"])
        for source in (first, "b" if first == "a" else "a"):
            for key, item in events[source]:
                merge.push(source, (key,), item)
        orders.append(_drain(merge))
    assert orders[0] == orders[1] == ["a1", "b2", "b3", "a4", "b5", "a6"]


def test_a_partition_that_is_behind_holds_the_merge_until_max_wait_without_news() -> None:
    merge = EventTimeMerge(max_wait_ms=100)
    merge.assign(["a", "b"])
    merge.push("a", (5,), "a5")
    behind = lambda source: source != "b"  # noqa: E731 - b has more to deliver
    assert merge.pop(behind, now_ms=0) is None
    assert merge.pop(behind, now_ms=99) is None
    merge.push("a", (6,), "a6")  # news: the wait starts again
    assert merge.pop(behind, now_ms=150) is None
    assert merge.pop(behind, now_ms=250) == "a5"  # 100 ms without news: go on
    assert merge.pop(lambda s: True, now_ms=250) == "a6"


def test_a_caught_up_partition_does_not_hold_the_merge() -> None:
    merge = EventTimeMerge(max_wait_ms=10_000)
    merge.assign(["a", "b"])
    merge.push("a", (5,), "a5")
    assert merge.pop(lambda source: True, now_ms=0) == "a5"


def test_a_dead_letter_goes_as_soon_as_it_heads_its_queue() -> None:
    merge = EventTimeMerge(max_wait_ms=10_000)
    merge.assign(["a", "b"])
    merge.push("a", FIRST, "bad")
    merge.push("a", (7,), "a7")
    behind = lambda source: False  # noqa: E731
    assert merge.pop(behind, now_ms=0) == "bad"
    assert merge.pop(behind, now_ms=0) is None  # a7 still waits for b


def test_revoked_partitions_leave_the_merge_with_what_they_queued() -> None:
    merge = EventTimeMerge(max_wait_ms=10_000)
    merge.assign(["a", "b"])
    merge.push("a", (1,), "a1")
    merge.push("b", (2,), "b2")
    merge.revoke(["a"])
    assert (len(merge), merge.queued("a")) == (1, 0)
    assert _drain(merge, caught_up=lambda s: False) == ["b2"]
