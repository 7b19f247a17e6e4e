"""The online model as a ModelSnapshot record: what a restart resumes from, what rankers load.

A snapshot holds what :meth:`LeapCore.learn` changes (the river model, the interval calibration,
the per-type counts), pickled, with the offset of the learn log it has folded up to. The model
is a fold over the learn log, so snapshot + the log from that offset = the model as it was.

>>> from leap_stream.core import LeapCore
>>> from leap_stream.core.catalog import default_catalog
>>> core = LeapCore(default_catalog())
>>> record = snapshot_record(core, learn_topic="leap.learn", learn_offset=0)
>>> record["model_version"], record["log_offsets"]
('online-0', {'leap.learn:0': 0})
>>> state, offset = read_snapshot(record, learn_topic="leap.learn")
>>> offset, type(state["model"]).__name__
(0, 'ThroughputModel')
"""

from __future__ import annotations

import pickle
import platform
import uuid
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from leap_stream.core import LeapCore

__all__ = ["MODEL_KEY", "SnapshotError", "read_snapshot", "snapshot_record"]

MODEL_KEY = b"online"
"""Key of the online model's snapshots on the compacted models topic (the newest one stays)."""

_LIBRARIES = ("river", "numpy")


class SnapshotError(ValueError):
    """A snapshot this process cannot load (another library version, format or catalog)."""


def _library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _LIBRARIES:
        versions[name] = metadata.version(name)
    return versions


def snapshot_record(
    core: LeapCore,
    *,
    learn_topic: str,
    learn_offset: int,
    metrics: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The ModelSnapshot record of ``core``'s model, which has folded the learn log up to
    (not including) ``learn_offset``."""
    return {
        "event_id": str(uuid.uuid4()),
        "event_time": datetime.now(UTC),
        "model_version": core.model_version,
        "model_kind": "online",
        "trained_on_events": core.model.learned,
        "library_versions": _library_versions(),
        "metrics": metrics or {},
        "payload_format": "pickle",
        "payload": pickle.dumps(core.model_state(), protocol=pickle.HIGHEST_PROTOCOL),
        "log_offsets": {f"{learn_topic}:0": learn_offset},
    }


def read_snapshot(record: dict[str, Any], *, learn_topic: str) -> tuple[dict[str, Any], int]:
    """The model state of a ModelSnapshot record, and the learn-log offset to read on from.

    Refuses a snapshot written with other library versions: a pickle carries no
    cross-version guarantee, and a silently different model is worse than a refusal.
    """
    if record["payload_format"] != "pickle":
        raise SnapshotError(f"unknown snapshot payload format {record['payload_format']!r}")
    have = _library_versions()
    differ = {
        name: (record["library_versions"].get(name), have[name])
        for name in _LIBRARIES
        if record["library_versions"].get(name) != have[name]
    }
    if differ:
        raise SnapshotError(
            f"snapshot {record['model_version']} was written with other library versions "
            f"(snapshot, here): {differ}"
        )
    key = f"{learn_topic}:0"
    if key not in record["log_offsets"]:
        raise SnapshotError(f"snapshot {record['model_version']} has no offset of {key}")
    state = pickle.loads(record["payload"])
    return state, record["log_offsets"][key]
