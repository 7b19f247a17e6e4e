"""``leap-stream demo --live``: the streaming product end to end, with a tiny fleet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leap_stream import cli
from leap_stream.streaming.live import LiveView


def test_the_live_view_records_each_decision_and_counts_abstentions() -> None:
    view = LiveView(shown=2)
    candidate = {"hardware_type": "H100-SXM", "rank": 1, "predicted_cost_per_1k_samples": 0.002}
    for job in ("j1", "j2", "j3"):
        view.policy(
            {"job_id": job, "abstained": False, "candidates": [candidate], "model_version": "m"}
        )
    view.policy({"job_id": "j4", "abstained": True, "candidates": [], "model_version": "m"})
    assert (view.decisions, view.abstentions) == (4, 1)
    assert view.by_hardware == {"H100-SXM": 3, "abstained": 1}
    assert [row[0] for row in view.recent] == ["j3", "j4"]  # the newest few


def test_live_demo_needs_a_broker_address() -> None:
    result = CliRunner().invoke(cli.app, ["demo", "--live"], env={"LEAP_KAFKA_BOOTSTRAP": ""})
    assert result.exit_code == 2 and "--bootstrap" in result.output


@pytest.mark.integration
def test_live_demo_streams_the_fleet_through_the_service(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "DEMO_DAYS", 2)
    monkeypatch.setattr(cli, "DEMO_JOBS_PER_DAY", 150)
    result = CliRunner().invoke(
        cli.app,
        ["demo", "--live", "--out", str(tmp_path), "--bootstrap", kafka_bootstrap],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "live" / "summary.json").read_text())
    assert summary["events"]["submitted"] > 100
    assert "backtest of the rankings the service made" in result.output
    assert (tmp_path / "live" / "report.html").is_file()
    assert (tmp_path / "live" / "worker.log").stat().st_size > 0
