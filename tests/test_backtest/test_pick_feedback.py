"""The replay tells the core whether its first choice would have fit in memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from core_fixtures import completed_event, hours, submitted_event
from typer.testing import CliRunner

from leap_stream.backtest.replay import replay
from leap_stream.cli import app
from leap_stream.core.catalog import default_catalog
from leap_stream.core.leap import LeapCore
from leap_stream.data.history import events_to_table, write_history, write_oracle

CANDIDATES = ["H100-SXM", "L40S"]
# a 13B-parameter model, 8-way tensor parallel on 8 devices: the catalog's memory estimate
# says it fits both candidates
LLM = {
    "model_type": "llm-13b",
    "model_family": "dense_llm",
    "param_count": 13_000_000_000,
    "global_batch_size": 64,
    "seq_len": 4096,
    "tensor_parallel": 8,
}
JOBS = 40
# the fitting type runs slowly: what the model learns keeps the other one looking cheaper
SLOW = 1.0


def _history_where_the_first_choice_never_fits(tmp_path: Path) -> tuple[Path, Path]:
    first = LeapCore(default_catalog()).on_submitted(
        submitted_event("probe", "probe", hours(0), candidates=CANDIDATES, **LLM)
    )
    unfit = first.hardware[first.order[0]]
    other = next(h for h in CANDIDATES if h != unfit)
    events: list[tuple[str, dict[str, Any]]] = []
    oracle = []
    for i in range(JOBS):  # a new lineage each time: no lineage remembers a failure
        job, lineage = f"j{i:02d}", f"l{i:02d}"
        events.append(
            ("submitted", submitted_event(job, lineage, hours(i), candidates=CANDIDATES, **LLM))
        )
        events.append(
            ("completed", completed_event(job, lineage, hours(i + 0.5), other, throughput=SLOW))
        )
        oracle += [(job, other, SLOW), (job, unfit, None)]
    history, truth = tmp_path / "history.parquet", tmp_path / "oracle.parquet"
    write_history([events_to_table(events)], history)
    write_oracle([pd.DataFrame(oracle, columns=["job_id", "hardware_type", "throughput"])], truth)
    return history, truth


def test_a_ranking_told_its_picks_do_not_fit_stops_picking_them(tmp_path: Path) -> None:
    history, oracle = _history_where_the_first_choice_never_fits(tmp_path)

    def unrunnable(feedback: bool) -> int:
        summary = replay(
            history,
            tmp_path / f"out-{feedback}",
            default_catalog(),
            oracle=oracle,
            progress=False,
            report=False,
            pick_feedback=feedback,
        )
        return summary["decisions"]["unrunnable_picks"]

    told, untold = unrunnable(True), unrunnable(False)
    assert untold > JOBS // 2  # the users' own placements never reveal the risk
    assert told < untold / 2


def test_the_cli_turns_the_feedback_off_with_no_pick_feedback(tmp_path: Path) -> None:
    history, oracle = _history_where_the_first_choice_never_fits(tmp_path)
    unrunnable = {}
    for flag in ("--pick-feedback", "--no-pick-feedback"):
        out = tmp_path / flag
        args = ["replay", str(history), "--oracle", str(oracle), "--out", str(out), "--no-report"]
        result = CliRunner().invoke(app, [*args, flag])
        assert result.exit_code == 0, result.output
        summary = json.loads((out / "summary.json").read_text())
        unrunnable[flag] = summary["decisions"]["unrunnable_picks"]
    assert unrunnable["--no-pick-feedback"] > 2 * unrunnable["--pick-feedback"]
