"""Tests of ``leap-stream retrain`` (leap_stream.backtest.retrain): the saved batch models
record what they were trained on, load back to the same predictions, and refuse to load when
anything they record does not match."""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from leap_stream import cli
from leap_stream.backtest import retrain as retrain_module
from leap_stream.backtest.nightly import plan_cutoffs
from leap_stream.backtest.retrain import (
    MANIFEST_FILE,
    PAYLOAD_FILE,
    ModelStoreError,
    load_models,
    replay_snapshots,
    train_snapshot,
)
from leap_stream.core import LeapCore
from leap_stream.core.catalog import Catalog
from leap_stream.data.fleet import FleetConfig
from leap_stream.data.history import iter_events

FLEET = FleetConfig(days=4, jobs_per_day=300, seed=21)


@pytest.fixture(scope="module")
def fleet(generated_fleet: Callable[[FleetConfig], Path]) -> Path:
    return generated_fleet(FLEET)


@pytest.fixture(scope="module")
def saved(fleet: Path) -> tuple[Path, datetime]:
    """The command line's model directory, at the last day's midnight."""
    cutoff = plan_cutoffs(fleet / "history.parquet", 1)[0]
    out = fleet / "models"
    result = CliRunner().invoke(
        cli.app,
        ["retrain", str(fleet / "history.parquet"), "--until", cutoff.date().isoformat(),
         "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "payload sha256" in result.output
    return out, cutoff


def _jobs(fleet: Path, n: int = 60) -> list[dict[str, Any]]:
    jobs = []
    for kind, event in iter_events(fleet / "history.parquet"):
        if kind == "submitted":
            jobs.append(event)
        if len(jobs) == n:
            break
    return jobs


def _copy(saved: tuple[Path, datetime], tmp_path: Path) -> Path:
    target = tmp_path / "models"
    shutil.copytree(saved[0], target)
    return target


def test_the_manifest_records_cutoff_data_features_libraries_and_sha256(
    saved: tuple[Path, datetime],
) -> None:
    out, cutoff = saved
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert manifest["cutoff"] == cutoff.isoformat()
    assert datetime.fromisoformat(manifest["data"]["last_completion"]) < cutoff
    assert manifest["data"]["examples"] > 500
    assert len(manifest["features"]["fingerprint"]) == 64
    assert set(manifest["libraries"]) == {"python", "numpy", "scipy", "river", "lightgbm"}
    payload = (out / PAYLOAD_FILE).read_bytes()
    assert manifest["payload"]["sha256"] == hashlib.sha256(payload).hexdigest()
    assert manifest["models"] == ["lightgbm", "river_batch"]


def test_saved_models_load_back_to_the_same_predictions(
    saved: tuple[Path, datetime], fleet: Path, hw_catalog: Catalog
) -> None:
    out, cutoff = saved
    loaded = load_models(out, hw_catalog, expect_cutoff=cutoff)
    (snapshot,) = replay_snapshots(fleet / "history.parquet", hw_catalog, [cutoff])
    online = pickle.loads(snapshot.online)
    trained = train_snapshot(snapshot.examples, online.encoder, online=online)
    for job in _jobs(fleet):
        for name in ("river_batch", "lightgbm"):
            model, again = trained[name], loaded.models[name]
            np.testing.assert_array_equal(
                again.predict_many(again.encoder.job(job)),
                model.predict_many(model.encoder.job(job)),
            )


def test_the_snapshot_holds_the_model_a_ranking_replay_learns(
    fleet: Path, hw_catalog: Catalog
) -> None:
    """The snapshot pass remembers submissions without ranking them: the model must be the one
    a replay that ranks every submission learns, weight for weight."""
    cutoff = plan_cutoffs(fleet / "history.parquet", 1)[0]
    (snapshot,) = replay_snapshots(fleet / "history.parquet", hw_catalog, [cutoff])
    ranked, day = LeapCore(hw_catalog), None
    for kind, event in iter_events(fleet / "history.parquet"):
        if event["event_time"] >= cutoff:
            break
        if kind == "submitted":
            if event["event_time"].date() != day:
                day = event["event_time"].date()
                ranked.evict_idle_lineages(event["event_time"].timestamp() * 1000.0)
            ranked.on_submitted(event)
        else:
            ranked.on_completed(event)
    remembered = pickle.loads(snapshot.online)
    assert remembered.learned == ranked.model.learned > 0
    assert remembered.regressor._weights.to_dict() == ranked.model.regressor._weights.to_dict()
    for job in _jobs(fleet):
        np.testing.assert_array_equal(
            remembered.predict_many(remembered.encoder.job(job)),
            ranked.model.predict_many(ranked.model.encoder.job(job)),
        )


def test_a_changed_payload_is_refused_before_it_is_read(
    saved: tuple[Path, datetime], tmp_path: Path, hw_catalog: Catalog
) -> None:
    models = _copy(saved, tmp_path)
    payload = bytearray((models / PAYLOAD_FILE).read_bytes())
    payload[len(payload) // 2] ^= 0xFF
    (models / PAYLOAD_FILE).write_bytes(bytes(payload))
    with pytest.raises(ModelStoreError, match=r"sha256 .* differs .* changed after it was saved"):
        load_models(models, hw_catalog)


def test_a_manifest_that_misstates_the_payload_is_refused(
    saved: tuple[Path, datetime], tmp_path: Path, hw_catalog: Catalog
) -> None:
    models = _copy(saved, tmp_path)
    manifest = json.loads((models / MANIFEST_FILE).read_text())
    manifest["cutoff"] = "2030-01-01T00:00:00+00:00"
    (models / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ModelStoreError, match="cutoff: the manifest says 2030-01-01"):
        load_models(models, hw_catalog)


@pytest.mark.parametrize("edit", ["libraries", "features", "payload", "a list"])
def test_a_manifest_missing_an_entry_is_refused(
    saved: tuple[Path, datetime], tmp_path: Path, hw_catalog: Catalog, edit: str
) -> None:
    models = _copy(saved, tmp_path)
    manifest = json.loads((models / MANIFEST_FILE).read_text())
    if edit == "a list":
        manifest = [manifest]
    else:
        del manifest[edit]
    (models / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ModelStoreError, match=r"manifest\.json: (missing or malformed|format)"):
        load_models(models, hw_catalog)


def test_another_cutoff_than_the_one_expected_is_refused(
    saved: tuple[Path, datetime], hw_catalog: Catalog
) -> None:
    out, cutoff = saved
    with pytest.raises(ModelStoreError, match=r"cutoff .* expected"):
        load_models(out, hw_catalog, expect_cutoff=cutoff.replace(year=cutoff.year + 1))


def test_other_library_versions_are_refused(
    saved: tuple[Path, datetime], hw_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    versions = retrain_module._libraries()
    monkeypatch.setattr(
        retrain_module, "_libraries", lambda: {**versions, "lightgbm": "0.0.1", "river": "0.1"}
    )
    with pytest.raises(ModelStoreError) as refused:
        load_models(saved[0], hw_catalog)
    message = str(refused.value)
    assert f"lightgbm {versions['lightgbm']} saved, 0.0.1 here" in message
    assert f"river {versions['river']} saved, 0.1 here" in message


def test_another_catalog_or_feature_set_is_refused(
    saved: tuple[Path, datetime], hw_catalog: Catalog
) -> None:
    fewer = Catalog(list(hw_catalog)[:-1])
    with pytest.raises(ModelStoreError, match="hardware catalog"):
        load_models(saved[0], fewer)
    first = next(iter(hw_catalog))
    faster = first.model_copy(update={"memory_bw_tbps": first.memory_bw_tbps * 2})
    changed = Catalog([faster, *list(hw_catalog)[1:]])
    with pytest.raises(ModelStoreError, match="feature set"):
        load_models(saved[0], changed)


def test_train_days_trains_on_the_last_days_only(
    saved: tuple[Path, datetime], fleet: Path, tmp_path: Path
) -> None:
    out, cutoff = saved
    result = CliRunner().invoke(
        cli.app,
        ["retrain", str(fleet / "history.parquet"), "--until", cutoff.date().isoformat(),
         "--out", str(tmp_path / "window"), "--train-days", "1.5"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    window = json.loads((tmp_path / "window" / MANIFEST_FILE).read_text())
    full = json.loads((out / MANIFEST_FILE).read_text())
    first = datetime.fromisoformat(window["data"]["first_completion"])
    assert first >= cutoff - timedelta(days=1.5)
    assert datetime.fromisoformat(full["data"]["first_completion"]) < cutoff - timedelta(days=2)
    assert 0 < window["data"]["examples"] < full["data"]["examples"]
    assert window["settings"]["train_days"] == 1.5 and full["settings"]["train_days"] is None
    assert window["probe"] != full["probe"]  # other data, other models


def test_retrain_refuses_a_cutoff_before_any_completion(fleet: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli.app,
        ["retrain", str(fleet / "history.parquet"), "--until", "2000-01-01",
         "--out", str(tmp_path / "none")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "no succeeded completion before 2000-01-01" in result.output
    result = CliRunner().invoke(
        cli.app,
        ["retrain", str(fleet / "history.parquet"), "--until", "2000-01-01", "--train-days",
         "3", "--out", str(tmp_path / "none")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "no succeeded completion in the 3 days before 2000-01-01" in result.output
    result = CliRunner().invoke(
        cli.app, ["retrain", str(fleet / "history.parquet"), "--until", "soon", "--out", "x"]
    )
    assert result.exit_code == 2 and "not a date" in result.output
