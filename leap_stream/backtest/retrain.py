"""Snapshot retrains: the batch models of every completion up to a cutoff, saved and loaded back.

A *snapshot* is every learn example (:class:`~leap_stream.core.LearnExample`) whose completion
came strictly before the cutoff. Its examples only exist once a core has joined each completion
to its submission (the target is net of the lineage's offset at that moment), so
:func:`replay_snapshots` replays the history through a :class:`~leap_stream.core.LeapCore`, as
the replay does, and hands out the examples (and the online model) at each cutoff.
:func:`train_snapshot` fits the batch models of :mod:`leap_stream.core.batch` on them, and
:func:`save_models` / :func:`load_models` keep them in a directory:

- ``payload.pkl``: the models (pickle; LightGBM's booster inside as its text format);
- ``manifest.json``: the cutoff, the data range, the feature set, the library versions, the
  payload's sha256 and the models' predictions on probe jobs.

:func:`load_models` refuses a directory whose payload does not hash to the manifest's sha256
(checked before anything is unpickled), whose libraries or feature set differ from this
build's, whose cutoff is not the one expected, or whose models, once loaded, predict otherwise
than when saved; the error names each difference. The sha256 detects a changed or truncated
file, not a forged one: load model directories you trust (pickle runs code).
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from leap_stream.core import LeapCore
from leap_stream.core.batch import (
    BOOSTED_PARAMS,
    BOOSTED_ROUNDS,
    RIVER_PASSES,
    TrainingSet,
    TrainingSetBuilder,
    feature_fingerprint,
    probe_predictions,
    train_boosted,
    train_river,
)
from leap_stream.core.catalog import Catalog
from leap_stream.core.features import FeatureEncoder
from leap_stream.core.hardware import HardwareArrays
from leap_stream.core.model import ThroughputModel
from leap_stream.core.priors import HALF_LIFE_DAYS
from leap_stream.data.history import iter_events

__all__ = [
    "FORMAT",
    "LIBRARIES",
    "MANIFEST_FILE",
    "MODELS",
    "PAYLOAD_FILE",
    "LoadedModels",
    "ModelStoreError",
    "Snapshot",
    "load_models",
    "parse_cutoff",
    "replay_snapshots",
    "retrain",
    "save_models",
    "train_snapshot",
]

FORMAT = "leap-stream-batch-models/1"
MANIFEST_FILE = "manifest.json"
PAYLOAD_FILE = "payload.pkl"
# The batch models a retrain trains, by the names reports and files use.
MODELS = ("river_batch", "lightgbm")
# Libraries whose objects are in the payload: another version may unpickle them differently.
LIBRARIES = ("numpy", "scipy", "river", "lightgbm")


class ModelStoreError(ValueError):
    """A model directory that cannot be loaded as it is; the message names each difference."""


@dataclass(slots=True)
class Snapshot:
    """What :func:`replay_snapshots` hands out at each cutoff.

    ``examples`` holds the learn examples completed since the previous cutoff (all before the
    first); ``online`` is the online model at this cutoff, pickled: the first time-ordered
    pass over every example so far.
    """

    index: int
    cutoff: datetime
    examples: TrainingSet
    online: bytes
    seconds: float = 0.0


def parse_cutoff(text: str) -> datetime:
    """A cutoff from ``YYYY-MM-DD`` or an ISO 8601 date-time; no offset means UTC.

    >>> parse_cutoff("2025-12-01").isoformat(), parse_cutoff("2025-12-01T06:30+02:00").isoformat()
    ('2025-12-01T00:00:00+00:00', '2025-12-01T04:30:00+00:00')
    """
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError as error:
        raise ValueError(f"not a date or ISO 8601 date-time: {text!r}") from error
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def replay_snapshots(
    history: Path,
    catalog: Catalog,
    cutoffs: Sequence[datetime],
    *,
    lineage_half_life_days: float = HALF_LIFE_DAYS,
    batch_rows: int = 65_536,
    strict: bool = False,
    on_event: Callable[[int], None] | None = None,
    on_submitted: Callable[[dict[str, Any]], None] | None = None,
) -> Iterator[Snapshot]:
    """Replay ``history`` through an online core and hand out a :class:`Snapshot` per cutoff.

    The core sees the events as the replay's does (:func:`leap_stream.backtest.replay.replay`:
    submissions remembered, completions joined and learned, idle lineages forgotten at each new
    submission day), so its model and learn examples are the replay's. The submissions are not
    ranked (:meth:`LeapCore.remember`): nothing here reads a ranking, and the model learns the
    same without one. A snapshot is handed out at the
    first event at or after its cutoff (the history is in event-time order): it holds exactly
    the examples completed strictly before it. Reading stops after the last cutoff.

    Parameters
    ----------
    history, catalog
        The history file and the catalog.
    cutoffs
        Ascending, timezone-aware.
    lineage_half_life_days, batch_rows, strict
        As for the replay.
    on_event
        Called with the number of events read so far, every 10,000 (a progress bar).
    on_submitted
        Called with each submission read.
    """
    if list(cutoffs) != sorted(cutoffs):
        raise ValueError("cutoffs must be in ascending order")
    bounds = [cutoff.timestamp() * 1000.0 for cutoff in cutoffs]
    core = LeapCore(catalog, lineage_half_life_days=lineage_half_life_days)
    builder = TrainingSetBuilder(core.hw.index)
    rejects: list[Any] | None = None if strict else []
    k, day, count = 0, None, 0
    began = time.perf_counter()

    def snapshot() -> Snapshot:
        nonlocal began
        taken = Snapshot(k, cutoffs[k], builder.take(), pickle.dumps(core.model), 0.0)
        taken.seconds, began = time.perf_counter() - began, time.perf_counter()
        return taken

    for kind, event in iter_events(history, batch_rows, rejects):
        if rejects:
            rejects.clear()  # the replay reports them; here they are only skipped
        when = event["event_time"]
        now = when.timestamp() * 1000.0
        while k < len(bounds) and now >= bounds[k]:
            yield snapshot()
            k += 1
        if k == len(bounds):
            return
        count += 1
        if on_event is not None and count % 10_000 == 0:
            on_event(count)
        if kind == "submitted":
            if when.date() != day:  # as the replay's session does
                day = when.date()
                core.evict_idle_lineages(now)
            core.remember(event)  # the model learns as if ranked; the rankings go unused
            if on_submitted is not None:
                on_submitted(event)
            continue
        _, example = core.join(event)
        if example is not None:
            core.learn(example)
            builder.add(example)
    while k < len(bounds):  # the history ended first
        yield snapshot()
        k += 1


def train_snapshot(
    training: TrainingSet,
    encoder: FeatureEncoder,
    *,
    online: ThroughputModel | None = None,
    passes: int = RIVER_PASSES,
    boosted_params: Mapping[str, Any] | None = None,
    boosted_rounds: int = BOOSTED_ROUNDS,
    recent: TrainingSet | None = None,
) -> dict[str, Any]:
    """The batch models of one snapshot, by name (:data:`MODELS`); none of an empty one.

    ``online``, the online model at the cutoff, saves the river model's first pass (it is that
    pass); it is updated in place. ``recent``, a window of the snapshot's latest days
    (:meth:`TrainingSet.window`), is all LightGBM and the river model's later passes learn.
    """
    if len(training) == 0 or (recent is not None and len(recent) == 0):
        return {}
    boosted_on = training if recent is None else recent
    return {
        "river_batch": train_river(training, encoder, passes, start=online, later=recent),
        "lightgbm": train_boosted(boosted_on, encoder, boosted_params, boosted_rounds),
    }


def _libraries() -> dict[str, str]:
    versions = {"python": ".".join(platform.python_version_tuple()[:2])}
    for name in LIBRARIES:
        versions[name] = metadata.version(name)
    return versions


def _hardware_digest(encoder: FeatureEncoder) -> str:
    return hashlib.sha256("\n".join(encoder.names).encode()).hexdigest()


def _iso(ms: float | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000.0, UTC).isoformat()


def _describe(
    cutoff: datetime, training: TrainingSet, encoder: FeatureEncoder, settings: Mapping[str, Any]
) -> dict[str, Any]:
    """What the manifest and the payload both record (compared when loading)."""
    times = training.time_ms
    return {
        "cutoff": cutoff.astimezone(UTC).isoformat(),
        "data": {
            "examples": len(training),
            "first_completion": _iso(float(times.min())) if len(times) else None,
            "last_completion": _iso(float(times.max())) if len(times) else None,
            "model_types": len(training.type_counts()),
        },
        "features": {
            "fingerprint": feature_fingerprint(encoder),
            "hardware_types": len(encoder.names),
            "hardware_sha256": _hardware_digest(encoder),
        },
        "settings": dict(settings),
    }


def save_models(
    directory: Path,
    models: Mapping[str, Any],
    *,
    cutoff: datetime,
    training: TrainingSet,
    encoder: FeatureEncoder,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``models`` (trained on ``training``, every completion before ``cutoff``) into
    ``directory`` (created if need be); return the manifest."""
    described = _describe(cutoff, training, encoder, settings or {})
    for name, model in models.items():
        if hasattr(model, "vectoriser"):  # the boosted model's vocabulary: its feature set
            described["features"][f"{name}_vocabulary"] = len(model.vectoriser.vocabulary)
    buffer = io.BytesIO()
    pickle.dump({"described": described, "models": dict(models)}, buffer, protocol=5)
    payload = buffer.getvalue()
    manifest = {
        "format": FORMAT,
        **described,
        "libraries": _libraries(),
        "models": sorted(models),
        "payload": {
            "file": PAYLOAD_FILE,
            "sha256": hashlib.sha256(payload).hexdigest(),
            "bytes": len(payload),
        },
        "probe": {name: probe_predictions(model) for name, model in sorted(models.items())},
        "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / PAYLOAD_FILE).write_bytes(payload)
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


@dataclass(slots=True)
class LoadedModels:
    """Models read back by :func:`load_models`, with their manifest."""

    models: dict[str, Any]
    manifest: dict[str, Any]
    cutoff: datetime = field(init=False)

    def __post_init__(self) -> None:
        self.cutoff = datetime.fromisoformat(self.manifest["cutoff"])


def load_models(
    directory: Path, catalog: Catalog, *, expect_cutoff: datetime | None = None
) -> LoadedModels:
    """Read a directory :func:`save_models` wrote, refusing it when anything does not match.

    Parameters
    ----------
    directory
        The model directory.
    catalog
        The catalog this build ranks with: its features must be the ones the models learned.
    expect_cutoff
        The cutoff the caller wants (None: any).

    Raises
    ------
    ModelStoreError
        Naming every difference found: the payload's sha256, library versions, the feature
        set, the cutoff, the payload's own record of what it holds, or the probe predictions.
    """
    manifest_path = directory / MANIFEST_FILE
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as error:
        raise ModelStoreError(f"{manifest_path}: cannot read the manifest ({error})") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise ModelStoreError(f"{manifest_path}: format {found!r}, this build reads {FORMAT!r}")
    try:  # an edited manifest is refused, not a KeyError
        payload_path = directory / manifest["payload"]["file"]
        saved_sha256, libraries = manifest["payload"]["sha256"], dict(manifest["libraries"])
        features = manifest["features"]
        saved_hardware, saved_fingerprint = features["hardware_sha256"], features["fingerprint"]
        cutoff = datetime.fromisoformat(manifest["cutoff"])
    except (KeyError, TypeError, ValueError) as error:
        raise ModelStoreError(
            f"{manifest_path}: missing or malformed entry ({type(error).__name__}: {error})"
        ) from None
    try:
        payload = payload_path.read_bytes()
    except OSError as error:
        raise ModelStoreError(f"{payload_path}: cannot read the payload ({error})") from error
    digest = hashlib.sha256(payload).hexdigest()
    if digest != saved_sha256:  # before unpickling anything
        raise ModelStoreError(
            f"{payload_path}: sha256 {digest} differs from the manifest's "
            f"{saved_sha256} (the file changed after it was saved)"
        )
    problems = []
    for name, version in _libraries().items():
        saved = libraries.get(name)
        if saved != version:
            problems.append(f"{name} {saved} saved, {version} here")
    encoder = FeatureEncoder(HardwareArrays.from_catalog(catalog))
    if saved_hardware != _hardware_digest(encoder):
        problems.append(
            f"hardware catalog: {features['hardware_types']} types saved, "
            f"{len(encoder.names)} here, or other names or order"
        )
    elif saved_fingerprint != feature_fingerprint(encoder):
        problems.append(
            "feature set: the features this build computes differ from the ones the models "
            "learned (features.py or the catalog's figures changed)"
        )
    if expect_cutoff is not None and cutoff != expect_cutoff:
        problems.append(f"cutoff {cutoff.isoformat()}, expected {expect_cutoff.isoformat()}")
    if problems:
        raise ModelStoreError(f"{directory}: refused: " + "; ".join(problems))
    content = pickle.loads(payload)
    described = content["described"]
    for key in ("cutoff", "data", "features", "settings"):
        if described[key] != manifest[key]:
            problems.append(
                f"{key}: the manifest says {manifest[key]}, the payload {described[key]}"
            )
    models = content["models"]
    if sorted(models) != manifest["models"]:
        problems.append(
            f"models: the manifest lists {manifest['models']}, the payload {sorted(models)}"
        )
    for name, model in sorted(models.items()):
        if probe_predictions(model) != manifest["probe"].get(name):
            problems.append(f"{name}: predicts otherwise than when it was saved")
    if problems:
        raise ModelStoreError(f"{directory}: refused: " + "; ".join(problems))
    return LoadedModels(models, manifest)


def retrain(
    history: Path,
    until: datetime,
    out_dir: Path,
    catalog: Catalog,
    *,
    passes: int = RIVER_PASSES,
    train_days: float | None = None,
    lineage_half_life_days: float = HALF_LIFE_DAYS,
    batch_rows: int = 65_536,
    strict: bool = False,
    on_event: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Train the batch models on every completion of ``history`` before ``until`` (only those
    of its last ``train_days`` days, when set); save them.

    Returns the manifest written to ``out_dir`` (see the module docstring).
    """
    (snapshot,) = replay_snapshots(
        history,
        catalog,
        [until],
        lineage_half_life_days=lineage_half_life_days,
        batch_rows=batch_rows,
        strict=strict,
        on_event=on_event,
    )
    training = snapshot.examples.window(until.timestamp() * 1000.0, train_days)
    if len(training) == 0:
        within = "" if train_days is None else f" in the {train_days:g} days"
        raise ValueError(f"{history}: no succeeded completion{within} before {until.isoformat()}")
    online = pickle.loads(snapshot.online)
    models = train_snapshot(
        snapshot.examples, online.encoder, online=online, passes=passes, recent=training
    )
    settings = {
        "river_passes": passes,
        "train_days": train_days,
        "boosted_params": BOOSTED_PARAMS,
        "boosted_rounds": BOOSTED_ROUNDS,
        "lineage_half_life_days": lineage_half_life_days,
    }
    return save_models(
        out_dir,
        models,
        cutoff=until,
        training=training,
        encoder=online.encoder,
        settings=settings,
    )
