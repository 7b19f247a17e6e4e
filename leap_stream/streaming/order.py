"""The event-time merge: messages of several partitions released in one deterministic order.

A worker reads two co-partitioned topics, and Kafka only orders each partition. Which partition
a fetch delivers first is up to the client, so the same backlog could be processed in different
orders, and an online model that learned in another order is another model. The merge holds
each partition's messages in a queue and releases the smallest head (event time, then job id,
then submissions before completions: the order of a history file) but only while every other
partition either has a head to compare with or is caught up; a partition that is behind holds
the merge back for at most ``max_wait_ms`` without a new message. The result: a backlog (after a
restart, or a trace produced before the worker started) is processed in the same order every
time, and that order is the in-process replay's; a live stream is processed as it arrives.

It is Kafka Streams' stream-time choice (``max.task.idle.ms``) in a few lines of plain Python.

>>> merge = EventTimeMerge(max_wait_ms=100)
>>> merge.assign(["sub-0", "done-0"])
>>> merge.push("done-0", (2, "j1", 1), "j1 completed")
>>> merge.pop(caught_up=lambda source: False, now_ms=0)  # sub-0 may still hold an earlier one
>>> merge.push("sub-0", (1, "j1", 0), "j1 submitted")
>>> merge.pop(caught_up=lambda source: False, now_ms=0), merge.pop(lambda s: True, 0)
('j1 submitted', 'j1 completed')
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any

__all__ = ["FIRST", "EventTimeMerge"]

# The key of a message that needs no ordering (a dead letter): released as soon as it heads
# its queue.
FIRST: tuple[Any, ...] = (float("-inf"),)


class EventTimeMerge:
    """Per-partition queues released smallest key first (see the module docstring)."""

    def __init__(self, max_wait_ms: float = 500.0) -> None:
        self.max_wait_ms = max_wait_ms
        self._queues: dict[Hashable, deque[tuple[tuple[Any, ...], Any]]] = {}
        self._blocked_since: float | None = None

    def assign(self, sources: Iterable[Hashable]) -> None:
        """Take part in the merge from now on (a partition assigned to this worker)."""
        for source in sources:
            self._queues.setdefault(source, deque())

    def revoke(self, sources: Iterable[Hashable]) -> None:
        """Leave the merge, dropping what was queued (it was never processed, nor committed)."""
        for source in sources:
            self._queues.pop(source, None)

    def push(self, source: Hashable, key: tuple[Any, ...], item: Any) -> None:
        """Queue ``item`` of ``source``; keys within a source must not decrease (Kafka order).

        A partition that is behind holds the merge only while nothing arrives: a fetch that
        delivers one partition's long backlog first is no reason to give up on the others.
        """
        self._queues[source].append((key, item))
        self._blocked_since = None

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    def queued(self, source: Hashable) -> int:
        """How many messages of ``source`` wait in the merge."""
        queue = self._queues.get(source)
        return 0 if queue is None else len(queue)

    def pop(self, caught_up: Callable[[Hashable], bool], now_ms: float) -> Any | None:
        """The next item in merge order, or None when the merge must wait for a fetch.

        ``caught_up(source)`` tells whether an empty source has nothing more to deliver now
        (its consumer position is at the end of the partition).
        """
        best: tuple[Any, ...] | None = None
        best_queue: deque[tuple[tuple[Any, ...], Any]] | None = None
        behind = False
        for source, queue in self._queues.items():
            if queue:
                key = queue[0][0]
                if best is None or key < best:
                    best, best_queue = key, queue
            elif not caught_up(source):
                behind = True
        if best_queue is None:
            self._blocked_since = None
            return None
        if behind and best[0] != FIRST[0]:
            if self._blocked_since is None:
                self._blocked_since = now_ms
            if now_ms - self._blocked_since < self.max_wait_ms:
                return None
        self._blocked_since = None
        return best_queue.popleft()[1]
