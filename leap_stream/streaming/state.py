"""Partition-local state that survives restarts: dicts whose writes go to a changelog topic.

:class:`~leap_stream.core.LeapCore` keeps a lineage's prior and its pending submissions in
injected mappings. In the service they are :class:`ChangelogMap` objects: plain dicts that also
remember, per input partition, which keys changed since the last transaction. The worker writes
those changes to the compacted state topic (partition p for input partition p) in the same
Kafka transaction as the rankings and the input offsets, so state and progress never disagree,
and a restarted worker reads its partitions' state back before it processes anything.

Values travel pickled: they are the core's own plain data (dicts, lists, floats, datetimes)
and the topic is internal to the service.

>>> pending = ChangelogMap("pending")
>>> pending.partition = 3
>>> pending["job-1"] = {"positions": [0, 2]}
>>> del pending["job-1"]
>>> pending["job-2"] = {"positions": [1]}
>>> [(p, key, value is None) for p, key, value in pending.drain()]
[(3, b'pending/job-1', True), (3, b'pending/job-2', False)]
>>> pending.drain()
[]
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any

__all__ = ["ChangelogMap", "decode_value", "encode_value"]

_DELETED = object()


def encode_value(value: Any) -> bytes:
    """A state value as changelog bytes."""
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def decode_value(data: bytes) -> Any:
    """Changelog bytes back to the state value (only ever read from the service's own topic)."""
    return pickle.loads(data)


class ChangelogMap(MutableMapping[str, Any]):
    """A dict of one kind of state (``name``), its changes remembered per input partition.

    Set :attr:`partition` to the input partition of the message being processed: a new key
    belongs to it. A key keeps the partition it was first written under (a lineage always
    lands on one partition).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.partition = 0
        self._data: dict[str, Any] = {}
        self._partition_of: dict[str, int] = {}
        self._changed: dict[str, int] = {}  # key -> partition, in order of first change
        self._prefix = f"{name}/"

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:  # the hot path: skip the ABC's
        return self._data.get(key, default)

    def __setitem__(self, key: str, value: Any) -> None:
        partition = self._partition_of.setdefault(key, self.partition)
        self._data[key] = value
        self._changed[key] = partition

    def __delitem__(self, key: str) -> None:
        del self._data[key]
        self._changed[key] = self._partition_of.pop(key)

    def pop(self, key: str, default: Any = _DELETED) -> Any:
        if key in self._data:
            value = self._data[key]
            del self[key]
            return value
        if default is _DELETED:
            raise KeyError(key)
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def drain(self) -> list[tuple[int, bytes, bytes | None]]:
        """The changes since the last drain as ``(partition, key, value or None to delete)``."""
        changes = [
            (
                partition,
                (self._prefix + key).encode(),
                encode_value(self._data[key]) if key in self._data else None,
            )
            for key, partition in self._changed.items()
        ]
        self._changed.clear()
        return changes

    def restore(self, partition: int, key: bytes, value: bytes | None) -> bool:
        """Apply one changelog record of ``partition``; False when it is another map's."""
        text = key.decode()
        if not text.startswith(self._prefix):
            return False
        name = text[len(self._prefix) :]
        if value is None:
            self._data.pop(name, None)
            self._partition_of.pop(name, None)
        else:
            self._data[name] = decode_value(value)
            self._partition_of[name] = partition
        return True

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop the keys of partitions this worker no longer owns (after a rebalance)."""
        gone = set(partitions)
        for key in [k for k, p in self._partition_of.items() if p in gone]:
            del self._data[key]
            del self._partition_of[key]
            self._changed.pop(key, None)
