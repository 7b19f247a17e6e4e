"""``leap-stream replay --via-kafka``: the backtest through a running worker on the real broker."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kafka_fixtures import unique_name
from streaming_fixtures import WorkerProcess
from typer.testing import CliRunner

from leap_stream.backtest.replay import replay
from leap_stream.cli import app
from leap_stream.core.catalog import default_catalog
from leap_stream.data.fleet import FleetConfig, generate_fleet
from leap_stream.data.history import events_to_table, iter_events, write_history

pytestmark = pytest.mark.integration

EVENTS = 300


@pytest.fixture(scope="module")
def small_history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The first ``EVENTS`` events of a small fleet, and the fleet's oracle (a superset whose
    jobs come in the same submission order, so the replay's decision figures are scored)."""
    out = tmp_path_factory.mktemp("via-kafka")
    generate_fleet(FleetConfig(days=2, jobs_per_day=200, seed=11), out, progress=False)
    events = list(iter_events(out / "history.parquet"))[:EVENTS]
    write_history([events_to_table(events)], out / "small.parquet")
    return out / "small.parquet", out / "oracle.parquet"


def _without_timing(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "events_per_second"}


@pytest.mark.parametrize("rate", [None, 400.0], ids=["lock-step", "rate"])
def test_replay_through_the_service_scores_as_the_in_process_replay(
    kafka_bootstrap: str, fleet_topics, small_history, tmp_path: Path, rate: float | None
) -> None:
    history, oracle = small_history
    topics = fleet_topics(partitions=4)
    group = unique_name("g")
    worker = WorkerProcess(kafka_bootstrap, topics, group, tmp_path).start()
    try:
        worker.wait_ready()
        args = [
            "replay", str(history),
            "--out", str(tmp_path / "via-kafka"),
            "--oracle", str(oracle),
            "--no-report",
            "--via-kafka", kafka_bootstrap,
            "--topic-prefix", topics.prefix,
            "--group-id", group,
            *(["--rate", str(rate)] if rate else []),
        ]  # fmt: skip
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, (result.output, worker.log_tail())
        assert worker.metric("leap_rankings_published_total") == sum(
            1 for kind, _ in iter_events(history) if kind == "submitted"
        )
    finally:
        worker.stop()
    timing = re.search(r"([\d,]+) events sent .*: ([\d.]+) s, ([\d.]+) ms per event", result.output)
    assert timing and int(timing[1].replace(",", "")) == EVENTS, result.output
    print(timing[0])  # the per-event time, with pytest -s

    via_kafka = json.loads((tmp_path / "via-kafka" / "summary.json").read_text())
    expected = replay(
        history,
        tmp_path / "in-process",
        default_catalog(),
        oracle=oracle,
        progress=False,
        report=False,
        pick_feedback=False,  # the service learns from completions only
    )
    assert expected["events"]["submitted"] > 100 and expected["decisions"]["n"] > 0
    expected = json.loads(json.dumps(expected))
    if rate is None:  # lock-step: the service processes the history's own order
        assert _without_timing(via_kafka) == _without_timing(expected)
    else:  # a load: events race each other across partitions, so figures may differ a little
        assert via_kafka["events"] == expected["events"]
        assert via_kafka.keys() == expected.keys()
