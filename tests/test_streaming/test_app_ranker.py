"""Which model a worker ranks with, as the newest serving decision names it (no broker: a
worker connects only when it runs)."""

from __future__ import annotations

import numpy as np
from core_fixtures import completed_event, hours, submitted_event

from leap_stream.core import LeapCore
from leap_stream.core.catalog import default_catalog
from leap_stream.core.champion import ONLINE
from leap_stream.core.ensemble import ENSEMBLE
from leap_stream.streaming.app import Worker
from leap_stream.streaming.settings import ServiceSettings


def _nightly_model(throughput: float) -> object:
    """A model taught ``throughput`` for the default job on H100-SXM."""
    core = LeapCore(default_catalog())  # the worker's catalog when settings name none
    for i in range(40):
        core.on_submitted(submitted_event(f"j{i}", f"l{i}", hours(i)))
        core.on_completed(
            completed_event(f"j{i}", f"l{i}", hours(i + 1), "H100-SXM", throughput=throughput)
        )
    return core.model


def _h100(worker: Worker, job_id: str) -> tuple[str, float]:
    """The model version and H100 prediction of the worker's ranking of a new submission."""
    record = worker._ranker().on_submitted(submitted_event(job_id, job_id, hours(50))).record()
    (h100,) = [c for c in record["candidates"] if c["hardware_type"] == "H100-SXM"]
    return record["model_version"], h100["predicted_throughput"]


def test_the_worker_ranks_with_the_ensemble_of_its_online_and_nightly_models() -> None:
    worker = Worker(ServiceSettings(bootstrap="127.0.0.1:1", web_port=None))
    nightly = _nightly_model(4_000.0)
    worker.nightly = {"lightgbm": (nightly, "lightgbm-20260301T0000Z")}
    assert worker.serving == ENSEMBLE  # the incumbent, before any decision
    version, both = _h100(worker, "b")
    assert version == "ensemble:online-0+lightgbm-20260301T0000Z"
    worker.serving = "lightgbm"
    _, alone = _h100(worker, "c")
    worker.serving = ONLINE
    online_version, online = _h100(worker, "a")
    assert online_version == "online-0"
    assert np.isclose(np.log(both), (np.log(online) + np.log(alone)) / 2)


def test_without_a_nightly_model_the_ensemble_is_the_online_model() -> None:
    worker = Worker(ServiceSettings(bootstrap="127.0.0.1:1", web_port=None))
    assert worker.serving == ENSEMBLE and _h100(worker, "a")[0] == "online-0"


def test_a_decision_for_the_ensemble_names_its_members_versions() -> None:
    worker = Worker(ServiceSettings(bootstrap="127.0.0.1:1", web_port=None))
    assert worker.board is not None  # an inline worker learns, so it keeps the scoreboard
    worker.board.add_challenger("lightgbm", _nightly_model(4_000.0), 0.0, "lightgbm-v1")
    example = {"job": submitted_event("x", "x", hours(0)), "hardware_type": "H100-SXM",
               "target": 8.0, "out_of_memory": False}  # fmt: skip
    for h in (1, 2, 30):  # two examples on the first day, then the next day's first decides
        worker._score({**example, "event_time": hours(h)})
    (decision,) = worker._decisions
    assert decision["serving"] == ENSEMBLE  # 2 attempts: too few for any change
    assert decision["serving_version"] == "ensemble:online-0+lightgbm-v1"
