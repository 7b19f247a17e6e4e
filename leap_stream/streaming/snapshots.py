"""Models as ModelSnapshot records, and the ServingDecision that says which one ranks.

The online model's snapshot (key ``online``) is what a restart resumes from and what rankers in
shared mode load. A nightly model (key ``nightly:<name>``, published by ``leap-stream
publish-models``) is a challenger: the learner scores it, and it ranks once the champion/challenger
rule promotes it (a ServingDecision, key ``serving``).

A snapshot holds what :meth:`LeapCore.learn` changes (the river model, the interval calibration,
the per-type and per-pair counts), pickled, with the offset of the learn log it has folded up
to. The model is a fold over the learn log, so snapshot + the log from that offset = the model
as it was.

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
from datetime import UTC, date, datetime
from importlib import metadata
from typing import Any

from leap_stream.core import LeapCore
from leap_stream.core.batch import feature_fingerprint
from leap_stream.core.promotion import Decision

__all__ = [
    "MODEL_KEY",
    "NIGHTLY_PREFIX",
    "SERVING_KEY",
    "SnapshotError",
    "decision_record",
    "nightly_record",
    "read_nightly",
    "read_snapshot",
    "snapshot_record",
]

MODEL_KEY = b"online"
"""Key of the online model's snapshots on the compacted models topic (the newest one stays)."""
NIGHTLY_PREFIX = b"nightly:"
"""Keys of the nightly models: ``nightly:<name>`` (the newest of each name stays)."""
SERVING_KEY = b"serving"
"""Key of the ServingDecision records: which model ranks."""

_LIBRARIES = ("river", "numpy")
# a nightly model may hold a LightGBM booster and scipy matrices besides
_NIGHTLY_LIBRARIES = (*_LIBRARIES, "lightgbm", "scipy")
# library_versions also names the features the model reads (their sha256, feature_fingerprint):
# weights learned on other features (another one-hot value, a new numeric row) load without an
# error and predict nonsense, so they are refused as another library version is
_FEATURES = "features"


class SnapshotError(ValueError):
    """A snapshot this process cannot load (another library version, format or catalog)."""


def _library_versions(names: tuple[str, ...] = _LIBRARIES) -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in names:
        versions[name] = metadata.version(name)
    return versions


def _check_libraries(record: dict[str, Any], names: tuple[str, ...]) -> None:
    """Refuse a payload pickled with other library versions: a pickle carries no cross-version
    guarantee, and a silently different model is worse than a refusal."""
    if record["payload_format"] != "pickle":
        raise SnapshotError(f"unknown snapshot payload format {record['payload_format']!r}")
    have = _library_versions(names)
    differ = {
        name: (record["library_versions"].get(name), have[name])
        for name in names
        if record["library_versions"].get(name) != have[name]
    }
    if differ:
        raise SnapshotError(
            f"snapshot {record['model_version']} was written with other library versions "
            f"(snapshot, here): {differ}"
        )


def _written_with(names: tuple[str, ...], model: Any) -> dict[str, str]:
    """What a record's ``library_versions`` holds: the libraries' versions and the features."""
    return {**_library_versions(names), _FEATURES: feature_fingerprint(model.encoder)}


def _check_features(record: dict[str, Any], model: Any) -> None:
    """Refuse a model whose weights were learned on other features than this code computes."""
    written, here = record["library_versions"].get(_FEATURES), feature_fingerprint(model.encoder)
    if written != here:
        raise SnapshotError(
            f"snapshot {record['model_version']} was learned on other features than this "
            f"version computes (sha256 {str(written)[:12]}, here {here[:12]})"
        )


def snapshot_record(
    core: LeapCore,
    *,
    learn_topic: str,
    learn_offset: int,
    metrics: dict[str, float] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ModelSnapshot record of ``core``'s model, which has folded the learn log up to
    (not including) ``learn_offset``; ``extra`` joins the pickled state (the scoreboard)."""
    state = {**core.model_state(), **(extra or {})}
    return {
        "event_id": str(uuid.uuid4()),
        "event_time": datetime.now(UTC),
        "model_version": core.model_version,
        "model_kind": "online",
        "trained_on_events": core.model.learned,
        "library_versions": _written_with(_LIBRARIES, core.model),
        "metrics": metrics or {},
        "payload_format": "pickle",
        "payload": pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL),
        "log_offsets": {f"{learn_topic}:0": learn_offset},
        "trained_until": None,
    }


def read_snapshot(record: dict[str, Any], *, learn_topic: str) -> tuple[dict[str, Any], int]:
    """The model state of a ModelSnapshot record, and the learn-log offset to read on from.

    Refuses a snapshot written with other library versions or learned on other features.
    """
    _check_libraries(record, _LIBRARIES)
    key = f"{learn_topic}:0"
    if key not in record["log_offsets"]:
        raise SnapshotError(f"snapshot {record['model_version']} has no offset of {key}")
    state = _unpickled(record)
    _check_features(record, state["model"])
    return state, record["log_offsets"][key]


def _unpickled(record: dict[str, Any]) -> Any:
    """A record's payload, unpickled; a payload this version's classes do not load (renamed
    or moved by another version of the same libraries) is refused like any other."""
    try:
        return pickle.loads(record["payload"])
    except Exception as error:  # unpickling can raise anything its classes raise
        raise SnapshotError(
            f"{record['model_version']}'s payload does not load here: "
            f"{type(error).__name__}: {error}"
        ) from error


def nightly_record(name: str, model: Any, *, trained_until: datetime) -> dict[str, Any]:
    """The ModelSnapshot record of nightly model ``name``, trained on every completion before
    ``trained_until`` (key: ``NIGHTLY_PREFIX + name``)."""
    cutoff = trained_until.astimezone(UTC)
    return {
        "event_id": str(uuid.uuid4()),
        "event_time": datetime.now(UTC),
        "model_version": f"{name}-{cutoff:%Y%m%dT%H%MZ}",
        "model_kind": "nightly",
        "trained_on_events": int(model.learned),
        "library_versions": _written_with(_NIGHTLY_LIBRARIES, model),
        "metrics": {},
        "payload_format": "pickle",
        "payload": pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL),
        "log_offsets": {},
        "trained_until": cutoff,
    }


def read_nightly(record: dict[str, Any]) -> tuple[Any, float]:
    """A nightly model record's model and its cutoff (ms since the epoch)."""
    if record["model_kind"] != "nightly" or record.get("trained_until") is None:
        raise SnapshotError(f"{record['model_version']} is not a nightly model with a cutoff")
    _check_libraries(record, _NIGHTLY_LIBRARIES)
    model = _unpickled(record)
    _check_features(record, model)
    return model, record["trained_until"].timestamp() * 1000.0


def decision_record(decision: Decision, *, day: date, version: str) -> dict[str, Any]:
    """The ServingDecision record of the rule's ``decision``, holding from ``day`` on."""
    return {
        "event_id": str(uuid.uuid4()),
        "event_time": datetime.now(UTC),
        "day": day,
        "serving": decision.serving,
        "serving_version": version,
        "promoted": decision.promoted,
        "reason": decision.reason,
        "window_shares": dict(decision.shares),
        "window_attempts": decision.attempts,
    }
